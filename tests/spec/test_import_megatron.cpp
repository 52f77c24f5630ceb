// Megatron-LM arguments importer (src/import/import_megatron.cpp): the 405B pp 16 x vpp 8 fixture
// with the embedding and the loss counted as layers, the emitter round trip, shell-like parsing
// and bad input.
#include <doctest/doctest.h>

#include <algorithm>
#include <filesystem>
#include <fmt/format.h>
#include <fstream>
#include <string>
#include <unistd.h>

#include "../cli/run_binary.hpp"
#include "cost/compute_cost.hpp"
#include "emit/bundle.hpp"
#include "emit/megatron_emitter.hpp"
#include "sim/step_simulator.hpp"
#include "spec/cluster_loader.hpp"
#include "import/config_loader.hpp"
#include "spec/error.hpp"
#include "import/import_megatron.hpp"
#include "spec/model_loader.hpp"
#include "spec/plan_toml.hpp"
#include "test_paths.hpp"
#include "workload/layer_kernels.hpp"
#include "workload/memory_estimate.hpp"

using namespace meshplan;
namespace fs = std::filesystem;

namespace {

const std::string kFixture = "plans/examples/megatron-llama3.1-405b-pp16-vpp8.args";

std::string fixture_path() { return (test::data_root() / kFixture).string(); }

std::string write_temp(const std::string& name, const std::string& text) {
  const fs::path p = fs::temp_directory_path() / fmt::format("meshplan_megargs_{}_{}", ::getpid(), name);
  std::ofstream(p) << text;
  return p.string();
}

RunConfig import_text(const std::string& text, const std::string& name = "a.args") {
  return import_megatron_args(name, text);
}

// What one bad file reports: "file: key: reason".
InputError error_of(const std::string& text) {
  try {
    (void)import_text(text);
  } catch (const InputError& e) {
    return e;
  }
  FAIL("no InputError for: " << text);
  return InputError("", "", "");
}

bool warns(const RunConfig& rc, const std::string& start) {
  for (const auto& w : rc.warnings)
    if (w.rfind(start, 0) == 0) return true;
  return false;
}

// A small dense model whose flags name every required shape.
const std::string kSmall =
    "--num-layers 4 --hidden-size 1024 --num-attention-heads 16 --seq-length 2048 --vocab-size 32000 "
    "--micro-batch-size 2 --global-batch-size 64 --bf16 ";

}  // namespace

TEST_CASE("the 405B Megatron launch script: detected, shipped model picked by shape, layout and split read") {
  RunConfig rc = load_run_config(fixture_path());
  CHECK(rc.format == ConfigFormat::megatron_args);
  CHECK(rc.plan.runtime == Runtime::megatron);
  CHECK(rc.model.name == "llama3.1-405b");  // shape and tokenizer match the shipped model
  CHECK(rc.n_gpus == 128 * 8);              // torchrun --nnodes 128 --nproc-per-node 8
  CHECK(rc.plan.mesh.tp == 8);              // ${TP} set in the file
  CHECK(rc.plan.mesh.pp == 16);
  CHECK(rc.plan.mesh.vpp == 8);
  CHECK(rc.plan.mesh.dp_replicate == -1);   // world / (tp x pp x cp)
  CHECK(rc.plan.schedule == PipelineSchedule::interleaved_1f1b);
  CHECK(rc.plan.sequence_parallel);
  CHECK(rc.plan.pipeline_split.embedding_as_layer);
  CHECK(rc.plan.pipeline_split.loss_as_layer);
  CHECK(rc.plan.sharding == Sharding::zero1);
  CHECK(rc.plan.ac == AcMode::full);
  CHECK(rc.plan.param_dtype == Dtype::bf16);
  CHECK(rc.plan.reduce_dtype == Dtype::fp32);
  CHECK_FALSE(rc.plan.dropout);
  CHECK(rc.job.micro_batch == 1);
  CHECK(rc.job.global_batch == 512);
  CHECK(rc.job.seq_len == 8192);
  // Megatron pads Llama 3's 128256 tokens to a multiple of 128 x tp 8 = 1024: 125 x 1024 = 128000
  // is too few, so 126 x 1024 = 129024 (its log's "768 dummy tokens").
  CHECK(rc.model.vocab == 129024);
  REQUIRE(rc.warnings.size() == 1);
  CHECK(rc.warnings[0].rfind("--vocab-size: 128256 padded to 129024", 0) == 0);
  resolve_layout(rc, std::nullopt);
  CHECK(rc.plan.mesh.dp_replicate == 8);
  CHECK(rc.job.grad_accum == 64);  // 512 / (8 x 1)
}

TEST_CASE("the 405B fixture: every stage's layers as Megatron builds them, in memory's output and JSON") {
  // Megatron-Core (megatron/core/transformer/transformer_block.py get_num_layers_to_build and
  // transformer_layer.py get_transformer_layer_offset, core_v0.15): with both account-for flags the
  // layer count is 126 + 1 + 1 = 128, 128 / pp 16 = 8 per rank, 8 / vpp 8 = 1 per virtual stage;
  // the first virtual stage of rank 0 builds one layer fewer (0: the embedding alone) and the last
  // virtual stage of rank 15 one fewer (0: the output layer and loss alone). Model chunk
  // c = k x 16 + r (virtual stage k of rank r) thus holds decoder layer c - 1 for 1 <= c <= 126.
  auto expected_layers = [](int r) {
    std::vector<int> out;
    for (int k = 0; k < 8; ++k) {
      const int c = k * 16 + r;
      if (c >= 1 && c <= 126) out.push_back(c - 1);
    }
    return out;
  };
  const test::BinaryRun run = test::run_meshplan(fmt::format("memory --config {}", fixture_path()));
  CHECK(run.exit_code == 0);
  INFO(run.err);
  int total = 0;
  for (int r = 0; r < 16; ++r) {
    const std::vector<int> layers = expected_layers(r);
    total += static_cast<int>(layers.size());
    CHECK(layers.size() == (r == 0 || r == 15 ? 7u : 8u));
    std::string list;
    for (int l : layers) list += (list.empty() ? "" : ", ") + std::to_string(l);
    const std::string line = fmt::format("stage {} (layers {}{}; {} layers,", r, list,
                                         r == 0 ? " + embedding (a chunk of its own)"
                                                : r == 15 ? " + head and loss (a chunk of their own)" : "",
                                         layers.size());
    INFO(line);
    CHECK(run.out.find(line) != std::string::npos);
  }
  CHECK(total == 126);

  // The JSON lists every virtual chunk: rank 0's first chunk is the embedding's, with no layer.
  RunConfig rc = load_run_config(fixture_path());
  resolve_layout(rc, std::nullopt);
  const ClusterSpec c = load_cluster("h100-sxm-80gb");
  const MemoryEstimate e = estimate_memory(rc.model, rc.plan, rc.job, c);
  REQUIRE(e.stages.size() == 16);
  for (int r = 0; r < 16; ++r) {
    const auto& chunks = e.stages[static_cast<std::size_t>(r)].chunks;
    REQUIRE(chunks.size() == 8);
    for (int k = 0; k < 8; ++k) {
      const int model_chunk = k * 16 + r;
      const bool empty = model_chunk == 0 || model_chunk == 127;
      CHECK(chunks[static_cast<std::size_t>(k)].n_layers == (empty ? 0 : 1));
      if (!empty) CHECK(chunks[static_cast<std::size_t>(k)].first_layer == model_chunk - 1);
    }
  }
  CHECK(e.stages[0].holds_embedding);
  CHECK(e.stages[15].holds_loss);
}

TEST_CASE("the 405B fixture simulates, and matches the plan TOML of the same run") {
  const test::BinaryRun run = test::run_meshplan(fmt::format("simulate --config {}", fixture_path()));
  CHECK(run.exit_code == 0);
  CHECK(run.out.find("tokens/s") != std::string::npos);

  RunConfig args = load_run_config(fixture_path());
  RunConfig toml = load_run_config((test::data_root() / "plans/examples/plan-llama3.1-405b-megatron-pp16-vpp8.toml").string());
  resolve_layout(args, std::nullopt);
  resolve_layout(toml, std::nullopt);
  const ClusterSpec c = load_cluster("h100-sxm-80gb");
  const SimulatedStep a = simulate_step(args.model, args.plan, args.job, c);
  const SimulatedStep b = simulate_step(toml.model, toml.plan, toml.job, c);
  CHECK(a.result.stages.size() == 16);
  CHECK(a.result.step_time_s == doctest::Approx(b.result.step_time_s).epsilon(1e-12));
}

TEST_CASE("Megatron round trip: emit the 405B plan's arguments, import them, same simulated step") {
  RunConfig plan = load_run_config((test::data_root() / "plans/examples/plan-llama3.1-405b-megatron-pp16-vpp8.toml").string());
  resolve_layout(plan, std::nullopt);
  const std::string text = megatron_args_text(emit_megatron_args(plan));
  CHECK(text.find("--account-for-embedding-in-pipeline-split") != std::string::npos);
  RunConfig back = load_run_config(write_temp("405b.args", text));
  CHECK(back.format == ConfigFormat::megatron_args);
  CHECK(back.model.name == "llama3.1-405b");
  resolve_layout(back, 1024);
  CHECK(back.plan.mesh.pp == 16);
  CHECK(back.plan.mesh.vpp == 8);
  CHECK(back.plan.mesh.tp == 8);
  CHECK(back.plan.mesh.dp() == 8);
  CHECK(back.plan.sharding == Sharding::zero1);
  CHECK(back.plan.ac == AcMode::full);
  CHECK(back.job.grad_accum == plan.job.grad_accum);
  const ClusterSpec c = load_cluster("h100-sxm-80gb");
  const double t_plan = simulate_step(plan.model, plan.plan, plan.job, c).result.step_time_s;
  const double t_back = simulate_step(back.model, back.plan, back.job, c).result.step_time_s;
  CHECK(t_back == doctest::Approx(t_plan).epsilon(1e-12));
  // Re-emitting the imported run writes the same arguments.
  CHECK(megatron_args_text(emit_megatron_args(back)) == text);

  // The bundle's megatron_args.txt (one flag and its value per line, values shell-quoted) reads
  // back the same.
  std::string bundle_args;
  for (const BundleFile& f : render_bundle(plan, c, EmitRuntime::megatron, TorchtitanVersion::early_2026, PlanSummary{}))
    if (f.name == "megatron_args.txt") bundle_args = f.content;
  REQUIRE_FALSE(bundle_args.empty());
  CHECK(bundle_args.find(" \\\n") == std::string::npos);  // no continuations: one flag per line
  RunConfig from_bundle = load_run_config(write_temp("megatron_args.txt", bundle_args));
  resolve_layout(from_bundle, 1024);
  CHECK(megatron_args_text(emit_megatron_args(from_bundle)) == text);
}

TEST_CASE("Megatron round trip: Mixtral with expert parallelism and selective recompute") {
  RunConfig plan = load_run_config((test::data_root() / "plans/examples/plan-mixtral-8x7b-ep8-64gpu.toml").string());
  resolve_layout(plan, std::nullopt);
  const std::string text = megatron_args_text(emit_megatron_args(plan));
  RunConfig back = import_megatron_args("mixtral.args", text);
  CHECK(back.model.name == "mixtral-8x7b");
  CHECK(back.plan.mesh.ep == 8);
  CHECK(back.plan.ac == AcMode::selective_attn);
  resolve_layout(back, 64);
  CHECK(back.plan.mesh.dp() == 32);
  const ClusterSpec c = load_cluster("h100-sxm-80gb");
  CHECK(simulate_step(back.model, back.plan, back.job, c).result.step_time_s ==
        doctest::Approx(simulate_step(plan.model, plan.plan, plan.job, c).result.step_time_s).epsilon(1e-12));

  // The same layout with DeepSeek-V3: MLA ranks, 3 leading dense layers (--moe-layer-freq
  // ([0]*3+[1]*58)) and the shared expert come back as the shipped model.
  RunConfig ds = load_run_config((test::data_root() / "plans/examples/plan-mixtral-8x7b-ep8-64gpu.toml").string());
  ds.model = load_model("deepseek-v3");
  resolve_layout(ds, std::nullopt);
  const std::string ds_text = megatron_args_text(emit_megatron_args(ds));
  CHECK(ds_text.find("--moe-layer-freq ([0]*3+[1]*58)") != std::string::npos);
  RunConfig ds_back = import_megatron_args("dsv3.args", ds_text);
  CHECK(ds_back.model.name == "deepseek-v3");
  CHECK(ds_back.model.moe.n_dense_layers == 3);
  resolve_layout(ds_back, 64);
  CHECK(megatron_args_text(emit_megatron_args(ds_back)) == ds_text);

  // The flex dispatcher round-trips: DeepEP by --moe-enable-deepep, HybridEP by its backend flag.
  for (const MoeDispatcher d : {MoeDispatcher::deepep, MoeDispatcher::hybridep}) {
    RunConfig flex = plan;
    flex.plan.moe_dispatcher = d;
    const std::string flex_text = megatron_args_text(emit_megatron_args(flex));
    CHECK(flex_text.find("--moe-token-dispatcher-type flex") != std::string::npos);
    CHECK((flex_text.find("--moe-enable-deepep") != std::string::npos) == (d == MoeDispatcher::deepep));
    RunConfig flex_back = import_megatron_args("flex.args", flex_text);
    CHECK(flex_back.plan.moe_dispatcher == d);
  }
}

// Megatron-Core's expert all-to-all overlap: read, written back, and refused where Megatron-Core's
// arguments.py refuses it (no experts in parallel, pp > 1 without virtual stages, full recompute).
TEST_CASE("Megatron arguments: --overlap-moe-expert-parallel-comm round-trips and is checked as Megatron-Core does") {
  RunConfig plan = load_run_config((test::data_root() / "plans/examples/plan-mixtral-8x7b-ep8-64gpu.toml").string());
  resolve_layout(plan, std::nullopt);
  CHECK_FALSE(plan.plan.moe_a2a_overlap);
  REQUIRE(plan.plan.mesh.pp == 1);
  plan.plan.moe_a2a_overlap = true;
  const std::string text = megatron_args_text(emit_megatron_args(plan));
  CHECK(text.find("--overlap-moe-expert-parallel-comm") != std::string::npos);
  RunConfig back = import_megatron_args("overlap.args", text);
  CHECK(back.plan.moe_a2a_overlap);
  CHECK(back.unmodelled_settings.empty());
  resolve_layout(back, 64);
  CHECK(megatron_args_text(emit_megatron_args(back)) == text);

  auto refusal = [&](const std::string& edited) -> std::string {
    RunConfig rc = import_megatron_args("overlap.args", edited);
    try {
      resolve_layout(rc, 64);
    } catch (const InputError& e) {
      return e.what();
    }
    return "";
  };
  auto replaced = [&](std::string t, const std::string& from, const std::string& to) {
    const auto at = t.find(from);
    REQUIRE(at != std::string::npos);
    return t.replace(at, from.size(), to);
  };
  const std::string no_ep = refusal(replaced(text, "--expert-model-parallel-size 8", "--expert-model-parallel-size 1"));
  CHECK(no_ep.find("--overlap-moe-expert-parallel-comm") != std::string::npos);
  CHECK(no_ep.find("ep > 1") != std::string::npos);
  const std::string no_vpp =
      refusal(replaced(text, "--pipeline-model-parallel-size 1", "--pipeline-model-parallel-size 2"));
  CHECK(no_vpp.find("--overlap-moe-expert-parallel-comm: needs the interleaved schedule") != std::string::npos);
}

// Megatron-Core's fused MoE kernels: read from the flags, written back, kept by the plan TOML, and
// fewer launches per layer (workload/moe_launches.cpp).
TEST_CASE("Megatron arguments: --moe-permute-fusion and --moe-router-fusion round-trip and cut the MoE layer's launches") {
  RunConfig plan = load_run_config((test::data_root() / "plans/examples/plan-mixtral-8x7b-ep8-64gpu.toml").string());
  resolve_layout(plan, std::nullopt);
  CHECK_FALSE(plan.plan.moe_permute_fusion);
  CHECK_FALSE(plan.plan.moe_router_fusion);
  const std::string plain = megatron_args_text(emit_megatron_args(plan));
  CHECK(plain.find("-fusion") == std::string::npos);
  plan.plan.moe_permute_fusion = plan.plan.moe_router_fusion = true;
  const std::string text = megatron_args_text(emit_megatron_args(plan));
  CHECK(text.find("--moe-permute-fusion") != std::string::npos);
  CHECK(text.find("--moe-router-fusion") != std::string::npos);
  RunConfig back = import_megatron_args("fused.args", text);
  CHECK(back.plan.moe_permute_fusion);
  CHECK(back.plan.moe_router_fusion);
  resolve_layout(back, 64);
  CHECK(megatron_args_text(emit_megatron_args(back)) == text);
  const std::string toml = to_plan_toml(back);
  CHECK(toml.find("moe_permute_fusion = true") != std::string::npos);
  CHECK(toml.find("moe_router_fusion = true") != std::string::npos);
  // Mixtral's 8 experts over EP 8: one local expert, so no chunk sorting. Unfused forward: router
  // 10 + auxiliary loss 6 + preprocess 11 + permute 8 + the probabilities' all-to-all 1 +
  // activation 2 + unpermute 2 + fc1 and fc2 = 42; fused: 3 + 3 + 9 + 2 + 1 + 2 + 1 + 2 = 23.
  // Backward 5 + 3 + 4 + 1 + 2 + 1 + 4 = 20 and 3 + 2 + 1 + 1 + 2 + 1 + 4 = 14.
  auto launches = [](const RunConfig& rc) {
    const LayerKernels k = layer_kernels(rc.model, rc.plan, layer_dims(rc.model, rc.plan, rc.job));
    return std::pair{k.mlp_kernels, k.mlp_kernels_bwd};
  };
  CHECK(launches(plan) == std::pair{23, 14});
  plan.plan.moe_permute_fusion = plan.plan.moe_router_fusion = false;
  CHECK(launches(plan) == std::pair{42, 20});
}

// Megatron-Core from core_v0.14: --cuda-graph-impl names the graphs' implementation and
// --cuda-graph-scope lists the modules they capture (argparse nargs='+').
TEST_CASE("Megatron arguments: --cuda-graph-impl and a multi-module --cuda-graph-scope round-trip") {
  RunConfig plan = load_run_config((test::data_root() / "plans/examples/plan-mixtral-8x7b-ep8-64gpu.toml").string());
  resolve_layout(plan, std::nullopt);
  const std::string text = megatron_args_text(emit_megatron_args(plan)) +
                           " --cuda-graph-impl transformer_engine --cuda-graph-scope attn moe_router moe_preprocess";
  RunConfig rc = import_megatron_args("graphs.args", text);
  CHECK(rc.plan.cuda_graphs);
  CHECK_FALSE(rc.plan.cuda_graph_scope.full);
  CHECK(rc.plan.cuda_graph_scope.attn);
  CHECK(rc.plan.cuda_graph_scope.moe_router);
  CHECK(rc.plan.cuda_graph_scope.moe_preprocess);
  CHECK_FALSE(rc.plan.cuda_graph_scope.mlp);
  CHECK(rc.unmodelled_settings.empty());
  resolve_layout(rc, 64);
  const std::string emitted = megatron_args_text(emit_megatron_args(rc));
  CHECK(emitted.find("--cuda-graph-impl transformer_engine") != std::string::npos);
  CHECK(emitted.find("--cuda-graph-scope attn moe_router moe_preprocess") != std::string::npos);
  RunConfig back = import_megatron_args("graphs2.args", emitted);
  CHECK(back.plan.cuda_graph_scope == rc.plan.cuda_graph_scope);
  CHECK(to_plan_toml(back).find("cuda_graph_scope = [\"attn\", \"moe_router\", \"moe_preprocess\"]") != std::string::npos);
  // The implementation alone: the whole layer, as --enable-cuda-graph.
  RunConfig local = import_megatron_args("local.args", megatron_args_text(emit_megatron_args(plan)) + " --cuda-graph-impl local");
  CHECK(local.plan.cuda_graphs);
  CHECK(local.plan.cuda_graph_scope.full);
  // A scope Megatron's layers here do not have is refused, naming the flag.
  try {
    import_megatron_args("bad.args", megatron_args_text(emit_megatron_args(plan)) + " --cuda-graph-impl local --cuda-graph-scope router");
    FAIL("no error for --cuda-graph-scope router");
  } catch (const InputError& e) {
    CHECK(e.key() == "--cuda-graph-scope");
    CHECK(std::string(e.what()).find("'router'") != std::string::npos);
  }
}

TEST_CASE("Megatron arguments: a model not shipped is built from the flags, with Megatron's defaults") {
  RunConfig rc = import_text(kSmall);
  CHECK(rc.model.name == "megatron-a");
  CHECK(rc.model.n_layers == 4);
  CHECK(rc.model.head_dim == 64);
  CHECK(rc.model.n_kv_heads == 16);              // no --group-query-attention: multi-head
  CHECK(rc.model.mlp == MlpKind::gelu);          // Megatron's default activation
  CHECK(rc.model.ffn_hidden == 4 * 1024);        // 4h without --ffn-hidden-size
  CHECK(rc.model.norm == NormKind::layernorm);   // default --normalization LayerNorm, with a bias
  CHECK(rc.model.norm_bias);
  CHECK(rc.model.linear_bias);                   // no --disable-bias-linear
  CHECK(rc.model.tied_embeddings);               // no --untie-embeddings-and-output-weights
  CHECK(rc.model.pos_emb == PosEmb::learned);    // default learned_absolute
  CHECK(rc.plan.dropout);                        // 0.1 attention and hidden dropout by default
  CHECK(rc.plan.sharding == Sharding::none);     // DDP without --use-distributed-optimizer
  // SwiGLU without --ffn-hidden-size: int(4h x 2/3 / 64) x 64 = 2688 for h = 1024.
  CHECK(import_text(kSmall + "--swiglu").model.ffn_hidden == 2688);
  const RunConfig gqa = import_text(kSmall + "--group-query-attention --num-query-groups 4 --kv-channels 128");
  CHECK(gqa.model.n_kv_heads == 4);
  CHECK(gqa.model.head_dim == 128);
  const RunConfig moe = import_text(kSmall + "--num-experts 8 --moe-router-topk 2 --moe-ffn-hidden-size 512 "
                                             "--moe-shared-expert-intermediate-size 1024 --moe-layer-freq ([0]*1+[1]*3) "
                                             "--expert-model-parallel-size 4");
  CHECK(moe.model.moe.n_experts == 8);
  CHECK(moe.model.moe.expert_ffn == 512);
  CHECK(moe.model.moe.n_shared_experts == 2);
  CHECK(moe.model.moe.n_dense_layers == 1);
  CHECK(moe.plan.mesh.ep == 4);
  CHECK_FALSE(moe.model.moe.force_balance);  // the trained router, its imbalance priced
  CHECK(import_text(kSmall + "--num-experts 8 --moe-router-topk 2 --moe-router-force-load-balancing")
            .model.moe.force_balance);
  const RunConfig fsdp = import_text(kSmall + "--use-megatron-fsdp --data-parallel-sharding-strategy optim_grads_params");
  CHECK(fsdp.plan.sharding == Sharding::zero3);
  CHECK(fsdp.plan.mesh.dp_shard == -1);
  const RunConfig sel = import_text(kSmall + "--recompute-granularity selective --recompute-modules core_attn layernorm "
                                             "--fp8-format hybrid --fp8-recipe tensorwise");
  CHECK(sel.plan.ac == AcMode::selective_attn);
  CHECK(sel.plan.recompute_modules.norms);
  CHECK(sel.plan.fp8 == Fp8Recipe::te_current);
}

TEST_CASE("Megatron arguments: shell forms (arrays, defaults, --flag=value, comments), unknown flags warned") {
  const std::string script =
      "#!/bin/bash\n"
      "export CUDA_DEVICE_MAX_CONNECTIONS=1\n"
      "GPUS_PER_NODE=8\n"
      "MODEL_ARGS=(\n"
      "    --num-layers 4   # four blocks\n"
      "    --hidden-size 1024\n"
      "    --num-attention-heads 16\n"
      ")\n"
      "TRAIN_ARGS=\"--micro-batch-size 2 --global-batch-size 64 --rampup-batch-size 16 16 5859375\"\n"
      "torchrun --nproc_per_node $GPUS_PER_NODE --nnodes=2 pretrain_gpt.py \\\n"
      "    ${MODEL_ARGS[@]} $TRAIN_ARGS \\\n"
      "    --seq-length=2048 --vocab-size 32000 --tensor-model-parallel-size ${TP:-2} \\\n"
      "    --bf16 --use-flash-atn --log-interval 1\n"
      "echo done\n";
  const RunConfig rc = import_megatron_args("train.sh", script);
  CHECK(rc.n_gpus == 16);
  CHECK(rc.model.n_layers == 4);
  CHECK(rc.job.micro_batch == 2);
  CHECK(rc.job.seq_len == 2048);
  CHECK(rc.plan.mesh.tp == 2);
  CHECK(rc.job.global_batch == 64);
  CHECK(warns(rc, "--rampup-batch-size: modelled at the final"));  // nargs '*': its three values are read
  REQUIRE(warns(rc, "--use-flash-atn: not a Megatron-LM argument"));
  bool suggestion = false;
  for (const auto& w : rc.warnings) suggestion = suggestion || w.find("--use-flash-attn") != std::string::npos;
  CHECK(suggestion);
  CHECK(looks_like_megatron_args(script));
  CHECK_FALSE(looks_like_megatron_args("[layout]\npp = 2\n"));
}

TEST_CASE("Megatron arguments: bad input is one line naming the file, the flag and the reason") {
  SUBCASE("malformed integer") {
    const InputError e = error_of(kSmall + "--num-layers abc");
    CHECK(e.key() == "--num-layers");
    CHECK(std::string(e.what()).find("'abc'") != std::string::npos);
    CHECK(std::string(e.what()).find("a.args") != std::string::npos);
  }
  SUBCASE("unresolved shell variable") {
    const InputError e = error_of(kSmall + "--tensor-model-parallel-size ${TP}");
    CHECK(e.key() == "--tensor-model-parallel-size");
    CHECK(std::string(e.what()).find("$TP") != std::string::npos);
    const InputError bare = error_of(kSmall + "$EXTRA_ARGS");
    CHECK(bare.key() == "$EXTRA_ARGS");
  }
  SUBCASE("truncated file: a flag without its value, or required flags missing") {
    const std::string whole = kSmall + "--tensor-model-parallel-size 2\n";
    for (std::size_t n = 1; n < whole.size(); ++n) {
      CAPTURE(n);
      try {
        (void)import_text(whole.substr(0, n));
      } catch (const InputError& e) {
        CHECK(std::string(e.what()).find('\n') == std::string::npos);
        // A flag is named, unless the cut leaves no Megatron command at all ("--num-la").
        CHECK((!e.key().empty() || e.reason().find("no Megatron-LM command") != std::string::npos));
      }
    }
    CHECK(error_of(kSmall + "--pipeline-model-parallel-size").key() == "--pipeline-model-parallel-size");
    CHECK(error_of("--num-layers 4 --hidden-size 1024 --num-attention-heads 16").key() == "--seq-length");
  }
  SUBCASE("values Megatron would reject") {
    CHECK(error_of(kSmall + "--normalization BatchNorm").key() == "--normalization");
    CHECK(error_of(kSmall + "--recompute-granularity selective --recompute-modules everything").key() ==
          "--recompute-modules");
    CHECK(error_of(kSmall + "--bf16 stray").key() == "--bf16");
    CHECK(error_of(kSmall + "--num-experts 8 --moe-layer-freq ([1]*2+[0]*2)").key() == "--moe-layer-freq");
    CHECK(error_of(kSmall + "--use-megatron-fsdp --data-parallel-sharding-strategy optim_grads").key() ==
          "--data-parallel-sharding-strategy");
  }
  SUBCASE("resolve_layout names Megatron's flags") {
    RunConfig rc = import_text(kSmall + "--tensor-model-parallel-size 3");
    try {
      resolve_layout(rc, 6);
      FAIL("resolved");
    } catch (const InputError& e) {
      CHECK(e.key() == "--tensor-model-parallel-size");
    }
    RunConfig split = import_text(kSmall + "--pipeline-model-parallel-size 2 --decoder-first-pipeline-num-layers 9");
    try {
      resolve_layout(split, 2);
      FAIL("resolved");
    } catch (const InputError& e) {
      CHECK(e.key() == "--decoder-first-pipeline-num-layers");
    }
  }
  SUBCASE("the CLI exits 2 with the flag named") {
    const std::string path = write_temp("bad.args", kSmall + "--num-layers abc\n");
    const test::BinaryRun run = test::run_meshplan(fmt::format("simulate --config {} --gpus 8", path));
    CHECK(run.exit_code == 2);
    CHECK(run.err.find("--num-layers") != std::string::npos);
    fs::remove(path);
  }
}

TEST_CASE("Megatron fine-grained activation offload: read, emitted back, and refused when malformed") {
  RunConfig plan = load_run_config((test::data_root() / "plans/examples/plan-mixtral-8x7b-ep8-64gpu.toml").string());
  resolve_layout(plan, std::nullopt);
  plan.plan.act_offload = true;
  plan.plan.offload_modules.expert_fc1 = true;
  plan.plan.offload_modules.moe_act = true;
  const std::string text = megatron_args_text(emit_megatron_args(plan));
  CHECK(text.find("--fine-grained-activation-offloading") != std::string::npos);
  CHECK(text.find("--offload-modules expert_fc1 moe_act") != std::string::npos);
  RunConfig back = import_megatron_args("offload.args", text);
  CHECK(back.plan.act_offload);
  CHECK(back.plan.offload_modules.expert_fc1);
  CHECK(back.plan.offload_modules.moe_act);
  CHECK_FALSE(back.plan.offload_modules.core_attn);
  // Whole-layer offload has no Megatron-Core spelling meshplan emits: refused, naming the key.
  RunConfig whole = plan;
  whole.plan.offload_modules = {};
  CHECK_THROWS_AS(emit_megatron_args(whole), InputError);

  CHECK(error_of(kSmall + "--fine-grained-activation-offloading --offload-modules attn_norm everything").key() ==
        "--offload-modules");
  CHECK(error_of(kSmall + "--fine-grained-activation-offloading").key() == "--offload-modules");
  CHECK(warns(import_text(kSmall + "--offload-modules core_attn"), "--offload-modules: has no effect"));
}

TEST_CASE("Megatron --fp8-dot-product-attention: read, emitted back, warned or refused where it cannot run") {
  RunConfig rc = import_text(kSmall + "--fp8-format hybrid --fp8-recipe tensorwise --fp8-dot-product-attention");
  resolve_layout(rc, 8);
  CHECK(rc.plan.fp8 == Fp8Recipe::te_current);
  CHECK(rc.plan.fp8_attention);
  const std::string text = megatron_args_text(emit_megatron_args(rc));
  CHECK(text.find("--fp8-dot-product-attention") != std::string::npos);
  CHECK(import_megatron_args("back.args", text).plan.fp8_attention);
  // Without an FP8 autocast region Transformer Engine keeps attention in 16-bit.
  const RunConfig bf16 = import_text(kSmall + "--fp8-dot-product-attention");
  CHECK_FALSE(bf16.plan.fp8_attention);
  CHECK(warns(bf16, "--fp8-dot-product-attention: has no effect"));
  // NVFP4 linears with FP8 attention: not modelled, refused naming the flag.
  CHECK(error_of(kSmall + "--fp4-format e2m1 --fp8-dot-product-attention").key() == "--fp8-dot-product-attention");
}

TEST_CASE("every Megatron flag the importer accepts is modelled, changes nothing meshplan computes, or is named") {
  const std::vector<std::string> no_effect = megatron_no_effect_flags();
  auto is_no_effect = [&](const std::string& f) { return std::find(no_effect.begin(), no_effect.end(), f) != no_effect.end(); };
  const std::string dense = kSmall;
  const std::string moe = kSmall + "--num-experts 8 --moe-router-topk 2 --moe-ffn-hidden-size 512 "
                                   "--expert-model-parallel-size 1 ";
  const std::string base_dense = to_plan_toml(import_text(dense));
  const std::string base_moe = to_plan_toml(import_text(moe));
  int modelled = 0, named = 0, silent = 0;
  for (const std::string& f : megatron_known_flags()) {
    CAPTURE(f);
    bool handled = false;
    for (const std::string& value : {std::string(" "), std::string(" 2 "), std::string(" 1 ")}) {
      for (const auto* ctx : {&dense, &moe}) {
        const std::string& base = ctx == &dense ? base_dense : base_moe;
        RunConfig rc;
        try {
          rc = import_text(*ctx + f + value);
        } catch (const InputError& e) {
          // The importer read the flag and refused its value or its context.
          if (e.key() == f || e.reason().find(f) != std::string::npos) handled = true;
          continue;
        }
        const bool in_list = std::find(rc.unmodelled_settings.begin(), rc.unmodelled_settings.end(), f) !=
                             rc.unmodelled_settings.end();
        const bool warned = std::any_of(rc.warnings.begin(), rc.warnings.end(),
                                        [&](const std::string& w) { return w.rfind(f + ":", 0) == 0; });
        const bool changed = to_plan_toml(rc) != base;
        if (in_list) ++named;
        if (changed) ++modelled;
        if (in_list || warned || changed) handled = true;
        // A no-effect flag never changes the plan and is never reported.
        if (is_no_effect(f)) {
          CHECK_FALSE(in_list);
          if (f != "--max-position-embeddings" && f != "--save-interval") CHECK_FALSE(changed);
        }
      }
      if (handled) break;
    }
    if (!handled && !is_no_effect(f)) ++silent;
    CHECK_MESSAGE((handled || is_no_effect(f)), f << " is accepted, changes nothing and is not named");
  }
  CHECK(silent == 0);
  CHECK(named > 10);
  // The flags the issue found silently accepted are named.
  const RunConfig rc = import_text(kSmall + "--num-distributed-optimizer-instances 2 --distribute-saved-activations "
                                            "--moe-grouped-gemm --no-gradient-accumulation-fusion "
                                            "--overlap-p2p-communication --lr 3e-4 --seed 7");
  for (const char* f : {"--distribute-saved-activations", "--moe-grouped-gemm", "--no-gradient-accumulation-fusion",
                        "--num-distributed-optimizer-instances", "--overlap-p2p-communication"})
    CHECK_MESSAGE(std::find(rc.unmodelled_settings.begin(), rc.unmodelled_settings.end(), f) !=
                      rc.unmodelled_settings.end(), f);
  CHECK(std::find(rc.unmodelled_settings.begin(), rc.unmodelled_settings.end(), "--lr") == rc.unmodelled_settings.end());
}

TEST_CASE("--moe-grouped-gemm: grouped experts with it, Megatron's SequentialMLP without it, both modelled") {
  const std::string moe = kSmall + "--num-experts 8 --moe-router-topk 2 --moe-ffn-hidden-size 512 ";
  auto named = [](const RunConfig& rc) {
    return std::find(rc.unmodelled_settings.begin(), rc.unmodelled_settings.end(), "--moe-grouped-gemm") !=
           rc.unmodelled_settings.end();
  };
  const RunConfig grouped = import_text(moe + "--moe-grouped-gemm");
  CHECK(grouped.plan.moe_grouped_gemm);
  CHECK_FALSE(named(grouped));
  // Without it Megatron loops over the local experts (SequentialMLP, Megatron-LM's default).
  const RunConfig seq = import_text(moe);
  CHECK_FALSE(seq.plan.moe_grouped_gemm);
  CHECK_FALSE(named(seq));
  CHECK(to_plan_toml(seq).find("moe_grouped_gemm = false") != std::string::npos);
  CHECK(to_plan_toml(grouped).find("moe_grouped_gemm") == std::string::npos);
  RunConfig resolved = seq;
  resolve_layout(resolved, 8);
  const std::string back = megatron_args_text(emit_megatron_args(resolved));
  CHECK(back.find("--moe-grouped-gemm") == std::string::npos);
  // The lowering: each of the 8 local experts' two GEMMs its own launch (GemmGroup::sequential)
  // at the mean rows, and 4 launches forward per expert (fc1, the weighted activation's 2, fc2) and
  // 6 backward, plus the concatenation, where grouped GEMMs take 2 per expert and the activation 2.
  const LayerKernels ks = layer_kernels(seq.model, seq.plan, layer_dims(seq.model, seq.plan, seq.job));
  const LayerKernels kg = layer_kernels(grouped.model, grouped.plan, layer_dims(grouped.model, grouped.plan, grouped.job));
  REQUIRE(ks.mlp.size() == 3);  // router, up, down (a GELU MLP)
  for (std::size_t i = 1; i < 3; ++i) {
    CHECK(ks.mlp[i].group == GemmGroup::sequential);
    CHECK(ks.mlp[i].batch == 8);
    CHECK(kg.mlp[i].group == GemmGroup::rows);
  }
  CHECK(ks.mlp_kernels - kg.mlp_kernels == (4 * 8 + 1) - (2 + 2 * 8));
  CHECK(ks.mlp_kernels_bwd - kg.mlp_kernels_bwd == (6 * 8 + 1) - (2 + 4 * 8));
  // Sequential GEMMs cost each member's own GEMM: 8 x one GEMM of the mean rows.
  const ClusterSpec c = load_cluster("h100-sxm-80gb");
  const GemmShape one{ks.mlp[2].m, ks.mlp[2].n, ks.mlp[2].k, 1};
  CHECK(gemm_time(c, ks.mlp[2], Dtype::bf16).seconds == doctest::Approx(8 * gemm_time(c, one, Dtype::bf16).seconds));
}

TEST_CASE("an unread Megatron flag given at Megatron's default is what the model assumes: not named") {
  const RunConfig same = import_text(kSmall + "--transformer-impl transformer_engine "
                                              "--num-distributed-optimizer-instances 1 --cuda-graph-scope full");
  CHECK(same.unmodelled_settings.empty());
  const RunConfig other = import_text(kSmall + "--transformer-impl local --num-distributed-optimizer-instances 2");
  CHECK(other.unmodelled_settings ==
        std::vector<std::string>{"--num-distributed-optimizer-instances", "--transformer-impl"});
}

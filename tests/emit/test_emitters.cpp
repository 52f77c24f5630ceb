// Emitters (src/emit): round trips through the importers, key spellings per pinned runtime
// version, refusals for inexpressible plans, Megatron argument lists, bundles and determinism.
#include <doctest/doctest.h>
#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <toml++/toml.h>
#include <yaml-cpp/yaml.h>

#include "emit/bundle.hpp"
#include "emit/foundry_emitter.hpp"
#include "emit/launch_emitter.hpp"
#include "emit/megatron_emitter.hpp"
#include "emit/torchtitan_emitter.hpp"
#include "emit/torchtitan_keys.hpp"
#include "import/import_torchtitan.hpp"
#include "import/config_loader.hpp"
#include "spec/error.hpp"
#include "spec/model_loader.hpp"
#include "spec/pipeline_split.hpp"
#include "test_paths.hpp"

using namespace meshplan;
namespace fs = std::filesystem;

namespace {

// A resolved plan built the way the planner builds one: shipped model, runtime, mesh, batch.
struct PlanArgs {
  std::string model;
  Runtime runtime = Runtime::torchtitan_fsdp2;
  Mesh mesh;
  std::int64_t gpus = 8;
  std::int64_t seq = 8192;
  std::int64_t global = 0;
  std::int64_t micro = 1;
  std::int64_t pp_microbatches = 0;
};

RunConfig make(const PlanArgs& a, void (*tweak)(Plan&) = nullptr) {
  RunConfig rc;
  rc.source_file = "test-plan";
  rc.model = load_model(a.model);
  rc.plan.runtime = a.runtime;
  rc.plan.mesh = a.mesh;
  rc.job.seq_len = a.seq;
  rc.job.global_batch = a.global;
  rc.job.micro_batch = a.micro;
  rc.job.grad_accum = 0;
  rc.job.pp_microbatches = a.pp_microbatches;
  Plan& p = rc.plan;
  if (a.runtime == Runtime::torchtitan_fsdp2) {
    p.sequence_parallel = a.mesh.tp > 1;
    p.reshard_after_forward = a.mesh.pp == 1;
    p.ac = AcMode::selective_op;
  }
  if (a.runtime == Runtime::composer_fsdp1 || a.runtime == Runtime::composer_fsdp2) {
    p.backward_prefetch = BackwardPrefetch::backward_post;
    p.ac = AcMode::full;
    p.reduce_dtype = Dtype::bf16;  // PURE, as every llm-foundry preset
    if (a.mesh.tp > 1) p.tp_style = TpStyle::mlp_only;
  }
  if (tweak) tweak(p);
  // Composer's FSDP1 never frees the root unit (importer semantics; not a knob of the YAML).
  if (a.runtime == Runtime::composer_fsdp1) p.root_unsharded = p.sharding != Sharding::none;
  resolve_layout(rc, a.gpus);
  return rc;
}

fs::path temp_dir(const std::string& name) {
  const fs::path d = fs::temp_directory_path() / ("meshplan-emit-" + name);
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

RunConfig reimport(const std::string& text, const std::string& file_name, std::int64_t gpus) {
  const fs::path p = temp_dir("rt") / file_name;
  std::ofstream(p) << text;
  RunConfig rc = load_run_config(p.string());
  resolve_layout(rc, gpus);
  return rc;
}

void same_model(const ModelSpec& a, const ModelSpec& b) {
  CHECK(a.n_layers == b.n_layers);
  CHECK(a.d_model == b.d_model);
  CHECK(a.n_heads == b.n_heads);
  CHECK(a.n_kv_heads == b.n_kv_heads);
  CHECK(a.head_dim == b.head_dim);
  CHECK(a.ffn_hidden == b.ffn_hidden);
  CHECK(a.mlp == b.mlp);
  CHECK(a.vocab == b.vocab);
  CHECK(a.tied_embeddings == b.tied_embeddings);
  CHECK(a.pos_emb == b.pos_emb);
  CHECK(a.norm == b.norm);
  CHECK(a.linear_bias == b.linear_bias);
  CHECK(a.norm_bias == b.norm_bias);
  CHECK(a.max_seq_len == b.max_seq_len);
  CHECK(a.moe.n_experts == b.moe.n_experts);
  CHECK(a.moe.force_balance == b.moe.force_balance);
}

// Everything a plan fixes that the runtimes can carry.
void same_plan(const RunConfig& a, const RunConfig& b) {
  const Plan& p = a.plan;
  const Plan& q = b.plan;
  CHECK(p.runtime == q.runtime);
  CHECK(p.mesh.pp == q.mesh.pp);
  CHECK(p.mesh.vpp == q.mesh.vpp);
  CHECK(p.mesh.dp_replicate == q.mesh.dp_replicate);
  CHECK(p.mesh.dp_shard == q.mesh.dp_shard);
  CHECK(p.mesh.cp == q.mesh.cp);
  CHECK(p.mesh.tp == q.mesh.tp);
  CHECK(p.mesh.ep == q.mesh.ep);
  CHECK(p.sharding == q.sharding);
  CHECK(p.reshard_after_forward == q.reshard_after_forward);
  CHECK(p.param_dtype == q.param_dtype);
  CHECK(p.reduce_dtype == q.reduce_dtype);
  CHECK(p.state_dtype == q.state_dtype);
  CHECK(p.compute_dtype == q.compute_dtype);
  CHECK(p.fp8 == q.fp8);
  CHECK(p.fp8_all_gather == q.fp8_all_gather);
  CHECK(p.ac == q.ac);
  CHECK(p.ac_every_n == q.ac_every_n);
  CHECK(p.ac_reentrant == q.ac_reentrant);
  CHECK(p.act_offload == q.act_offload);
  CHECK(p.param_offload == q.param_offload);
  CHECK(p.tp_style == q.tp_style);
  CHECK(p.sequence_parallel == q.sequence_parallel);
  CHECK(p.async_tp == q.async_tp);
  if (p.mesh.pp > 1) CHECK(p.schedule == q.schedule);
  CHECK(a.job.seq_len == b.job.seq_len);
  CHECK(a.job.global_batch == b.job.global_batch);
  CHECK(a.job.micro_batch == b.job.micro_batch);
  CHECK(a.job.grad_accum == b.job.grad_accum);
  CHECK(a.job.pp_microbatches == b.job.pp_microbatches);
  CHECK(a.n_gpus == b.n_gpus);
  same_model(a.model, b.model);
}

// Every leaf key of a TOML document as "section.sub.key".
void leaf_keys(const toml::table& t, const std::string& prefix, std::vector<std::string>& out) {
  for (const auto& [k, v] : t) {
    const std::string name = prefix.empty() ? std::string(k.str()) : prefix + "." + std::string(k.str());
    if (const toml::table* sub = v.as_table()) leaf_keys(*sub, name, out);
    else out.push_back(name);
  }
}

void keys_known(const std::string& toml_text, TorchtitanVersion v) {
  std::vector<std::string> keys;
  leaf_keys(toml::parse(toml_text), "", keys);
  CHECK(keys.size() > 20);
  for (const auto& k : keys) {
    INFO("key " << k << " for torchtitan " << to_string(v));
    CHECK(torchtitan_key_known(v, k));
  }
}

const TorchtitanVersion kTomlVersions[] = {TorchtitanVersion::mid_2025, TorchtitanVersion::early_2026};

ClusterSpec h100() {
  ClusterSpec c;
  c.name = "h100-sxm-80gb";
  c.node.gpus_per_node = 8;
  c.gpu.hbm_bytes = 85899345920.0;
  c.fabric.transport = "infiniband";
  return c;
}

PlanSummary summary() {
  PlanSummary s;
  s.tokens_per_s_per_gpu = 3812.5;
  s.step_time_s = 17.19;
  s.peak_bytes = 61234567890;
  s.breakdown = {"compute 71.0 %", "exposed communication 9.5 %"};
  s.assumptions = {"H100 GEMM efficiency from the shipped profile"};
  return s;
}

std::string refusal(auto&& fn) {
  try {
    fn();
  } catch (const InputError& e) {
    const std::string what = e.what();
    CHECK(what.find('\n') == std::string::npos);  // one line
    return what;
  }
  FAIL("no InputError");
  return "";
}

}  // namespace

TEST_CASE("torchtitan versions parse from commits and names") {
  CHECK(parse_torchtitan_version("8570415c3") == TorchtitanVersion::mid_2025);
  CHECK(parse_torchtitan_version("8570415") == TorchtitanVersion::mid_2025);
  CHECK(parse_torchtitan_version("238fa9953e4a") == TorchtitanVersion::early_2026);
  CHECK(parse_torchtitan_version("238fa995") == TorchtitanVersion::early_2026);
  CHECK(parse_torchtitan_version("registry") == TorchtitanVersion::registry);
  CHECK(parse_torchtitan_version("9810191bb") == TorchtitanVersion::registry);
  CHECK_FALSE(parse_torchtitan_version("238fa").has_value());
  CHECK_FALSE(parse_torchtitan_version("main").has_value());
  CHECK(parse_emit_runtime("llm-foundry") == EmitRuntime::llm_foundry);
  CHECK(to_string(TorchtitanVersion::early_2026) == "238fa9953e4a");
}

TEST_CASE("torchtitan round trip: 8B FSDP, selective per-op AC, both TOML layouts") {
  Mesh m;
  m.dp_shard = 8;
  const RunConfig rc = make({"llama3.1-8b", Runtime::torchtitan_fsdp2, m, 8, 8192, 64, 1, 0});
  CHECK(rc.job.grad_accum == 8);
  for (TorchtitanVersion v : kTomlVersions) {
    INFO("version " << to_string(v));
    const std::string toml = emit_torchtitan_toml(rc, v);
    keys_known(toml, v);
    const RunConfig back = reimport(toml, "llama3.1-8b.toml", 8);
    same_plan(rc, back);
    CHECK(back.warnings.empty());
  }
}

TEST_CASE("torchtitan round trip: 70B with interleaved PP, TP+SP, async TP, compile, float8 all-gather") {
  Mesh m;
  m.pp = 4;
  m.vpp = 2;
  m.tp = 8;
  m.dp_shard = 2;
  const RunConfig rc = make({"llama3.1-70b", Runtime::torchtitan_fsdp2, m, 64, 8192, 32, 1, 8}, [](Plan& p) {
    p.schedule = PipelineSchedule::interleaved_1f1b;
    p.ac = AcMode::full;
    p.compile = true;
    p.async_tp = true;
    p.fp8 = Fp8Recipe::torchao_tensorwise;
    p.fp8_all_gather = true;
  });
  CHECK(rc.job.grad_accum == 16);
  for (TorchtitanVersion v : kTomlVersions) {
    INFO("version " << to_string(v));
    const std::string toml = emit_torchtitan_toml(rc, v);
    keys_known(toml, v);
    const RunConfig back = reimport(toml, "llama3.1-70b.toml", 64);
    same_plan(rc, back);
    CHECK(back.plan.compile);
    for (const auto& w : back.warnings) CHECK(w.find("converter") == std::string::npos);  // the pinned name
  }
  // Converter names and sections per version (torchtitan job_config.py; quantization refactor 8a2686c4a).
  const std::string early = emit_torchtitan_toml(rc, TorchtitanVersion::early_2026);
  CHECK(early.find("converters = [\"quantize.linear.float8\"]") != std::string::npos);
  CHECK(early.find("[quantize.linear.float8]") != std::string::npos);
  CHECK(early.find("[compile]\nenable = true") != std::string::npos);
  CHECK(early.find("pipeline_parallel_layers_per_stage = 10") != std::string::npos);
  const std::string mid = emit_torchtitan_toml(rc, TorchtitanVersion::mid_2025);
  CHECK(mid.find("converters = [\"float8\"]") != std::string::npos);
  CHECK(mid.find("[float8]") != std::string::npos);
  CHECK(mid.find("compile = true") != std::string::npos);
  CHECK(mid.find("[compile]") == std::string::npos);
  CHECK(mid.find("enable_checkpoint = false") != std::string::npos);
  CHECK(mid.find("\"layers.10\", \"layers.20\"") != std::string::npos);
  CHECK(mid.find("local_batch_size = 8") != std::string::npos);  // micro 1 x 8 pipeline microbatches
}

TEST_CASE("torchtitan round trip: context parallel, HSDP, rowwise float8, selective every-2, zero2") {
  Mesh m;
  m.cp = 2;
  m.tp = 2;
  m.dp_shard = 2;
  m.dp_replicate = 2;
  const RunConfig rc = make({"llama3.1-8b", Runtime::torchtitan_fsdp2, m, 16, 8192, 8, 2, 0}, [](Plan& p) {
    p.ac = AcMode::selective_layer;
    p.ac_every_n = 2;
    p.fp8 = Fp8Recipe::torchao_rowwise;
    p.reshard_after_forward = false;  // "never": FSDP2 with params kept after forward
  });
  for (TorchtitanVersion v : kTomlVersions) {
    const std::string toml = emit_torchtitan_toml(rc, v);
    keys_known(toml, v);
    CHECK(toml.find("fsdp_reshard_after_forward = \"never\"") != std::string::npos);
    CHECK(toml.find("recipe_name = \"rowwise\"") != std::string::npos);
    same_plan(rc, reimport(toml, "llama3.1-8b.toml", 16));
  }
  // zero2 is written as "never" and reads back as FSDP2 without resharding (zero3 + no reshard).
  RunConfig z2 = rc;
  z2.plan.sharding = Sharding::zero2;
  const RunConfig back = reimport(emit_torchtitan_toml(z2, TorchtitanVersion::early_2026), "a.toml", 16);
  CHECK(back.plan.sharding == Sharding::zero3);
  CHECK_FALSE(back.plan.reshard_after_forward);
}

TEST_CASE("torchtitan round trip: pure DDP over dp_replicate, fp32 params, CPU offload refused without FSDP") {
  Mesh m;
  m.dp_replicate = 8;
  m.dp_shard = 1;
  const RunConfig rc = make({"llama3.1-8b", Runtime::torchtitan_fsdp2, m, 8, 4096, 16, 2, 0}, [](Plan& p) {
    p.ac = AcMode::none;
  });
  CHECK(rc.plan.sharding == Sharding::none);  // resolve_layout: no shard dimension
  const std::string toml = emit_torchtitan_toml(rc, TorchtitanVersion::early_2026);
  CHECK(toml.find("mode = \"none\"") != std::string::npos);
  same_plan(rc, reimport(toml, "x.toml", 8));
  RunConfig off = rc;
  off.plan.param_offload = true;
  CHECK(refusal([&] { emit_torchtitan_toml(off, TorchtitanVersion::early_2026); }).find("param_offload") != std::string::npos);
}

TEST_CASE("torchtitan round trip: uneven stages written back in each layout's keys and read to the same layers") {
  auto stages_of = [](const RunConfig& r) {
    return r.plan.pipeline_split.chunk_layers.empty() ? *split_layers(r.model.n_layers, r.plan.mesh.pp * r.plan.mesh.vpp)
                                                      : r.plan.pipeline_split.chunk_layers;
  };
  Mesh m;
  m.pp = 4;
  m.dp_shard = 2;
  // DeepSeek-V3 on pp 4 under Megatron-Bridge's ceil(61 / 4) layout, 16, 16, 16, 13: not a split
  // torchtitan's weighted rule gives, so each stage's modules are named (early-2026 only: the
  // mid-2025 layout has no deepseek_v3).
  const RunConfig ds = make({"deepseek-v3", Runtime::torchtitan_fsdp2, m, 8, 4096, 16, 1, 8}, [](Plan& p) {
    p.ac = AcMode::full;
    set_layout(p.pipeline_split, *ceil_split_layout(61, 4));
  });
  const std::string early = emit_torchtitan_toml(ds, TorchtitanVersion::early_2026);
  keys_known(early, TorchtitanVersion::early_2026);
  CHECK(early.find("pipeline_parallel_layers_per_stage") == std::string::npos);
  CHECK(early.find("# stages of 16, 16, 16, 13 layers") != std::string::npos);
  const toml::table t = toml::parse(early);
  const toml::array& parts = *t["parallelism"]["module_fqns_per_model_part"].as_array();
  REQUIRE(parts.size() == 4);
  CHECK(parts[0].as_array()->front().value<std::string>() == "tok_embeddings");
  CHECK(parts[0].as_array()->size() == 17);  // the embedding and layers 0-15
  CHECK(parts[3].as_array()->front().value<std::string>() == "layers.48");
  CHECK(parts[3].as_array()->back().value<std::string>() == "output");
  const RunConfig ds_back = reimport(early, "dsv3.toml", 8);
  same_plan(ds, ds_back);
  CHECK(ds_back.plan.pipeline_split.chunk_layers == std::vector<int>{16, 16, 16, 13});

  // Llama 3.1 8B on pp 4: torchtitan's default weights (1, 1) give 8, 9, 8, 7, written as its own
  // keys (layers_per_stage 9 = ceil(34 / 4)) or as split points; the ceil layout 8, 8, 8, 8 is even.
  // 405B's 126 layers on pp 16 under ceil(126 / 16): 8 x 15 and 6, by name or by split points.
  struct Case {
    const char* model;
    int pp;
    std::vector<int> layers;
    const char* early_key;
  };
  for (const Case& k : {Case{"llama3.1-8b", 4, {8, 9, 8, 7}, "pipeline_parallel_layers_per_stage = 9"},
                        Case{"llama3.1-405b", 16, {8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 6},
                             "module_fqns_per_model_part"}}) {
    CAPTURE(k.model);
    Mesh mk;
    mk.pp = k.pp;
    RunConfig rc = make({k.model, Runtime::torchtitan_fsdp2, mk, k.pp, 4096, 2 * k.pp, 1, 2 * k.pp});
    rc.plan.pipeline_split.chunk_layers = k.layers;
    for (TorchtitanVersion v : kTomlVersions) {
      INFO("version " << to_string(v));
      const std::string text = emit_torchtitan_toml(rc, v);
      keys_known(text, v);
      if (v == TorchtitanVersion::early_2026) CHECK(text.find(k.early_key) != std::string::npos);
      else CHECK(text.find(fmt::format("\"layers.{}\"", k.layers[0])) != std::string::npos);
      const RunConfig back = reimport(text, "rt.toml", k.pp);
      same_plan(rc, back);
      CHECK(stages_of(back) == k.layers);
    }
  }
}

TEST_CASE("torchtitan refuses plans it cannot run as simulated") {
  Mesh m;
  m.dp_shard = 8;
  const RunConfig rc = make({"llama3.1-8b", Runtime::torchtitan_fsdp2, m, 8, 8192, 8, 1, 0});
  auto refuse_with = [&](void (*tweak)(RunConfig&), const char* key) {
    RunConfig bad = rc;
    tweak(bad);
    const std::string what = refusal([&] { emit_torchtitan_toml(bad, TorchtitanVersion::early_2026); });
    CHECK(what.rfind("torchtitan: ", 0) == 0);
    CHECK(what.find(key) != std::string::npos);
  };
  refuse_with([](RunConfig& r) { r.plan.sharding = Sharding::zero1; }, "sharding");
  refuse_with([](RunConfig& r) { r.plan.ac = AcMode::selective_attn; }, "ac");
  refuse_with([](RunConfig& r) { r.plan.ac_reentrant = true; }, "ac_reentrant");
  refuse_with([](RunConfig& r) { r.plan.fp8 = Fp8Recipe::te_delayed; }, "fp8");
  refuse_with([](RunConfig& r) { r.plan.reduce_dtype = Dtype::bf16; }, "reduce_dtype");
  refuse_with([](RunConfig& r) { r.plan.act_offload = true; }, "act_offload");
  refuse_with([](RunConfig& r) { r.plan.async_tp = true; }, "async_tp");
  refuse_with([](RunConfig& r) { r.plan.optimizer = Optimizer::sgd; }, "optimizer");
  refuse_with([](RunConfig& r) { r.model = load_model("mpt-7b"); }, "no torchtitan flavor");
  refuse_with([](RunConfig& r) { r.model.n_layers = 40; }, "no torchtitan flavor");  // name reused, shape not
  refuse_with([](RunConfig& r) { r.n_gpus = 0; }, "n_gpus");
  CHECK(refusal([&] { emit_torchtitan_toml(rc, TorchtitanVersion::registry); }).find("registry") != std::string::npos);
}

TEST_CASE("torchtitan expert parallelism: expert_parallel_degree for deepseek_v3, read back; Mixtral refused") {
  // DeepSeek-V3 (torchtitan deepseek_v3 671B) on 64 GPUs: FSDP over dp_shard 64, EP 8 borrowed
  // from the shard ranks (parallel_dims.py: ep divides dp_shard x cp, experts not tensor-parallel).
  Mesh m;
  m.dp_shard = 64;
  m.ep = 8;
  m.etp = 1;
  const RunConfig rc = make({"deepseek-v3", Runtime::torchtitan_fsdp2, m, 64, 4096, 64, 1, 0},
                            [](Plan& p) { p.ac = AcMode::full; });
  const std::string toml = emit_torchtitan_toml(rc, TorchtitanVersion::early_2026);
  keys_known(toml, TorchtitanVersion::early_2026);
  const toml::table t = toml::parse(toml);
  CHECK(t["model"]["name"].value<std::string>() == "deepseek_v3");
  CHECK(t["model"]["flavor"].value<std::string>() == "671B");
  CHECK(t["parallelism"]["expert_parallel_degree"].value<std::int64_t>() == 8);
  CHECK(t["parallelism"]["expert_tensor_parallel_degree"].value<std::int64_t>() == 1);
  const RunConfig back = reimport(toml, "dsv3.toml", 64);
  CHECK(back.model.name == "deepseek-v3");
  CHECK(back.plan.mesh.ep == 8);
  CHECK(back.plan.mesh.expert_tp() == 1);
  same_plan(rc, back);
  CHECK_FALSE(t["debug"]["moe_force_load_balance"].value<bool>().has_value());
  // A force-balanced run (benchmark routing) says so in [debug] and reads back so.
  RunConfig forced = rc;
  forced.model.moe.force_balance = true;
  const std::string forced_toml = emit_torchtitan_toml(forced, TorchtitanVersion::early_2026);
  keys_known(forced_toml, TorchtitanVersion::early_2026);
  CHECK(toml::parse(forced_toml)["debug"]["moe_force_load_balance"].value<bool>() == true);
  CHECK(reimport(forced_toml, "dsv3-forced.toml", 64).model.moe.force_balance);
  // The mid-2025 layout's and the registry era's deepseek_v3 presets are not pinned: refused.
  CHECK(refusal([&] { emit_torchtitan_toml(rc, TorchtitanVersion::mid_2025); }).find("early-2026") != std::string::npos);
  CHECK(refusal([&] { emit_torchtitan_registry_args(rc); }).find("not pinned") != std::string::npos);
  // EP that borrows replicate ranks, or expert TP other than 1 or tp, is not torchtitan's mesh.
  Mesh hsdp = m;
  hsdp.dp_shard = 4;
  hsdp.dp_replicate = 16;
  const RunConfig wide = make({"deepseek-v3", Runtime::torchtitan_fsdp2, hsdp, 64, 4096, 64, 1, 0},
                              [](Plan& p) { p.ac = AcMode::full; });
  CHECK(refusal([&] { emit_torchtitan_toml(wide, TorchtitanVersion::early_2026); }).find("torchtitan: ep") == 0);

  // Mixtral: torchtitan ships no Mixtral model, so the plan is refused for its model, not its EP.
  RunConfig mix = load_run_config((test::data_root() / "plans/examples/plan-mixtral-8x7b-ep8-64gpu.toml").string());
  resolve_layout(mix, std::nullopt);
  mix.plan.runtime = Runtime::torchtitan_fsdp2;
  CHECK(refusal([&] { emit_torchtitan_toml(mix, TorchtitanVersion::early_2026); }).find("torchtitan: model") == 0);
  // A dense model with ep > 1 is refused for its EP.
  Mesh dense;
  dense.dp_shard = 8;
  dense.ep = 2;
  const RunConfig d8 = make({"llama3.1-8b", Runtime::torchtitan_fsdp2, dense, 8, 8192, 8, 1, 0});
  CHECK(refusal([&] { emit_torchtitan_toml(d8, TorchtitanVersion::early_2026); }).find("dense") != std::string::npos);
}

TEST_CASE("torchtitan registry era: --module/--config launch with parallelism overrides") {
  Mesh m;
  m.tp = 8;
  m.dp_shard = 4;
  const RunConfig rc = make({"llama3.1-70b", Runtime::torchtitan_fsdp2, m, 32, 8192, 4, 1, 0},
                            [](Plan& p) { p.ac = AcMode::full; });
  const std::vector<std::string> args = emit_torchtitan_registry_args(rc);
  const std::vector<std::string> want = {
      "--module", "llama3", "--config", "llama3_70b",
      "--parallelism.data_parallel_replicate_degree", "1",
      "--parallelism.data_parallel_shard_degree", "4",
      "--parallelism.tensor_parallel_degree", "8",
      "--parallelism.pipeline_parallel_degree", "1",
      "--parallelism.context_parallel_degree", "1",
      "--parallelism.fsdp_reshard_after_forward", "default",
      "--training.max_context_length", "8192",
      "--training.num_tokens_per_microbatch_per_dp_rank", "8192"};
  CHECK(args == want);
  // Settings whose registry-era override is not pinned must match the preset, or are refused.
  RunConfig accum = make({"llama3.1-70b", Runtime::torchtitan_fsdp2, m, 32, 8192, 8, 1, 0},
                         [](Plan& p) { p.ac = AcMode::full; });
  CHECK(refusal([&] { emit_torchtitan_registry_args(accum); }).find("grad_accum") != std::string::npos);
  RunConfig sac = rc;
  sac.plan.ac = AcMode::selective_op;
  CHECK(refusal([&] { emit_torchtitan_registry_args(sac); }).find("238fa9953e4a") != std::string::npos);
}

// ---------------------------------------------------------------------------------------------
// llm-foundry

namespace {
// FSDPConfig / FSDP2Config fields (composer/utils/parallelism.py) and TrainConfig's top-level keys
// (llmfoundry/utils/config_utils.py).
const std::set<std::string> kFsdp1 = {
    "sharding_strategy", "mixed_precision", "keep_low_precision_grads", "activation_checkpointing",
    "activation_checkpointing_reentrant", "activation_cpu_offload", "cpu_offload", "limit_all_gathers",
    "forward_prefetch", "forward_prefetch_limit", "backward_prefetch", "backward_prefetch_limit", "use_orig_params",
    "sync_module_states", "state_dict_type", "sharded_ckpt_prefix_dir", "load_monolith_rank0_only",
    "data_parallel_shard_degree", "data_parallel_replicate_degree", "ignored_modules", "process_group",
    "load_planner", "save_planner", "auto_wrap", "te_checkpoint_wrapper", "te_shard_fp8_weight", "verbose"};
const std::set<std::string> kFsdp2 = {"reshard_after_forward", "activation_checkpointing", "activation_cpu_offload",
                                      "state_dict_type", "load_monolith_rank0_only", "mixed_precision", "verbose"};
const std::set<std::string> kTop = {
    "max_seq_len", "run_name", "model", "tokenizer", "train_loader", "scheduler", "optimizer", "algorithms",
    "max_duration", "eval_interval", "eval_first", "global_train_batch_size", "seed", "device_eval_batch_size",
    "device_train_microbatch_size", "precision", "fsdp_config", "tp_config", "progress_bar", "log_to_console",
    "console_log_interval", "callbacks", "compile_config"};

void foundry_keys_ok(const std::string& yaml, bool fsdp2) {
  const YAML::Node n = YAML::Load(yaml);
  for (const auto& kv : n) {
    INFO("top-level " << kv.first.Scalar());
    CHECK(kTop.count(kv.first.Scalar()) == 1);
  }
  for (const auto& kv : n["fsdp_config"]) {
    INFO("fsdp_config." << kv.first.Scalar());
    CHECK((fsdp2 ? kFsdp2 : kFsdp1).count(kv.first.Scalar()) == 1);
  }
}
}  // namespace

TEST_CASE("llm-foundry round trip: mpt-7b preset shape, FULL_SHARD, PURE, full AC") {
  Mesh m;
  m.dp_shard = 8;
  const RunConfig rc = make({"mpt-7b", Runtime::composer_fsdp1, m, 8, 2048, 64, 8, 0});
  const std::string yaml = emit_foundry_yaml(rc);
  foundry_keys_ok(yaml, false);
  CHECK(yaml.find("name: mpt_causal_lm") != std::string::npos);
  CHECK(yaml.find("sharding_strategy: FULL_SHARD") != std::string::npos);
  CHECK(yaml.find("mixed_precision: PURE") != std::string::npos);
  CHECK(yaml.find("activation_checkpointing_reentrant: false") != std::string::npos);
  CHECK(yaml.find("backward_prefetch: BACKWARD_POST") != std::string::npos);
  CHECK(yaml.find("tp_config") == std::string::npos);
  const RunConfig back = reimport(yaml, "mpt-7b.yaml", 8);
  same_plan(rc, back);
  CHECK(back.plan.root_unsharded == rc.plan.root_unsharded);
  CHECK(back.plan.limit_all_gathers == rc.plan.limit_all_gathers);
  CHECK(back.plan.backward_prefetch == rc.plan.backward_prefetch);
  CHECK(back.plan.forward_prefetch == rc.plan.forward_prefetch);
  CHECK(back.warnings.empty());
}

TEST_CASE("llm-foundry round trip: Llama 3.1 8B by HF id, HSDP over 2 nodes, DEFAULT precision, prefetch knobs") {
  Mesh m;
  m.dp_replicate = 2;
  m.dp_shard = 8;
  const RunConfig rc = make({"llama3.1-8b", Runtime::composer_fsdp1, m, 16, 4096, 128, 2, 0}, [](Plan& p) {
    p.reduce_dtype = Dtype::fp32;  // DEFAULT
    p.ac = AcMode::none;
    p.backward_prefetch = BackwardPrefetch::backward_pre;
    p.forward_prefetch = true;
    p.limit_all_gathers = false;
    p.act_offload = true;
  });
  CHECK(rc.job.grad_accum == 4);  // device batch 128 / 16 = 8 = 2 x 4
  const std::string yaml = emit_foundry_yaml(rc);
  foundry_keys_ok(yaml, false);
  CHECK(yaml.find("pretrained_model_name_or_path: meta-llama/Llama-3.1-8B") != std::string::npos);
  CHECK(yaml.find("sharding_strategy: HYBRID_SHARD") != std::string::npos);
  CHECK(yaml.find("data_parallel_replicate_degree: 2") != std::string::npos);
  CHECK(yaml.find("data_parallel_shard_degree: 8") != std::string::npos);
  CHECK(yaml.find("mixed_precision: DEFAULT") != std::string::npos);
  CHECK(yaml.find("device_train_microbatch_size: 2") != std::string::npos);
  const RunConfig back = reimport(yaml, "llama3.1-8b.yaml", 16);
  same_plan(rc, back);
  CHECK(back.plan.backward_prefetch == BackwardPrefetch::backward_pre);
  CHECK(back.plan.forward_prefetch);
  CHECK_FALSE(back.plan.limit_all_gathers);
  CHECK(back.warnings.empty());
}

TEST_CASE("llm-foundry round trip: MLP-only TP through tp_config, SHARD_GRAD_OP") {
  Mesh m;
  m.dp_shard = 4;
  m.tp = 2;
  const RunConfig rc = make({"mpt-7b", Runtime::composer_fsdp1, m, 8, 2048, 32, 2, 0}, [](Plan& p) {
    p.sharding = Sharding::zero2;
    p.reshard_after_forward = false;
  });
  const std::string yaml = emit_foundry_yaml(rc);
  foundry_keys_ok(yaml, false);
  CHECK(yaml.find("tp_config:\n  strategy: ffn\n  tensor_parallel_degree: 2\n") != std::string::npos);
  CHECK(yaml.find("sharding_strategy: SHARD_GRAD_OP") != std::string::npos);
  same_plan(rc, reimport(yaml, "mpt-7b.yaml", 8));
}

TEST_CASE("llm-foundry round trip: Composer FSDP2 writes only FSDP2Config keys") {
  Mesh m;
  m.dp_shard = 8;
  const RunConfig rc = make({"llama3.1-8b", Runtime::composer_fsdp2, m, 8, 8192, 16, 1, 0}, [](Plan& p) {
    p.sharding = Sharding::zero2;
    p.reshard_after_forward = false;
    p.backward_prefetch = BackwardPrefetch::backward_pre;
    p.forward_prefetch = true;
    p.limit_all_gathers = false;
  });
  const std::string yaml = emit_foundry_yaml(rc);
  foundry_keys_ok(yaml, true);
  CHECK(yaml.find("reshard_after_forward: false") != std::string::npos);
  const RunConfig back = reimport(yaml, "llama3.1-8b.yaml", 8);
  same_plan(rc, back);
}

TEST_CASE("llm-foundry refuses what it cannot express") {
  Mesh m;
  m.dp_shard = 8;
  const RunConfig rc = make({"mpt-7b", Runtime::composer_fsdp1, m, 8, 2048, 64, 8, 0});
  auto refuse_with = [&](void (*tweak)(RunConfig&), const char* key) {
    RunConfig bad = rc;
    tweak(bad);
    const std::string what = refusal([&] { emit_foundry_yaml(bad); });
    CHECK(what.rfind("llm-foundry: ", 0) == 0);
    CHECK(what.find(key) != std::string::npos);
  };
  refuse_with([](RunConfig& r) { r.plan.mesh.dp_shard = 4; r.plan.mesh.pp = 2; }, "pp");
  refuse_with([](RunConfig& r) { r.plan.mesh.dp_shard = 4; r.plan.mesh.cp = 2; }, "cp");
  refuse_with([](RunConfig& r) { r.plan.mesh.dp_shard = 4; r.plan.mesh.tp = 2; r.plan.tp_style = TpStyle::full; }, "tp_style");
  refuse_with([](RunConfig& r) { r.plan.sharding = Sharding::zero1; }, "sharding");
  refuse_with([](RunConfig& r) { r.plan.ac = AcMode::selective_op; }, "ac");
  refuse_with([](RunConfig& r) { r.plan.param_offload = true; }, "param_offload");
  refuse_with([](RunConfig& r) { r.plan.state_dtype = Dtype::bf16; }, "state_dtype");
  refuse_with([](RunConfig& r) { r.plan.fp8 = Fp8Recipe::torchao_rowwise; }, "fp8");
  refuse_with([](RunConfig& r) { r.job.global_batch = 60; }, "global_batch");
  refuse_with([](RunConfig& r) { r.job.micro_batch = 4; }, "micro_batch");
}

// ---------------------------------------------------------------------------------------------
// Megatron-LM: no importer, so the argument lists are checked against hand-written ones.

TEST_CASE("megatron: Llama 3.1 8B, TP 2 + SP, distributed optimizer, selective recompute") {
  Mesh m;
  m.tp = 2;
  m.dp_shard = 4;
  const RunConfig rc = make({"llama3.1-8b", Runtime::megatron, m, 8, 8192, 32, 1, 0}, [](Plan& p) {
    p.sharding = Sharding::zero1;
    p.sequence_parallel = true;
    p.ac = AcMode::selective_attn;
  });
  const std::vector<std::string> want = {
      "--tensor-model-parallel-size", "2", "--pipeline-model-parallel-size", "1", "--sequence-parallel",
      "--use-distributed-optimizer", "--overlap-grad-reduce", "--overlap-param-gather",
      "--num-layers", "32", "--hidden-size", "4096", "--num-attention-heads", "32",
      "--group-query-attention", "--num-query-groups", "8", "--ffn-hidden-size", "14336", "--swiglu",
      "--normalization", "RMSNorm", "--norm-epsilon", "1e-05", "--disable-bias-linear",
      "--position-embedding-type", "rope", "--rotary-base", "500000", "--use-rope-scaling",
      "--rope-scaling-factor", "8", "--max-position-embeddings", "131072", "--untie-embeddings-and-output-weights",
      "--attention-dropout", "0.0", "--hidden-dropout", "0.0",
      "--micro-batch-size", "1", "--global-batch-size", "32", "--seq-length", "8192", "--bf16",
      "--recompute-activations",
      "--optimizer", "adam", "--adam-beta1", "0.9", "--adam-beta2", "0.95", "--lr", "3e-4", "--min-lr", "3e-5",
      "--lr-decay-style", "cosine", "--lr-warmup-iters", "100", "--weight-decay", "0.1", "--clip-grad", "1.0",
      "--init-method-std", "0.02", "--train-iters", "1000", "--mock-data", "--tokenizer-type", "HuggingFaceTokenizer",
      "--tokenizer-model", "meta-llama/Llama-3.1-8B", "--log-interval", "10", "--eval-interval", "1000",
      "--eval-iters", "0"};
  CHECK(emit_megatron_args(rc) == want);
}

TEST_CASE("megatron: 70B interleaved PP, CP, full recompute, FP8 delayed with param gather") {
  Mesh m;
  m.tp = 4;
  m.pp = 4;
  m.vpp = 5;
  m.cp = 2;
  m.dp_shard = 2;
  const RunConfig rc = make({"llama3.1-70b", Runtime::megatron, m, 64, 8192, 64, 1, 0}, [](Plan& p) {
    p.sharding = Sharding::zero1;
    p.sequence_parallel = true;
    p.async_tp = true;
    p.schedule = PipelineSchedule::interleaved_1f1b;
    p.ac = AcMode::full;
    p.fp8 = Fp8Recipe::te_delayed;
    p.fp8_all_gather = true;
    p.reduce_dtype = Dtype::bf16;
  });
  const std::vector<std::string> args = emit_megatron_args(rc);
  const std::vector<std::string> head = {
      "--tensor-model-parallel-size", "4", "--pipeline-model-parallel-size", "4",
      "--num-layers-per-virtual-pipeline-stage", "4", "--context-parallel-size", "2", "--sequence-parallel",
      "--tp-comm-overlap", "--use-distributed-optimizer", "--overlap-grad-reduce", "--overlap-param-gather",
      "--num-layers", "80", "--hidden-size", "8192", "--num-attention-heads", "64", "--group-query-attention",
      "--num-query-groups", "8", "--ffn-hidden-size", "28672", "--swiglu", "--normalization", "RMSNorm",
      "--norm-epsilon", "1e-05", "--disable-bias-linear", "--position-embedding-type", "rope", "--rotary-base",
      "500000", "--use-rope-scaling", "--rope-scaling-factor", "8", "--max-position-embeddings", "131072",
      "--untie-embeddings-and-output-weights", "--attention-dropout", "0.0", "--hidden-dropout", "0.0",
      "--micro-batch-size", "1", "--global-batch-size", "64", "--seq-length", "8192", "--bf16",
      "--grad-reduce-in-bf16", "--recompute-granularity", "full", "--recompute-method", "uniform",
      "--recompute-num-layers", "1", "--fp8-format", "hybrid", "--fp8-recipe", "delayed", "--fp8-param-gather",
      "--optimizer", "adam"};
  REQUIRE(args.size() > head.size());
  CHECK(std::vector<std::string>(args.begin(), args.begin() + static_cast<std::ptrdiff_t>(head.size())) == head);
  CHECK(megatron_args_text(args).find("  --num-layers 80 \\\n") != std::string::npos);
}

TEST_CASE("megatron refuses what it cannot express") {
  Mesh m;
  m.dp_shard = 8;
  const RunConfig rc = make({"llama3.1-8b", Runtime::megatron, m, 8, 4096, 16, 1, 0},
                            [](Plan& p) { p.sharding = Sharding::zero1; });
  CHECK_NOTHROW(emit_megatron_args(rc));
  auto refuse_with = [&](void (*tweak)(RunConfig&), const char* key) {
    RunConfig bad = rc;
    tweak(bad);
    const std::string what = refusal([&] { emit_megatron_args(bad); });
    CHECK(what.rfind("megatron: ", 0) == 0);
    CHECK(what.find(key) != std::string::npos);
  };
  refuse_with([](RunConfig& r) { r.plan.deepspeed_engine = true; }, "deepspeed");
  refuse_with([](RunConfig& r) { r.plan.ac = AcMode::selective_op; }, "ac");
  refuse_with([](RunConfig& r) { r.plan.fp8 = Fp8Recipe::torchao_tensorwise; }, "fp8");
  refuse_with([](RunConfig& r) { r.plan.mesh.dp_shard = 4; r.plan.mesh.pp = 2; r.plan.schedule = PipelineSchedule::gpipe; }, "schedule");
  refuse_with([](RunConfig& r) { r.plan.mesh.dp_shard = 4; r.plan.mesh.tp = 2; r.plan.tp_style = TpStyle::mlp_only; }, "tp_style");
  refuse_with([](RunConfig& r) { r.plan.act_offload = true; }, "act_offload");
  refuse_with([](RunConfig& r) { r.model = load_model("mpt-7b"); r.model.pos_emb = PosEmb::alibi; }, "model");
  refuse_with([](RunConfig& r) { r.model.sliding_window = 4096; }, "model.sliding_window");
}

TEST_CASE("megatron: Megatron-FSDP for ZeRO-2/3 and the pipeline split rules") {
  Mesh m;
  m.dp_shard = 8;
  const RunConfig rc = make({"llama3.1-8b", Runtime::megatron, m, 8, 4096, 16, 1, 0},
                            [](Plan& p) { p.sharding = Sharding::zero3; });
  auto has = [](const std::vector<std::string>& a, const std::string& flag, const std::string& value = "") {
    const auto it = std::find(a.begin(), a.end(), flag);
    if (it == a.end()) return false;
    return value.empty() || (it + 1 != a.end() && *(it + 1) == value);
  };
  const auto fsdp = emit_megatron_args(rc);
  CHECK(has(fsdp, "--use-megatron-fsdp"));
  CHECK(has(fsdp, "--data-parallel-sharding-strategy", "optim_grads_params"));
  CHECK(has(fsdp, "--use-distributed-optimizer"));
  RunConfig z2 = rc;
  z2.plan.sharding = Sharding::zero2;
  CHECK(refusal([&] { emit_megatron_args(z2); }).find("sharding") != std::string::npos);

  // 32 layers on pp 2 with the embedding and the loss counted: (32 + 2) / 2 = 17, 16 decoder
  // layers each; 32 on pp 3 only with fixed first / last counts (10 + 11 + 11).
  RunConfig pp = rc;
  pp.plan.sharding = Sharding::zero1;
  pp.plan.mesh.pp = 2;
  pp.plan.mesh.dp_shard = 4;
  pp.job.grad_accum = 4;
  pp.plan.pipeline_split.embedding_as_layer = pp.plan.pipeline_split.loss_as_layer = true;
  const auto split = emit_megatron_args(pp);
  CHECK(has(split, "--account-for-embedding-in-pipeline-split"));
  CHECK(has(split, "--account-for-loss-in-pipeline-split"));
  RunConfig three = rc;
  three.plan.sharding = Sharding::zero1;
  three.plan.mesh.pp = 4;
  three.plan.mesh.dp_shard = 2;
  three.job.grad_accum = 8;
  three.plan.pipeline_split.first_stage_layers = 5;
  three.plan.pipeline_split.last_stage_layers = 9;
  const auto fl = emit_megatron_args(three);
  CHECK(has(fl, "--decoder-first-pipeline-num-layers", "5"));
  CHECK(has(fl, "--decoder-last-pipeline-num-layers", "9"));
  three.plan.pipeline_split.first_stage_layers = 40;  // more than the model's 32
  const std::string what = refusal([&] { emit_megatron_args(three); });
  CHECK(what.find("pipeline_split") != std::string::npos);
}

TEST_CASE("megatron MoE: EP, expert TP, shared experts, dense layers, MLA, recompute modules") {
  auto after = [](const std::vector<std::string>& a, const std::string& flag) -> std::string {
    const auto it = std::find(a.begin(), a.end(), flag);
    if (it == a.end()) return "<absent>";
    return it + 1 == a.end() ? "" : *(it + 1);
  };
  auto has_flag = [](const std::vector<std::string>& a, const std::string& flag) {
    return std::find(a.begin(), a.end(), flag) != a.end();
  };
  Mesh m;
  m.tp = 2;
  m.dp_shard = 8;
  m.ep = 8;
  m.etp = 1;
  const RunConfig ds = make({"deepseek-v3", Runtime::megatron, m, 16, 4096, 64, 1, 0}, [](Plan& p) {
    p.sharding = Sharding::zero1;
    p.sequence_parallel = true;
    p.recompute_modules.norms = true;
    p.recompute_modules.moe_act = true;
  });
  const std::vector<std::string> a = emit_megatron_args(ds);
  CHECK(after(a, "--expert-model-parallel-size") == "8");
  CHECK(after(a, "--expert-tensor-parallel-size") == "1");
  CHECK(after(a, "--num-experts") == "256");
  CHECK(after(a, "--moe-router-topk") == "8");
  CHECK(after(a, "--moe-ffn-hidden-size") == "2048");
  CHECK(after(a, "--ffn-hidden-size") == "18432");  // the dense layers' width
  CHECK(after(a, "--moe-shared-expert-intermediate-size") == "2048");
  CHECK(after(a, "--moe-layer-freq") == "([0]*3+[1]*58)");
  CHECK(has_flag(a, "--moe-grouped-gemm"));
  CHECK_FALSE(has_flag(a, "--moe-router-force-load-balancing"));
  RunConfig forced = ds;
  forced.model.moe.force_balance = true;
  CHECK(has_flag(emit_megatron_args(forced), "--moe-router-force-load-balancing"));
  CHECK(has_flag(a, "--multi-latent-attention"));
  CHECK(after(a, "--q-lora-rank") == "1536");
  CHECK(after(a, "--kv-lora-rank") == "512");
  CHECK(after(a, "--qk-head-dim") == "128");
  CHECK(after(a, "--qk-pos-emb-head-dim") == "64");
  CHECK(after(a, "--v-head-dim") == "128");
  CHECK_FALSE(has_flag(a, "--group-query-attention"));
  CHECK(after(a, "--recompute-granularity") == "selective");
  CHECK(after(a, "--recompute-modules") == "layernorm");
  CHECK(has_flag(a, "moe_act"));

  Mesh q;
  q.tp = 2;
  q.dp_shard = 4;
  q.ep = 4;
  const RunConfig qwen = make({"qwen3-30b-a3b", Runtime::megatron, q, 8, 4096, 32, 1, 0}, [](Plan& p) {
    p.sharding = Sharding::zero1;
    p.sequence_parallel = true;
  });
  const std::vector<std::string> b = emit_megatron_args(qwen);
  CHECK(after(b, "--kv-channels") == "128");  // head width 128 != 2048 / 32
  CHECK(has_flag(b, "--qk-layernorm"));
  CHECK(after(b, "--expert-tensor-parallel-size") == "<absent>");  // Megatron's default: etp = tp
  CHECK(after(b, "--moe-layer-freq") == "<absent>");

  RunConfig bad = qwen;
  bad.plan.mesh.ep = 3;
  CHECK(refusal([&] { emit_megatron_args(bad); }).find("ep") != std::string::npos);
}

// ---------------------------------------------------------------------------------------------
// Bundles

TEST_CASE("bundles: files per runtime, sbatch only for multi-node, plan.md, byte-identical output") {
  const ClusterSpec c = h100();
  Mesh m8;
  m8.dp_shard = 8;
  Mesh m16;
  m16.dp_shard = 16;
  const RunConfig tt8 = make({"llama3.1-8b", Runtime::torchtitan_fsdp2, m8, 8, 8192, 8, 1, 0});
  const RunConfig tt16 = make({"llama3.1-8b", Runtime::torchtitan_fsdp2, m16, 16, 8192, 16, 1, 0});

  auto names = [](const std::vector<BundleFile>& fs) {
    std::vector<std::string> out;
    for (const auto& f : fs) out.push_back(f.name);
    return out;
  };
  const auto single = render_bundle(tt8, c, EmitRuntime::torchtitan, TorchtitanVersion::early_2026, summary());
  CHECK(names(single) == std::vector<std::string>{"llama3.1-8b.toml", "launch.sh", "plan.md"});
  CHECK(single[1].content.find("torchrun --nproc_per_node=8 --rdzv_backend c10d --rdzv_endpoint=\"localhost:0\"") !=
        std::string::npos);
  CHECK(single[1].content.find("--job.config_file \"$BUNDLE_DIR/llama3.1-8b.toml\"") != std::string::npos);
  const std::string& md = single[2].content;
  CHECK(md.find("| tokens/s per GPU | 3812 |") != std::string::npos);
  CHECK(md.find("| step time | 17.190 s |") != std::string::npos);
  CHECK(md.find("57.0 GiB of 80.0 GiB") != std::string::npos);
  CHECK(md.find("- compute 71.0 %") != std::string::npos);
  CHECK(md.find("- H100 GEMM efficiency from the shipped profile") != std::string::npos);
  CHECK(md.find("238fa9953e4a") != std::string::npos);

  const auto multi = render_bundle(tt16, c, EmitRuntime::torchtitan, TorchtitanVersion::mid_2025, summary());
  CHECK(names(multi) == std::vector<std::string>{"llama3.1-8b.toml", "launch.sh", "sbatch.slurm", "plan.md"});
  CHECK(multi[2].content.find("#SBATCH --nodes=2") != std::string::npos);
  CHECK(multi[2].content.find("srun torchrun --nnodes 2 --nproc_per_node 8 --rdzv_id \"$SLURM_JOB_ID\"") != std::string::npos);
  CHECK(multi[1].content.find("--nnodes=2 --nproc_per_node=8") != std::string::npos);

  // Registry era: the command line is the config.
  Mesh mr;
  mr.dp_shard = 8;
  const RunConfig reg = make({"llama3.1-8b", Runtime::torchtitan_fsdp2, mr, 8, 8192, 8, 1, 0});
  const auto rb = render_bundle(reg, c, EmitRuntime::torchtitan, TorchtitanVersion::registry, summary());
  CHECK(names(rb) == std::vector<std::string>{"torchtitan_args.txt", "launch.sh", "plan.md"});
  CHECK(rb[1].content.find("-m torchtitan.train \\\n    --module llama3 \\\n    --config llama3_8b") != std::string::npos);

  // llm-foundry: Composer's launcher; multi-node takes the node rank from Slurm.
  Mesh mf;
  mf.dp_shard = 16;
  const RunConfig f16 = make({"mpt-7b", Runtime::composer_fsdp1, mf, 16, 2048, 64, 4, 0});
  const auto fb = render_bundle(f16, c, EmitRuntime::llm_foundry, TorchtitanVersion::early_2026, summary());
  CHECK(names(fb) == std::vector<std::string>{"mpt-7b.yaml", "launch.sh", "sbatch.slurm", "plan.md"});
  CHECK(fb[1].content.find("composer --world_size 16 --node_rank \"$NODE_RANK\"") != std::string::npos);
  CHECK(fb[2].content.find("--node_rank \"$SLURM_NODEID\"") != std::string::npos);

  // Megatron: torchrun pretrain_gpt.py with the arguments.
  const RunConfig mg = make({"llama3.1-8b", Runtime::megatron, m8, 8, 4096, 16, 1, 0},
                            [](Plan& p) { p.sharding = Sharding::zero1; });
  const auto mb = render_bundle(mg, c, EmitRuntime::megatron, TorchtitanVersion::early_2026, summary());
  CHECK(names(mb) == std::vector<std::string>{"megatron_args.txt", "launch.sh", "plan.md"});
  CHECK(mb[0].content.find("--tensor-model-parallel-size 1\n") != std::string::npos);
  CHECK(mb[1].content.find("export CUDA_DEVICE_MAX_CONNECTIONS=1") != std::string::npos);
  CHECK(mb[1].content.find("pretrain_gpt.py \\\n    --tensor-model-parallel-size 1") != std::string::npos);

  if (const char* dump = std::getenv("MESHPLAN_EMIT_DUMP"); dump != nullptr && *dump != '\0') {
    write_bundle(fs::path(dump) / "tt16", tt16, c, EmitRuntime::torchtitan, TorchtitanVersion::early_2026, summary());
    write_bundle(fs::path(dump) / "f16", f16, c, EmitRuntime::llm_foundry, TorchtitanVersion::early_2026, summary());
    write_bundle(fs::path(dump) / "mg", mg, c, EmitRuntime::megatron, TorchtitanVersion::early_2026, summary());
    write_bundle(fs::path(dump) / "reg", reg, c, EmitRuntime::torchtitan, TorchtitanVersion::registry, summary());
  }

  // Determinism: the same input writes the same bytes.
  const fs::path a = temp_dir("bundle-a");
  const fs::path b = temp_dir("bundle-b");
  const auto wa = write_bundle(a, tt16, c, EmitRuntime::torchtitan, TorchtitanVersion::early_2026, summary());
  const auto wb = write_bundle(b, tt16, c, EmitRuntime::torchtitan, TorchtitanVersion::early_2026, summary());
  REQUIRE(wa.size() == 4);
  auto slurp = [](const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  };
  for (std::size_t i = 0; i < wa.size(); ++i) CHECK(slurp(wa[i]) == slurp(wb[i]));
  CHECK((fs::status(a / "launch.sh").permissions() & fs::perms::owner_exec) != fs::perms::none);
  // The written config is itself importable.
  RunConfig back = load_run_config((a / "llama3.1-8b.toml").string());
  resolve_layout(back, 16);
  same_plan(tt16, back);

  // An inexpressible plan writes nothing.
  const fs::path none = temp_dir("bundle-none") / "out";
  CHECK_THROWS_AS(write_bundle(none, tt16, c, EmitRuntime::llm_foundry, TorchtitanVersion::early_2026, summary()),
                  InputError);
  CHECK_FALSE(fs::exists(none));
}

TEST_CASE("bundles: GPU counts that do not fill whole nodes are refused; partial single node is fine") {
  ClusterSpec c = h100();
  Mesh m;
  m.dp_shard = 4;
  const RunConfig rc = make({"llama3.1-8b", Runtime::torchtitan_fsdp2, m, 4, 8192, 4, 1, 0});
  const auto files = render_bundle(rc, c, EmitRuntime::torchtitan, TorchtitanVersion::early_2026, summary());
  CHECK(files[1].content.find("CUDA_VISIBLE_DEVICES:-0,1,2,3") != std::string::npos);
  Mesh m12;
  m12.dp_shard = 12;
  const RunConfig r12 = make({"llama3.1-8b", Runtime::torchtitan_fsdp2, m12, 12, 8192, 12, 1, 0});
  CHECK_THROWS_AS(render_bundle(r12, c, EmitRuntime::torchtitan, TorchtitanVersion::early_2026, summary()), InputError);
}

TEST_CASE("emitted torchtitan files for the shipped example shapes stay inside each version's key list" *
          SKIP_UNLESS_SHARED()) {
  // The key list itself agrees with the shipped torchtitan configs of each commit (../shared).
  for (const auto& [dir, v] : {std::pair{"8570415c3", TorchtitanVersion::mid_2025},
                               std::pair{"238fa9953e4a", TorchtitanVersion::early_2026}}) {
    for (const char* f : {"llama3_8b.toml", "llama3_70b.toml", "llama3_405b.toml"}) {
      const fs::path p = test::shared_root() / "examples" / "torchtitan" / dir / f;
      std::vector<std::string> keys;
      leaf_keys(toml::parse_file(p.string()), "", keys);
      for (const auto& k : keys) {
        INFO(p.string() << ": " << k);
        CHECK(torchtitan_key_known(v, k));
      }
    }
  }
}

TEST_CASE("CUDA graphs: Megatron --enable-cuda-graph, llm-foundry compile mode reduce-overhead, torchtitan refuses") {
  Mesh m;
  m.tp = 2;
  m.dp_shard = 4;
  const RunConfig mg = make({"llama3.1-8b", Runtime::megatron, m, 8, 8192, 32, 1, 0}, [](Plan& p) {
    p.sharding = Sharding::zero1;
    p.cuda_graphs = true;
  });
  const std::vector<std::string> args = emit_megatron_args(mg);
  CHECK(std::count(args.begin(), args.end(), "--enable-cuda-graph") == 1);

  Mesh f;
  f.dp_shard = 8;
  const RunConfig fy = make({"mpt-7b", Runtime::composer_fsdp1, f, 8, 2048, 64, 8, 0}, [](Plan& p) {
    p.compile = true;
    p.cuda_graphs = true;
  });
  const std::string yaml = emit_foundry_yaml(fy);
  CHECK(yaml.find("compile_config: {mode: reduce-overhead}") != std::string::npos);
  const RunConfig back = reimport(yaml, "graphs.yaml", 8);
  CHECK(back.plan.cuda_graphs);
  CHECK(back.plan.compile);

  Mesh t;
  t.dp_shard = 8;
  const RunConfig tt = make({"llama3.1-8b", Runtime::torchtitan_fsdp2, t, 8, 8192, 8, 1, 0},
                            [](Plan& p) { p.cuda_graphs = true; });
  CHECK(refusal([&] { emit_torchtitan_toml(tt, TorchtitanVersion::early_2026); }).find("cuda_graphs") != std::string::npos);
}

TEST_CASE("a planned checkpoint interval reaches every runtime's config; 0 keeps the runtime's default") {
  Mesh m;
  m.dp_shard = 8;
  RunConfig tt = make({"llama3.1-8b", Runtime::torchtitan_fsdp2, m, 8, 8192, 64, 1, 0});
  CHECK(emit_torchtitan_toml(tt, TorchtitanVersion::early_2026).find("interval = 500") != std::string::npos);
  tt.checkpoint_interval_steps = 123;
  for (TorchtitanVersion v : kTomlVersions) {
    const std::string toml = emit_torchtitan_toml(tt, v);
    keys_known(toml, v);
    CHECK(toml.find("interval = 123") != std::string::npos);
  }
  RunConfig fy = make({"mpt-7b", Runtime::composer_fsdp1, m, 8, 2048, 64, 8, 0});
  CHECK(emit_foundry_yaml(fy).find("save_interval") == std::string::npos);
  fy.checkpoint_interval_steps = 77;
  CHECK(emit_foundry_yaml(fy).find("save_interval: 77ba") != std::string::npos);
  Mesh mt;
  mt.dp_shard = 4;
  mt.tp = 2;
  RunConfig mg = make({"llama3.1-8b", Runtime::megatron, mt, 8, 8192, 32, 1, 0}, [](Plan& p) {
    p.sharding = Sharding::zero1;
    p.sequence_parallel = true;
    p.ac = AcMode::selective_attn;
  });
  auto has = [](const std::vector<std::string>& a, const std::string& flag, const std::string& value) {
    for (std::size_t i = 0; i + 1 < a.size(); ++i)
      if (a[i] == flag && a[i + 1] == value) return true;
    return false;
  };
  const std::vector<std::string> before = emit_megatron_args(mg);
  CHECK(std::find(before.begin(), before.end(), "--save-interval") == before.end());
  mg.checkpoint_interval_steps = 40;
  CHECK(has(emit_megatron_args(mg), "--save-interval", "40"));
}

TEST_CASE("megatron: every model field Megatron needs to train the same model is emitted (RoPE base, scaling, eps)") {
  auto after = [](const std::vector<std::string>& a, const std::string& flag) -> std::string {
    const auto it = std::find(a.begin(), a.end(), flag);
    if (it == a.end()) return "<absent>";
    return it + 1 == a.end() ? "" : *(it + 1);
  };
  Mesh m;
  m.dp_shard = 8;
  // Llama 3.1: rope_theta 500000 and the llama3 scaling with factor 8 (meta-llama config.json).
  for (const char* name : {"llama3.1-8b", "llama3.1-70b", "llama3.1-405b"}) {
    CAPTURE(name);
    const RunConfig rc = make({name, Runtime::megatron, m, 8, 4096, 16, 1, 0}, [](Plan& p) { p.sharding = Sharding::zero1; });
    REQUIRE(rc.model.rope.theta == 500000.0);
    const auto a = emit_megatron_args(rc);
    CHECK(after(a, "--rotary-base") == "500000");
    CHECK(std::find(a.begin(), a.end(), "--use-rope-scaling") != a.end());
    CHECK(after(a, "--rope-scaling-factor") == "8");
    CHECK(after(a, "--norm-epsilon") == "1e-05");
  }
  // Every shipped RoPE model: the base and epsilon Megatron gets are the model spec's.
  for (const char* name : {"llama2-7b", "mixtral-8x7b", "qwen3-30b-a3b"}) {
    CAPTURE(name);
    const RunConfig rc = make({name, Runtime::megatron, m, 8, 4096, 16, 1, 0}, [](Plan& p) { p.sharding = Sharding::zero1; });
    const auto a = emit_megatron_args(rc);
    CHECK(after(a, "--rotary-base") == fmt::format("{:g}", rc.model.rope.theta));
    CHECK(after(a, "--norm-epsilon") == fmt::format("{:g}", rc.model.norm_eps));
    CHECK(std::find(a.begin(), a.end(), "--use-rope-scaling") == a.end());
  }
}

TEST_CASE("torchtitan mid-2025: no training.dtype (that layout has none), and the header says unknown keys are ignored") {
  Mesh m;
  m.dp_shard = 8;
  const RunConfig rc = make({"llama3.1-8b", Runtime::torchtitan_fsdp2, m, 8, 8192, 8, 1, 0});
  const std::string mid = emit_torchtitan_toml(rc, TorchtitanVersion::mid_2025);
  CHECK(mid.find("\ndtype = ") == std::string::npos);
  CHECK(mid.find("ignores keys it does not know") != std::string::npos);
  const std::string early = emit_torchtitan_toml(rc, TorchtitanVersion::early_2026);
  CHECK(early.find("\ndtype = \"float32\"") != std::string::npos);
  CHECK(early.find("Unknown keys are fatal") != std::string::npos);
  RunConfig pure = rc;
  pure.plan.state_dtype = Dtype::bf16;
  pure.plan.param_dtype = pure.plan.compute_dtype = Dtype::bf16;
  CHECK(refusal([&] { emit_torchtitan_toml(pure, TorchtitanVersion::mid_2025); }).find("training.dtype") !=
        std::string::npos);
}

TEST_CASE("one torchtitan key table: the emitter's keys are the importer's, training.dtype only in the early-2026 layout") {
  CHECK(torchtitan_keys(TorchtitanVersion::early_2026) == torchtitan_layout_keys(TorchtitanLayout::early_2026));
  CHECK(torchtitan_keys(TorchtitanVersion::mid_2025) == torchtitan_layout_keys(TorchtitanLayout::mid_2025));
  CHECK(torchtitan_key_known(TorchtitanVersion::early_2026, "training.dtype"));
  CHECK_FALSE(torchtitan_key_known(TorchtitanVersion::mid_2025, "training.dtype"));
  CHECK(torchtitan_key_known(TorchtitanVersion::mid_2025, "training.compile"));
  CHECK_FALSE(torchtitan_key_known(TorchtitanVersion::early_2026, "training.compile"));
}

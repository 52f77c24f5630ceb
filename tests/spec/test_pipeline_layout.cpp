// Megatron's pipeline layout strings (spec/pipeline_layout.hpp) and uneven pipelines of a 61-layer
// model: the stage layer counts Megatron-Bridge's DeepSeek-V3 recipe writes, read from the
// Megatron flag, through the plan TOML and back out of the emitter, with each stage's parameters.
#include <doctest/doctest.h>

#include <fmt/format.h>

#include <algorithm>
#include <numeric>
#include <string>
#include <vector>

#include "emit/megatron_emitter.hpp"
#include "import/config_loader.hpp"
#include "import/import_megatron.hpp"
#include "import/import_torchtitan.hpp"
#include "spec/cluster_loader.hpp"
#include "spec/error.hpp"
#include "spec/model_loader.hpp"
#include "spec/pipeline_split.hpp"
#include "spec/plan_toml.hpp"
#include "workload/memory_estimate.hpp"

using namespace meshplan;

namespace {

std::vector<int> repeat(int n, int layers) { return std::vector<int>(static_cast<std::size_t>(n), layers); }
std::vector<int> cat(std::vector<int> a, const std::vector<int>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

std::string layout_error(const std::string& text) {
  std::string why;
  CHECK_FALSE(parse_pipeline_layout(text, &why));
  return why;
}

// DeepSeek-V3's shape on pp x (no tp, ep, cp: every parameter of a stage is its rank's), the
// layout in Megatron's flag. Micro-batch 1, 64 per step.
RunConfig deepseek_on(int pp, const std::string& layout) {
  const std::string args = fmt::format(
      "--num-layers 61 --hidden-size 7168 --num-attention-heads 128 --multi-latent-attention --q-lora-rank 1536 "
      "--kv-lora-rank 512 --qk-head-dim 128 --qk-pos-emb-head-dim 64 --v-head-dim 128 --ffn-hidden-size 18432 "
      "--num-experts 256 --moe-router-topk 8 --moe-ffn-hidden-size 2048 --moe-shared-expert-intermediate-size 2048 "
      "--moe-layer-freq '([0]*3+[1]*58)' --swiglu --normalization RMSNorm --position-embedding-type rope "
      "--untie-embeddings-and-output-weights --disable-bias-linear --vocab-size 129280 --seq-length 4096 "
      "--micro-batch-size 1 --global-batch-size 64 --bf16 --pipeline-model-parallel-size {} "
      "--pipeline-model-parallel-layout {}",
      pp, layout);
  RunConfig rc = import_megatron_args("dsv3.args", args);
  resolve_layout(rc, pp);
  return rc;
}

}  // namespace

TEST_CASE("layout strings: Megatron-Bridge's DeepSeek-V3 layouts parse to their stage layer counts") {
  // GB300's perf config: pp 2 x vpp 8 = 16 stages, the embedding and 4 layers first, 14 stages of
  // 4, the last holding 1 layer, the MTP layer and the loss.
  auto a = parse_pipeline_layout("Et*4|(t*4|)*14tmL");
  REQUIRE(a);
  CHECK(a->chunk_layers == cat(repeat(15, 4), {1}));
  CHECK(a->mtp_chunk == 15);
  CHECK(a->mtp_layers == 1);
  CHECK(format_pipeline_layout(*a) == "Et*4|(t*4|)*14tmL");
  // H100's: 32 stages, one layer first, 30 of two, the MTP layer and the loss alone last.
  auto b = parse_pipeline_layout("Et|(tt|)*30mL");
  REQUIRE(b);
  CHECK(b->chunk_layers == cat(cat({1}, repeat(30, 2)), {0}));
  CHECK(std::accumulate(b->chunk_layers.begin(), b->chunk_layers.end(), 0) == 61);
  CHECK(b->mtp_chunk == 31);
  CHECK(format_pipeline_layout(*b) == "Et|(t*2|)*30mL");
  CHECK(parse_pipeline_layout(format_pipeline_layout(*b))->chunk_layers == b->chunk_layers);
  // Commas and spaces are cosmetic; repeats nest.
  CHECK(parse_pipeline_layout("E, t*2 | ((t|)*2)*2 t L")->chunk_layers == std::vector<int>{2, 1, 1, 1, 1, 1});
}

TEST_CASE("layout strings Megatron rejects are one-line reasons") {
  CHECK(layout_error("tE|tL").find("embedding E must come first") != std::string::npos);
  CHECK(layout_error("Et|L|t").find("loss L must come last") != std::string::npos);
  CHECK(layout_error("Et|mt|L").find("after the MTP layers") != std::string::npos);
  CHECK(layout_error("Etm|m|tL").find("one stage") != std::string::npos);
  CHECK(layout_error("Et|tm|mL").find("one stage") != std::string::npos);
  CHECK(layout_error("Et||tL").find("stage 1 is empty") != std::string::npos);
  CHECK(layout_error("Ex|tL").find("'x'") != std::string::npos);
  CHECK(layout_error("(Et|tL").find("not closed") != std::string::npos);
  CHECK(layout_error("Et*|tL").find("needs a count") != std::string::npos);
  CHECK(layout_error("Et*99999999999|L").find("repeat count above") != std::string::npos);
  CHECK(layout_error("((((t*1000)*1000)*1000)*1000)").find("expands past") != std::string::npos);
  CHECK(layout_error("t|tL").find("exactly one embedding") != std::string::npos);
  CHECK(layout_error("EL").find("no decoder layer") != std::string::npos);
}

TEST_CASE("ceil(L / stages) per stage, the remainder last: Megatron-Bridge's map for 61 layers") {
  // recipes/deepseek/deepseek_v3.py: (4, 1) E+16t, 16t, 16t, 13t+L; (8, 1) and (4, 2) E+8t, 6 x 8t,
  // 5t+L; (16, 1), (8, 2) and (4, 4) E+4t, 14 x 4t, 1t+L.
  CHECK(ceil_split_layout(61, 4)->chunk_layers == std::vector<int>{16, 16, 16, 13});
  CHECK(ceil_split_layout(61, 8)->chunk_layers == cat(repeat(7, 8), {5}));
  CHECK(ceil_split_layout(61, 16)->chunk_layers == cat(repeat(15, 4), {1}));
  CHECK(format_pipeline_layout(*ceil_split_layout(61, 16, 1)) == "Et*4|(t*4|)*14tmL");
  // 32 stages: 2 x 31 = 62 would leave the last stage no layer. Megatron-Bridge's H100 config
  // ("Et|(tt|)*30mL") puts the loss and the MTP layer alone last, ceil(61 / 31) = 2 in each of
  // the 30 middle stages and the remaining 61 - 60 = 1 with the embedding.
  const auto h100 = ceil_split_layout(61, 32, 1);
  REQUIRE(h100);
  CHECK(h100->chunk_layers == cat(cat({1}, repeat(30, 2)), {0}));
  CHECK(h100->mtp_chunk == 31);
  CHECK(format_pipeline_layout(*h100) == "Et|(t*2|)*30mL");
  // 64 stages of 126 layers (Llama-3.1-405B): 2 in each of 62 middle stages, 2 first, none last.
  CHECK(ceil_split_layout(126, 64)->chunk_layers == cat(repeat(63, 2), {0}));
  // Only where even the first stage would be left empty is there no layout: 3 layers on 5 stages
  // (1 per middle stage leaves the first none).
  CHECK_FALSE(ceil_split_layout(3, 5));
  CHECK(ceil_split_layout(3, 4)->chunk_layers == std::vector<int>{1, 1, 1, 0});
}

TEST_CASE("a 61-layer model on (pp 16, vpp 1), (pp 4, vpp 4) and (pp 4, vpp 2): stages and their parameters") {
  const ModelSpec ds = load_model("deepseek-v3");
  const ParamCounts pc = param_counts(ds);
  const double moe = static_cast<double>(pc.per_layer());
  const double dense = moe - static_cast<double>(pc.mlp_per_layer - pc.dense_mlp_per_layer);
  const double first_extra = static_cast<double>(pc.embedding);
  const double last_extra = static_cast<double>(pc.lm_head + pc.final_norm);
  const ClusterSpec c = load_cluster("h100-sxm-80gb");
  struct Case {
    int pp, vpp;
    std::string layout;
    std::vector<int> stage_layers;  // decoder layers per pipeline rank, all its chunks
  };
  for (const Case& k : {Case{16, 1, "Et*4|(t*4|)*14tL", cat(repeat(15, 4), {1})},
                        Case{4, 4, "Et*4|(t*4|)*14tL", {16, 16, 16, 13}},
                        Case{4, 2, "Et*8|(t*8|)*6t*5L", {16, 16, 16, 13}}}) {
    CAPTURE(k.layout);
    CAPTURE(k.pp);
    RunConfig rc = deepseek_on(k.pp, k.layout);
    CHECK(rc.plan.mesh.vpp == k.vpp);
    CHECK(rc.plan.schedule == (k.vpp > 1 ? PipelineSchedule::interleaved_1f1b : PipelineSchedule::one_f_one_b));
    const MemoryEstimate e = estimate_memory(rc.model, rc.plan, rc.job, c);
    REQUIRE(e.stages.size() == static_cast<std::size_t>(k.pp));
    for (int r = 0; r < k.pp; ++r) {
      const StageMemory& st = e.stages[static_cast<std::size_t>(r)];
      CAPTURE(r);
      CHECK(st.n_layers == k.stage_layers[static_cast<std::size_t>(r)]);
      // By hand: rank 0 holds the three dense layers (0-2, in its first chunk) and the embedding,
      // the last rank the head and final norm; every other layer is an MoE block.
      double want = (st.n_layers - (r == 0 ? 3 : 0)) * moe + (r == 0 ? 3 * dense + first_extra : 0) +
                    (r == k.pp - 1 ? last_extra : 0);
      CHECK(st.params_per_rank == doctest::Approx(want).epsilon(1e-9));
      // And the state each stage keeps, by hand: Megatron without the distributed optimizer holds,
      // per parameter, the bf16 weight (2 B), the fp32 main gradient (4 B), the fp32 master weight
      // and the two Adam moments (12 B): 18 B.
      const MemoryBreakdown& kept = st.persistent;
      CHECK(kept.params + kept.grads + kept.optimizer == doctest::Approx(18 * want).epsilon(1e-9));
    }
    // The stage with fewer layers keeps less: the last rank's state is below rank 1's.
    CHECK(e.stages.back().persistent.total() < e.stages[1].persistent.total());
    // Emitted back as the same layout, and read again to the same stages.
    const std::vector<std::string> args = emit_megatron_args(rc);
    auto it = std::find(args.begin(), args.end(), "--pipeline-model-parallel-layout");
    REQUIRE(it != args.end());
    CHECK(*(it + 1) == k.layout);
    CHECK(std::find(args.begin(), args.end(), "--num-virtual-stages-per-pipeline-rank") == args.end());
    // Through meshplan's plan TOML and back.
    const std::string toml = to_plan_toml(rc);
    CHECK(toml.find(fmt::format("pipeline_layout = \"{}\"", k.layout)) != std::string::npos);
    RunConfig again = read_plan_toml("roundtrip.toml", toml::parse(toml));
    CHECK(again.plan.pipeline_split.chunk_layers == rc.plan.pipeline_split.chunk_layers);
  }
}

TEST_CASE("layout flags Megatron refuses are refused, naming the flag") {
  auto err = [](int pp, const std::string& layout, const std::string& extra = "") {
    try {
      (void)deepseek_on(pp, layout + " " + extra);
    } catch (const InputError& e) {
      return std::string(e.key()) + ": " + e.reason();
    }
    return std::string("no error");
  };
  CHECK(err(3, "Et*4|(t*4|)*14tL").find("--pipeline-model-parallel-layout: 16 stages do not divide") == 0);
  CHECK(err(4, "Et*4|(t*4|)*14t*2L").find("--pipeline-model-parallel-layout: the layout places 62") == 0);
  CHECK(err(4, "Et*4|(t*4|)*14tmL").find("--pipeline-model-parallel-layout: the layout places 1 MTP") == 0);
  CHECK(err(4, "Et*4|(t*4|)*14tL", "--num-virtual-stages-per-pipeline-rank 2").find("make vpp 4") !=
        std::string::npos);
  CHECK(err(4, "Et*4|(t*4|)*14tL", "--decoder-first-pipeline-num-layers 4").find("cannot be combined") !=
        std::string::npos);
  CHECK(err(4, "Et*4|(t*4|)*14tLL").find("loss L must come last") != std::string::npos);
}

TEST_CASE("torchtitan's weighted split by hand: layers plus the embedding and output weights, spread evenly") {
  // 32 + 1 + 1 = 34 over 4 stages: 8 each and 2 over, to stages 0 and 1 (9, 9); stage 0 builds
  // 9 - 1 layers, stage 3 builds 8 - 1.
  CHECK(*torchtitan_stage_layers(32, 4, 1, 1) == std::vector<int>{8, 9, 8, 7});
  // 126 + 2 = 128 over 16: 8 each, the end stages one fewer (split_layers' uneven rule).
  CHECK(*torchtitan_stage_layers(126, 16, 1, 1) == cat(cat({7}, repeat(14, 8)), {7}));
  CHECK(*torchtitan_stage_layers(126, 16, 1, 1) == *split_layers(126, 16));
  // 61 + 2 = 63 over 16: 3 each and 15 over, to stages 0-14 (4 each): 3, 4 x 14, 2.
  CHECK(*torchtitan_stage_layers(61, 16, 1, 1) == cat(cat({3}, repeat(14, 4)), {2}));
  // Weights 0 (what meshplan's torchtitan bundles write for an even split): the layers alone.
  CHECK(*torchtitan_stage_layers(32, 4, 0, 0) == repeat(4, 8));
  // torchtitan raises on more stages than weighted layers, and on a weight above the share.
  std::string why;
  CHECK_FALSE(torchtitan_stage_layers(32, 40, 1, 1, &why));
  CHECK(why == "40 stages for 34 weighted layers (32 + 1 + 1)");
  CHECK_FALSE(torchtitan_stage_layers(32, 4, 12, 1, &why));
  CHECK(why == "a weight of 12 is above the 11 layers per stage");
}

TEST_CASE("a torchtitan file's pipeline stages hold the layers torchtitan places there, and their memory follows") {
  auto stages_of = [](const std::string& parallelism) {
    RunConfig rc = import_torchtitan("t.toml", toml::parse("[model]\nname = \"llama3\"\nflavor = \"8B\"\n"
                                                           "[training]\nlocal_batch_size = 8\nseq_len = 4096\n"
                                                           "[parallelism]\n" + parallelism));
    resolve_layout(rc, rc.plan.mesh.pp * 2);
    return rc;
  };
  // Llama-3.1 8B's 32 layers on pp 4 with torchtitan's default weights: 8, 9, 8, 7.
  const RunConfig rc = stages_of("pipeline_parallel_degree = 4\n");
  CHECK(rc.plan.pipeline_split.chunk_layers == std::vector<int>{8, 9, 8, 7});
  const MemoryEstimate e = estimate_memory(rc.model, rc.plan, rc.job, load_cluster("h100-sxm-80gb"));
  REQUIRE(e.stages.size() == 4);
  const ParamCounts pc = param_counts(rc.model);
  const double layer = static_cast<double>(pc.per_layer());
  // By hand: stage 1's 9 layers against stage 2's 8, one layer's parameters apart, and the state
  // FSDP keeps of them (sharded over the stage's 2 ranks) one layer's share heavier.
  CHECK(e.stages[1].n_layers == 9);
  CHECK(e.stages[1].params_per_rank - e.stages[2].params_per_rank == doctest::Approx(layer).epsilon(1e-9));
  CHECK(e.stages[1].persistent.total() > e.stages[2].persistent.total());
  // Through meshplan's plan TOML and back: the same stages, still torchtitan's runtime.
  RunConfig again = read_plan_toml("roundtrip.toml", toml::parse(to_plan_toml(rc)));
  resolve_layout(again, 8);
  CHECK(again.plan.runtime == rc.plan.runtime);
  CHECK(again.plan.pipeline_split.chunk_layers == rc.plan.pipeline_split.chunk_layers);
  // The weights meshplan's bundles write for an even split (0, 0) keep it even: no stage layers.
  CHECK(stages_of("pipeline_parallel_degree = 4\npipeline_parallel_layers_per_stage = 8\n"
                  "pipeline_parallel_first_stage_less_layers = 0\npipeline_parallel_last_stage_less_layers = 0\n")
            .plan.pipeline_split.chunk_layers.empty());
  // Two layers lighter first stage: 32 + 2 + 1 = 35 over 4, 8 each and 3 over: 9 - 2, 9, 9, 8 - 1.
  CHECK(stages_of("pipeline_parallel_degree = 4\npipeline_parallel_first_stage_less_layers = 2\n")
            .plan.pipeline_split.chunk_layers == std::vector<int>{7, 9, 9, 7});
  // Named modules (module_fqns_per_model_part) override the weights: 10, 10, 12.
  auto names = [](int from, int to) {
    std::string out;
    for (int l = from; l < to; ++l) out += fmt::format("{}\"layers.{}\"", l == from ? "" : ", ", l);
    return out;
  };
  const std::string fqns = fmt::format("module_fqns_per_model_part = [[\"tok_embeddings\", {}], [{}], [{}, \"norm\", "
                                       "\"output\"]]\n", names(0, 10), names(10, 20), names(20, 32));
  const RunConfig named = stages_of("pipeline_parallel_degree = 3\npipeline_parallel_first_stage_less_layers = 2\n" + fqns);
  CHECK(named.plan.pipeline_split.chunk_layers == std::vector<int>{10, 10, 12});
  CHECK(named.unmodelled_settings.empty());
  // A layer missing, or one out of order, is refused naming the key.
  auto refused = [&](const std::string& parallelism) {
    try {
      (void)stages_of(parallelism);
    } catch (const InputError& e) {
      return std::string(e.key()) + ": " + e.reason();
    }
    return std::string("no error");
  };
  CHECK(refused("pipeline_parallel_degree = 2\nmodule_fqns_per_model_part = [[\"tok_embeddings\", " + names(0, 16) +
                "], [" + names(17, 32) + ", \"norm\", \"output\"]]\n") ==
        "parallelism.module_fqns_per_model_part: stage 1: 'layers.17' out of order, layers.16 expected");
  CHECK(refused("pipeline_parallel_degree = 2\nmodule_fqns_per_model_part = [[\"tok_embeddings\", " + names(0, 16) +
                "], [" + names(16, 31) + ", \"norm\", \"output\"]]\n") ==
        "parallelism.module_fqns_per_model_part: the stages hold 31 of the model's 32 layers");
}

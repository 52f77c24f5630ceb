// The lowering's pure parts, one at a time: runtime traits, the one stage-parameter count, the
// pipeline schedule's order, the shared attention FLOPs and the enum name tables.
#include <doctest/doctest.h>

#include <algorithm>
#include <filesystem>
#include <regex>
#include <string>
#include <vector>

#include "import/config_loader.hpp"
#include "spec/model_loader.hpp"
#include "spec/pipeline_split.hpp"
#include "spec/runtime_traits.hpp"
#include "spec/units.hpp"
#include "workload/kernel_shapes.hpp"
#include "workload/pipeline_schedule.hpp"
#include "workload/stage_params.hpp"
#include "workload/step_program.hpp"
#include "test_paths.hpp"

using namespace meshplan;

namespace {
ModelSpec tiny(bool tied) {
  ModelSpec m;
  m.name = "tiny";
  m.n_layers = 4;
  m.d_model = 64;
  m.n_heads = m.n_kv_heads = 4;
  m.head_dim = 16;
  m.ffn_hidden = 256;
  m.mlp = MlpKind::gelu;
  m.vocab = 1000;
  m.pos_emb = PosEmb::rope;
  m.norm = NormKind::layernorm;
  m.tied_embeddings = tied;
  m.linear_bias = false;
  m.max_seq_len = 128;
  return m;
}
}  // namespace

TEST_CASE("runtime traits: FSDP2 runtimes copy out, Megatron has no FSDP, DeepSpeed blocks its sends") {
  const RuntimeTraits titan = runtime_traits(Runtime::torchtitan_fsdp2, false);
  CHECK(titan.fsdp_version == 2);
  CHECK(titan.fsdp_copy_out);
  CHECK(titan.pipelining_defers_fsdp_sync);
  CHECK(titan.keeps_head_group_gathered);
  CHECK_FALSE(titan.foreach_adamw);  // torchtitan's default AdamW is fused
  const RuntimeTraits composer2 = runtime_traits(Runtime::composer_fsdp2, false);
  CHECK(composer2.fsdp_copy_out);
  CHECK_FALSE(composer2.pipelining_defers_fsdp_sync);
  CHECK(composer2.foreach_adamw);
  const RuntimeTraits composer1 = runtime_traits(Runtime::composer_fsdp1, false);
  CHECK(composer1.fsdp_version == 1);
  CHECK_FALSE(composer1.fsdp_copy_out);
  CHECK_FALSE(composer1.fsdp_always_prefetches_backward);
  const RuntimeTraits megatron = runtime_traits(Runtime::megatron, false);
  CHECK(megatron.fsdp_version == 0);
  CHECK(megatron.fused_elementwise_kernels);
  CHECK(megatron.contiguous_grad_buffer);
  CHECK(megatron.frees_sent_pipeline_outputs);
  CHECK_FALSE(megatron.blocking_pp_sends);
  const RuntimeTraits ds = runtime_traits(Runtime::megatron, true);
  CHECK(ds.blocking_pp_sends);
  CHECK(ds.fp32_grad_accumulation);
  CHECK_FALSE(ds.frees_sent_pipeline_outputs);  // DeepSpeed's pipe buffers keep the outputs
  Plan p;
  p.runtime = Runtime::megatron;
  p.sharding = Sharding::zero3;
  // Megatron's ZeRO-1 is its distributed optimizer; ZeRO-2/3 are Megatron-FSDP's units (or
  // DeepSpeed's ZeRO-3), gathered in place with the next one prefetched in backward.
  CHECK(fsdp_units(p, runtime_traits(p)));
  CHECK(runtime_traits(p).fsdp_always_prefetches_backward);
  CHECK_FALSE(runtime_traits(p).fsdp_copy_out);
  p.sharding = Sharding::zero1;
  CHECK_FALSE(fsdp_units(p, runtime_traits(p)));
  p.sharding = Sharding::zero3;
  p.deepspeed_engine = true;
  CHECK(fsdp_units(p, runtime_traits(p)));
  CHECK_FALSE(runtime_traits(p).fp32_grad_accumulation);  // ZeRO-3 runs without BF16_Optimizer
  p.deepspeed_engine = false;
  p.runtime = Runtime::generic;
  CHECK(fsdp_units(p, runtime_traits(p)));
}

TEST_CASE("stage parameters: blocks split over TP, embeddings on the first stage, the head on the last") {
  const ModelSpec m = tiny(false);
  const ParamCounts c = param_counts(m);
  Plan p;
  p.mesh.tp = 2;
  p.mesh.pp = 2;
  // Per block: attention 4 h^2 / tp, MLP 2 h f / tp, the two norms whole.
  const double h = 64, f = 256;
  const double block = 4 * h * h / 2 + 2 * h * f / 2 + static_cast<double>(c.norm_per_layer);
  CHECK(block_params_per_rank(m, p) == doctest::Approx(block));
  const StageParams first = stage_params(m, p, 0, 2);
  const StageParams last = stage_params(m, p, 1, 2);
  CHECK(first.blocks == doctest::Approx(2 * block));
  CHECK(first.root == doctest::Approx(1000 * h / 2));  // vocab-split embedding, RoPE: no table
  CHECK(first.head_group == 0);
  CHECK(last.head_group == doctest::Approx(1000 * h / 2 + static_cast<double>(c.final_norm)));
  CHECK(last.total() == doctest::Approx(2 * block + last.head_group));
  // A tied embedding is the head: no second copy without pipeline stages, its own copy with them.
  const ModelSpec tied = tiny(true);
  Plan one = p;
  one.mesh.pp = 1;
  CHECK(stage_params(tied, one, 0, 4).head_group == doctest::Approx(static_cast<double>(c.final_norm)));
  CHECK(stage_params(tied, p, 1, 2).head_group == doctest::Approx(1000 * h / 2 + static_cast<double>(c.final_norm)));
}

TEST_CASE("pipeline schedule: 1F1B warm-up of pp - stage - 1 forwards; torchtitan's runs restart it") {
  Plan p;
  p.mesh.pp = 4;
  p.schedule = PipelineSchedule::one_f_one_b;
  auto pattern = [](const std::vector<Step>& order) {
    std::string s;
    for (const Step& st : order) {
      s += st.forward ? 'F' : 'B';
      s += std::to_string(st.mb);
    }
    return s;
  };
  CHECK(pattern(stage_order(p, 0, 4)) == "F0F1F2F3B0B1B2B3");
  CHECK(pattern(stage_order(p, 2, 4)) == "F0F1B0F2B1F3B2B3");
  CHECK(pattern(stage_order(p, 3, 4)) == "F0B0F1B1F2B2F3B3");
  // Two runs of two micro-batches: the second run's micro-batches are 2 and 3.
  CHECK(pattern(stage_steps(p, 3, 4, 2)) == "F0B0F1B1F2B2F3B3");
  CHECK(pattern(stage_steps(p, 0, 4, 2)) == "F0F1B0B1F2F3B2B3");
  p.schedule = PipelineSchedule::gpipe;
  CHECK(pattern(stage_order(p, 3, 2)) == "F0F1B0B1");
  // Interleaved, pp 2 x v 2: stage 0 warms up 2 (pp - 1) + (v - 1) pp = 4 chunk forwards.
  Plan v = p;
  v.mesh.pp = 2;
  v.mesh.vpp = 2;
  v.schedule = PipelineSchedule::interleaved_1f1b;
  CHECK(chunks_per_stage(v) == 2);
  const std::vector<Step> order = stage_order(v, 0, 2);
  REQUIRE(order.size() == 8);
  for (int i = 0; i < 4; ++i) CHECK(order[static_cast<std::size_t>(i)].forward);
  CHECK(order[1].chunk == 0);
  CHECK(order[2].chunk == 1);
}

TEST_CASE("attention FLOPs: 4 b h s^2 d forward, half of it causal, FlashAttention-2's backward 2.5x") {
  AttentionShape a;
  a.batch = 2;
  a.heads = 8;
  a.seq_q = a.seq_kv = 1024;
  a.head_dim = 128;
  a.causal = false;
  const double full = 4.0 * 2 * 8 * 1024.0 * 1024.0 * 128;
  CHECK(attention_flops(a, Pass::forward) == full);
  a.causal = true;
  CHECK(attention_flops(a, Pass::forward) == full / 2);
  CHECK(attention_flops(a, Pass::backward) == 2.5 * full / 2);
}

TEST_CASE("names: every stream, category and group has its own name") {
  CHECK(to_string(StreamKind::host_copy) == "host_copy");
  CHECK(to_string(OpCategory::param_all_gather) == "param_all_gather");
  CHECK(to_string(GroupKind::dp_replicate) == "dp_replicate");
  for (int i = 0; i < kStreamKinds; ++i) CHECK(to_string(static_cast<StreamKind>(i)) != "?");
  for (int i = 0; i < kOpCategories; ++i) CHECK(to_string(static_cast<OpCategory>(i)) != "?");
  for (int i = 0; i < kGroupKinds; ++i) CHECK(to_string(static_cast<GroupKind>(i)) != "?");
  CHECK(kGiB == 1073741824.0);
}

TEST_CASE("gpt-oss's windowed layers: each does the window's attention, by hand") {
  const ModelSpec windowed = load_model("gpt-oss-120b");
  ModelSpec full = windowed;
  full.sliding_window = 0;
  full.full_attention_every = 0;
  Plan p;
  p.runtime = Runtime::megatron;
  p.sharding = Sharding::none;
  p.param_dtype = p.compute_dtype = Dtype::bf16;
  p.reduce_dtype = Dtype::fp32;
  p.ac = AcMode::none;
  const Job j{4096, 1, 1, 1};
  const StepProgram a = lower_step(full, p, j), b = lower_step(windowed, p, j);
  // 18 of the 36 layers windowed: 64 heads of 64 attend to 128 keys each instead of the causal
  // prefix, 4096^2 / 2 - (4096 x 128 - 128^2 / 2) = 7,872,512 fewer pairs of 4 x 64 x 64 FLOPs
  // forward; the MFU count takes the backward as twice the forward (3x), the GPU runs 2.5x (3.5x).
  const double saved_forward = 18 * 4.0 * 64 * 64 * 7872512;
  CHECK(a.model_flops_per_step - b.model_flops_per_step == doctest::Approx(3 * saved_forward).epsilon(1e-9));
  double hardware_a = 0, hardware_b = 0;
  for (const Op& op : a.expanded()) hardware_a += op.hardware_flops;
  for (const Op& op : b.expanded()) hardware_b += op.hardware_flops;
  CHECK(hardware_a - hardware_b == doctest::Approx(3.5 * saved_forward).epsilon(1e-9));
  // Per token (no causal discount): a windowed layer's keys are 128, not 4096.
  CHECK(model_flops_per_token(full, 4096) - model_flops_per_token(windowed, 4096) ==
        doctest::Approx(12.0 * 64 * 64 * (4096 - 128) * 18).epsilon(1e-12));
}

namespace {

// Whether two lowerings of one step are the same program, op for op: schedules, dependencies,
// memory changes and works. Returns the first op that differs, or -1.
long first_difference(const StepProgram& a, const StepProgram& b) {
  if (a.ops.size() != b.ops.size() || a.works != b.works || a.pass_first_ops != b.pass_first_ops) return 0;
  for (std::size_t i = 0; i < a.ops.size(); ++i) {
    const StepOp &x = a.ops[i], &y = b.ops[i];
    if (x.stage != y.stage || x.stream != y.stream || x.category != y.category || x.kind != y.kind ||
        x.host_sync != y.host_sync || x.deps != y.deps || x.at_start != y.at_start || x.at_end != y.at_end ||
        x.work != y.work)
      return static_cast<long>(i);
  }
  return -1;
}

void check_templates_change_nothing(const ModelSpec& m, const Plan& p, const Job& j) {
  // Names turn the block templates off (block_templates.cpp): the named lowering is every block
  // lowered afresh.
  const StepProgram named = lower_step(m, p, j, LowerOptions{.op_names = true});
  const StepProgram plain = lower_step(m, p, j, LowerOptions{.op_names = false});
  CHECK(named.ops.size() > 0);
  CHECK(first_difference(named, plain) == -1);
}

}  // namespace

TEST_CASE("block templates: a step lowered from them is the step lowered block by block, on every shipped config") {
  namespace fs = std::filesystem;
  std::vector<fs::path> configs;
  for (const auto& dir : fs::directory_iterator(test::data_root() / "plans")) {
    if (!dir.is_directory()) continue;
    for (const auto& f : fs::directory_iterator(dir.path())) {
      const std::string ext = f.path().extension().string();
      if (ext == ".toml" || ext == ".yaml" || ext == ".args") configs.push_back(f.path());
    }
  }
  std::sort(configs.begin(), configs.end());
  int checked = 0;
  for (const fs::path& path : configs) {
    CAPTURE(path.string());
    RunConfig rc = load_run_config(path.string());
    // The GPU count where the file leaves it to the launcher: the one its name gives (64xh100, 32gpu).
    std::smatch gpus;
    const std::string file = path.parent_path().filename().string() + "/" + path.filename().string();
    const bool named = std::regex_search(file, gpus, std::regex("-([0-9]+)(xh100|gpu)"));
    resolve_layout(rc, named ? std::optional<std::int64_t>(std::stoll(gpus[1].str())) : std::nullopt);
    // A long step lowers in seconds: two pipeline rounds hold every kind of block the step has.
    rc.job.grad_accum = std::min<std::int64_t>(rc.job.grad_accum, 2 * std::max(1, rc.plan.mesh.pp * chunks_per_stage(rc.plan)));
    rc.job.global_batch = rc.job.grad_accum * rc.job.micro_batch * rc.plan.mesh.dp_replicate * rc.plan.mesh.dp_shard;
    check_templates_change_nothing(rc.model, rc.plan, rc.job);
    // The same with what changes a block's ops: overlapped TP, FP8 with cached weight casts, and
    // full recompute.
    Plan variant = rc.plan;
    variant.async_tp = variant.mesh.tp > 1;
    variant.fp8 = Fp8Recipe::te_delayed;
    variant.ac = AcMode::full;
    check_templates_change_nothing(rc.model, variant, rc.job);
    ++checked;
  }
  CHECK(checked >= 15);
}

TEST_CASE("block templates: MoE models with dense and multi-token-prediction blocks and windowed attention") {
  for (const std::string name : {"gpt-oss-120b", "deepseek-v3", "qwen3-30b-a3b"}) {
    CAPTURE(name);
    const ModelSpec m = load_model(name);
    Plan p;
    p.runtime = Runtime::megatron;
    p.sharding = Sharding::zero1;
    p.mesh.tp = 2;
    p.mesh.pp = 4;
    p.mesh.ep = 8;
    p.mesh.dp_shard = 8;
    p.sequence_parallel = true;
    const auto split = megatron_split_for(m.n_layers, p.mesh.pp, 1, m.n_mtp_layers);
    REQUIRE(split);
    p.pipeline_split = *split;
    const Job j{4096, 8 * 8, 1, 8};
    check_templates_change_nothing(m, p, j);
    p.recompute_modules.moe_act = true;
    p.recompute_modules.norms = true;
    check_templates_change_nothing(m, p, j);
  }
}

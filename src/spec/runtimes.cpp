#include "spec/runtimes.hpp"

#include <algorithm>
#include <array>

#include <fmt/format.h>

namespace meshplan {

namespace {

// ---- llm-foundry / Composer ----------------------------------------------------------------

// llm-foundry: FSDP (+HSDP), MLP-only TP, no pipeline or context parallelism, AC whole blocks.
bool composer_supports(const Plan& p) {
  const Mesh& m = p.mesh;
  return m.pp == 1 && m.cp == 1 && m.ep == 1 && (m.tp == 1 || p.tp_style == TpStyle::mlp_only) &&
         (p.sharding == Sharding::zero3 || p.sharding == Sharding::zero2 || p.sharding == Sharding::none) &&
         (p.ac == AcMode::none || p.ac == AcMode::full);
}

void composer_fsdp1_defaults(Plan& p) {
  p.root_unsharded = true;
  p.backward_prefetch = BackwardPrefetch::backward_post;
  p.tp_style = TpStyle::mlp_only;
}

void no_defaults(Plan&) {}

// Composer: activation_checkpointing, then activation_cpu_offload.
constexpr std::array kComposerRecompute{RecomputeRung{AcMode::full, false, "full"},
                                        RecomputeRung{AcMode::none, true, "activation offload"}};

constexpr RuntimeTraits composer_traits(int fsdp_version) {
  RuntimeTraits t;
  t.fsdp_version = fsdp_version;
  t.foreach_adamw = true;
  t.fsdp1_prefetch_knobs = fsdp_version == 1;
  t.offload_on_copy_stream = false;
  t.device_batch_over_world = true;
  t.single_gpu_drops_sharding = true;
  return t;
}

// ---- torchtitan ------------------------------------------------------------------------------

bool torchtitan_supports(const Plan& p) {
  return p.tp_style == TpStyle::full && (p.sharding == Sharding::zero3 || p.sharding == Sharding::none) &&
         p.ac != AcMode::selective_attn && (p.mesh.tp == 1 || p.sequence_parallel);
}

void torchtitan_defaults(Plan& p) { p.sequence_parallel = true; }

// torchtitan: selective op, every n-th layer, full (no activation offload).
constexpr std::array kTorchtitanRecompute{RecomputeRung{AcMode::selective_op, false, "selective (op)"},
                                          RecomputeRung{AcMode::selective_layer, false, "torchtitan selective_ac_option"},
                                          RecomputeRung{AcMode::full, false, "full"}};

constexpr RuntimeTraits torchtitan_traits() {
  RuntimeTraits t;
  t.fsdp_version = 2;
  t.attention_backend = AttentionBackend::torch_sdpa;
  t.pipelining_defers_fsdp_sync = true;
  t.keeps_head_group_gathered = true;
  t.unsharded_without_shard_dim = true;
  t.sequence_parallel_with_tp = true;
  t.any_stage_layers = true;
  t.async_tp_sums_partials = true;
  t.ring_attention_merges_eagerly = true;
  return t;
}

// ---- Megatron-LM -----------------------------------------------------------------------------

bool megatron_supports(const Plan& p) {
  return p.tp_style == TpStyle::full && (p.sharding == Sharding::zero1 || p.sharding == Sharding::none) &&
         p.ac != AcMode::selective_op && p.ac != AcMode::selective_layer;
}

void megatron_defaults(Plan& p) {
  p.sharding = Sharding::zero1;
  p.grad_sync_every_microbatch = false;
  p.sequence_parallel = true;
}

// Megatron: selective (core attention), full recompute of a fraction of the layers, full, then
// activation offload (--cpu-offloading).
constexpr std::array kMegatronRecompute{
    RecomputeRung{AcMode::selective_attn, false, "selective (core attention)"},
    RecomputeRung{AcMode::selective_layer, false, "Megatron --recompute-method block"},
    RecomputeRung{AcMode::full, false, "full"}, RecomputeRung{AcMode::none, true, "activation offload"}};

constexpr RuntimeTraits megatron_traits() {
  RuntimeTraits t;
  t.fsdp_version = 0;
  t.attention_backend = AttentionBackend::transformer_engine;
  t.fused_elementwise_kernels = true;
  t.vocab_parallel_cross_entropy = true;
  t.contiguous_grad_buffer = true;
  t.optimizer_copies_params_back = true;
  t.sp_saves_sharded_linear_input = true;
  t.frees_sent_pipeline_outputs = true;
  t.host_syncs_before_optimizer = true;
  t.micro_batch_required = true;
  t.sharding_by_distributed_optimizer = true;
  t.pipeline_split_by_flags = true;
  t.any_stage_layers = true;
  t.zero3_as_layer_buckets = true;
  t.accepts_deepspeed_engine = true;
  t.zero2_modelled = false;
  t.offers_cuda_graphs = true;
  t.offers_expert_a2a_overlap = true;
  t.moe_layer_op_by_op = true;
  return t;
}

// ---- generic (meshplan's own plan TOML without a runtime) -----------------------------------

bool generic_supports(const Plan&) { return true; }

constexpr std::array kGenericRecompute{RecomputeRung{AcMode::selective_op, false, "selective (op)"},
                                       RecomputeRung{AcMode::selective_layer, false, "every n-th block checkpointed"},
                                       RecomputeRung{AcMode::full, false, "full"},
                                       RecomputeRung{AcMode::none, true, "activation offload"}};

constexpr RuntimeTraits generic_traits() {
  RuntimeTraits t;
  t.fsdp_version = 1;
  t.foreach_adamw = true;
  t.fsdp1_prefetch_knobs = true;
  return t;
}

// ---- the registry ------------------------------------------------------------------------------

// The names after a runtime's first are the CLI's (`plan --runtime torchtitan | llm-foundry`): a
// plan TOML accepts every spelling, and to_string gives the first.
constexpr std::array<std::string_view, 1> kFoundryAliases{"llm-foundry"};
constexpr std::array<std::string_view, 1> kTorchtitanAliases{"torchtitan"};
constexpr std::array<std::string_view, 1> kMegatronAliases{"megatron-lm"};

const std::array<RuntimeInfo, 5> kRegistry{{
    {Runtime::composer_fsdp1, "composer-fsdp1", kFoundryAliases, Framework::llm_foundry, "llm-foundry",
     composer_traits(1), kComposerRecompute, composer_supports, composer_fsdp1_defaults},
    {Runtime::composer_fsdp2, "composer-fsdp2", {}, Framework::llm_foundry, "", composer_traits(2),
     kComposerRecompute, composer_supports, no_defaults},
    {Runtime::torchtitan_fsdp2, "torchtitan-fsdp2", kTorchtitanAliases, Framework::torchtitan, "torchtitan",
     torchtitan_traits(), kTorchtitanRecompute, torchtitan_supports, torchtitan_defaults},
    {Runtime::megatron, "megatron", kMegatronAliases, Framework::megatron, "megatron", megatron_traits(),
     kMegatronRecompute, megatron_supports, megatron_defaults},
    {Runtime::generic, "generic", {}, Framework::none, "", generic_traits(), kGenericRecompute, generic_supports,
     no_defaults},
}};

}  // namespace

std::span<const RuntimeInfo> runtime_registry() { return kRegistry; }

const RuntimeInfo& runtime_info(Runtime r) {
  for (const RuntimeInfo& row : kRegistry)
    if (row.runtime == r) return row;
  return kRegistry.back();  // unreachable: every enumerator has a row (tests/spec/test_runtimes.cpp)
}

std::string_view to_string(Runtime r) { return runtime_info(r).name; }

std::optional<Runtime> parse_runtime(std::string_view s) {
  for (const RuntimeInfo& row : kRegistry)
    if (row.name == s) return row.runtime;
  for (const RuntimeInfo& row : kRegistry)
    if (std::find(row.aliases.begin(), row.aliases.end(), s) != row.aliases.end()) return row.runtime;
  return std::nullopt;
}

std::optional<Runtime> planner_runtime(std::string_view name) {
  for (const RuntimeInfo& row : kRegistry)
    if (!row.planner_name.empty() && row.planner_name == name) return row.runtime;
  const std::optional<Runtime> r = parse_runtime(name);
  if (r && !runtime_info(*r).planner_name.empty()) return r;
  return std::nullopt;
}

std::vector<std::string_view> planner_runtime_names() {
  std::vector<std::string_view> out;
  for (const RuntimeInfo& row : kRegistry)
    if (!row.planner_name.empty()) out.push_back(row.planner_name);
  return out;
}

RuntimeTraits runtime_traits(Runtime runtime, bool deepspeed_engine, Sharding sharding) {
  RuntimeTraits t = runtime_info(runtime).traits;
  // ZeRO-2 under Megatron (Megatron-FSDP optim_grads, DeepSpeed ZeRO-2) keeps whole bf16 params on
  // every rank and shards only gradients and optimizer state: not FSDP units, and not modeled
  // (plan_toml and the validation mapping refuse it).
  const bool sharded_params_or_grads = sharding == Sharding::zero3;
  if (t.zero3_as_layer_buckets && sharded_params_or_grads) {
    // Megatron-Core's own FSDP (--use-megatron-fsdp, --data-parallel-sharding-strategy
    // optim_grads_params) and DeepSpeed ZeRO-3: each transformer layer is one
    // bucket, all-gathered into a persistent buffer that the layer uses in place (no copy-out),
    // the next bucket prefetched in backward, and its gradients reduce-scattered from the
    // (sharded) main-grad buffer on their own stream. The grad buffer lives through the step.
    t.fsdp_version = 1;
    t.fsdp_always_prefetches_backward = true;
  }
  // DeepSpeed's engine drives the Megatron model (plan_toml accepts it only with megatron).
  if (deepspeed_engine && sharded_params_or_grads) {
    // ZeRO-3 runs under DeepSpeed's plain engine (its pipeline engine takes ZeRO-0/1 only;
    // plan_toml and the validation mapping refuse pp > 1): no BF16_Optimizer fp32 accumulation,
    // gradients are reduce-scattered per bucket as backward produces them.
    t.frees_sent_pipeline_outputs = false;
    t.host_syncs_every_pass = true;
  } else if (deepspeed_engine) {
    t.frees_sent_pipeline_outputs = false;
    t.blocking_pp_sends = true;
    t.fp32_grad_accumulation = true;
    t.host_syncs_every_pass = true;
  }
  // Megatron-DeepSpeed's MoE layers are DeepSpeed-MoE's, not Megatron-Core's.
  if (deepspeed_engine) t.moe_layer_op_by_op = false;
  if (t.fsdp_version == 2) {
    t.fsdp_copy_out = true;
    t.fsdp_always_prefetches_backward = true;
    t.fsdp_reduce_copies_grads = true;
    t.fsdp_one_reduce_scatter_in_flight = true;
  }
  return t;
}

std::string expert_a2a_overlap_refusal(const Plan& p, bool moe) {
  if (!runtime_traits(p).offers_expert_a2a_overlap)
    return fmt::format("is Megatron-Core's schedule (--overlap-moe-expert-parallel-comm); runtime '{}' has no such "
                       "option",
                       to_string(p.runtime));
  if (!moe || p.mesh.ep <= 1) return "overlaps the expert all-to-alls: it needs an MoE model with ep > 1";
  if (p.mesh.pp > 1 && (p.schedule != PipelineSchedule::interleaved_1f1b || p.mesh.vpp <= 1))
    return "needs the interleaved schedule (vpp > 1) when pp > 1, as Megatron-Core asserts";
  if (p.ac == AcMode::full) return "does not run with full activation recompute (Megatron-Core asserts it)";
  return "";
}

}  // namespace meshplan

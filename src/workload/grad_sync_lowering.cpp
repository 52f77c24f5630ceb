// Data-parallel gradient synchronisation outside FSDP: DDP's and Megatron's bucketed all-reduce
// (ZeRO-1 / the distributed optimizer: reduce-scatter, then all-gather of the updated params before
// the next forward), and DeepSpeed's BF16_Optimizer, which accumulates fp32 gradients after every
// micro-batch and all-reduces them once the pipeline has flushed.
#include "workload/step_builder.hpp"

namespace meshplan::lowering {

namespace {
// DeepSpeed's BF16_Optimizer adds each micro-batch's bf16 gradients into its fp32 copies once
// the backward is done: read the bf16 grad, write and read its fp32 cast, read and write the
// fp32 accumulator (18 bytes per parameter).
constexpr double kHpGradAccumulateBytesPerParam = 2 + 4 + 4 + 4 + 4;
// Per block: the cast to fp32 and the add into the accumulator.
constexpr int kHpGradAccumulateKernelsPerBlock = 2;
}  // namespace

// Megatron's distributed optimizer gathers updated params before the forward of the step
// (--overlap-param-gather overlaps them with the first micro-batch).
void Builder::gather_updated_params(StageState& st) {
  if (p_.sharding != Sharding::zero1 || s_.dp_all <= 1) return;
  for (int c = 0; c < s_.v; ++c)
    for (int l = 0; l < chunk_blocks(c * s_.pp + st.stage); ++l) {
      const int layer = chunk_first(c * s_.pp + st.stage) + l;
      st.param_gather_of_layer[layer] =
          add(collective_op(st.stage, op_name("param_ag.L{}", layer), StreamKind::dp, OpCategory::param_all_gather,
                            CollectiveOp::all_gather, GroupKind::dp, bytes_per_element(p_.param_dtype) * s_.unit));
    }
}

// DDP / Megatron: bucketed reduction overlapped with the rest of backward, on the last
// micro-batch only (no_sync / local accumulation before it).
void Builder::dp_reduce(int stage, int layer, int backward_end) {
  const bool zero1 = p_.sharding == Sharding::zero1;
  Op red = collective_op(stage, op_name("dp_{}.L{}", zero1 ? "rs" : "ar", layer), StreamKind::dp,
                         zero1 ? OpCategory::dp_reduce_scatter : OpCategory::dp_all_reduce,
                         zero1 ? CollectiveOp::reduce_scatter : CollectiveOp::all_reduce, GroupKind::dp,
                         s_.reduce_b * s_.unit);
  red.deps = {backward_end};
  add(std::move(red));
}

int Builder::hp_grad_accumulate(int stage, int vstage, std::int64_t mb, int n_chunk_layers, int last) {
  Op acc = compute_op(stage, op_name("bf16_optimizer.accumulate.v{}.mb{}", vstage, mb), OpCategory::compute);
  acc.memory_bound_bytes = kHpGradAccumulateBytesPerParam * stage_params_total(stage) / s_.v;
  acc.kernels = kHpGradAccumulateKernelsPerBlock * std::max(1, n_chunk_layers);
  acc.deps = {last};
  return add(std::move(acc));
}

// DeepSpeed reduces after the pipeline has flushed: an all-reduce of the fp32 gradients over the
// data-parallel group (BF16_Optimizer's, ZeRO-1 included), one bucket per block, while the
// compute stream waits.
void Builder::all_reduce_after_flush(const StageState& st) {
  if (!traits_.fp32_grad_accumulation || s_.dp_all <= 1) return;
  int flushed = -1;
  for (std::size_t i = st.begin; i < prog_.ops.size(); ++i)
    if (prog_.ops[i].stage == st.stage && prog_.ops[i].stream == StreamKind::compute) flushed = static_cast<int>(i);
  for (int c = 0; c < s_.v; ++c)
    for (int l = 0; l < chunk_blocks(c * s_.pp + st.stage); ++l) {
      const int layer = chunk_first(c * s_.pp + st.stage) + l;
      Op ar = collective_op(st.stage, op_name("dp_ar.L{}", layer), StreamKind::dp, OpCategory::dp_all_reduce,
                            CollectiveOp::all_reduce, GroupKind::dp, bytes_per_element(Dtype::fp32) * s_.unit);
      if (flushed >= 0) ar.deps = {flushed};
      add(std::move(ar));
    }
}

}  // namespace meshplan::lowering

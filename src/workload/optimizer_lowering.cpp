// The optimizer step of one stage: memory-bound over the parameters whose update this rank owns,
// after every gradient of the stage is reduced.
#include "workload/step_builder.hpp"

namespace meshplan::lowering {

namespace {
// torch's AdamW (foreach) issues 8 multi-tensor kernels per step: the decoupled weight decay
// (mul_), lerp_ of exp_avg, mul_ and addcmul_ of exp_avg_sq, sqrt, div_, add_ (eps) and addcdiv_
// (torch/optim/adam.py, _multi_tensor_adam); the same count is kept for the fused variants.
constexpr int kOptimizerKernels = 8;
// bitsandbytes' 8-bit AdamW reads and writes its two 1-byte moments (4 bytes) beside the
// parameter and gradient.
constexpr double kAdamw8bitMomentBytes = 4.0;
// Megatron's copy-back writes the updated master into the bf16 model params.
constexpr double kParamCopyBackBytesPerParam = 2.0;
}  // namespace

// Memory-bound AdamW over the local shard: reads param, grad, exp_avg, exp_avg_sq and writes
// param and both moments (7 state-dtype accesses per parameter; SGD with momentum 5).
void Builder::optimizer_step(StageState& st) {
  const int stage = st.stage;
  Op opt = compute_op(stage, "optimizer.step", OpCategory::optimizer);
  const double state_b = bytes_per_element(p_.state_dtype);
  const double per_param = p_.optimizer == Optimizer::sgd ? 5 * state_b
                           : p_.optimizer == Optimizer::adamw8bit ? 2 * state_b + kAdamw8bitMomentBytes
                                                                  : 7 * state_b;
  // Parameters whose optimizer update this rank performs.
  opt.memory_bound_bytes = per_param * (stage_params_total(stage) / state_shard_group(p_));
  // Under FSDP units (Megatron-FSDP) the model params are sharded too: the copy-back writes the shard.
  if (traits_.optimizer_copies_params_back)
    opt.memory_bound_bytes +=
        kParamCopyBackBytesPerParam * stage_params_total(stage) / (s_.fsdp && p_.sharding == Sharding::zero3 ? state_shard_group(p_) : 1.0);
  opt.kernels = kOptimizerKernels;
  // foreach AdamW's temporaries (memory_estimate.hpp StateBytesPerParam::optimizer_step).
  const double temp = s_.state.optimizer_step * stage_params_total(stage);
  if (temp > 0) {
    opt.at_start.push_back({MemoryTerm::optimizer, temp});
    opt.at_end.push_back({MemoryTerm::optimizer, -temp});
  }
  // Only the last op of each of those streams: stream order implies the rest. This stage's ops
  // are the ones added since st.begin.
  std::map<StreamKind, int> last_of;
  for (std::size_t i = st.begin; i < prog_.ops.size(); ++i) {
    const StepOp& o = prog_.ops[i];
    if (o.stage == stage &&
        (o.stream == StreamKind::fsdp_reduce_scatter || o.stream == StreamKind::dp || o.stream == StreamKind::compute))
      last_of[o.stream] = static_cast<int>(i);
  }
  for (const auto& [k, dep] : last_of) opt.deps.push_back(dep);
  release_pending_reduce(st);
  // Optimizer in backward: the step of the largest parameter, its gradient alive meanwhile.
  if (const double g = largest_param_grad_bytes(m_, p_, j_, stage, stage_layers(stage)); g > 0) {
    opt.at_start.push_back({MemoryTerm::grads, g});
    opt.at_end.push_back({MemoryTerm::grads, -g});
  }
  add(std::move(opt));
}

}  // namespace meshplan::lowering

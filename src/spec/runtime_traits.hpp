#pragma once
// What differs between the training runtimes meshplan models, as one value derived once from the
// plan. The lowering, the memory model and the planner read these traits instead of testing
// `runtime ==`, so that adding a runtime means filling in one more case here (docs/design-notes.md,
// "How to extend"). Plan knobs (compile, sharding, reduce dtype, ...) stay in Plan: a trait says
// how a runtime implements a knob, not which knob the user chose.
#include "spec/plan.hpp"

namespace meshplan {

struct RuntimeTraits {
  // --- kernels ---------------------------------------------------------------------------
  // Norms, RoPE and the SwiGLU gate run as fused kernels (Transformer Engine / apex in Megatron)
  // rather than op by op in eager PyTorch (workload/eager_ops.hpp).
  bool fused_elementwise_kernels = false;
  // The attention API the runtime calls; the kernel it dispatches to depends on the GPU
  // (cost/compute_cost.hpp attention_kernel_for): Transformer Engine's DotProductAttention
  // (Megatron, NeMo), torch SDPA (torchtitan), the flash-attn package (llm-foundry).
  AttentionBackend attention_backend = AttentionBackend::flash_attn;

  // --- data-parallel sharding ------------------------------------------------------------
  // ZeRO-2/3 run as FSDP units: all-gather before use, reduce-scatter after backward. 0: the
  // runtime has no FSDP (Megatron shards only the optimizer, with its distributed optimizer);
  // 1: torch FSDP1's flat parameters; 2: FSDP2's per-parameter DTensors (fully_shard).
  int fsdp_version = 1;
  // FSDP2: the all-gather lands in one flat buffer that the compute stream copies out into the
  // per-parameter tensors before the unit runs (foreach_all_gather_copy_out).
  bool fsdp_copy_out = false;
  // FSDP2 always prefetches the next unit in backward (two gathered), whatever backward_prefetch
  // says; FSDP1 does only under BACKWARD_PRE.
  bool fsdp_always_prefetches_backward = false;
  // torch FSDP1 reads forward_prefetch, limit_all_gathers and the two prefetch limits (Composer
  // sets them per module); other runtimes bound their gathers themselves (FSDP2: two in flight).
  bool fsdp1_prefetch_knobs = false;
  // FSDP2 reduce-scatters from a separate buffer even when the reduce dtype is the param dtype;
  // FSDP1 reduces in place then.
  bool fsdp_reduce_copies_grads = false;
  // FSDP2's post-backward waits for the previous group's reduce-scatter before copying in its own
  // (one reduce-scatter in flight bounds the buffers).
  bool fsdp_one_reduce_scatter_in_flight = false;
  // torchtitan's pipelining stage keeps FSDP units gathered and skips gradient sync until the last
  // backward of a schedule run (when reshard_after_forward is off under PP).
  bool pipelining_defers_fsdp_sync = false;
  // torchtitan keeps the [norm, output] FSDP group gathered after forward.
  bool keeps_head_group_gathered = false;
  // Megatron's DDP: bf16 params and the main-grad buffer are full size on every rank and live
  // through the step; the distributed optimizer shards the fp32 master and the moments
  // (docs/user-guide/features/dist_optimizer.md: 6 + 12/d bytes per param). Gradients reduce
  // from the buffer itself (no DDP bucket copy).
  bool contiguous_grad_buffer = false;
  // The optimizer writes the updated fp32 master back into the bf16 model params (Megatron's
  // copy-back, 2 bytes per param).
  bool optimizer_copies_params_back = false;
  // torch's foreach AdamW (the default when no fused optimizer is configured) allocates one
  // temporary per local parameter (_foreach_sqrt(exp_avg_sq)); fused AdamW does not.
  bool foreach_adamw = false;

  // --- tensor and pipeline parallelism ----------------------------------------------------
  // Under sequence parallelism the linears save their sequence-sharded input and all-gather it
  // again in backward (Megatron, Korthikanti §4.2.3); DTensor's SequenceParallel ->
  // ColwiseParallel saves the gathered input.
  bool sp_saves_sharded_linear_input = false;
  // Megatron frees a sent stage output's data (deallocate_pipeline_outputs) and keeps only its
  // autograd node; DeepSpeed's pipe buffers and torch.distributed.pipelining keep it.
  bool frees_sent_pipeline_outputs = false;

  // --- DeepSpeed's engine (Megatron-DeepSpeed) ---------------------------------------------
  // The pipeline engine sends and receives on the compute stream: the next instruction waits.
  bool blocking_pp_sends = false;
  // BF16_Optimizer adds each micro-batch's bf16 gradients into fp32 copies after its backward,
  // and all-reduces the fp32 gradients once the pipeline has flushed (no overlap with backward).
  bool fp32_grad_accumulation = false;

  // --- The host thread (docs/host.md) -------------------------------------------------------
  // Gradient clipping returns the norm with .item() (Megatron's clip_grad_norm_fp32, the fp16
  // loss scaler's overflow check): the host waits for every gradient before the optimizer step.
  bool host_syncs_before_optimizer = false;
  // Megatron-LM's original timers synchronize at the start and end of every micro-batch's forward
  // and backward; Megatron-DeepSpeed kept them.
  bool host_syncs_every_pass = false;
};

inline RuntimeTraits runtime_traits(Runtime runtime, bool deepspeed_engine, Sharding sharding = Sharding::zero1) {
  RuntimeTraits t;
  switch (runtime) {
    case Runtime::torchtitan_fsdp2:
      t.fsdp_version = 2;
      t.attention_backend = AttentionBackend::torch_sdpa;
      t.pipelining_defers_fsdp_sync = true;
      t.keeps_head_group_gathered = true;
      break;
    case Runtime::composer_fsdp2:
      t.fsdp_version = 2;
      t.foreach_adamw = true;
      break;
    case Runtime::composer_fsdp1:
    case Runtime::generic:
      t.fsdp_version = 1;
      t.foreach_adamw = true;
      t.fsdp1_prefetch_knobs = true;
      break;
    case Runtime::megatron:
      t.fsdp_version = 0;
      t.attention_backend = AttentionBackend::transformer_engine;
      t.fused_elementwise_kernels = true;
      t.contiguous_grad_buffer = true;
      t.optimizer_copies_params_back = true;
      t.sp_saves_sharded_linear_input = true;
      t.frees_sent_pipeline_outputs = true;
      t.host_syncs_before_optimizer = true;
      break;
  }
  // ZeRO-2 under Megatron (Megatron-FSDP optim_grads, DeepSpeed ZeRO-2) keeps whole bf16 params on
  // every rank and shards only gradients and optimizer state: not FSDP units, and not modeled
  // (plan_toml and the validation mapping refuse it).
  const bool sharded_params_or_grads = sharding == Sharding::zero3;
  if (runtime == Runtime::megatron && sharded_params_or_grads) {
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
  if (t.fsdp_version == 2) {
    t.fsdp_copy_out = true;
    t.fsdp_always_prefetches_backward = true;
    t.fsdp_reduce_copies_grads = true;
    t.fsdp_one_reduce_scatter_in_flight = true;
  }
  return t;
}

inline RuntimeTraits runtime_traits(const Plan& p) { return runtime_traits(p.runtime, p.deepspeed_engine, p.sharding); }

// ZeRO-2/3 lowered as FSDP units (all-gathers before use, reduce-scatters after backward).
inline bool fsdp_units(const Plan& p, const RuntimeTraits& t) {
  return t.fsdp_version > 0 && (p.sharding == Sharding::zero2 || p.sharding == Sharding::zero3);
}

}  // namespace meshplan

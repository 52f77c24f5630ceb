#pragma once
// What differs between the training runtimes meshplan models, as one value derived once from the
// plan. The lowering, the memory model, the importers and the planner read these traits instead
// of testing `runtime ==`; each runtime's values are its row in the registry (spec/runtimes.cpp,
// docs/design-notes.md "How to extend"). Plan knobs (compile, sharding, reduce dtype, ...) stay in Plan: a trait says
// how a runtime implements a knob, not which knob the user chose.
#include <string>

#include "spec/plan.hpp"

namespace meshplan {

struct RuntimeTraits {
  // --- kernels ---------------------------------------------------------------------------
  // Norms, RoPE and the SwiGLU gate run as fused kernels (Transformer Engine / apex in Megatron)
  // rather than op by op in eager PyTorch (workload/eager_ops.hpp).
  bool fused_elementwise_kernels = false;
  // The unfused loss is Megatron's vocab-parallel cross-entropy (tensor_parallel/cross_entropy.py),
  // op by op over an fp32 copy of the logits, rather than torch's log_softmax + nll_loss.
  bool vocab_parallel_cross_entropy = false;
  // The attention API the runtime calls; the kernel it dispatches to depends on the GPU
  // (cost/compute_cost.hpp attention_kernel_for): Transformer Engine's DotProductAttention
  // (Megatron, NeMo), torch SDPA (torchtitan), the flash-attn package (llm-foundry).
  AttentionBackend attention_backend = AttentionBackend::flash_attn;
  // An MoE layer runs as Megatron-Core's does: its router, token bookkeeping and permutation op by
  // op, and one cuBLAS GEMM per local expert (Transformer Engine's GroupedLinear), each a launch
  // the host issues (workload/moe_launches.hpp). Otherwise the router and experts are counted as
  // a few fused kernels around one grouped GEMM.
  bool moe_layer_op_by_op = false;

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
  // Async TP's matmul + reduce-scatter leaves the tp partial chunks a rank received stacked and
  // sums them in one reduction kernel on the compute stream once the copies are in (torch's
  // micro-pipelined TP, symm_mem fused_matmul_reduce_scatter); Transformer Engine's userbuffers
  // reduce inside the communication kernels.
  bool async_tp_sums_partials = false;
  // Context parallelism merges each ring step's attention output into an fp32 accumulator op by op
  // and accumulates dQ, dK and dV in fp32 per step (torch's context_parallel ring attention);
  // Transformer Engine corrects its outputs with fused kernels (workload/eager_ops.hpp).
  bool ring_attention_merges_eagerly = false;

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

  // --- what the runtime does with the batch and the mesh ------------------------------------
  // Activation offload copies on a side stream overlapped with compute (Megatron's
  // --cpu-offloading, torch's offloading hooks on their own stream); Composer's
  // activation_cpu_offload wraps the blocks in save_on_cpu, whose copies run on the compute stream.
  bool offload_on_copy_stream = true;
  // Composer: the per-rank batch is the global batch over the world (device_train_batch_size),
  // its micro-batch found by halving; other runtimes divide by the data-parallel degree.
  bool device_batch_over_world = false;
  // llm-foundry drops fsdp_config (and tp_config) on one GPU and falls back to DDP.
  bool single_gpu_drops_sharding = false;
  // torchtitan: no FSDP dimension (dp_shard x cp = 1) means replicate() or a single replica.
  bool unsharded_without_shard_dim = false;
  // torchtitan's TP plan always shards the sequence between the TP regions (SequenceParallel).
  bool sequence_parallel_with_tp = false;
  // Megatron: --micro-batch-size has no default; with pipelines a tuned run takes 1.
  bool micro_batch_required = false;
  // Megatron shards over data-parallel ranks by its distributed optimizer (or Megatron-FSDP),
  // chosen independently of the mesh, which keeps every data-parallel rank a replica.
  bool sharding_by_distributed_optimizer = false;
  // Megatron splits layers unevenly only by its flags (--decoder-first/last-pipeline-num-layers,
  // --pipeline-model-parallel-layout): megatron_split_for.
  bool pipeline_split_by_flags = false;
  // The runtime's config places any per-stage layer counts (Megatron's
  // --pipeline-model-parallel-layout, torchtitan's module_fqns_per_model_part or split points), so
  // the planner may try Megatron-Bridge's ceil(L / stages) layout beside the runtime's own split.
  bool any_stage_layers = false;
  // Megatron-FSDP / DeepSpeed ZeRO-3: one persistent bucket per layer, prefetched in backward.
  bool zero3_as_layer_buckets = false;
  // DeepSpeed's engine drives this runtime's model (Megatron-DeepSpeed).
  bool accepts_deepspeed_engine = false;
  // ZeRO-2 (whole params, sharded gradients) is modelled for the runtime.
  bool zero2_modelled = true;
  // The runtime captures the step in CUDA graphs when asked (Megatron's --enable-cuda-graph).
  bool offers_cuda_graphs = false;
  // The runtime can overlap its expert all-to-alls by merging steady-state forward/backward pairs
  // (Megatron-Core's --overlap-moe-expert-parallel-comm; workload/a2a_overlap.hpp).
  bool offers_expert_a2a_overlap = false;
};

// The runtime's row in the registry (spec/runtimes.hpp) adjusted for the plan's sharding and
// DeepSpeed's engine.
RuntimeTraits runtime_traits(Runtime runtime, bool deepspeed_engine, Sharding sharding = Sharding::zero1);

inline RuntimeTraits runtime_traits(const Plan& p) { return runtime_traits(p.runtime, p.deepspeed_engine, p.sharding); }

// Why the plan cannot run Megatron-Core's expert all-to-all overlap, as its arguments.py refuses
// it (a runtime without it, no MoE or ep 1, pp > 1 without the interleaved schedule, full
// recompute); "" where it can. One rule for the loader's errors, validate's skips, and the
// planner's and lint's suggestions.
std::string expert_a2a_overlap_refusal(const Plan& p, bool moe);

// ZeRO-2/3 lowered as FSDP units (all-gathers before use, reduce-scatters after backward).
inline bool fsdp_units(const Plan& p, const RuntimeTraits& t) {
  return t.fsdp_version > 0 && (p.sharding == Sharding::zero2 || p.sharding == Sharding::zero3);
}

}  // namespace meshplan

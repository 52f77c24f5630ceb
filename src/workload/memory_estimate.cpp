#include "workload/memory_estimate.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "spec/pipeline_split.hpp"
#include "spec/runtime_traits.hpp"
#include "workload/activation_memory.hpp"
#include "workload/stage_params.hpp"

namespace meshplan {

namespace {

double optimizer_state_bytes_per_param(const Plan& p) {
  const double state = bytes_per_element(p.state_dtype);
  switch (p.optimizer) {
    case Optimizer::adamw: return 2 * state;  // exp_avg, exp_avg_sq
    case Optimizer::adamw8bit: return 2.0;    // two 8-bit moments (block scales are negligible)
    case Optimizer::sgd: return state;        // momentum buffer
  }
  return 2 * state;
}

int communicators(const Plan& p) {
  const Mesh& m = p.mesh;
  int n = 0;
  if (static_cast<std::int64_t>(m.dp_replicate) * m.dp_shard * m.cp > 1) ++n;
  if (m.dp_replicate > 1 && m.dp_shard * m.cp > 1) ++n;  // HSDP: shard and replicate groups
  if (m.tp > 1) ++n;
  if (m.cp > 1) ++n;
  if (m.pp > 1) n += 2;  // send to next stage, receive from previous
  if (m.ep > 1) ++n;
  return n;
}


// What every stage's estimate reads: the inputs and the plan's runtime traits, derived once.
struct MemoryContext {
  const ModelSpec& m;
  const Plan& p;
  const Job& j;
  const ClusterSpec& c;
  RuntimeTraits traits;
  MicroBatchShape mb;
  double n_state = 1, state_b = 4, gather_b = 2, reduce_b = 4;
  bool fsdp = false;
  bool grads_during_forward = false;
  bool foreach_optimizer = false;
  bool autocast_cache = false;
  int pp = 1, v = 1;
};

MemoryContext memory_context(const ModelSpec& m, const Plan& p, const Job& j, const ClusterSpec& c) {
  MemoryContext x{m, p, j, c, runtime_traits(p), {j.seq_len / std::max(1, p.mesh.cp), j.micro_batch}};
  x.pp = std::max(1, p.mesh.pp);
  x.n_state = state_shard_group(p);
  x.state_b = bytes_per_element(p.state_dtype);
  // Parameters are all-gathered in param_dtype, except the block linears under float8 all-gather
  // (unit_gathered below): norms, embeddings and the head are never converted to float8.
  x.gather_b = bytes_per_element(p.param_dtype);
  x.reduce_b = bytes_per_element(p.reduce_dtype);
  x.fsdp = fsdp_units(p, x.traits);
  // Grads live through forward only when they accumulate across micro-batches (zero_grad sets
  // them to None after each step) or when the runtime keeps a contiguous grad buffer.
  x.grads_during_forward = j.grad_accum > 1 || x.traits.contiguous_grad_buffer;
  // torch's foreach AdamW allocates one temporary per local param in the state dtype
  // (_foreach_sqrt(exp_avg_sq)); fused AdamW (torchtitan's default), Megatron's fused Adam and
  // bitsandbytes' 8-bit kernels do not.
  x.foreach_optimizer = x.traits.foreach_adamw && p.optimizer == Optimizer::adamw;
  x.autocast_cache = autocast_fp32_weights(p);
  x.v = p.schedule == PipelineSchedule::interleaved_1f1b ? std::max(1, p.mesh.vpp) : 1;
  return x;
}

// Layers (global indices) of each stage; a stage owns chunks stage, stage + pp, ... (interleaving),
// split by the plan's rule (spec/pipeline_split.hpp). `chunks` gets each stage's chunk ranges.
std::vector<std::vector<int>> layers_of_stages(const MemoryContext& x, std::vector<std::vector<LayerRange>>& chunks) {
  const int n_chunks = x.pp * x.v;
  std::vector<int> chunk_sizes(static_cast<std::size_t>(n_chunks), x.m.n_layers / n_chunks);
  if (auto split = split_pipeline(x.m.n_layers, x.pp, x.v, x.p.pipeline_split)) chunk_sizes = *split;
  else for (int i = 0; i < x.m.n_layers % n_chunks; ++i) ++chunk_sizes[static_cast<std::size_t>(i)];
  chunks = chunks_of_ranks(chunk_sizes, x.pp);
  std::vector<std::vector<int>> layers(static_cast<std::size_t>(x.pp));
  for (int stage = 0; stage < x.pp; ++stage)
    for (const LayerRange& r : chunks[static_cast<std::size_t>(stage)])
      for (int l = 0; l < r.n_layers; ++l) layers[static_cast<std::size_t>(stage)].push_back(r.first_layer + l);
  return layers;
}

// Params, grads and optimizer state every rank stores for the whole step.
MemoryBreakdown persistent_state(const MemoryContext& x, double P, StageMemory& sm) {
  const Plan& p = x.p;
  MemoryBreakdown state;
  const bool replicated_params = p.sharding == Sharding::none || p.sharding == Sharding::zero1;
  if (x.traits.contiguous_grad_buffer && replicated_params) {
    // Megatron: bf16 model params and the fp32 main-grad buffer are full size on every
    // rank; the distributed optimizer shards the fp32 master and the moments
    // (docs/user-guide/features/dist_optimizer.md: 6 + 12/d bytes per param).
    state.params = bytes_per_element(p.param_dtype) * P;
    state.grads = x.reduce_b * P;
    state.optimizer = (4.0 + optimizer_state_bytes_per_param(p)) * P / x.n_state;
  } else if (!x.fsdp && replicated_params && bytes_per_element(p.param_dtype) < x.state_b) {
    // DeepSpeed / apex-style mixed precision without FSDP: a low-precision model copy and its
    // gradients on every rank, the fp32 master weights kept by the (ZeRO-1: sharded) optimizer.
    state.params = bytes_per_element(p.param_dtype) * P;
    state.grads = x.reduce_b * P;
    state.optimizer = (x.state_b + optimizer_state_bytes_per_param(p)) * P / x.n_state;
  } else {
    state.params = x.state_b * P / (replicated_params ? 1 : x.n_state);
    state.grads = x.state_b * P / (p.sharding == Sharding::zero2 || p.sharding == Sharding::zero3 ? x.n_state : 1);
    state.optimizer = optimizer_state_bytes_per_param(p) * P / x.n_state;
  }
  if (p.param_offload) {
    sm.host_bytes += state.params + state.grads + state.optimizer;
    state.params = state.grads = state.optimizer = 0;
  }
  return state;
}

// Gathered FSDP units and the gradient reduction's buffers at the forward -> backward boundary.
void add_sharding_buffers(const MemoryContext& x, const StageParams& sp, int n_layers, double P, MemoryBreakdown& fb) {
  const Plan& p = x.p;
  const double unit = sp.per_block;
  const double unit_gathered =
      p.fp8_all_gather ? 1.0 * (unit - sp.per_block_norms) + x.gather_b * sp.per_block_norms : x.gather_b * unit;
  if (x.fsdp) {
    if (!p.reshard_after_forward) {
      // SHARD_GRAD_OP / reshard_after_forward=False: every unit stays gathered until backward.
      fb.unsharded_params = unit_gathered * n_layers + x.gather_b * sp.root;
    } else if (x.traits.fsdp_copy_out) {
      // Current and prefetched groups, plus one flat all-gather output awaiting copy-out.
      fb.unsharded_params = 3 * unit_gathered;
      if (x.traits.keeps_head_group_gathered) fb.unsharded_params += x.gather_b * sp.head_group;
    } else {
      // FSDP1: BACKWARD_PRE holds the current and the next unit; POST and none only one
      // (limit_all_gathers caps it at two in either case).
      // (Megatron-FSDP prefetches the next bucket whatever the setting: fsdp_always_prefetches_backward.)
      const double units =
          p.backward_prefetch == BackwardPrefetch::backward_pre || x.traits.fsdp_always_prefetches_backward ? 2 : 1;
      fb.unsharded_params = units * unit_gathered;
      if (p.root_unsharded) fb.unsharded_params += x.gather_b * sp.root;
    }
    // Backward of the current unit: its unsharded grad in the compute dtype, plus the
    // reduce-scatter input in reduce dtype (FSDP1 reduces in place when dtypes match;
    // FSDP2 always copies into a reduce buffer), plus the reduce-scatter output shard.
    const bool needs_copy = x.traits.fsdp_reduce_copies_grads || p.reduce_dtype != p.param_dtype;
    fb.reduce_buffers = bytes_per_element(p.param_dtype) * unit + (needs_copy ? x.reduce_b * unit : 0) +
                        x.reduce_b * unit / x.n_state;
  } else if (!x.traits.contiguous_grad_buffer && p.sharding == Sharding::none && p.mesh.dp() > 1) {
    // torch DDP copies gradients into its own buckets (gradient_as_bucket_view=False).
    fb.reduce_buffers = x.reduce_b * P;
  }
}

// Activations kept for backward, for every micro-batch in flight on this stage, and the stage
// outputs a pipeline keeps. Sets the stage's micro-batches in flight and its offloaded bytes.
double saved_activations(const MemoryContext& x, int stage, const std::vector<int>& layers, StageMemory& sm) {
  const Plan& p = x.p;
  double per_microbatch = 0, largest_block = 0;
  for (int layer : layers) {
    const double b = saved_block_bytes(x.m, p, x.mb, layer);
    per_microbatch += b;
    largest_block = std::max(largest_block, b);
  }
  sm.microbatches_in_flight = microbatches_in_flight(p, stage, x.j.grad_accum);
  double saved = per_microbatch * sm.microbatches_in_flight;
  if (p.act_offload) {
    // save_on_cpu: every saved tensor goes to pinned host memory; the device keeps the block
    // being copied out in forward and the one being brought back in backward.
    sm.host_bytes += saved;
    saved = std::min(saved, 2 * largest_block);
  }
  // A pipeline chunk that sends to a next one keeps the output of each micro-batch in flight
  // (not Megatron). microbatches_in_flight counts in whole-stage units (chunk-micro-batches / v):
  // all v chunks of a stage send, except the model's last chunk on the last stage.
  if (x.pp > 1) {
    const double sending = stage == x.pp - 1 ? (x.v - 1.0) / x.v : 1.0;
    saved += pipeline_boundary_bytes(x.m, p, x.mb, sm.microbatches_in_flight * x.v * sending);
  }
  return saved;
}

// Adds the fixed costs to each phase and records the phase whose total is largest as the peak.
void settle_peak(const MemoryContext& x, MemoryBreakdown fb, MemoryBreakdown fwd_end, MemoryBreakdown opt,
                 StageMemory& sm) {
  const ClusterSpec& c = x.c;
  const double comm = c.framework.nccl_buffer_bytes_per_group * communicators(x.p);
  for (MemoryBreakdown* b : {&fb, &fwd_end, &opt}) {
    b->comm_buffers = comm;
    const double allocated = b->total() - comm;
    b->framework = c.framework.cuda_context_bytes + c.framework.allocator_reserve_fraction * allocated;
  }
  const bool fwd_end_wins = x.autocast_cache && fwd_end.total() > fb.total();
  const MemoryBreakdown& fwd_bwd = fwd_end_wins ? fwd_end : fb;
  const bool fb_wins = fwd_bwd.total() >= opt.total();
  sm.breakdown = fb_wins ? fwd_bwd : opt;
  sm.peak_phase = !fb_wins ? "optimizer step" : fwd_end_wins ? "end of forward (autocast cache)" : "forward->backward";
  sm.peak_bytes = sm.breakdown.total();
  sm.allocated_peak_bytes = sm.peak_bytes - sm.breakdown.comm_buffers - sm.breakdown.framework;
  // The caching allocator keeps freed blocks reserved, but when cudaMalloc fails it releases its
  // cache and retries, so what it reserves never exceeds the device less the CUDA context and the
  // NCCL buffers (unless the allocations themselves do: then the run is out of memory).
  const double device_room = c.gpu.device_memory_bytes() - c.framework.cuda_context_bytes - comm;
  sm.reserved_peak_bytes = std::max(sm.allocated_peak_bytes,
                                    std::min(sm.allocated_peak_bytes * (1 + c.framework.allocator_reserve_fraction), device_room));
}

StageMemory estimate_stage(const MemoryContext& x, int stage, const std::vector<int>& layers,
                           const std::vector<LayerRange>& chunks) {
  const ModelSpec& m = x.m;
  const Plan& p = x.p;
  StageMemory sm;
  sm.stage = stage;
  sm.first_layer = layers.empty() ? (chunks.empty() ? 0 : chunks.front().first_layer) : layers.front();
  sm.n_layers = static_cast<int>(layers.size());
  sm.chunks = chunks;
  sm.holds_embedding = stage == 0;
  sm.holds_loss = stage == x.pp - 1;
  const StageParams sp = stage_params(m, p, stage, sm.n_layers);
  sm.params_per_rank = sp.total();
  const double P = sp.total();
  const MemoryBreakdown state = persistent_state(x, P, sm);

  // --- transient: forward -> backward boundary ---------------------------------------
  MemoryBreakdown fb = state;
  if (!x.grads_during_forward) fb.grads = 0;
  add_sharding_buffers(x, sp, sm.n_layers, P, fb);
  const double saved = saved_activations(x, stage, layers, sm);
  const bool last = stage == x.pp - 1;
  fb.activations = saved;
  // The backward working set: on the last stage the loss gradient (the vocab-wide fp32 tensors
  // dwarf one block's gradients), elsewhere the first block's own gradients.
  const double block_bwd = block_backward_working_bytes(m, p, x.mb);
  if (last) fb.activations += loss_saved_bytes(m, p, x.mb) + std::max(loss_backward_working_bytes(m, p, x.mb), block_bwd);
  else fb.activations += block_bwd;
  fb.recompute = recompute_working_bytes(m, p, x.mb);
  // Megatron --recompute-modules: one block's dropped tensors exist again during its backward.
  if (p.ac != AcMode::full) fb.recompute += recompute_modules_freed_bytes(m, p, x.mb);

  // --- transient: end of forward, under autocast with fp32 weights ----------------------
  // autocast keeps the low-precision cast of every weight it multiplied until its region
  // exits at the end of forward; backward (recompute, reduce buffers, loss gradient) has not
  // started yet. The cached copies are counted with the unsharded params.
  MemoryBreakdown fwd_end = fb;
  if (x.autocast_cache) {
    fwd_end.unsharded_params += bytes_per_element(p.compute_dtype) * (sp.blocks + sp.head_group);
    fwd_end.recompute = 0;
    fwd_end.reduce_buffers = 0;
    // On the last stage the peak of the forward is inside the loss: log_softmax reading the fp32
    // logits while writing the fp32 log-probs.
    fwd_end.activations = saved + (last ? loss_forward_peak_bytes(m, p, x.mb) : 0.0);
  }
  // --- transient: optimizer step --------------------------------------------------------
  MemoryBreakdown opt = state;
  if (x.foreach_optimizer && !p.param_offload) opt.optimizer += x.state_b * P / x.n_state;
  if (x.fsdp && p.root_unsharded && !x.traits.fsdp_copy_out) opt.unsharded_params = 0;

  settle_peak(x, fb, fwd_end, opt, sm);
  return sm;
}

}  // namespace

double microbatches_in_flight(const Plan& p, int stage, std::int64_t n_microbatches) {
  const double m = static_cast<double>(std::max<std::int64_t>(1, n_microbatches));
  const int pp = p.mesh.pp;
  if (pp <= 1) return 1;
  switch (p.schedule) {
    case PipelineSchedule::gpipe: return m;
    case PipelineSchedule::one_f_one_b: return std::min(m, static_cast<double>(pp - stage));
    case PipelineSchedule::interleaved_1f1b: {
      // Megatron's warm-up: 2*(pp-i-1) + (v-1)*pp chunk-micro-batches, plus the one in flight;
      // each chunk holds 1/v of the stage's layers (Korthikanti §4.2.3: pp*(1+(pp-1)/(pp*v)) at i=0).
      const double v = std::max(1, p.mesh.vpp);
      const double chunks = 2.0 * (pp - stage - 1) + (v - 1) * pp + 1;
      return std::min(m, chunks / v);
    }
  }
  return 1;
}

MemoryEstimate estimate_memory(const ModelSpec& m, const Plan& p, const Job& j, const ClusterSpec& c) {
  MemoryEstimate est;
  est.gpu_memory_bytes = c.gpu.device_memory_bytes();
  const MemoryContext x = memory_context(m, p, j, c);
  std::vector<std::vector<LayerRange>> chunks;
  const std::vector<std::vector<int>> layers = layers_of_stages(x, chunks);
  for (int stage = 0; stage < x.pp; ++stage)
    est.stages.push_back(estimate_stage(x, stage, layers[static_cast<std::size_t>(stage)],
                                        chunks[static_cast<std::size_t>(stage)]));

  double worst = 0;
  for (const auto& s : est.stages) worst = std::max(worst, s.peak_bytes);
  est.headroom_bytes = est.gpu_memory_bytes - worst;
  est.fits = est.headroom_bytes >= 0;
  if (p.act_offload) est.notes.push_back("activation offload: saved tensors live in pinned host memory");
  if (p.param_offload) est.notes.push_back("CPU offload: params, grads and optimizer step on the host");
  if (x.autocast_cache)
    est.notes.push_back("fp32 weights under autocast: fp32 residual stream, and the cached low-precision weight "
                        "copies (counted in unsharded_params) until the forward ends");
  if (!p.flash_attention) est.notes.push_back("unfused attention keeps the s^2 softmax per head");
  return est;
}

}  // namespace meshplan

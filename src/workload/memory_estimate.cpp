#include "workload/memory_estimate.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "spec/pipeline_split.hpp"
#include "workload/activation_memory.hpp"

namespace meshplan {

namespace {

bool is_fsdp(const Plan& p) {
  return p.runtime != Runtime::megatron && (p.sharding == Sharding::zero2 || p.sharding == Sharding::zero3);
}
bool is_fsdp2(const Plan& p) {
  return p.runtime == Runtime::torchtitan_fsdp2 || p.runtime == Runtime::composer_fsdp2;
}

// Parameters one rank of a stage owns before data-parallel sharding.
struct StageParams {
  double blocks = 0;      // all transformer blocks on this stage
  double per_block = 0;   // one block = one FSDP unit
  double per_block_norms = 0;  // of which norm weights (never float8)
  double root = 0;        // embeddings, position table, final norm, head on this stage
  double head_group = 0;  // final norm + head (torchtitan's [norm, output] FSDP group)
  double total() const { return blocks + root; }
};

StageParams stage_params(const ModelSpec& m, const Plan& p, int stage, int n_layers) {
  const ParamCounts c = param_counts(m);
  const bool full_tp = p.tp_style == TpStyle::full;
  const double tp = p.mesh.tp;
  const double attn_split = full_tp ? tp : 1.0;
  const double mlp_split = tp * (m.moe.enabled() ? p.mesh.ep : 1);
  const double vocab_split = full_tp ? tp : 1.0;
  StageParams s;
  s.per_block = static_cast<double>(c.attention_per_layer) / attn_split +
                static_cast<double>(c.mlp_per_layer) / mlp_split +
                static_cast<double>(c.norm_per_layer);
  s.per_block_norms = static_cast<double>(c.norm_per_layer);
  s.blocks = s.per_block * n_layers;
  const bool first = stage == 0;
  const bool last = stage == p.mesh.pp - 1;
  if (first) s.root += static_cast<double>(c.embedding) / vocab_split + static_cast<double>(c.position);
  if (last) {
    // With pipeline stages the last stage keeps its own copy of a tied embedding as the head.
    const double head = m.tied_embeddings ? (p.mesh.pp > 1 ? static_cast<double>(c.embedding) : 0.0)
                                          : static_cast<double>(c.lm_head);
    s.head_group = head / vocab_split + static_cast<double>(c.final_norm);
    s.root += s.head_group;
  }
  return s;
}

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
  est.gpu_memory_bytes = c.gpu.hbm_bytes;
  const int pp = std::max(1, p.mesh.pp);
  const MicroBatchShape mb{j.seq_len / std::max(1, p.mesh.cp), j.micro_batch};
  const double n_state = state_shard_group(p);
  const double state_b = bytes_per_element(p.state_dtype);
  // Parameters are all-gathered in param_dtype, except the block linears under float8 all-gather
  // (unit_gathered below): norms, embeddings and the head are never converted to float8.
  const double gather_b = bytes_per_element(p.param_dtype);
  const double reduce_b = bytes_per_element(p.reduce_dtype);
  const bool fsdp = is_fsdp(p);
  const bool megatron_buffers = p.runtime == Runtime::megatron;
  // Grads live through forward only when they accumulate across micro-batches (zero_grad sets
  // them to None after each step) or when the runtime keeps a contiguous grad buffer.
  const bool grads_during_forward = j.grad_accum > 1 || megatron_buffers;
  // torch's foreach AdamW allocates one temporary per local param in the state dtype
  // (_foreach_sqrt(exp_avg_sq)); fused AdamW (torchtitan's default), Megatron's fused Adam and
  // bitsandbytes' 8-bit kernels do not.
  const bool foreach_optimizer =
      (p.runtime == Runtime::composer_fsdp1 || p.runtime == Runtime::composer_fsdp2 || p.runtime == Runtime::generic) &&
      p.optimizer == Optimizer::adamw;
  const bool autocast_cache = autocast_fp32_weights(p);

  // Layers of each pipeline chunk; a stage owns chunks stage, stage + pp, ... (interleaving).
  const int v = p.schedule == PipelineSchedule::interleaved_1f1b ? std::max(1, p.mesh.vpp) : 1;
  std::vector<int> chunk_sizes(static_cast<std::size_t>(pp * v), m.n_layers / (pp * v));
  if (auto split = split_layers(m.n_layers, pp * v)) chunk_sizes = *split;
  else for (int i = 0; i < m.n_layers % (pp * v); ++i) ++chunk_sizes[static_cast<std::size_t>(i)];
  std::vector<int> chunk_first(chunk_sizes.size(), 0);
  for (std::size_t i = 1; i < chunk_sizes.size(); ++i) chunk_first[i] = chunk_first[i - 1] + chunk_sizes[i - 1];
  for (int stage = 0; stage < pp; ++stage) {
    StageMemory sm;
    sm.stage = stage;
    sm.first_layer = chunk_first[static_cast<std::size_t>(stage)];
    std::vector<int> stage_layers;
    for (int c = 0; c < v; ++c) {
      const auto chunk = static_cast<std::size_t>(c * pp + stage);
      for (int l = 0; l < chunk_sizes[chunk]; ++l) stage_layers.push_back(chunk_first[chunk] + l);
    }
    sm.n_layers = static_cast<int>(stage_layers.size());
    const StageParams sp = stage_params(m, p, stage, sm.n_layers);
    sm.params_per_rank = sp.total();
    const double P = sp.total();

    // --- persistent state -------------------------------------------------------------
    MemoryBreakdown state;
    if (megatron_buffers && (p.sharding == Sharding::none || p.sharding == Sharding::zero1)) {
      // Megatron: bf16 model params and the fp32 main-grad buffer are full size on every
      // rank; the distributed optimizer shards the fp32 master and the moments
      // (docs/user-guide/features/dist_optimizer.md: 6 + 12/d bytes per param).
      state.params = bytes_per_element(p.param_dtype) * P;
      state.grads = (p.reduce_dtype == Dtype::fp32 ? 4.0 : reduce_b) * P;
      state.optimizer = (4.0 + optimizer_state_bytes_per_param(p)) * P / n_state;
    } else if (!fsdp && (p.sharding == Sharding::none || p.sharding == Sharding::zero1) &&
               bytes_per_element(p.param_dtype) < state_b) {
      // DeepSpeed / apex-style mixed precision without FSDP: a low-precision model copy and its
      // gradients on every rank, the fp32 master weights kept by the (ZeRO-1: sharded) optimizer.
      state.params = bytes_per_element(p.param_dtype) * P;
      state.grads = reduce_b * P;
      state.optimizer = (state_b + optimizer_state_bytes_per_param(p)) * P / n_state;
    } else {
      state.params = state_b * P / (p.sharding == Sharding::none || p.sharding == Sharding::zero1 ? 1 : n_state);
      state.grads = state_b * P / (p.sharding == Sharding::zero2 || p.sharding == Sharding::zero3 ? n_state : 1);
      state.optimizer = optimizer_state_bytes_per_param(p) * P / n_state;
    }
    if (p.param_offload) {
      sm.host_bytes += state.params + state.grads + state.optimizer;
      state.params = state.grads = state.optimizer = 0;
    }

    // --- transient: forward -> backward boundary ---------------------------------------
    MemoryBreakdown fb = state;
    if (!grads_during_forward) fb.grads = 0;
    const double unit = sp.per_block;
    const double unit_gathered =
        p.fp8_all_gather ? 1.0 * (unit - sp.per_block_norms) + gather_b * sp.per_block_norms : gather_b * unit;
    if (fsdp) {
      if (!p.reshard_after_forward) {
        // SHARD_GRAD_OP / reshard_after_forward=False: every unit stays gathered until backward.
        fb.unsharded_params = unit_gathered * sm.n_layers + gather_b * sp.root;
      } else if (is_fsdp2(p)) {
        // Current and prefetched groups, plus one flat all-gather output awaiting copy-out.
        fb.unsharded_params = 3 * unit_gathered;
        // torchtitan keeps the [norm, output] group gathered unless the policy is "always".
        if (p.runtime == Runtime::torchtitan_fsdp2) fb.unsharded_params += gather_b * sp.head_group;
      } else {
        // FSDP1: BACKWARD_PRE holds the current and the next unit; POST and none only one
        // (limit_all_gathers caps it at two in either case).
        const double units = p.backward_prefetch == BackwardPrefetch::backward_pre ? 2 : 1;
        fb.unsharded_params = units * unit_gathered;
        if (p.root_unsharded) fb.unsharded_params += gather_b * sp.root;
      }
      // Backward of the current unit: its unsharded grad in the compute dtype, plus the
      // reduce-scatter input in reduce dtype (FSDP1 reduces in place when dtypes match;
      // FSDP2 always copies into a reduce buffer), plus the reduce-scatter output shard.
      const bool needs_copy = is_fsdp2(p) || p.reduce_dtype != p.param_dtype;
      fb.reduce_buffers = bytes_per_element(p.param_dtype) * unit + (needs_copy ? reduce_b * unit : 0) +
                          reduce_b * unit / n_state;
    } else if (!megatron_buffers && p.sharding == Sharding::none && p.mesh.dp() > 1) {
      // torch DDP copies gradients into its own buckets (gradient_as_bucket_view=False).
      fb.reduce_buffers = reduce_b * P;
    }

    // Activations kept for backward, for every micro-batch in flight on this stage.
    double per_microbatch = 0, largest_block = 0;
    for (int layer : stage_layers) {
      const double b = saved_block_bytes(m, p, mb, layer);
      per_microbatch += b;
      largest_block = std::max(largest_block, b);
    }
    sm.microbatches_in_flight = microbatches_in_flight(p, stage, j.grad_accum);
    double saved = per_microbatch * sm.microbatches_in_flight;
    if (p.act_offload) {
      // save_on_cpu: every saved tensor goes to pinned host memory; the device keeps the block
      // being copied out in forward and the one being brought back in backward.
      sm.host_bytes += saved;
      saved = std::min(saved, 2 * largest_block);
    }
    const bool last = stage == pp - 1;
    // A pipeline chunk that sends to a next one keeps the output of each micro-batch in flight
    // (not Megatron). microbatches_in_flight counts in whole-stage units (chunk-micro-batches / v):
    // all v chunks of a stage send, except the model's last chunk on the last stage.
    if (pp > 1) {
      const double sending = last ? (v - 1.0) / v : 1.0;
      saved += pipeline_boundary_bytes(m, p, mb, sm.microbatches_in_flight * v * sending);
    }
    fb.activations = saved;
    // The backward working set: on the last stage the loss gradient (the vocab-wide fp32 tensors
    // dwarf one block's gradients), elsewhere the first block's own gradients.
    const double block_bwd = block_backward_working_bytes(m, p, mb);
    if (last) fb.activations += loss_saved_bytes(m, p, mb) + std::max(loss_backward_working_bytes(m, p, mb), block_bwd);
    else fb.activations += block_bwd;
    fb.recompute = recompute_working_bytes(m, p, mb);

    // --- transient: end of forward, under autocast with fp32 weights ----------------------
    // autocast keeps the low-precision cast of every weight it multiplied until its region
    // exits at the end of forward; backward (recompute, reduce buffers, loss gradient) has not
    // started yet. The cached copies are counted with the unsharded params.
    MemoryBreakdown fwd_end = fb;
    if (autocast_cache) {
      fwd_end.unsharded_params += bytes_per_element(p.compute_dtype) * (sp.blocks + sp.head_group);
      fwd_end.recompute = 0;
      fwd_end.reduce_buffers = 0;
      // On the last stage the peak of the forward is inside the loss: log_softmax reading the fp32
      // logits while writing the fp32 log-probs.
      fwd_end.activations = saved + (last ? loss_forward_peak_bytes(m, p, mb) : 0.0);
    }
    // --- transient: optimizer step --------------------------------------------------------
    MemoryBreakdown opt = state;
    if (foreach_optimizer && !p.param_offload) opt.optimizer += state_b * P / n_state;
    if (fsdp && p.root_unsharded && !is_fsdp2(p)) opt.unsharded_params = 0;

    // --- fixed costs ------------------------------------------------------------------------
    const double comm = c.framework.nccl_buffer_bytes_per_group * communicators(p);
    for (MemoryBreakdown* b : {&fb, &fwd_end, &opt}) {
      b->comm_buffers = comm;
      const double allocated = b->total() - comm;
      b->framework = c.framework.cuda_context_bytes + c.framework.allocator_reserve_fraction * allocated;
    }
    const bool fwd_end_wins = autocast_cache && fwd_end.total() > fb.total();
    const MemoryBreakdown& fwd_bwd = fwd_end_wins ? fwd_end : fb;
    const bool fb_wins = fwd_bwd.total() >= opt.total();
    sm.breakdown = fb_wins ? fwd_bwd : opt;
    sm.peak_phase = !fb_wins ? "optimizer step" : fwd_end_wins ? "end of forward (autocast cache)" : "forward->backward";
    sm.peak_bytes = sm.breakdown.total();
    sm.allocated_peak_bytes = sm.peak_bytes - sm.breakdown.comm_buffers - sm.breakdown.framework;
    // The caching allocator keeps freed blocks reserved, but when cudaMalloc fails it releases its
    // cache and retries, so what it reserves never exceeds the device less the CUDA context and the
    // NCCL buffers (unless the allocations themselves do: then the run is out of memory).
    const double device_room = c.gpu.hbm_bytes - c.framework.cuda_context_bytes - comm;
    sm.reserved_peak_bytes = std::max(sm.allocated_peak_bytes,
                                      std::min(sm.allocated_peak_bytes * (1 + c.framework.allocator_reserve_fraction), device_room));
    est.stages.push_back(sm);
  }

  double worst = 0;
  for (const auto& s : est.stages) worst = std::max(worst, s.peak_bytes);
  est.headroom_bytes = est.gpu_memory_bytes - worst;
  est.fits = est.headroom_bytes >= 0;
  if (p.act_offload) est.notes.push_back("activation offload: saved tensors live in pinned host memory");
  if (p.param_offload) est.notes.push_back("CPU offload: params, grads and optimizer step on the host");
  if (autocast_cache)
    est.notes.push_back("fp32 weights under autocast: fp32 residual stream, and the cached low-precision weight "
                        "copies (counted in unsharded_params) until the forward ends");
  if (!p.flash_attention) est.notes.push_back("unfused attention keeps the s^2 softmax per head");
  return est;
}

}  // namespace meshplan

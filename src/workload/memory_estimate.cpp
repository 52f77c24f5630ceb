#include "workload/memory_estimate.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "spec/offload_modules.hpp"
#include "spec/pipeline_split.hpp"
#include "spec/runtime_traits.hpp"
#include "workload/activation_memory.hpp"
#include "workload/device_fit.hpp"
#include "workload/pipeline_schedule.hpp"
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
  double gather_b = 2;
  bool fsdp = false;
  bool grads_during_forward = false;
  bool autocast_cache = false;
  // Gradient sync deferred to a schedule run's last micro-batch: FSDP units kept gathered under a
  // pipeline whose runtime defers it (torchtitan; the lowering's Builder::defers_fsdp_sync).
  bool defers_sync = false;
  int pp = 1, v = 1;
};

MemoryContext memory_context(const ModelSpec& m, const Plan& p, const Job& j, const ClusterSpec& c) {
  MemoryContext x{m, p, j, c, runtime_traits(p), {j.seq_len / std::max(1, p.mesh.cp), j.micro_batch}};
  x.pp = std::max(1, p.mesh.pp);
  // Parameters are all-gathered in param_dtype, except the block linears under float8 all-gather
  // (unit_gathered below): norms, embeddings and the head are never converted to float8.
  x.gather_b = bytes_per_element(p.param_dtype);
  x.fsdp = fsdp_units(p, x.traits);
  x.grads_during_forward = state_bytes_per_param(p, j).grads_through_forward;
  x.autocast_cache = autocast_fp32_weights(p);
  x.v = p.schedule == PipelineSchedule::interleaved_1f1b ? std::max(1, p.mesh.vpp) : 1;
  x.defers_sync = x.fsdp && x.traits.pipelining_defers_fsdp_sync && x.pp > 1 && !p.reshard_after_forward;
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
  const StateBytesPerParam per = state_bytes_per_param(x.p, x.j);
  MemoryBreakdown state;
  state.params = per.device.params * P;
  state.grads = per.device.grads * P;
  state.optimizer = per.device.optimizer * P;
  state.reduce_buffers = per.device.reduce_buffers * P;
  sm.host_bytes += per.host * P;
  sm.host_state_bytes = per.host * P;
  sm.grads_bytes = state.grads;
  sm.optimizer_step_bytes = per.optimizer_step * P;
  return state;
}

// The gathered FSDP units and the reductions' buffers at the loss's backward (`at_loss`) and at the
// first block's backward, as the lowering allocates them (fsdp_lowering.cpp).
struct ShardingBuffers {
  double unsharded_at_loss = 0, reduce_at_loss = 0;
  double unsharded_at_block = 0, reduce_at_block = 0;
};

ShardingBuffers sharding_buffers(const MemoryContext& x, const StageParams& sp, int n_layers, bool last) {
  ShardingBuffers b;
  if (!x.fsdp) return b;
  const Plan& p = x.p;
  const RootGathering rg = root_gathering(p);
  const double unit = fsdp_unit_gathered_bytes(x.m, p);
  const double head = sp.head_group, root = sp.root;
  if (!p.reshard_after_forward) {
    // SHARD_GRAD_OP / reshard_after_forward=False: every unit stays gathered until its backward.
    b.unsharded_at_loss = b.unsharded_at_block = unit * n_layers + x.gather_b * root;
  } else {
    // The group holding the head is gathered during the loss's backward: the root unit, or
    // torchtitan's [norm, output] (kept from its forward, or gathered again); the last block too
    // when it was not resharded. The block gathers of backward start once the loss's backward has
    // produced the gradient of the last block's output.
    b.unsharded_at_loss = x.gather_b * (rg.one_root ? root : head) + (rg.last_block_kept ? unit : 0.0);
    // First block backward: the current unit and the prefetched one (FSDP2: plus the flat
    // all-gather output awaiting copy-out; FSDP1 with BACKWARD_POST or none: the current only;
    // Megatron-FSDP prefetches the next bucket whatever the setting).
    const double units = x.traits.fsdp_copy_out ? 3
                         : p.backward_prefetch == BackwardPrefetch::backward_pre || x.traits.fsdp_always_prefetches_backward
                             ? 2
                             : 1;
    b.unsharded_at_block = units * unit + (rg.one_root ? x.gather_b * root : 0.0);
  }
  // The head's group gets its gradient in the loss's backward; the root unit's buffer lives until
  // the embedding's backward; torchtitan's [norm, output] buffer until its reduce-scatter is done,
  // which may still run during the first block's backward (counted: an upper bound).
  const double head_group_buffer = fsdp_reduce_buffer_bytes(p, rg.one_root ? root : head);
  if (last) b.reduce_at_loss = head_group_buffer;
  b.reduce_at_block = fsdp_reduce_buffer_bytes(p, sp.per_block) + (last ? head_group_buffer : 0.0);
  return b;
}

// Activations kept for backward by the forwards a stage holds (pipeline_schedule's held_forwards,
// the order the lowering runs), and the stage outputs a pipeline keeps until their backward, at
// a block's backward (`at_block`) and at the loss's backward (`at_loss`); `*_sync` at the backward
// of a run's last micro-batch, the only one that reduces gradients when the pipelining stage
// defers gradient sync (torchtitan), else the same. Each chunk counts its own layers: Megatron's
// uneven splits give chunks of one layer beside a chunk that holds only the loss. Sets the stage's
// micro-batches in flight (held forwards per micro-batch of the whole stage) and its offloaded bytes.
struct SavedActivations {
  double at_block = 0, at_loss = 0, at_block_sync = 0, at_loss_sync = 0;
};

SavedActivations saved_activations(const MemoryContext& x, int stage, const std::vector<LayerRange>& chunks,
                                   int mtp_local_chunk, int n_mtp, StageMemory& sm) {
  const Plan& p = x.p;
  const std::size_t v = static_cast<std::size_t>(x.v);
  // Per chunk and micro-batch: saved bytes, of them offloaded, and the stage output it sends.
  std::vector<double> saved(v, 0.0), offloaded(v, 0.0), boundary(v, 0.0), weight(v, 0.0);
  double largest_offload = 0;
  auto add_block = [&](std::size_t c, int layer) {
    saved[c] += saved_block_bytes(x.m, p, x.mb, layer);
    const double moved = offloaded_block_bytes(x.m, p, x.mb, layer);
    offloaded[c] += moved;
    largest_offload = std::max(largest_offload, moved);
  };
  for (std::size_t c = 0; c < v && c < chunks.size(); ++c)
    for (int l = 0; l < chunks[c].n_layers; ++l) add_block(c, chunks[c].first_layer + l);
  // The multi-token-prediction modules' blocks are blocks n_layers, n_layers + 1, ... (what the
  // lowering numbers them), in their chunk after its decoder layers; each also keeps its inputs.
  for (int k = 0; k < n_mtp; ++k) {
    const auto c = static_cast<std::size_t>(std::clamp(mtp_local_chunk, 0, x.v - 1));
    add_block(c, x.m.n_layers + k);
    saved[c] += mtp_input_saved_bytes(x.m, p, x.mb);
  }
  // A pipeline chunk that sends to a next one keeps the output of each micro-batch it holds: all
  // chunks of a stage send, except the model's last chunk on the last stage.
  if (x.pp > 1) {
    const double out_bytes = pipeline_boundary_bytes(x.m, p, x.mb, 1.0);
    for (std::size_t c = 0; c < v; ++c) boundary[c] = stage == x.pp - 1 && c == v - 1 ? 0.0 : out_bytes;
  }
  for (std::size_t c = 0; c < v; ++c) weight[c] = saved[c] + boundary[c];
  const std::int64_t per_run = microbatches_per_run(std::max<std::int64_t>(1, x.j.grad_accum), x.j.pp_microbatches, x.pp);
  const HeldForwards held = held_forwards(p, stage, per_run, weight);
  auto sum = [&](const std::vector<std::int64_t>& n, const std::vector<double>& bytes) {
    double total = 0;
    for (std::size_t c = 0; c < v && c < n.size(); ++c) total += static_cast<double>(n[c]) * bytes[c];
    return total;
  };
  const bool stream = runtime_traits(p).offload_on_copy_stream;
  // Every saved tensor of the blocks goes to pinned host memory as it is saved and comes back
  // before its backward (the lowering's offload copies). On its own stream with one layer of
  // look-ahead (torchtune, torchtitan, Megatron) two layers are on the device during a block's
  // backward (the one in use and the one coming back) and at most one at the loss (the last
  // layer's copy-out may still run; the copies back start once the loss's backward is done).
  // torch's save_on_cpu (Composer) copies synchronously: none at the loss, the one in use
  // during a block's backward. Under fine-grained offload the rest of each block's saved tensors
  // stays on the device.
  auto on_device = [&](const std::vector<std::int64_t>& n, bool at_loss) {
    const double kept = sum(n, saved), moved = p.act_offload ? sum(n, offloaded) : 0.0;
    const double back = at_loss ? (stream ? 1 : 0) * largest_offload : (stream ? 2 : 1) * largest_offload;
    return kept - moved + std::min(moved, back) + sum(n, boundary);
  };
  if (p.act_offload) sm.host_bytes += sum(held.any, offloaded);
  double per_microbatch = 0;
  for (double b : saved) per_microbatch += b;
  double held_chunks = 0;
  for (auto n : held.any) held_chunks += static_cast<double>(n);
  sm.microbatches_in_flight = per_microbatch > 0 ? sum(held.any, saved) / per_microbatch : held_chunks / x.v;
  const bool defers = x.defers_sync;
  SavedActivations out;
  out.at_block = on_device(held.any, false);
  out.at_loss = on_device(held.last_chunk, true);
  out.at_block_sync = defers ? on_device(held.run_last, false) : out.at_block;
  out.at_loss_sync = defers ? on_device(held.run_last_last_chunk, true) : out.at_loss;
  return out;
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
  for (MemoryBreakdown* b : {&sm.persistent}) {
    b->comm_buffers = comm;
    b->framework = c.framework.cuda_context_bytes + c.framework.allocator_reserve_fraction * (b->total() - comm);
  }
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

// With gradient sync deferred to a run's last micro-batch: that micro-batch's block and loss
// backwards (`block_sync`, `loss_sync`, copies of the block and loss moments on entry), which
// reduce each unit's gradients with the forwards held then (estimate_stage).
void deferred_sync_moments(const MemoryContext& x, int stage, const std::vector<int>& layers, const StageParams& sp,
                           const ShardingBuffers& sb, const SavedActivations& saved, const MemoryBreakdown& held,
                           MemoryBreakdown& block_sync, MemoryBreakdown& loss_sync) {
  const ModelSpec& m = x.m;
  const Plan& p = x.p;
  const bool last = stage == x.pp - 1;
  const double heads = last ? 1.0 + m.n_mtp_layers : 0.0;
  const RootGathering rg = root_gathering(p);
  const double head_released = last && (!rg.one_root || stage != 0) ? x.gather_b * (rg.one_root ? sp.root : sp.head_group) : 0.0;
  block_sync.unsharded_params = std::max(0.0, sb.unsharded_at_block - head_released);
  block_sync.reduce_buffers = held.reduce_buffers + sb.reduce_at_block;
  block_sync.activations = saved.at_block_sync + block_backward_working_bytes(m, p, x.mb);
  // FSDP2 keeps the previous group's reduce-scatter input until this group's post-backward: at
  // the second block of the backward two units' buffers are live, the first block's unit is
  // resharded and its saved activations are freed (the one freed counted as the smallest).
  if (x.traits.fsdp_one_reduce_scatter_in_flight && layers.size() > 1) {
    double smallest_block = saved_block_bytes(m, p, x.mb, layers.front());
    for (int l : layers) smallest_block = std::min(smallest_block, saved_block_bytes(m, p, x.mb, l));
    MemoryBreakdown second = block_sync;
    second.unsharded_params = std::max(0.0, block_sync.unsharded_params - fsdp_unit_gathered_bytes(m, p));
    second.reduce_buffers = held.reduce_buffers + 2.0 * fsdp_reduce_buffer_bytes(p, sp.per_block);
    second.activations = std::max(0.0, saved.at_block_sync - smallest_block) + block_backward_working_bytes(m, p, x.mb);
    if (second.total() > block_sync.total()) block_sync = second;
  }
  loss_sync.reduce_buffers = held.reduce_buffers + sb.reduce_at_loss;
  loss_sync.activations =
      saved.at_loss_sync + heads * loss_saved_bytes(m, p, x.mb) + loss_backward_working_bytes(m, p, x.mb);
}

// The memory terms of one stage in the order docs/memory.md gives them: each term is one call,
// the length is their number.
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
  int n_dense = 0;
  for (const LayerRange& r : chunks) n_dense += dense_layers_in(m, r.first_layer, r.n_layers);
  // Multi-token prediction: the modules on the stage of their chunk, their heads and losses with
  // the model's on the last stage (Megatron-Core GPTModel._postprocess).
  const int mtp_chunk = mtp_chunk_of(p.pipeline_split, x.pp * x.v, m.n_mtp_layers);
  const int n_mtp = mtp_chunk >= 0 && mtp_chunk % x.pp == stage ? m.n_mtp_layers : 0;
  const StageParams sp = stage_params(m, p, stage, sm.n_layers, n_dense, n_mtp);
  sm.mtp_layers = n_mtp;
  sm.params_per_rank = sp.total();
  const double P = sp.total();
  const MemoryBreakdown state = persistent_state(x, P, sm);
  MemoryBreakdown held = state;  // what every moment holds
  if (!x.grads_during_forward) held.grads = 0;
  sm.persistent = held;
  const bool last = stage == x.pp - 1;
  const double heads = last ? 1.0 + m.n_mtp_layers : 0.0;  // LM heads and losses on this stage
  const ShardingBuffers sb = sharding_buffers(x, sp, sm.n_layers + n_mtp, last);
  const SavedActivations saved = saved_activations(x, stage, chunks, mtp_chunk / x.pp, n_mtp, sm);
  // With gradient sync deferred to a run's last micro-batch (torchtitan under PP), reductions run
  // only in that micro-batch's backward, which holds fewer forwards: its own moments below.
  const bool defers = x.defers_sync;

  // --- the first block's backward: every saved activation, the block's gradients, the recompute
  // working set, the gathered units and the current unit's reduction.
  MemoryBreakdown block = held;
  block.unsharded_params = sb.unsharded_at_block;
  block.reduce_buffers += defers ? 0.0 : sb.reduce_at_block;
  block.activations = saved.at_block + block_backward_working_bytes(m, p, x.mb);
  block.recompute = recompute_working_bytes(m, p, x.mb);
  // Megatron --recompute-modules: one block's dropped tensors exist again during its backward.
  if (p.ac != AcMode::full) block.recompute += recompute_modules_freed_bytes(m, p, x.mb);
  // --- the loss's backward (last stage): the vocab-wide fp32 tensors beside all saved activations.
  MemoryBreakdown loss = held;
  loss.unsharded_params = sb.unsharded_at_loss;
  loss.reduce_buffers += defers ? 0.0 : sb.reduce_at_loss;
  loss.activations = saved.at_loss + heads * loss_saved_bytes(m, p, x.mb) + loss_backward_working_bytes(m, p, x.mb);
  // Interleaved pipelines whose loss is a chunk of its own: the next chunk's first recompute (its
  // TP all-gather, on its own stream) may start while the loss's backward runs (an upper bound).
  if (p.mesh.vpp > 1 && p.pipeline_split.loss_as_layer) loss.recompute = recompute_working_bytes(m, p, x.mb);
  // --- deferred sync: the run's last micro-batch, whose backward reduces each unit's gradients
  // and releases the head's group once the loss's backward is done (stage_lowering.cpp) while the
  // embedding's stays gathered until the embedding's backward.
  MemoryBreakdown block_sync = block, loss_sync = loss;
  if (defers) deferred_sync_moments(x, stage, layers, sp, sb, saved, held, block_sync, loss_sync);
  // --- the last block's backward, when the gradients do not live through forward: those of every
  // other block and of the head exist; one block's activations are left.
  MemoryBreakdown tail = held;
  if (!x.grads_during_forward && P > 0 && !layers.empty()) {
    const RootGathering rg = root_gathering(p);
    const double embedding_group = stage == 0 ? (rg.one_root ? sp.root : sp.root - sp.head_group) : 0.0;
    // FSDP2 holds the previous unit's reduce-scatter input until this unit's post-backward: two
    // units' buffers. Whether that reduce-scatter has written its sharded gradient yet depends on
    // timing: counted as written (an upper bound).
    const double in_flight = x.fsdp && x.traits.fsdp_one_reduce_scatter_in_flight && layers.size() > 1 ? 2.0 : 1.0;
    tail.grads = sm.grads_bytes * std::max(0.0, P - sp.per_block - embedding_group) / P;
    const double first_block = saved_block_bytes(m, p, x.mb, layers.front());
    tail.activations = std::min(saved.at_block, first_block) + block_backward_working_bytes(m, p, x.mb);
    tail.recompute = block.recompute;
    tail.unsharded_params = block.unsharded_params;
    if (x.fsdp)
      tail.reduce_buffers += in_flight * fsdp_reduce_buffer_bytes(p, sp.per_block) +
                             (rg.one_root && last ? fsdp_reduce_buffer_bytes(p, sp.root) : 0.0);
  }
  const MemoryBreakdown* fb_ptr = &block;
  for (const MemoryBreakdown* b : {&block_sync, last ? &loss : nullptr, last ? &loss_sync : nullptr, &tail})
    if (b != nullptr && b->total() > fb_ptr->total()) fb_ptr = b;
  const MemoryBreakdown& fb = *fb_ptr;

  // --- transient: end of forward, under autocast with fp32 weights ----------------------
  // autocast keeps the low-precision cast of every weight it multiplied until its region
  // exits at the end of forward; backward (recompute, reduce buffers, loss gradient) has not
  // started yet. The cached copies are counted with the unsharded params.
  MemoryBreakdown fwd_end = held;
  if (x.autocast_cache) {
    fwd_end.unsharded_params =
        sb.unsharded_at_loss + bytes_per_element(p.compute_dtype) * (sp.blocks + n_mtp * sp.per_block + sp.head_group);
    // On the last stage the peak of the forward is inside the loss: log_softmax reading the fp32
    // logits while writing the fp32 log-probs.
    fwd_end.activations =
        saved.at_loss + (last ? loss_forward_peak_bytes(m, p, x.mb) + (heads - 1) * loss_saved_bytes(m, p, x.mb) : 0.0);
  }
  // --- transient: optimizer step --------------------------------------------------------
  MemoryBreakdown opt = state;
  opt.optimizer += sm.optimizer_step_bytes;
  opt.grads += largest_param_grad_bytes(m, p, x.j, stage, sm.n_layers);

  settle_peak(x, fb, fwd_end, opt, sm);
  sm.peak_moment = sm.peak_phase;
  if (sm.peak_phase == "forward->backward") {
    sm.peak_moment = &fb == &loss        ? "loss backward"
                     : &fb == &loss_sync ? "loss backward of a run's last micro-batch"
                     : &fb == &block_sync ? "block backward of a run's last micro-batch"
                     : &fb == &tail       ? "last block backward"
                                          : "first block backward";
    if (&fb == &tail) sm.peak_phase = "end of backward";
  }
  return sm;
}

}  // namespace

StateBytesPerParam state_bytes_per_param(const Plan& p, const Job& j) {
  const RuntimeTraits traits = runtime_traits(p);
  const double n_state = state_shard_group(p);
  const double state_b = bytes_per_element(p.state_dtype);
  const double reduce_b = bytes_per_element(p.reduce_dtype);
  const bool fsdp = fsdp_units(p, traits);
  StateBytesPerParam out;
  MemoryBreakdown& st = out.device;
  const bool replicated_params = p.sharding == Sharding::none || p.sharding == Sharding::zero1;
  if (traits.contiguous_grad_buffer && replicated_params) {
    // Megatron: bf16 model params and the fp32 main-grad buffer are full size on every
    // rank; the distributed optimizer shards the fp32 master and the moments
    // (docs/user-guide/features/dist_optimizer.md: 6 + 12/d bytes per param).
    st.params = bytes_per_element(p.param_dtype);
    st.grads = reduce_b;
    st.optimizer = (4.0 + optimizer_state_bytes_per_param(p)) / n_state;
  } else if (!fsdp && replicated_params && bytes_per_element(p.param_dtype) < state_b) {
    // DeepSpeed / apex-style mixed precision without FSDP: a low-precision model copy and its
    // gradients on every rank, the fp32 master weights kept by the (ZeRO-1: sharded) optimizer.
    st.params = bytes_per_element(p.param_dtype);
    st.grads = reduce_b;
    st.optimizer = (state_b + optimizer_state_bytes_per_param(p)) / n_state;
  } else {
    st.params = state_b / (replicated_params ? 1 : n_state);
    st.grads = state_b / (p.sharding == Sharding::zero2 || p.sharding == Sharding::zero3 ? n_state : 1);
    st.optimizer = optimizer_state_bytes_per_param(p) / n_state;
  }
  // torch DDP copies gradients into its own buckets (gradient_as_bucket_view=False), allocated
  // with the reducer and kept for the whole run.
  if (!fsdp && !traits.contiguous_grad_buffer && p.sharding == Sharding::none && p.mesh.dp() > 1)
    st.reduce_buffers = reduce_b;
  if (p.param_offload) {
    out.host = st.params + st.grads + st.optimizer;
    st.params = st.grads = st.optimizer = 0;
  }
  // Grads live through forward only when they accumulate across micro-batches (zero_grad sets
  // them to None after each step) or when the runtime keeps a contiguous grad buffer.
  out.grads_through_forward = j.grad_accum > 1 || traits.contiguous_grad_buffer;
  // torch's foreach AdamW allocates one temporary per local param in the state dtype
  // (_foreach_sqrt(exp_avg_sq)); fused AdamW (torchtitan's default), Megatron's fused Adam and
  // bitsandbytes' 8-bit kernels do not.
  const bool foreach = p.optimizer_impl == OptimizerImpl::foreach ||
                       (p.optimizer_impl == OptimizerImpl::framework && traits.foreach_adamw);
  if (foreach && p.optimizer == Optimizer::adamw && !p.param_offload) out.optimizer_step = state_b / n_state;
  if (p.optimizer_in_backward) {
    // Each parameter is stepped (and its gradient freed) as soon as its gradient is ready: no
    // stored gradients; the largest parameter's gradient is the one alive at a time
    // (largest_param_grad_bytes).
    out.grad_of_one_param = st.grads;
    st.grads = 0;
    out.grads_through_forward = false;
    out.optimizer_step = 0;
  }
  return out;
}

double largest_param_grad_bytes(const ModelSpec& m, const Plan& p, const Job& j, int stage, int n_layers) {
  const StateBytesPerParam per = state_bytes_per_param(p, j);
  if (per.grad_of_one_param <= 0) return 0;
  const StageParams sp = stage_params(m, p, stage, n_layers);
  const double tp = std::max(1, p.mesh.tp);
  const double ffn = m.moe.enabled() ? static_cast<double>(m.moe.expert_ffn) : static_cast<double>(m.ffn_hidden);
  const double mlp_matrix = n_layers > 0 ? static_cast<double>(m.d_model) * ffn / tp : 0.0;
  return per.grad_of_one_param * std::max({sp.root - sp.head_group, sp.head_group, mlp_matrix});
}

RootGathering root_gathering(const Plan& p) {
  const RuntimeTraits t = runtime_traits(p);
  RootGathering g;
  if (!fsdp_units(p, t)) return g;
  g.one_root = p.root_unsharded && !t.keeps_head_group_gathered;
  g.head_kept = t.keeps_head_group_gathered;
  // torchtitan's "default" policy: the last block is not resharded after forward (FSDP would
  // prefetch it again at once); with PP nothing is resharded.
  g.last_block_kept = t.keeps_head_group_gathered && p.reshard_after_forward && p.mesh.pp <= 1;
  return g;
}

double fsdp_unit_gathered_bytes(const ModelSpec& m, const Plan& p) {
  const StageParams sp = stage_params(m, p, 0, 1);
  const double gather_b = bytes_per_element(p.param_dtype);
  return p.fp8_all_gather ? 1.0 * (sp.per_block - sp.per_block_norms) + gather_b * sp.per_block_norms
                          : gather_b * sp.per_block;
}

double fsdp_reduce_buffer_bytes(const Plan& p, double params) {
  const RuntimeTraits t = runtime_traits(p);
  const double reduce_b = bytes_per_element(p.reduce_dtype);
  const bool needs_copy = t.fsdp_reduce_copies_grads || p.reduce_dtype != p.param_dtype;
  return bytes_per_element(p.param_dtype) * params + (needs_copy ? reduce_b * params : 0) +
         reduce_b * params / state_shard_group(p);
}

double microbatches_in_flight(const Plan& p, int stage, std::int64_t n_microbatches) {
  // Held chunk-micro-batches of equal chunks, in whole-stage units.
  const int v = chunks_per_stage(p);
  const HeldForwards held =
      held_forwards(p, stage, std::max<std::int64_t>(1, n_microbatches), std::vector<double>(static_cast<std::size_t>(v), 1.0));
  double n = 0;
  for (auto k : held.any) n += static_cast<double>(k);
  return n / v;
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

  const DeviceFit fit = device_fit_of(est.stages, c.framework.cuda_context_bytes, est.gpu_memory_bytes);
  est.headroom_bytes = est.gpu_memory_bytes - fit.reserve_peak_bytes;
  est.needed_bytes = fit.needed_bytes;
  est.fits = fit.fits();
  est.tight = fit.tight();
  if (p.act_offload)
    est.notes.push_back(p.offload_modules.any()
                            ? "activation offload: the tensors " + offload_modules_text(p.offload_modules) +
                                  " save live in pinned host memory, the rest on the device"
                            : "activation offload: saved tensors live in pinned host memory");
  if (p.param_offload) est.notes.push_back("CPU offload: params, grads and optimizer step on the host");
  if (x.autocast_cache)
    est.notes.push_back("fp32 weights under autocast: fp32 residual stream, and the cached low-precision weight "
                        "copies (counted in unsharded_params) until the forward ends");
  if (!p.flash_attention) est.notes.push_back("unfused attention keeps the s^2 softmax per head");
  est.notes.push_back("the same terms as simulate's timeline, at the op where they add up most; where only "
                      "timing decides whether two transients overlap they are added (an upper bound)");
  return est;
}

}  // namespace meshplan

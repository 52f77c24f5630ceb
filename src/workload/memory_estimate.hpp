#pragma once
// Closed-form peak memory per pipeline stage: the persistent model state, then the transient
// buffers of the moment of the step where the sum is largest (end of forward, the loss's
// backward, the first block's backward, the optimizer step). The lowering attaches the same
// terms (the functions below and activation_memory.hpp) to the ops that allocate and free them,
// so the simulated timeline and this closed form cannot drift; where the timeline knows more
// (whether two transients overlap in time) the closed form is an upper bound.
// Every term is documented with its formula and source in docs/memory.md.
#include <string>
#include <vector>

#include "spec/cluster_spec.hpp"
#include "spec/model_spec.hpp"
#include "spec/pipeline_split.hpp"
#include "spec/plan.hpp"

namespace meshplan {

// The JSON contract names these terms; all are bytes per GPU and they add up to the peak.
struct MemoryBreakdown {
  double params = 0;            // stored parameters (sharded fp32 master, or replicated model params)
  double grads = 0;             // stored gradients (fp32 shard under FSDP in every MP mode)
  double optimizer = 0;         // AdamW moments (+ Megatron's fp32 master) + step temporaries
  double unsharded_params = 0;  // all-gathered params: current + prefetched units, FSDP1 root
  double reduce_buffers = 0;    // current unit's unsharded grad + its reduce-scatter input
  double activations = 0;       // tensors saved for backward (all micro-batches in flight) + loss
  double recompute = 0;         // working set while one checkpointed block is recomputed
  double comm_buffers = 0;      // NCCL channel buffers per communicator
  double framework = 0;         // CUDA context + caching-allocator reserve
  double total() const {
    return params + grads + optimizer + unsharded_params + reduce_buffers + activations + recompute +
           comm_buffers + framework;
  }
};

struct StageMemory {
  int stage = 0;
  int first_layer = 0;               // the lowest layer this rank holds
  int n_layers = 0;                  // decoder layers on this rank, all its chunks together
  int mtp_layers = 0;                // multi-token-prediction modules on this rank
  std::vector<LayerRange> chunks;    // each virtual chunk's layers, in the rank's order
  bool holds_embedding = false, holds_loss = false;
  double params_per_rank = 0;        // parameters this rank owns before data-parallel sharding
  double microbatches_in_flight = 1; // activations kept for this many micro-batches (PP schedules)
  std::string peak_phase;            // "forward->backward", "end of backward" or "optimizer step"
  std::string peak_moment;           // the op: "loss backward", "first block backward", ...
  MemoryBreakdown breakdown;         // at the moment of the peak
  double peak_bytes = 0;             // = breakdown.total()
  double allocated_peak_bytes = 0;   // what torch.cuda.max_memory_allocated would report
  double reserved_peak_bytes = 0;    // what torch.cuda.max_memory_reserved would report
  double host_bytes = 0;             // pinned host memory used by offload, per rank
  // Held at every moment of the step: params, optimizer state, the gradients when they live
  // through forward, DDP's bucket copies. The timeline adds its own transients to this.
  MemoryBreakdown persistent;
  double host_state_bytes = 0;       // of host_bytes: params, grads and optimizer under param offload
  double grads_bytes = 0;            // stored gradients once backward has produced all of them
  double optimizer_step_bytes = 0;   // temporaries of the optimizer step (foreach AdamW)
};

struct MemoryEstimate {
  double gpu_memory_bytes = 0;
  double headroom_bytes = 0;         // capacity - max peak, the allocator's usual reserve included
  // The worst stage's allocated peak + CUDA context + NCCL buffers: what must fit (device_fit.hpp).
  double needed_bytes = 0;
  bool fits = false;                 // needed_bytes <= capacity
  bool tight = false;                // fits, but not with the allocator's usual reserve
  std::vector<StageMemory> stages;
  std::vector<std::string> notes;    // assumptions that shaped the result
};

// The micro-batch size and count come from the Job; degrees from Plan::mesh (already resolved).
MemoryEstimate estimate_memory(const ModelSpec& m, const Plan& p, const Job& j, const ClusterSpec& c);

// --- terms the lowering attaches to ops (one definition for both answers) --------------------

// Persistent bytes per parameter of the stage (params, grads, optimizer; reduce_buffers: DDP's
// buckets), on the device; under param offload they are on the host (returned in `host`).
struct StateBytesPerParam {
  MemoryBreakdown device;
  double host = 0;
  bool grads_through_forward = false;  // accumulated across micro-batches or a contiguous buffer
  double optimizer_step = 0;           // temporaries while the optimizer runs
  double grad_of_one_param = 0;        // optimizer in backward: bytes per element of a gradient
};
StateBytesPerParam state_bytes_per_param(const Plan& p, const Job& j);
// Optimizer in backward: the gradient of the stage's largest parameter (embedding, head or an MLP
// matrix), the one alive while the optimizer steps it. 0 otherwise.
double largest_param_grad_bytes(const ModelSpec& m, const Plan& p, const Job& j, int stage, int n_layers);

// How FSDP holds what is not in a block: FSDP1's root unit and Composer's FSDP2 root keep the
// embeddings, final norm and head gathered from their forward until their backward is done
// (`one_root`); torchtitan shards the embedding and [norm, output] as their own groups and does
// not reshard [norm, output] nor the last block after forward (`head_kept`, `last_block_kept`).
struct RootGathering {
  bool one_root = false;
  bool head_kept = false;
  bool last_block_kept = false;
};
RootGathering root_gathering(const Plan& p);

// One block unit as all-gathered (float8 all-gather: 1-byte linears, 16-bit norms): the one size
// the memory model counts and the lowering's all-gathers send, allocate and free.
double fsdp_unit_gathered_bytes(const ModelSpec& m, const Plan& p);
// What a unit's gradient reduction holds from its backward until its reduce-scatter is done: the
// unsharded grad in the param dtype, the reduce-dtype copy (FSDP2 always, FSDP1 when the dtypes
// differ) and the reduce-scatter's output shard.
double fsdp_reduce_buffer_bytes(const Plan& p, double params);

// Activations are kept for this many micro-batches on `stage` (1F1B: pp - stage; interleaved:
// Megatron's warm-up count; GPipe: all of them), capped by the micro-batches per step.
double microbatches_in_flight(const Plan& p, int stage, std::int64_t n_microbatches);

}  // namespace meshplan

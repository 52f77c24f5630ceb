#pragma once
// Closed-form peak memory per pipeline stage: the persistent model state, then the transient
// buffers of the phase of the step where the sum is largest (end of forward / start of
// backward, or the optimizer step). The simulator's timeline must agree with it where it is
// exact. Every term is documented with its formula and source in docs/memory.md.
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
  std::vector<LayerRange> chunks;    // each virtual chunk's layers, in the rank's order
  bool holds_embedding = false, holds_loss = false;
  double params_per_rank = 0;        // parameters this rank owns before data-parallel sharding
  double microbatches_in_flight = 1; // activations kept for this many micro-batches (PP schedules)
  std::string peak_phase;            // "forward->backward" or "optimizer step"
  MemoryBreakdown breakdown;         // at the moment of the peak
  double peak_bytes = 0;             // = breakdown.total()
  double allocated_peak_bytes = 0;   // what torch.cuda.max_memory_allocated would report
  double reserved_peak_bytes = 0;    // what torch.cuda.max_memory_reserved would report
  double host_bytes = 0;             // pinned host memory used by offload, per rank
};

struct MemoryEstimate {
  double gpu_memory_bytes = 0;
  double headroom_bytes = 0;         // capacity - max peak (negative: does not fit)
  bool fits = false;
  std::vector<StageMemory> stages;
  std::vector<std::string> notes;    // assumptions that shaped the result
};

// The micro-batch size and count come from the Job; degrees from Plan::mesh (already resolved).
MemoryEstimate estimate_memory(const ModelSpec& m, const Plan& p, const Job& j, const ClusterSpec& c);

// Activations are kept for this many micro-batches on `stage` (1F1B: pp - stage; interleaved:
// Megatron's warm-up count; GPipe: all of them), capped by the micro-batches per step.
double microbatches_in_flight(const Plan& p, int stage, std::int64_t n_microbatches);

}  // namespace meshplan

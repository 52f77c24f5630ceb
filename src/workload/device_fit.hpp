#pragma once
// Whether a step's memory runs on the device: one rule for `memory`, `simulate`, `whatif`, `lint`,
// the resolution of settings a config leaves to the runtime, and `validate`'s runs that "could not
// have run" (docs/memory.md, "Fits").
//
// A step runs while the worst stage's allocations, the CUDA context and NCCL's buffers fit: when
// cudaMalloc fails, PyTorch's caching allocator frees the blocks it has cached and retries before
// it raises (c10 CUDACachingAllocator, release_cached_blocks on a failed malloc), so the reserve it
// usually keeps above what is allocated (the profile's allocator_reserve_fraction) is not needed to
// run. A step that fits only without that reserve is tight: each retry synchronizes the device and
// frees cached blocks (slower steps), and fragmentation can still fail an allocation.
#include <span>
#include <vector>

namespace meshplan {

// What one stage asks of the device at its peak.
struct StageDemand {
  int stage = 0;
  double allocated_peak_bytes = 0;  // torch.cuda.max_memory_allocated
  double comm_buffer_bytes = 0;     // NCCL's buffers
  double peak_bytes = 0;            // with the CUDA context and the allocator's usual reserve
};

struct DeviceFit {
  int stage = 0;                  // the stage that needs the most
  double needed_bytes = 0;        // its allocated peak + CUDA context + NCCL buffers
  double reserve_peak_bytes = 0;  // the largest stage peak with the allocator's usual reserve
  double device_bytes = 0;
  bool fits() const { return needed_bytes <= device_bytes; }
  bool tight() const { return fits() && reserve_peak_bytes > device_bytes; }
};

DeviceFit device_fit(std::span<const StageDemand> stages, double cuda_context_bytes, double device_bytes);

// The same over stage records of either memory view (the closed form's StageMemory, the timeline's
// StageTimeline): each has its stage, allocated peak, breakdown and peak.
template <class Stages>
DeviceFit device_fit_of(const Stages& stages, double cuda_context_bytes, double device_bytes) {
  std::vector<StageDemand> demands;
  demands.reserve(stages.size());
  for (const auto& s : stages)
    demands.push_back({s.stage, s.allocated_peak_bytes, s.breakdown.comm_buffers, s.peak_bytes});
  return device_fit(demands, cuda_context_bytes, device_bytes);
}

}  // namespace meshplan

#include "workload/device_fit.hpp"

#include <algorithm>

namespace meshplan {

DeviceFit device_fit(std::span<const StageDemand> stages, double cuda_context_bytes, double device_bytes) {
  DeviceFit f;
  f.device_bytes = device_bytes;
  bool first = true;
  for (const StageDemand& s : stages) {
    const double needed = s.allocated_peak_bytes + s.comm_buffer_bytes + cuda_context_bytes;
    if (first || needed > f.needed_bytes) {
      f.needed_bytes = needed;
      f.stage = s.stage;
    }
    f.reserve_peak_bytes = std::max(f.reserve_peak_bytes, s.peak_bytes);
    first = false;
  }
  return f;
}

}  // namespace meshplan

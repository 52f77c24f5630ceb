#pragma once
// The CUDA microbenchmarks inside the calibration plugin (bench_cuda.cpp). Only the plugin
// (plugin_entry.cpp) calls these; the main binary reaches them through backend.hpp.
#include <optional>
#include <string>

#include "calibrate/backend.hpp"
#include "calibrate/measurements.hpp"

namespace meshplan::calibrate::cuda {

// nullopt when a CUDA device is usable; otherwise why not, in words a user can act on.
std::optional<std::string> unavailable_reason();
Measurements run_microbenchmarks(const BenchOptions& options, bool& is_writer);

}  // namespace meshplan::calibrate::cuda

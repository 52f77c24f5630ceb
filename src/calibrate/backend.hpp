#pragma once
// The microbenchmark backend of `meshplan calibrate`. The CUDA code lives in a plugin
// (meshplan-calibrate-cuda.so, plugin_abi.hpp) that these functions dlopen() on first use, so the
// meshplan binary itself links no CUDA library and starts in milliseconds on any machine.
#include <functional>
#include <optional>
#include <string>

#include "calibrate/measurements.hpp"

namespace meshplan::calibrate {

struct BenchOptions {
  bool quick = false;                       // --quick: < 3 minutes on one GPU
  std::function<void(const std::string&)> progress;  // one line per step (the CLI: stderr)
};

// nullopt when this machine can run the microbenchmarks; otherwise one line saying why not and
// what to do (no CUDA backend in this build, no NVIDIA driver or GPU, the plugin or the CUDA
// runtime libraries missing, a driver too old).
std::optional<std::string> backend_unavailable_reason();

// Runs every microbenchmark this machine supports. In a multi-process launch (torchrun/srun
// variables set) every rank takes part in the collectives and only rank 0's return value is
// complete; `is_writer` tells the caller whether to write the file.
Measurements run_microbenchmarks(const BenchOptions& options, bool& is_writer);

// Whether this build produced the CUDA plugin (meson option `cuda` and nvcc found).
bool backend_built_with_cuda();

// Where the plugin is looked for: $MESHPLAN_CALIBRATE_PLUGIN, else next to the running binary.
std::string backend_plugin_path();

}  // namespace meshplan::calibrate

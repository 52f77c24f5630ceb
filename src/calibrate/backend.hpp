#pragma once
// The microbenchmark backend of `meshplan calibrate`. Two implementations, chosen by the meson
// option `cuda`: bench_cuda.cpp (cuBLASLt, CUDA kernels, NCCL through dlopen) and
// backend_none.cpp (a build without CUDA, which can only say so).
#include <functional>
#include <optional>
#include <string>

#include "calibrate/measurements.hpp"

namespace meshplan::calibrate {

struct BenchOptions {
  bool quick = false;                       // --quick: < 3 minutes on one GPU
  std::function<void(const std::string&)> progress;  // one line per step (the CLI: stderr)
};

// nullopt when this build can run the microbenchmarks here; otherwise one line saying why not
// (no CUDA in this build, no device, driver too old).
std::optional<std::string> backend_unavailable_reason();

// Runs every microbenchmark this machine supports. In a multi-process launch (torchrun/srun
// variables set) every rank takes part in the collectives and only rank 0's return value is
// complete; `is_writer` tells the caller whether to write the file.
Measurements run_microbenchmarks(const BenchOptions& options, bool& is_writer);

// Whether this binary was built with the CUDA backend.
bool backend_built_with_cuda();

}  // namespace meshplan::calibrate

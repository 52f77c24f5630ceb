// The backend of a build without CUDA (meson -Dcuda=disabled, or nvcc not found): fitting works,
// measuring cannot.
#include <stdexcept>

#include "calibrate/backend.hpp"

namespace meshplan::calibrate {

std::optional<std::string> backend_unavailable_reason() {
  return std::string("this meshplan was built without CUDA (meson option cuda disabled or nvcc not found)");
}

Measurements run_microbenchmarks(const BenchOptions&, bool&) {
  throw std::runtime_error(*backend_unavailable_reason());
}

bool backend_built_with_cuda() { return false; }

}  // namespace meshplan::calibrate

// The calibration plugin's C entry point: wraps cuda_bench.hpp in plugin_abi.hpp's interface.
// No exception crosses it; errors come back as text.
#include <cstdlib>
#include <cstring>
#include <exception>
#include <nlohmann/json.hpp>
#include <string>

#include "calibrate/cuda_bench.hpp"
#include "calibrate/plugin_abi.hpp"

namespace {

char* copy_text(const std::string& s) {
  char* p = static_cast<char*>(std::malloc(s.size() + 1));
  if (p != nullptr) std::memcpy(p, s.c_str(), s.size() + 1);
  return p;
}

int unavailable_reason(char** reason) {
  try {
    const auto r = meshplan::calibrate::cuda::unavailable_reason();
    if (!r) return 0;
    *reason = copy_text(*r);
  } catch (const std::exception& e) {
    *reason = copy_text(e.what());
  }
  return 1;
}

int run(int quick, MeshplanCalibrateProgress progress, void* context, int* is_writer, char** text) {
  try {
    meshplan::calibrate::BenchOptions options;
    options.quick = quick != 0;
    if (progress != nullptr)
      options.progress = [progress, context](const std::string& line) { progress(line.c_str(), context); };
    bool writer = false;
    const meshplan::calibrate::Measurements m = meshplan::calibrate::cuda::run_microbenchmarks(options, writer);
    *is_writer = writer ? 1 : 0;
    *text = copy_text(meshplan::calibrate::to_json(m).dump());
    return 0;
  } catch (const std::exception& e) {
    *text = copy_text(e.what());
  } catch (...) {
    *text = copy_text("unknown error in the CUDA calibration plugin");
  }
  return 1;
}

void free_text(char* text) { std::free(text); }

constexpr MeshplanCalibratePlugin kPlugin{kMeshplanCalibrateAbiVersion, &unavailable_reason, &run, &free_text};

}  // namespace

extern "C" __attribute__((visibility("default"))) const MeshplanCalibratePlugin* meshplan_calibrate_plugin() {
  return &kPlugin;
}

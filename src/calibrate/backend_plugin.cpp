// Loads the CUDA calibration plugin (plugin_abi.hpp) on first use. The NVIDIA driver is checked
// before the plugin: without libcuda.so.1 the CUDA runtime only says "CUDA driver version is
// insufficient", which reads as a version problem on a machine that has no GPU at all.
#include "calibrate/backend.hpp"

#include <dlfcn.h>
#include <unistd.h>

#include <array>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <system_error>

#include "calibrate/plugin_abi.hpp"
#include "calibrate/plugin_config.hpp"

namespace meshplan::calibrate {
namespace {

std::string dl_error() {
  const char* e = ::dlerror();
  return e != nullptr ? e : "unknown dlopen error";
}

std::filesystem::path running_binary_dir() {
  std::array<char, 4096> buf{};
  const ssize_t n = ::readlink("/proc/self/exe", buf.data(), buf.size() - 1);
  if (n <= 0) return {};
  return std::filesystem::path(std::string(buf.data(), static_cast<std::size_t>(n))).parent_path();
}

struct Loaded {
  const MeshplanCalibratePlugin* plugin = nullptr;
  std::string error;  // why there is none
};

// The process keeps the driver and the plugin loaded once it has asked for them.
Loaded load() {
  Loaded l;
  if (!backend_built_with_cuda()) {
    l.error = "this meshplan was built without the CUDA calibration backend (nvcc not found, or meson -Dcuda=disabled)";
    return l;
  }
  if (::dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL) == nullptr) {
    l.error = "no NVIDIA GPU or driver found (libcuda.so.1, the driver library, is not installed: " + dl_error() + ")";
    return l;
  }
  const std::string path = backend_plugin_path();
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) {
    l.error = "the CUDA calibration plugin is not at " + path + " (it is built beside meshplan; MESHPLAN_CALIBRATE_PLUGIN names another)";
    return l;
  }
  void* handle = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    l.error = "the CUDA calibration plugin cannot be loaded (" + dl_error() +
              "); it needs the CUDA runtime, cuBLAS and cuBLASLt libraries it was built with (LD_LIBRARY_PATH)";
    return l;
  }
  const auto entry = reinterpret_cast<MeshplanCalibratePluginEntry>(::dlsym(handle, kMeshplanCalibratePluginSymbol));
  const MeshplanCalibratePlugin* p = entry != nullptr ? entry() : nullptr;
  if (p == nullptr || p->abi_version != kMeshplanCalibrateAbiVersion) {
    l.error = path + " is not a calibration plugin of this meshplan version";
    return l;
  }
  l.plugin = p;
  return l;
}

const Loaded& loaded() {
  static const Loaded l = load();
  return l;
}

struct Text {
  const MeshplanCalibratePlugin* plugin;
  char* text = nullptr;
  ~Text() {
    if (text != nullptr) plugin->free_text(text);
  }
  std::string str() const { return text != nullptr ? text : ""; }
};

}  // namespace

bool backend_built_with_cuda() { return MESHPLAN_CUDA_PLUGIN != 0; }

std::string backend_plugin_path() {
  const char* env = std::getenv("MESHPLAN_CALIBRATE_PLUGIN");
  if (env != nullptr && *env != '\0') return env;
  return (running_binary_dir() / MESHPLAN_CUDA_PLUGIN_FILE).string();
}

std::optional<std::string> backend_unavailable_reason() {
  const Loaded& l = loaded();
  if (l.plugin == nullptr) return l.error;
  Text reason{l.plugin};
  if (l.plugin->unavailable_reason(&reason.text) == 0) return std::nullopt;
  return reason.str();
}

Measurements run_microbenchmarks(const BenchOptions& options, bool& is_writer) {
  if (const auto reason = backend_unavailable_reason()) throw std::runtime_error(*reason);
  const MeshplanCalibratePlugin* p = loaded().plugin;
  auto forward = [](const char* line, void* context) {
    (*static_cast<const std::function<void(const std::string&)>*>(context))(line);
  };
  Text out{p};
  int writer = 0;
  const int rc = p->run(options.quick ? 1 : 0, options.progress ? +forward : nullptr,
                        const_cast<std::function<void(const std::string&)>*>(&options.progress), &writer, &out.text);
  if (rc != 0) throw std::runtime_error(out.str());
  is_writer = writer != 0;
  return measurements_from_json(nlohmann::json::parse(out.str()), "the CUDA calibration plugin's measurements");
}

}  // namespace meshplan::calibrate

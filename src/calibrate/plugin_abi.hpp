#pragma once
// The C interface between `meshplan calibrate` and the CUDA calibration plugin
// (meshplan-calibrate-cuda.so, built from bench_cuda.cpp and kernels.cu). The main binary links
// no CUDA library: it dlopen()s the plugin only when it measures, so every other command starts
// without loading cuBLAS and runs where CUDA is not installed. Plain C types only: measurements
// cross as the JSON text of the measurements file (measurements.hpp), strings as malloc'd
// buffers the plugin frees.
extern "C" {

// Bumped whenever a member below changes meaning; the loader refuses any other version.
inline constexpr int kMeshplanCalibrateAbiVersion = 1;

using MeshplanCalibrateProgress = void (*)(const char* line, void* context);

struct MeshplanCalibratePlugin {
  int abi_version;
  // 0 when this machine can run the microbenchmarks; otherwise 1 and *reason = why not.
  int (*unavailable_reason)(char** reason);
  // 0 and *text = the measurements JSON, or 1 and *text = the error. *is_writer: whether this
  // rank writes the file (rank 0 of a torchrun/srun launch, or a single process).
  int (*run)(int quick, MeshplanCalibrateProgress progress, void* context, int* is_writer, char** text);
  void (*free_text)(char* text);
};

// The plugin's one exported symbol.
using MeshplanCalibratePluginEntry = const MeshplanCalibratePlugin* (*)();
inline constexpr const char* kMeshplanCalibratePluginSymbol = "meshplan_calibrate_plugin";
}

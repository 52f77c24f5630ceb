#pragma once
// Raw microbenchmark results of `meshplan calibrate` (one JSON file per run) as value types.
// Schema: docs/calibration.md. Every time is a median over repeats, in seconds; every size is
// in bytes; shapes use the cost model's own types so the fit can ask the model what it predicts.
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "spec/dtype.hpp"
#include "workload/collective_kind.hpp"
#include "workload/kernel_shapes.hpp"

namespace meshplan::calibrate {

inline constexpr int kMeasurementsSchemaVersion = 1;

// What the numbers were measured on. Strings are as the driver / libraries report them; an
// empty string means "not available" (e.g. nccl_version when libnccl.so.2 was not found).
struct DeviceInfo {
  std::string name;                  // cudaDeviceProp::name, "NVIDIA H200"
  std::string compute_capability;    // "9.0"
  int sm_count = 0;
  double memory_bytes = 0;           // cudaDeviceProp::totalGlobalMem
  double l2_bytes = 0;
  double sm_clock_mhz = 0;           // max SM clock the driver reports
  double memory_clock_mhz = 0;
  std::string driver_version;        // cudaDriverGetVersion, "13.0"
  std::string cuda_runtime_version;  // cudaRuntimeGetVersion
  std::string cublas_version;
  std::string nccl_version;
  int gpus_per_node = 1;             // local GPUs the collectives used
  int nodes = 1;
  int world_size = 1;
};

struct GemmSample {
  Dtype dtype = Dtype::bf16;
  GemmShape shape;
  double seconds = 0;                // median kernel time, L2 flushed before each run
  std::string label;                 // "grid" or "llama3.1-8b tp2 mlp_up fwd", ...
};

// Causal/non-causal attention of `batch` x `heads` x seq_len^2 x head_dim. `fused` = one fused
// kernel (cuDNN / FlashAttention); false = the batched-GEMM + softmax proxy, labelled by `kernel`.
struct AttentionSample {
  std::string kernel;                // "bgemm-softmax-proxy", "cudnn-sdpa", ...
  bool fused = false;
  std::string pass = "fwd+bwd";      // "fwd+bwd" or "fwd"
  Dtype dtype = Dtype::bf16;
  AttentionShape shape;              // seq_q == seq_kv
  double seconds = 0;                // the whole pass (fwd+bwd: both)
};

// A kernel that streams `bytes` through HBM: "copy" (device-to-device memcpy, bytes = read +
// written), "triad" (a = b + s*c, 3 arrays), "elementwise" (the small kernels timed back to back
// to fit the launch overhead; seconds = per kernel).
struct StreamSample {
  std::string kernel;
  double bytes = 0;
  double seconds = 0;
};

struct HostCopySample {
  std::string direction;             // "h2d" or "d2h" (pinned host memory)
  double bytes = 0;
  double seconds = 0;
};

// One NCCL call; `bytes` is the nccl-tests size (all-reduce: the per-rank buffer; all-gather and
// reduce-scatter: the total; all-to-all: the per-rank send buffer; send_recv: the message).
struct CollectiveSample {
  CollectiveOp op = CollectiveOp::all_reduce;
  std::string scope;                 // "intra_node" or "inter_node"
  int ranks = 0;
  int nodes = 1;
  double bytes = 0;
  double seconds = 0;
};

// One GEMM timed alone and while an all-reduce of `comm_bytes` runs on another stream.
struct InterferenceSample {
  Dtype dtype = Dtype::bf16;
  GemmShape shape;
  double alone_seconds = 0;
  double with_comm_seconds = 0;
  CollectiveOp comm_op = CollectiveOp::all_reduce;
  double comm_bytes = 0;
  int comm_ranks = 0;
};

struct Measurements {
  int schema_version = kMeasurementsSchemaVersion;
  std::string generator;             // the command that produced the file
  std::string created_utc;           // ISO 8601
  std::string host;
  std::string mode;                  // "quick", "full" or "model" (generated from known parameters)
  DeviceInfo device;
  std::vector<GemmSample> gemm;
  std::vector<AttentionSample> attention;
  std::vector<StreamSample> hbm;     // kernel "copy" / "triad"
  std::vector<StreamSample> launch;  // kernel "elementwise"
  std::vector<HostCopySample> host_copy;
  std::vector<CollectiveSample> collectives;
  std::vector<InterferenceSample> interference;
  std::vector<std::string> notes;    // what was skipped and why
};

nlohmann::json to_json(const Measurements& m);
// Strict: unknown keys, wrong types and non-positive times are InputError(file, json.path, why).
Measurements measurements_from_json(const nlohmann::json& j, const std::string& file);
Measurements read_measurements(const std::string& path);
void write_measurements(const Measurements& m, const std::string& path);

}  // namespace meshplan::calibrate

#pragma once
// Measurements -> the parameters of the cost models (docs/calibration.md "What is fitted"):
// GEMM and attention efficiency tables, HBM efficiency, launch overhead, host link bandwidths,
// the comm/compute interference factor, and latency + bandwidth per collective and scope.
// Pure functions of (measurements, base profile); the TOML side is profile_writer.hpp.
#include <optional>
#include <string>
#include <vector>

#include "calibrate/fit_least_squares.hpp"
#include "calibrate/measurements.hpp"
#include "spec/cluster_spec.hpp"

namespace meshplan::calibrate {

// How well a fitted value reproduces the samples it came from (relative errors).
struct Residual {
  double rms = 0;
  double max = 0;
  int samples = 0;
};

// A GEMM efficiency curve in the compute model's own coordinates: x = cube root of the padded
// (tile-rounded) volume, y = achieved FLOP/s on that padded volume / dense peak, so that
// gemm_efficiency() reproduces each measured shape. Non-decreasing in x (isotonic fit).
struct GemmCurveFit {
  GemmCurve curve;
  Residual residual;  // gemm_efficiency(fitted profile) vs measured efficiency, per sample
};

struct AttentionCurveFit {
  AttentionCurve curve;  // tflops as achieved FLOP/s, counted like compute_cost's attention_flops
  bool fused = false;    // false: the batched-GEMM + softmax proxy
  Residual residual;
};

struct CollectiveFit {
  CollectiveOp op = CollectiveOp::all_reduce;
  std::string scope;     // "intra_node" / "inter_node"
  int ranks = 0;
  int nodes = 1;
  double min_bytes = 0, max_bytes = 0;
  LineFit line;          // seconds = latency + nccl-tests bytes / algbw
  double bus_bandwidth_bytes_per_s = 0;  // algbw x nccl-tests busbw factor
};

struct ProfileFit {
  std::string measurements_file;
  std::string generator, created_utc, mode;  // of the measurements, for the provenance ref
  DeviceInfo device;
  std::vector<GemmCurveFit> gemm;
  std::vector<AttentionCurveFit> attention;
  std::optional<double> hbm_efficiency;         // copy bandwidth / spec peak
  std::optional<LineFit> hbm_copy, hbm_triad;
  std::optional<double> kernel_launch_seconds;
  std::optional<LineFit> launch_line;
  std::optional<double> host_h2d_bytes_per_s, host_d2h_bytes_per_s;
  std::optional<LineFit> h2d_line, d2h_line;
  std::optional<double> comm_interference;      // compute slowdown fraction f: t = t_alone (1+f)
  Residual interference_spread;                 // of the per-sample factors around the median
  std::vector<CollectiveFit> collectives;
  std::vector<std::string> warnings;            // values clamped, series too small to fit, ...
};

// Throws InputError when a series cannot be fitted at all (a dtype without a peak in the base,
// a single-size collective series, ...) only if nothing else can be; otherwise such series
// become warnings and the base value stays.
ProfileFit fit_profile(const Measurements& m, const ClusterSpec& base, const std::string& measurements_file);

// Human-readable residual report, one line per fitted quantity (the CLI prints it).
std::vector<std::string> residual_report(const ProfileFit& f);

// Measured GEMM efficiency (achieved / dense peak of the dtype in `c`).
double measured_gemm_efficiency(const ClusterSpec& c, const GemmSample& s);

}  // namespace meshplan::calibrate

#pragma once
// cuBLAS's stream-K threshold (gpu.gemm_stream_k_min_saving) fitted to GEMMs timed by shape. The
// model prices a GEMM's whole-tile waves and a stream-K schedule and takes stream-K only when it
// saves more than this fraction of the waves' time (docs/compute.md, "GEMM time from the shape").
// The threshold only decides which of the two schedules prices a GEMM, so the model's error on a
// series is a step function of it: the fit is the middle of the interval with the least squared log
// error over the GEMMs it decides (the criterion of every whole-run fit, docs/validation.md). It is
// declared fitted in every profile, and tests/regen_fits.sh writes it there.
#include <string>
#include <utility>
#include <vector>

#include "spec/cluster_spec.hpp"
#include "workload/kernel_shapes.hpp"

namespace meshplan::calibrate {

// One bf16 GEMM timed alone (tests/cost/measured_h200_shapes.csv's rows).
struct GemmShapePoint {
  std::string series, label;
  GemmShape shape;
  double seconds = 0;
  int line = 0;  // in the series file
};

// The file: CSV with the header series,label,dtype,m,n,k,groups,flops,seconds (seconds per kernel),
// '#' lines anywhere. Keeps the bf16 single-group rows of the named series; errors name the file,
// the line and the column.
std::vector<GemmShapePoint> read_gemm_shapes(const std::string& path, const std::vector<std::string>& series);

// Kernels this long or longer ran back to back at the power limit, shorter ones at the burst clock
// (the measuring script replays 20 calls in a CUDA graph; docs/compute.md).
constexpr double kSustainedKernelSeconds = 100e-6;

struct StreamKPoint {
  GemmShapePoint point;
  double whole_tiles_seconds = 0;  // the model's time without stream-K (just above `saving`)
  double stream_k_seconds = 0;     // ... and with it (just below)
  double saving = 0;               // the fraction of the waves' time stream-K saves: it runs above this
  bool measured_stream_k = false;  // the measured time is nearer the stream-K one (in log): which ran
};

struct StreamKFit {
  double min_saving = 0;
  double lo = 0, hi = 0;          // every value in (lo, hi) prices the points alike
  double squared_log_error = 0;    // summed over the points at min_saving
  int points_read = 0;
  int misclassified = 0;           // points priced with the schedule their time is farther from
  std::vector<StreamKPoint> points;  // those whose schedule the threshold sets, in file order
};

// Fits on `points` priced with `gpu` (its other constants as shipped), within `bounds`.
StreamKFit fit_stream_k_min_saving(const std::vector<GemmShapePoint>& points, const ClusterSpec& gpu,
                                   std::pair<double, double> bounds);

}  // namespace meshplan::calibrate

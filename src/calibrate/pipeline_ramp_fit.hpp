#pragma once
// The pipeline ramp (NCCL table [pipeline_ramp]) fitted to measured nccl-tests points. The ramp is
// not an NCCL constant: it is how far below NCCL's own latency + bytes / bandwidth model the
// measured bus bandwidth of mid-size messages sits (docs/collectives.md "Pipeline ramp"). Its two
// values are therefore fitted, by this, on a committed series (tests/regen_fits.sh), within the
// bounds the table's `fitted` sources declare.
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "cost/collective_cost.hpp"
#include "spec/cluster_spec.hpp"
#include "spec/nccl_table.hpp"
#include "workload/collective_kind.hpp"

namespace meshplan::calibrate {

// One published nccl-tests figure: the busbw of `op` at `bytes` over nodes x gpus_per_node ranks.
struct NcclTestsPoint {
  std::string cluster;  // hardware profile name
  CollectiveOp op = CollectiveOp::all_reduce;
  int nodes = 1;
  int gpus_per_node = 1;
  LaunchMode launch = LaunchMode::one_process_per_gpu;
  bool amd_host = false;
  double bytes = 0;
  double busbw_bytes_per_s = 0;
  int line = 0;  // in the series file
};

// A series file: CSV with the header
//   cluster,op,nodes,gpus_per_node,launch,host_cpu,bytes,busbw_gbps
// launch `single_process` (nccl-tests -g N) or `process_per_gpu`, host_cpu `amd` or `intel`, busbw
// in GB/s (1e9 B/s). Lines starting with '#' say where the figures come from. Errors name the file,
// the line and the column.
std::vector<NcclTestsPoint> read_nccl_tests_series(const std::string& path);

struct RampResidual {
  NcclTestsPoint point;
  double predicted_busbw_bytes_per_s = 0;
  bool used = false;  // at or above the fit's minimum size
};

struct RampFit {
  double small_message_efficiency = 1;
  double half_ramp_bytes = 0;
  double max_abs_relative_error = 0;  // over the points used: what the fit minimises
  int points_used = 0;
  bool at_bound = false;              // a value sits on its bound: the series does not pin it
  std::vector<RampResidual> residuals;
};

// The bus bandwidth the collective model predicts for `p` on `cluster` with the constants of `table`.
double predicted_busbw(const NcclTestsPoint& p, const ClusterSpec& cluster, const NcclTable& table);

// Below `min_bytes` an nccl-tests time is the host's launch floor or NCCL's fixed latency, which the
// ramp does not move; 1 MiB on the series shipped.
constexpr double kRampFitMinBytes = 1024.0 * 1024.0;

// Minimises the largest relative busbw error over the points from `min_bytes` up (a minimax fit:
// the series is one run, so no point may be traded against the rest), searching a grid over the
// bounds of the table's fitted sources for the two keys and narrowing it around the best cell.
// `clusters` holds the profile of every point's `cluster`; `base` gives every other constant.
RampFit fit_pipeline_ramp(const std::vector<NcclTestsPoint>& points, const std::map<std::string, ClusterSpec>& clusters,
                          const NcclTable& base, double min_bytes = kRampFitMinBytes);

// The bounds the table declares for a fitted key ("pipeline_ramp.half_ramp_bytes"); throws
// InputError naming the table when the key is not fitted.
std::pair<double, double> fitted_bounds_of(const NcclTable& t, const std::string& key);

}  // namespace meshplan::calibrate

#pragma once
// A fabric's transport latency (docs/collectives.md, "Transport latency") fitted to measured
// nccl-tests points across nodes: what the network's transport adds to each hop of an NCCL message
// beyond NCCL's own InfiniBand latencies (AWS EFA: SRD and the aws-ofi-nccl proxy). No source gives
// it, so the profile declares it fitted and tests/regen_fits.sh fits it on a committed series.
#include <map>
#include <string>
#include <vector>

#include "calibrate/pipeline_ramp_fit.hpp"
#include "spec/cluster_spec.hpp"
#include "spec/nccl_table.hpp"

namespace meshplan::calibrate {

struct TransportLatencyFit {
  std::string cluster;                     // the profile whose fabric.transport_latency is fitted
  double transport_latency_seconds = 0;
  double max_abs_relative_error = 0;       // over the points used: what the fit minimises
  int points_used = 0;
  bool at_bound = false;                   // on a bound: the series does not pin it
  std::vector<RampResidual> residuals;     // every point, at the fitted value
};

// Minimises the largest relative busbw error over the series' points that cross nodes, from
// `min_bytes` up (one run, as the ramp's series: no point is traded against the rest), over the
// bounds of the profile's fitted source. Every such point must name the same profile, and that
// profile must declare fabric.transport_latency fitted; the NCCL table is `table`'s as shipped.
TransportLatencyFit fit_transport_latency(const std::vector<NcclTestsPoint>& points,
                                          const std::map<std::string, ClusterSpec>& clusters, const NcclTable& table,
                                          double min_bytes = kRampFitMinBytes);

}  // namespace meshplan::calibrate

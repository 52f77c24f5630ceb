#include "calibrate/transport_latency_fit.hpp"

#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "spec/error.hpp"

namespace meshplan::calibrate {

namespace {

constexpr const char* kKey = "fabric.transport_latency_seconds";

// The bounds (in the unit the profile writes the key in, microseconds) of the fitted source.
std::pair<double, double> bounds_of(const ClusterSpec& c) {
  const auto tag = c.sources.find(kKey);
  const auto b = tag == c.sources.end() ? c.fitted_bounds.end() : c.fitted_bounds.find(tag->second);
  if (b == c.fitted_bounds.end())
    throw InputError(c.source_file, "fabric.transport_latency_us",
                     "is not declared fitted (a [sources] tag of kind \"fitted\" with bounds and fit)");
  return b->second;
}

}  // namespace

TransportLatencyFit fit_transport_latency(const std::vector<NcclTestsPoint>& points,
                                          const std::map<std::string, ClusterSpec>& clusters, const NcclTable& table,
                                          double min_bytes) {
  TransportLatencyFit fit;
  std::vector<const NcclTestsPoint*> used;
  for (const NcclTestsPoint& p : points) {
    if (p.nodes <= 1 || p.bytes < min_bytes) continue;
    if (!fit.cluster.empty() && p.cluster != fit.cluster)
      throw InputError("", "--transport-latency",
                       fmt::format("the series crosses nodes on '{}' and '{}': one profile's transport per fit",
                                   fit.cluster, p.cluster));
    fit.cluster = p.cluster;
    used.push_back(&p);
  }
  if (used.size() < 2)
    throw InputError("", "--transport-latency",
                     fmt::format("{} point(s) across nodes from {} bytes up: the fit needs at least two", used.size(),
                                 min_bytes));
  const auto c = clusters.find(fit.cluster);
  if (c == clusters.end()) throw InputError("", "cluster", fmt::format("no profile '{}' given for the fit", fit.cluster));
  ClusterSpec cluster = c->second;
  const auto [lo_us, hi_us] = bounds_of(cluster);
  auto worst_at = [&](double us) {
    cluster.fabric.transport_latency_seconds = us * 1e-6;
    double worst = 0;
    for (const NcclTestsPoint* p : used)
      worst = std::max(worst, std::abs(predicted_busbw(*p, cluster, table) / p->busbw_bytes_per_s - 1));
    return worst;
  };
  // A grid over the bounds, then grids over the cells around the best value, narrowing each round
  // until far below the microsecond the profile keeps. Strictly better only: ties keep the first.
  double lo = lo_us, hi = hi_us, best = lo_us, best_worst = std::numeric_limits<double>::infinity();
  int steps = 500;
  for (int round = 0; round < 30; ++round, steps = 24) {
    const double d = (hi - lo) / steps;
    for (int i = 0; i <= steps; ++i)
      if (const double w = worst_at(lo + i * d); w < best_worst) {
        best = lo + i * d;
        best_worst = w;
      }
    lo = std::max(lo_us, best - 6 * d);
    hi = std::min(hi_us, best + 6 * d);
  }
  fit.transport_latency_seconds = best * 1e-6;
  fit.max_abs_relative_error = best_worst;
  fit.points_used = static_cast<int>(used.size());
  const auto near = [](double v, double bound) { return std::abs(v - bound) <= 1e-9 * std::max(1.0, std::abs(bound)); };
  fit.at_bound = near(best, lo_us) || near(best, hi_us);
  for (const NcclTestsPoint& p : points) {
    ClusterSpec pc = clusters.at(p.cluster);
    if (p.cluster == fit.cluster) pc.fabric.transport_latency_seconds = fit.transport_latency_seconds;
    fit.residuals.push_back({p, predicted_busbw(p, pc, table), p.nodes > 1 && p.bytes >= min_bytes});
  }
  return fit;
}

}  // namespace meshplan::calibrate

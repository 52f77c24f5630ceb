#include "calibrate/pipeline_ramp_fit.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <string_view>

#include <fmt/format.h>

#include "calibrate/csv_row.hpp"
#include "spec/error.hpp"
#include "spec/input_file.hpp"

namespace meshplan::calibrate {

namespace {

constexpr std::string_view kHeader = "cluster,op,nodes,gpus_per_node,launch,host_cpu,bytes,busbw_gbps";

NcclTestsPoint read_point(const std::string& file, int line_no, const std::string& line) {
  const RowReader r{file, line_no};
  const std::vector<std::string> f = split_commas(line);
  if (f.size() != 8) r.fail("row", fmt::format("has {} columns, the header {} ({})", f.size(), 8, kHeader));
  NcclTestsPoint p;
  p.line = line_no;
  p.cluster = f[0];
  if (p.cluster.empty()) r.fail("cluster", "empty (a hardware profile name)");
  if (!parse_collective_op(f[1], p.op) || std::string(to_string(p.op)) != f[1])
    r.fail("op", fmt::format("unknown collective '{}'", f[1]));
  p.nodes = r.count(f[2], "nodes", 1 << 20);
  p.gpus_per_node = r.count(f[3], "gpus_per_node", 1024);
  if (f[4] == "single_process") p.launch = LaunchMode::single_process_multi_gpu;
  else if (f[4] == "process_per_gpu") p.launch = LaunchMode::one_process_per_gpu;
  else r.fail("launch", fmt::format("'{}' is not single_process (nccl-tests -g N) or process_per_gpu", f[4]));
  if (f[5] == "amd") p.amd_host = true;
  else if (f[5] != "intel") r.fail("host_cpu", fmt::format("'{}' is not amd or intel", f[5]));
  p.bytes = r.number(f[6], "bytes", 0, 1e15);
  p.busbw_bytes_per_s = r.number(f[7], "busbw_gbps", 0, 1e6) * 1e9;
  return p;
}


struct Evaluated {
  double efficiency = 0, log_half = 0, worst = std::numeric_limits<double>::infinity();
};

}  // namespace

double predicted_busbw(const NcclTestsPoint& p, const ClusterSpec& c, const NcclTable& table) {
  CollectiveOptions o;
  o.nccl = &table;
  o.launch_mode = p.launch;
  o.amd_host = p.amd_host;
  const CollectiveEstimate e =
      estimate_collective(c, p.op, p.bytes, GroupPlacement{p.nodes * p.gpus_per_node, p.gpus_per_node}, o);
  return e.bus_bytes / e.seconds;
}

std::vector<NcclTestsPoint> read_nccl_tests_series(const std::string& path) {
  InputFile in(path, InputKind::nccl_tests_series, "--nccl-tests");
  std::vector<NcclTestsPoint> out;
  const bool header = for_each_series_row(in, kHeader, [&](int line_no, const std::string& line) {
    out.push_back(read_point(path, line_no, line));
  });
  if (out.empty()) throw InputError(path, "--nccl-tests", header ? "no points after the header" : "empty: no header row");
  return out;
}

std::pair<double, double> fitted_bounds_of(const NcclTable& t, const std::string& key) {
  const auto tag = t.sources.find(key);
  const auto b = tag == t.sources.end() ? t.fitted_bounds.end() : t.fitted_bounds.find(tag->second);
  if (b == t.fitted_bounds.end())
    throw InputError(t.source_file, key, "is not declared fitted (a [sources] tag of kind \"fitted\" with bounds and fit)");
  return b->second;
}

RampFit fit_pipeline_ramp(const std::vector<NcclTestsPoint>& points, const std::map<std::string, ClusterSpec>& clusters,
                          const NcclTable& base, double min_bytes) {
  std::vector<std::pair<const NcclTestsPoint*, const ClusterSpec*>> used;
  for (const NcclTestsPoint& p : points) {
    const auto c = clusters.find(p.cluster);
    if (c == clusters.end()) throw InputError("", "cluster", fmt::format("no profile '{}' given for the fit", p.cluster));
    if (p.bytes >= min_bytes) used.emplace_back(&p, &c->second);
  }
  if (used.size() < 2)
    throw InputError("", "--nccl-tests", fmt::format("{} point(s) from {} bytes up: the ramp's two values need at least two",
                                                     used.size(), min_bytes));
  const auto [eff_lo, eff_hi] = fitted_bounds_of(base, "pipeline_ramp.small_message_efficiency");
  const auto [half_lo, half_hi] = fitted_bounds_of(base, "pipeline_ramp.half_ramp_bytes");
  NcclTable table = base;
  auto worst_at = [&](double eff, double log_half) {
    table.pipeline_small_message_efficiency = eff;
    table.pipeline_half_ramp_bytes = std::exp(log_half);
    double worst = 0;
    for (const auto& [p, c] : used)
      worst = std::max(worst, std::abs(predicted_busbw(*p, *c, table) / p->busbw_bytes_per_s - 1));
    return worst;
  };
  // A fine grid over the box (the largest error is only piecewise smooth, with a minimum in a
  // narrow valley between the points it trades), then a grid over the 12 x 12 cells around the best
  // point, halving the window each round (a gentle narrowing follows a diagonal valley), until the
  // cells are far below the precision the table keeps.
  double e0 = eff_lo, e1 = eff_hi, h0 = std::log(half_lo), h1 = std::log(half_hi);
  Evaluated best;
  int steps = 192;
  for (int round = 0; round < 40; ++round, steps = 24) {
    const double de = (e1 - e0) / steps, dh = (h1 - h0) / steps;
    for (int i = 0; i <= steps; ++i)
      for (int k = 0; k <= steps; ++k) {
        const double e = e0 + i * de, h = h0 + k * dh;
        // Strictly better only: ties keep the first grid point, so the result is deterministic.
        if (const double w = worst_at(e, h); w < best.worst) best = {e, h, w};
      }
    constexpr double window = 6;  // cells on each side of the best point
    e0 = std::max(eff_lo, best.efficiency - window * de);
    e1 = std::min(eff_hi, best.efficiency + window * de);
    h0 = std::max(std::log(half_lo), best.log_half - window * dh);
    h1 = std::min(std::log(half_hi), best.log_half + window * dh);
  }
  RampFit fit;
  fit.small_message_efficiency = best.efficiency;
  fit.half_ramp_bytes = std::exp(best.log_half);
  fit.max_abs_relative_error = best.worst;
  fit.points_used = static_cast<int>(used.size());
  const auto near = [](double v, double bound) { return std::abs(v - bound) <= 1e-9 * std::max(1.0, std::abs(bound)); };
  fit.at_bound = near(fit.small_message_efficiency, eff_lo) || near(fit.small_message_efficiency, eff_hi) ||
                 near(fit.half_ramp_bytes, half_lo) || near(fit.half_ramp_bytes, half_hi);
  table.pipeline_small_message_efficiency = fit.small_message_efficiency;
  table.pipeline_half_ramp_bytes = fit.half_ramp_bytes;
  for (const NcclTestsPoint& p : points)
    fit.residuals.push_back({p, predicted_busbw(p, clusters.at(p.cluster), table), p.bytes >= min_bytes});
  return fit;
}

}  // namespace meshplan::calibrate

#include "calibrate/stream_k_fit.hpp"

#include <algorithm>
#include <cmath>
#include <string_view>

#include <fmt/format.h>

#include "calibrate/csv_row.hpp"
#include "cost/compute_cost.hpp"
#include "spec/error.hpp"
#include "spec/input_file.hpp"

namespace meshplan::calibrate {

namespace {

constexpr std::string_view kHeader = "series,label,dtype,m,n,k,groups,flops,seconds";

// The model's price of a point with the threshold at `min_saving`, at the clock its measured length
// ran: the profile copied once at each clock, its threshold set per call.
class Pricer {
public:
  explicit Pricer(const ClusterSpec& gpu) : sustained_(gpu), burst_(gpu) { burst_.gpu.sustained_clock_fraction = 1; }
  KernelEstimate operator()(const GemmShapePoint& p, double min_saving) {
    ClusterSpec& c = p.seconds < kSustainedKernelSeconds ? burst_ : sustained_;
    c.gpu.gemm_stream_k_min_saving = min_saving;
    return gemm_time(c, p.shape, Dtype::bf16);
  }

private:
  ClusterSpec sustained_, burst_;
};

// The threshold below which the model takes stream-K for p: where its choice flips (bisection on
// the choice itself, so it is the model's own comparison, whatever else the schedule weighs).
double flip_point(Pricer& priced, const GemmShapePoint& p) {
  double below = -1, above = 1;  // stream-K at `below`, whole tiles at `above`
  for (int i = 0; i < 80 && above - below > 1e-15; ++i) {
    const double mid = 0.5 * (below + above);
    (priced(p, mid).gemm_stream_k ? below : above) = mid;
  }
  return above;
}

}  // namespace

std::vector<GemmShapePoint> read_gemm_shapes(const std::string& path, const std::vector<std::string>& series) {
  InputFile in(path, InputKind::gemm_shapes, "--gemm-shapes");
  std::vector<GemmShapePoint> out;
  const bool header = for_each_series_row(in, kHeader, [&](int line_no, const std::string& line) {
    const RowReader r{path, line_no};
    const std::vector<std::string> f = split_commas(line);
    if (f.size() != 9) r.fail("row", fmt::format("has {} columns, the header 9 ({})", f.size(), kHeader));
    if (std::find(series.begin(), series.end(), f[0]) == series.end() || f[2] != "bf16") return;
    if (r.count(f[6], "groups", 1 << 20) != 1) return;
    GemmShapePoint p;
    p.series = f[0];
    p.label = f[1];
    p.shape = GemmShape{r.count(f[3], "m", 1 << 30), r.count(f[4], "n", 1 << 30), r.count(f[5], "k", 1 << 30), 1};
    p.seconds = r.number(f[8], "seconds", 0, 3600);
    p.line = line_no;
    out.push_back(std::move(p));
  });
  if (out.empty())
    throw InputError(path, "--gemm-shapes",
                     header ? fmt::format("no bf16 GEMM of series {} after the header", fmt::join(series, ", "))
                            : "empty: no header row");
  return out;
}

StreamKFit fit_stream_k_min_saving(const std::vector<GemmShapePoint>& points, const ClusterSpec& gpu,
                                   std::pair<double, double> bounds) {
  StreamKFit fit;
  fit.points_read = static_cast<int>(points.size());
  Pricer priced(gpu);
  for (const GemmShapePoint& p : points) {
    // Where the 128x128 tile beats both, or stream-K is no pick at all, the threshold moves nothing.
    if (!priced(p, -1).gemm_stream_k) continue;
    StreamKPoint s;
    s.point = p;
    s.saving = flip_point(priced, p);
    // Each schedule's price just either side of the flip: the per-tile rate the profile's curve
    // implies is read under the same threshold, so the two are priced as the fit would price them.
    s.stream_k_seconds = priced(p, s.saving - 1e-9).seconds;
    s.whole_tiles_seconds = priced(p, s.saving + 1e-9).seconds;
    if (s.stream_k_seconds == s.whole_tiles_seconds) continue;
    s.measured_stream_k = std::abs(std::log(p.seconds / s.stream_k_seconds)) <
                          std::abs(std::log(p.seconds / s.whole_tiles_seconds));
    fit.points.push_back(std::move(s));
  }
  if (fit.points.empty())
    throw InputError("", "--gemm-shapes", "no GEMM whose schedule the stream-K threshold sets: nothing to fit");
  // The model takes stream-K for a point exactly when the threshold is below its saving, so the
  // error changes at the points' savings: price every point in the middle of each interval
  // between those.
  std::vector<double> cuts{bounds.first, bounds.second};
  for (const StreamKPoint& s : fit.points)
    if (s.saving > bounds.first && s.saving < bounds.second) cuts.push_back(s.saving);
  std::sort(cuts.begin(), cuts.end());
  cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());
  bool first = true;
  for (std::size_t i = 0; i + 1 < cuts.size(); ++i) {
    const double mid = 0.5 * (cuts[i] + cuts[i + 1]);
    double error = 0;
    int wrong = 0;
    for (const StreamKPoint& s : fit.points) {
      const double log_ratio = std::log(priced(s.point, mid).seconds / s.point.seconds);
      error += log_ratio * log_ratio;
      wrong += (mid < s.saving) != s.measured_stream_k ? 1 : 0;
    }
    // The least error; among equals the widest interval, the one the data pin least tightly.
    if (first || error < fit.squared_log_error ||
        (error == fit.squared_log_error && cuts[i + 1] - cuts[i] > fit.hi - fit.lo)) {
      first = false;
      fit.squared_log_error = error;
      fit.misclassified = wrong;
      fit.lo = cuts[i];
      fit.hi = cuts[i + 1];
    }
  }
  fit.min_saving = 0.5 * (fit.lo + fit.hi);
  return fit;
}

}  // namespace meshplan::calibrate

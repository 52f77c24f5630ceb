// Fitting measurements to the cost models' parameters. Every fitted quantity is defined in the
// coordinates the consuming model uses (compute_cost.hpp, collective_cost.hpp), so that feeding
// the fitted profile back through the model reproduces the measurements; residual_report() says
// how closely it does.
#include "calibrate/fit_profile.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <tuple>
#include <utility>

#include "cost/collective_cost.hpp"
#include "cost/compute_cost.hpp"
#include "spec/error.hpp"

namespace meshplan::calibrate {
namespace {

// Samples whose curve coordinate differs by less than this are one point of the table: the
// loader needs strictly increasing x, and repeats of one size are noise around one value.
constexpr double kSameSizeRelative = 0.005;
// A fitted efficiency above 1 by more than this means the base profile's peak is wrong for this
// GPU (clocks above spec, a different SKU); it is clamped to 1 with a warning either way.
constexpr double kPeakSlack = 0.02;
// comm_interference must stay in [0, 1) for the loader; a GEMM more than twice as slow beside
// an all-reduce means the two were serialised, not interfering.
constexpr double kMaxInterference = 0.99;

Residual residual_of(const std::vector<double>& relative_errors) {
  Residual r;
  double sum_sq = 0;
  for (double e : relative_errors) {
    sum_sq += e * e;
    r.max = std::max(r.max, std::abs(e));
  }
  r.samples = static_cast<int>(relative_errors.size());
  r.rms = r.samples > 0 ? std::sqrt(sum_sq / r.samples) : 0.0;
  return r;
}

struct Point {
  double x, y, weight;
};

// Sorts by x, merges near-equal x (geometric-mean x, weighted-mean y), then makes y
// non-decreasing by isotonic regression.
std::vector<Point> monotone_table(std::vector<Point> pts) {
  std::sort(pts.begin(), pts.end(), [](const Point& a, const Point& b) { return a.x < b.x; });
  std::vector<Point> merged;
  double log_x_sum = 0;
  for (const Point& p : pts) {
    if (!merged.empty() && p.x <= merged.back().x * (1.0 + kSameSizeRelative) &&
        p.x >= merged.back().x / (1.0 + kSameSizeRelative)) {
      Point& m = merged.back();
      const double w = m.weight + p.weight;
      log_x_sum += std::log(p.x) * p.weight;
      m.y = (m.y * m.weight + p.y * p.weight) / w;
      m.weight = w;
      m.x = std::exp(log_x_sum / w);
    } else {
      merged.push_back(p);
      log_x_sum = std::log(p.x) * p.weight;
    }
  }
  std::vector<double> y, w;
  for (const Point& p : merged) {
    y.push_back(p.y);
    w.push_back(p.weight);
  }
  const std::vector<double> iso = isotonic_increasing(y, w);
  for (std::size_t i = 0; i < merged.size(); ++i) merged[i].y = iso[i];
  return merged;
}

// The profile with `curve` as its GEMM curve, at the microbenchmark's own clock: calibration loops
// are short runs like the sweeps the curves come from, so the sustained-load fraction is not in them.
ClusterSpec with_gemm_curve(const ClusterSpec& base, const GemmCurve& curve) {
  ClusterSpec c = base;
  c.gpu.sustained_clock_fraction = 1.0;
  auto it = std::find_if(c.gpu.gemm_curves.begin(), c.gpu.gemm_curves.end(),
                         [&](const GemmCurve& g) { return g.dtype == curve.dtype; });
  if (it == c.gpu.gemm_curves.end()) c.gpu.gemm_curves.push_back(curve);
  else *it = curve;
  return c;
}

void fit_gemm(const Measurements& m, const ClusterSpec& base, ProfileFit& out) {
  std::map<Dtype, std::vector<const GemmSample*>> by_dtype;
  for (const GemmSample& s : m.gemm) by_dtype[s.dtype].push_back(&s);
  for (const auto& [dtype, samples] : by_dtype) {
    const std::string name(to_string(dtype));
    if (!(base.peak_flops_per_s(dtype) > 0)) {
      out.warnings.push_back(fmt::format("gemm {}: the base profile has no {} peak; {} samples not fitted",
                                         name, name, samples.size()));
      continue;
    }
    // With an efficiency of 1 everywhere, gemm_efficiency() is exactly the fraction of the padded
    // tile grid that is useful work, so the model's own padding rule is used, not a copy of it.
    GemmCurve flat{dtype, {{1.0, 1.0}, {2.0, 1.0}}, "calibrated"};
    const ClusterSpec flat_spec = with_gemm_curve(base, flat);
    std::vector<Point> pts;
    for (const GemmSample* s : samples) {
      const double useful = gemm_efficiency(flat_spec, s->shape, dtype);
      const double padded_volume = s->shape.flops() / 2.0 / useful;
      pts.push_back({std::cbrt(padded_volume), measured_gemm_efficiency(base, *s) / useful, 1.0});
    }
    const std::vector<Point> table = monotone_table(std::move(pts));
    if (table.size() < 2) {
      out.warnings.push_back(fmt::format("gemm {}: fewer than 2 distinct sizes; curve not fitted", name));
      continue;
    }
    GemmCurveFit fit;
    fit.curve.dtype = dtype;
    fit.curve.source = "calibrated";
    bool clamped = false;
    double worst = 0;
    for (const Point& p : table) {
      worst = std::max(worst, p.y);
      clamped = clamped || p.y > 1.0;
      fit.curve.points.push_back({p.x, std::min(p.y, 1.0)});
    }
    if (worst > 1.0 + kPeakSlack)
      out.warnings.push_back(fmt::format(
          "gemm {}: measured {:.3f} x the base profile's dense peak; clamped to 1 (is the peak right for {}?)",
          name, worst, m.device.name));
    else if (clamped)
      out.warnings.push_back(fmt::format("gemm {}: efficiency {:.4f} clamped to 1", name, worst));
    const ClusterSpec fitted = with_gemm_curve(base, fit.curve);
    std::vector<double> errors;
    for (const GemmSample* s : samples)
      errors.push_back(gemm_efficiency(fitted, s->shape, dtype) / measured_gemm_efficiency(base, *s) - 1.0);
    fit.residual = residual_of(errors);
    out.gemm.push_back(std::move(fit));
  }
}

double attention_pass_flops(const AttentionSample& s) {
  const double fwd = attention_flops(s.shape, Pass::forward);
  return s.pass == "fwd+bwd" ? fwd + attention_flops(s.shape, Pass::backward) : fwd;
}

void fit_attention(const Measurements& m, ProfileFit& out) {
  // One curve per (kernel, pass, head_dim, causal): the keys attention_time() selects on.
  using Key = std::tuple<std::string, std::string, std::int64_t, bool>;
  std::map<Key, std::vector<const AttentionSample*>> groups;
  for (const AttentionSample& s : m.attention) {
    if (s.dtype != Dtype::bf16 && s.dtype != Dtype::fp16) {
      out.warnings.push_back(fmt::format("attention {}: {} samples are not fitted (curves are bf16/fp16 rates)",
                                         s.kernel, to_string(s.dtype)));
      continue;
    }
    groups[{s.kernel, s.pass, s.shape.head_dim, s.shape.causal}].push_back(&s);
  }
  for (auto& [key, samples] : groups) {
    const auto& [kernel, pass, head_dim, causal] = key;
    // bf16 and fp16 share a peak and a kernel; when both were measured keep bf16 (training default).
    const bool has_bf16 = std::any_of(samples.begin(), samples.end(),
                                      [](const AttentionSample* s) { return s->dtype == Dtype::bf16; });
    std::vector<const AttentionSample*> used;
    for (const AttentionSample* s : samples)
      if (!has_bf16 || s->dtype == Dtype::bf16) used.push_back(s);
    std::vector<Point> pts;
    for (const AttentionSample* s : used)
      pts.push_back({static_cast<double>(s->shape.seq_kv), attention_pass_flops(*s) / s->seconds, 1.0});
    const std::vector<Point> table = monotone_table(std::move(pts));
    const std::string label = fmt::format("{} {} hd{} {}", kernel, pass, head_dim, causal ? "causal" : "full");
    if (table.size() < 2) {
      out.warnings.push_back(fmt::format("attention {}: fewer than 2 sequence lengths; not fitted", label));
      continue;
    }
    AttentionCurveFit fit;
    fit.fused = used.front()->fused;
    fit.curve.kernel = kernel;
    fit.curve.pass = pass;
    fit.curve.head_dim = static_cast<int>(head_dim);
    fit.curve.causal = causal;
    fit.curve.source = "calibrated";
    for (const Point& p : table) {
      fit.curve.seq_len.push_back(p.x);
      fit.curve.flops_per_s.push_back(p.y);
    }
    std::vector<double> errors;
    for (const AttentionSample* s : used) {
      const double seq = static_cast<double>(s->shape.seq_kv);
      // The table's value at the merged point this sample belongs to.
      const auto at = std::min_element(table.begin(), table.end(), [&](const Point& a, const Point& b) {
        return std::abs(std::log(a.x / seq)) < std::abs(std::log(b.x / seq));
      });
      errors.push_back(at->y / (attention_pass_flops(*s) / s->seconds) - 1.0);
    }
    fit.residual = residual_of(errors);
    out.attention.push_back(std::move(fit));
  }
}

std::optional<LineFit> fit_series(const std::vector<double>& bytes, const std::vector<double>& seconds,
                                   const std::string& what, ProfileFit& out) {
  if (bytes.empty()) return std::nullopt;
  const auto [lo, hi] = std::minmax_element(bytes.begin(), bytes.end());
  if (bytes.size() < 2 || !(*hi > *lo)) {
    out.warnings.push_back(what + ": fewer than 2 distinct sizes; not fitted");
    return std::nullopt;
  }
  return fit_latency_bandwidth(bytes, seconds);
}

void fit_streams(const Measurements& m, const ClusterSpec& base, ProfileFit& out) {
  auto series = [&](const std::vector<StreamSample>& v, const std::string& kernel) {
    std::vector<double> b, t;
    for (const StreamSample& s : v)
      if (s.kernel == kernel) {
        b.push_back(s.bytes);
        t.push_back(s.seconds);
      }
    return fit_series(b, t, kernel, out);
  };
  for (const StreamSample& s : m.hbm)
    if (s.kernel != "copy" && s.kernel != "triad")
      out.warnings.push_back("hbm: unknown kernel \"" + s.kernel + "\" ignored (copy, triad)");
  out.hbm_copy = series(m.hbm, "copy");
  out.hbm_triad = series(m.hbm, "triad");
  if (out.hbm_copy) {
    // The profile's hbm_efficiency is STREAM copy / spec peak (docs/hardware_profiles.md).
    const double eff = out.hbm_copy->bandwidth_bytes_per_s() / base.gpu.hbm_bandwidth_bytes_per_s;
    if (eff > 1.0)
      out.warnings.push_back(fmt::format("hbm: copy bandwidth is {:.3f} x the base profile's peak; clamped to 1", eff));
    out.hbm_efficiency = std::min(eff, 1.0);
  }
  out.launch_line = series(m.launch, "elementwise");
  if (out.launch_line) {
    if (out.launch_line->latency_resolved) out.kernel_launch_seconds = out.launch_line->latency_seconds;
    else out.warnings.push_back("launch: the intercept is not above zero; kernel_launch kept from the base profile");
  }
  std::vector<double> b[2], t[2];
  for (const HostCopySample& s : m.host_copy) {
    const int i = s.direction == "h2d" ? 0 : 1;
    b[i].push_back(s.bytes);
    t[i].push_back(s.seconds);
  }
  out.h2d_line = fit_series(b[0], t[0], "host h2d", out);
  out.d2h_line = fit_series(b[1], t[1], "host d2h", out);
  if (out.h2d_line) out.host_h2d_bytes_per_s = out.h2d_line->bandwidth_bytes_per_s();
  if (out.d2h_line) out.host_d2h_bytes_per_s = out.d2h_line->bandwidth_bytes_per_s();
}

void fit_interference(const Measurements& m, ProfileFit& out) {
  if (m.interference.empty()) return;
  std::vector<double> factors;
  for (const InterferenceSample& s : m.interference) factors.push_back(s.with_comm_seconds / s.alone_seconds - 1.0);
  const double f = median(factors);
  std::vector<double> spread;
  for (double x : factors) spread.push_back((1.0 + x) / (1.0 + f) - 1.0);
  out.interference_spread = residual_of(spread);
  if (f < 0) out.warnings.push_back(fmt::format("interference: median factor {:.4f} < 0 (noise); set to 0", f));
  if (f > kMaxInterference)
    out.warnings.push_back(fmt::format("interference: median factor {:.3f} clamped to {}", f, kMaxInterference));
  out.comm_interference = std::clamp(f, 0.0, kMaxInterference);
}

void fit_collectives(const Measurements& m, ProfileFit& out) {
  using Key = std::tuple<CollectiveOp, std::string, int, int>;
  std::map<Key, std::pair<std::vector<double>, std::vector<double>>> groups;
  for (const CollectiveSample& s : m.collectives) {
    auto& g = groups[{s.op, s.scope, s.ranks, s.nodes}];
    g.first.push_back(s.bytes);
    g.second.push_back(s.seconds);
  }
  for (const auto& [key, series] : groups) {
    const auto& [op, scope, ranks, nodes] = key;
    const auto line = fit_series(series.first, series.second,
                                 fmt::format("{} {} {} ranks", to_string(op), scope, ranks), out);
    if (!line) continue;
    CollectiveFit f;
    f.op = op;
    f.scope = scope;
    f.ranks = ranks;
    f.nodes = nodes;
    f.min_bytes = *std::min_element(series.first.begin(), series.first.end());
    f.max_bytes = *std::max_element(series.first.begin(), series.first.end());
    f.line = *line;
    f.bus_bandwidth_bytes_per_s = line->bandwidth_bytes_per_s() * bus_bandwidth_factor(op, ranks);
    if (!line->latency_resolved)
      out.warnings.push_back(fmt::format("{} {} {} ranks: latency not resolved (intercept <= 0)",
                                         to_string(op), scope, ranks));
    out.collectives.push_back(f);
  }
}

}  // namespace

double measured_gemm_efficiency(const ClusterSpec& c, const GemmSample& s) {
  return s.shape.flops() / (s.seconds * c.peak_flops_per_s(s.dtype));
}

ProfileFit fit_profile(const Measurements& m, const ClusterSpec& base, const std::string& measurements_file) {
  ProfileFit out;
  out.measurements_file = measurements_file;
  out.generator = m.generator;
  out.created_utc = m.created_utc;
  out.mode = m.mode;
  out.device = m.device;
  fit_gemm(m, base, out);
  fit_attention(m, out);
  fit_streams(m, base, out);
  fit_interference(m, out);
  fit_collectives(m, out);
  const bool anything = !out.gemm.empty() || !out.attention.empty() || out.hbm_efficiency ||
                        out.kernel_launch_seconds || out.host_h2d_bytes_per_s || out.host_d2h_bytes_per_s ||
                        out.comm_interference || !out.collectives.empty();
  if (!anything) throw InputError(measurements_file, "", "no series in the measurements could be fitted");
  return out;
}

std::vector<std::string> residual_report(const ProfileFit& f) {
  std::vector<std::string> lines;
  auto pct = [](double x) { return 100.0 * x; };
  for (const GemmCurveFit& g : f.gemm)
    lines.push_back(fmt::format("gemm {:<5} {:>3} points from {:>4} samples: rms {:5.2f} %, max {:5.2f} % (model vs measured efficiency)",
                                to_string(g.curve.dtype), g.curve.points.size(), g.residual.samples,
                                pct(g.residual.rms), pct(g.residual.max)));
  for (const AttentionCurveFit& a : f.attention)
    lines.push_back(fmt::format("attention {} {} hd{} {}{}: {} points, rms {:5.2f} %, max {:5.2f} %", a.curve.kernel,
                                a.curve.pass, a.curve.head_dim, a.curve.causal ? "causal" : "full",
                                a.fused ? "" : " (proxy)", a.curve.seq_len.size(), pct(a.residual.rms),
                                pct(a.residual.max)));
  auto line = [&](const char* what, const std::optional<LineFit>& l) {
    if (!l) return;
    lines.push_back(fmt::format("{}: latency {:.3f} us, {:.2f} GB/s over {} samples: rms {:5.2f} %, max {:5.2f} %",
                                what, l->latency_seconds * 1e6, l->bandwidth_bytes_per_s() / 1e9, l->points,
                                pct(l->rms_relative_residual), pct(l->max_relative_residual)));
  };
  line("hbm copy", f.hbm_copy);
  if (f.hbm_efficiency) lines.push_back(fmt::format("  -> gpu.hbm_efficiency {:.4f}", *f.hbm_efficiency));
  line("hbm triad", f.hbm_triad);
  line("launch (element-wise)", f.launch_line);
  if (f.kernel_launch_seconds) lines.push_back(fmt::format("  -> gpu.kernel_launch_us {:.3f}", *f.kernel_launch_seconds * 1e6));
  line("host h2d", f.h2d_line);
  line("host d2h", f.d2h_line);
  if (f.comm_interference)
    lines.push_back(fmt::format("interference: gpu.comm_interference {:.4f} (median of {}; spread rms {:.2f} %, max {:.2f} %)",
                                *f.comm_interference, f.interference_spread.samples, pct(f.interference_spread.rms),
                                pct(f.interference_spread.max)));
  for (const CollectiveFit& c : f.collectives)
    lines.push_back(fmt::format("{} {} x{} ({} node{}): latency {:.2f} us, algbw {:.2f} GB/s, busbw {:.2f} GB/s; "
                                "{} sizes, rms {:5.2f} %, max {:5.2f} %",
                                to_string(c.op), c.scope, c.ranks, c.nodes, c.nodes == 1 ? "" : "s",
                                c.line.latency_seconds * 1e6, c.line.bandwidth_bytes_per_s() / 1e9,
                                c.bus_bandwidth_bytes_per_s / 1e9, c.line.points, pct(c.line.rms_relative_residual),
                                pct(c.line.max_relative_residual)));
  return lines;
}

}  // namespace meshplan::calibrate

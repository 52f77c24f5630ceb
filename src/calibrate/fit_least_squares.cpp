// Weighted linear least squares through Eigen's QR, and pool-adjacent-violators.
#include "calibrate/fit_least_squares.hpp"

#include <Eigen/Dense>
#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace meshplan::calibrate {
namespace {

void residuals(LineFit& f, std::span<const double> x, std::span<const double> t) {
  double sum_sq = 0, worst = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double r = (f.predict_seconds(x[i]) - t[i]) / t[i];
    sum_sq += r * r;
    worst = std::max(worst, std::abs(r));
  }
  f.rms_relative_residual = std::sqrt(sum_sq / static_cast<double>(x.size()));
  f.max_relative_residual = worst;
  f.points = static_cast<int>(x.size());
}

}  // namespace

LineFit fit_latency_bandwidth(std::span<const double> bytes, std::span<const double> seconds) {
  if (bytes.size() != seconds.size())
    throw std::invalid_argument("fit_latency_bandwidth: bytes and seconds differ in length");
  const auto n = static_cast<Eigen::Index>(bytes.size());
  if (n < 2) throw std::invalid_argument("fit_latency_bandwidth: needs at least 2 samples");
  const auto [lo, hi] = std::minmax_element(bytes.begin(), bytes.end());
  if (!(*hi > *lo)) throw std::invalid_argument("fit_latency_bandwidth: needs 2 distinct sizes");
  // Rows scaled by 1/t_i turn the relative-error objective into ordinary least squares. Bytes
  // are scaled to GB so the two columns have comparable magnitude for the QR.
  constexpr double kBytesScale = 1e-9;
  Eigen::MatrixXd a(n, 2);
  Eigen::VectorXd b(n);
  for (Eigen::Index i = 0; i < n; ++i) {
    const double t = seconds[static_cast<std::size_t>(i)];
    if (!(t > 0)) throw std::invalid_argument("fit_latency_bandwidth: times must be > 0");
    a(i, 0) = 1.0 / t;
    a(i, 1) = bytes[static_cast<std::size_t>(i)] * kBytesScale / t;
    b(i) = 1.0;
  }
  const Eigen::Vector2d sol = a.colPivHouseholderQr().solve(b);
  LineFit f;
  f.latency_seconds = sol(0);
  f.seconds_per_byte = sol(1) * kBytesScale;
  if (!(f.latency_seconds > 0)) {
    // Through the origin: minimise sum((b x_i / t_i - 1)^2) -> b = sum(x/t) / sum((x/t)^2).
    double num = 0, den = 0;
    for (Eigen::Index i = 0; i < n; ++i) {
      num += a(i, 1);
      den += a(i, 1) * a(i, 1);
    }
    f.latency_seconds = 0;
    f.seconds_per_byte = num / den * kBytesScale;
    f.latency_resolved = false;
  }
  residuals(f, bytes, seconds);
  return f;
}

std::vector<double> isotonic_increasing(std::span<const double> y, std::span<const double> w) {
  if (y.size() != w.size()) throw std::invalid_argument("isotonic_increasing: y and w differ in length");
  struct Block {
    double mean, weight;
    std::size_t count;
  };
  std::vector<Block> blocks;
  for (std::size_t i = 0; i < y.size(); ++i) {
    blocks.push_back({y[i], w[i] > 0 ? w[i] : 1.0, 1});
    // Merge backwards while the order is violated: the pooled mean is the least-squares value.
    while (blocks.size() >= 2 && blocks[blocks.size() - 2].mean > blocks.back().mean) {
      const Block top = blocks.back();
      blocks.pop_back();
      Block& prev = blocks.back();
      const double weight = prev.weight + top.weight;
      prev.mean = (prev.mean * prev.weight + top.mean * top.weight) / weight;
      prev.weight = weight;
      prev.count += top.count;
    }
  }
  std::vector<double> out;
  out.reserve(y.size());
  for (const Block& b : blocks) out.insert(out.end(), b.count, b.mean);
  return out;
}

double median(std::vector<double> v) {
  if (v.empty()) throw std::invalid_argument("median of an empty list");
  const std::size_t mid = v.size() / 2;
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(mid), v.end());
  const double upper = v[mid];
  if (v.size() % 2 == 1) return upper;
  return 0.5 * (upper + *std::max_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(mid)));
}

}  // namespace meshplan::calibrate

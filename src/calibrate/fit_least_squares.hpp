#pragma once
// The two regressions calibration needs: time = latency + bytes / bandwidth (Eigen least
// squares, weighted so that every size counts by its relative error), and a monotone
// (non-decreasing) least-squares fit for efficiency tables (pool-adjacent-violators).
#include <span>
#include <vector>

namespace meshplan::calibrate {

struct LineFit {
  double latency_seconds = 0;             // intercept
  double seconds_per_byte = 0;            // slope
  double rms_relative_residual = 0;       // sqrt(mean(((fit - measured) / measured)^2))
  double max_relative_residual = 0;       // the worst |fit - measured| / measured
  int points = 0;
  bool latency_resolved = true;           // false: the intercept came out <= 0 and was dropped
  double bandwidth_bytes_per_s() const { return seconds_per_byte > 0 ? 1.0 / seconds_per_byte : 0.0; }
  double predict_seconds(double bytes) const { return latency_seconds + bytes * seconds_per_byte; }
};

// Minimises sum(((a + b x_i - t_i) / t_i)^2): small messages determine the latency and large
// ones the bandwidth, instead of the largest times dominating as in plain least squares. When the
// intercept comes out negative (latency below the noise of the smallest sample) the line is
// refitted through the origin and `latency_resolved` is false. Needs >= 2 distinct sizes.
LineFit fit_latency_bandwidth(std::span<const double> bytes, std::span<const double> seconds);

// Non-decreasing least-squares fit of `y` (already ordered by x) with weights `w`
// (pool-adjacent-violators). Same length as y.
std::vector<double> isotonic_increasing(std::span<const double> y, std::span<const double> w);

// Median of a non-empty list.
double median(std::vector<double> v);

}  // namespace meshplan::calibrate

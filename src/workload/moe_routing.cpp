#include "workload/moe_routing.hpp"

#include <algorithm>
#include <cmath>

namespace meshplan {

namespace {
double normal_cdf(double x) { return 0.5 * std::erfc(-x / std::sqrt(2.0)); }
}  // namespace

double expected_max_standard_normal(int n) {
  if (n <= 1) return 0.0;
  // Both integrands are below 1e-20 beyond |x| = 10 for any n up to 2^31; each half is smooth
  // (the jump at 0 is between them).
  constexpr double kReach = 10.0;
  constexpr int kIntervals = 1000;  // per half, even, for Simpson
  const double h = kReach / kIntervals;
  auto simpson = [&](auto f) {
    double sum = f(0.0) + f(kReach);
    for (int i = 1; i < kIntervals; ++i) sum += (i % 2 == 1 ? 4.0 : 2.0) * f(i * h);
    return sum * h / 3.0;
  };
  const double above = simpson([n](double x) { return 1.0 - std::pow(normal_cdf(x), n); });
  const double below = simpson([n](double x) { return std::pow(normal_cdf(-x), n); });
  return above - below;
}

RoutedLoad routed_load(int experts, int top_k, int ep, double tokens_per_rank, double router_load_cv) {
  RoutedLoad out;
  if (experts <= 0 || top_k <= 0 || !(tokens_per_rank > 0)) return out;
  const double e = experts, k = std::min(top_k, experts);
  const double local = std::max(1.0, e / std::max(1, ep));
  const double c2 = router_load_cv * router_load_cv;
  // Per expert: mean copies T_g k / E from the T_g tokens of the EP group, a token choosing it
  // with probability k / E: relative sampling variance (1 - k/E) / mean.
  const double per_expert_mean = tokens_per_rank * k * std::max(1, ep) / e;
  out.expert_rows_cv = std::sqrt(c2 + (1 - k / e) / per_expert_mean);
  if (ep <= 1) return out;
  // Per rank: mean copies T k (the group's T_g k over ep ranks). The number of a token's k
  // experts that lie on one rank is hypergeometric, variance k (L/E)(1 - L/E)(E - k)/(E - 1);
  // the ranks' counts sum to T_g k, so they are the deviations from their mean of ep exchangeable
  // variables of ep / (ep - 1) that variance, whose expected maximum is that of ep independent
  // ones: relative variance (E - k) / ((E - 1) T k). The router's preference adds c^2 / L (a sum
  // of L experts' independent deviations of c each, relative to their L-fold mean).
  const double rank_mean = tokens_per_rank * k;
  const double sampling = (e > 1 ? (e - k) / (e - 1) : 0.0) / rank_mean;
  out.rank_load_factor = 1 + expected_max_standard_normal(ep) * std::sqrt(c2 / local + sampling);
  return out;
}

}  // namespace meshplan

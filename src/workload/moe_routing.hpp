#pragma once
// How evenly a dropless MoE router spreads its token copies over the expert-parallel ranks, and
// what the most-loaded rank, which every other rank waits for at the next all-to-all, receives
// (docs/compute.md, "Router load imbalance").

namespace meshplan {

// E[max of n independent standard normal variables] (0 for n = 1): the integral of
// 1 - Phi(x)^n over x > 0 less that of Phi(x)^n over x < 0 (Simpson, deterministic).
double expected_max_standard_normal(int n);

struct RoutedLoad {
  // The most-loaded EP rank's received token copies over the mean of the ranks: its grouped GEMM
  // rows and its all-to-all bytes.
  double rank_load_factor = 1;
  // Coefficient of variation of the per-expert rows within a rank (router preference and
  // sampling): the grouped GEMM's spread of group sizes.
  double expert_rows_cv = 0;
};

// Dropless top-`top_k` routing of `tokens_per_rank` tokens on each of `ep` ranks over `experts`
// experts (experts / ep on each rank). `router_load_cv`: the coefficient of variation of the
// trained router's per-expert load (0 when the run forces balanced routing); on top of it, each
// token's k distinct experts are drawn independently (the sampling noise of a k-subset per token,
// exact in its variance). The rank load is a sum of experts / ep expert loads, and the expected
// maximum over the ep ranks is taken as that of ep normals with the ranks' variance.
RoutedLoad routed_load(int experts, int top_k, int ep, double tokens_per_rank, double router_load_cv);

}  // namespace meshplan

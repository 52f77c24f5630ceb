// Compute cost model: one GEMM estimate (the planner makes millions; the target is < 1 us each)
// and one attention estimate.
#include <benchmark/benchmark.h>

#include "cost/compute_cost.hpp"
#include "spec/cluster_loader.hpp"

using namespace meshplan;

static void BM_GemmEstimate(benchmark::State& state) {
  const ClusterSpec c = load_cluster("h100-sxm-80gb");
  GemmShape g{8192, 1024, 4096};
  for (auto _ : state) {
    g.m = 8192 + (g.m & 1023) + 1;  // vary the shape so the call is not hoisted
    benchmark::DoNotOptimize(gemm_time(c, g, Dtype::bf16));
  }
}
BENCHMARK(BM_GemmEstimate);

static void BM_AttentionEstimate(benchmark::State& state) {
  const ClusterSpec c = load_cluster("h100-sxm-80gb");
  AttentionShape a;
  a.heads = 32;
  a.kv_heads = 8;
  a.seq_q = a.seq_kv = 8192;
  for (auto _ : state) {
    a.seq_kv = 8192 + (a.seq_kv & 255) + 1;
    benchmark::DoNotOptimize(attention_time(c, a, Pass::backward, Dtype::bf16));
  }
}
BENCHMARK(BM_AttentionEstimate);

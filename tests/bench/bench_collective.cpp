// One collective estimate (the planner calls this for every collective of every candidate plan):
// all NCCL (algorithm, protocol) pairs evaluated and the fastest picked.
#include <benchmark/benchmark.h>

#include "cost/collective_cost.hpp"
#include "spec/cluster_loader.hpp"

using namespace meshplan;

static void BM_CollectiveEstimate(benchmark::State& state) {
  const ClusterSpec c = load_cluster("h100-sxm-80gb");
  const GroupPlacement g{static_cast<int>(state.range(0)), 8};
  (void)estimate_collective(c, CollectiveOp::all_reduce, 1 << 20, g);  // load the NCCL table once
  double bytes = 1024;
  for (auto _ : state) {
    const CollectiveEstimate e = estimate_collective(c, CollectiveOp::all_reduce, bytes, g);
    benchmark::DoNotOptimize(e.seconds);
    bytes = bytes < 8e9 ? bytes * 2 : 1024;  // walk the sizes so every protocol regime is hit
  }
}
BENCHMARK(BM_CollectiveEstimate)->Arg(8)->Arg(64)->Arg(1024);

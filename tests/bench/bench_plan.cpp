// Full plan searches (issue targets: 405B on 16,384 H100 <= 5 s, 70B on 256 H100 <= 1 s, 2 cores).
#include <benchmark/benchmark.h>

#include "plan/planner.hpp"
#include "spec/cluster_loader.hpp"
#include "spec/model_loader.hpp"

using namespace meshplan;

namespace {
void search(benchmark::State& state, const char* model, std::int64_t gpus, std::int64_t batch_tokens) {
  PlanRequest rq;
  rq.model = load_model(model);
  rq.cluster = load_cluster("h100-sxm-80gb");
  rq.n_gpus = gpus;
  rq.global_batch_tokens = batch_tokens;
  std::int64_t evaluated = 0;
  for (auto _ : state) {
    const PlanSearch s = search_plans(rq);
    evaluated = s.evaluated;
    benchmark::DoNotOptimize(s.ranked.size());
  }
  state.counters["evaluated"] = static_cast<double>(evaluated);
}
}  // namespace

static void BM_Plan_Llama70B_256xH100(benchmark::State& state) { search(state, "llama3.1-70b", 256, 4LL << 20); }
BENCHMARK(BM_Plan_Llama70B_256xH100)->Unit(benchmark::kMillisecond)->UseRealTime()->Iterations(2);

static void BM_Plan_Llama405B_16384xH100(benchmark::State& state) {
  search(state, "llama3.1-405b", 16384, 16LL << 20);
}
BENCHMARK(BM_Plan_Llama405B_16384xH100)->Unit(benchmark::kMillisecond)->UseRealTime()->Iterations(1);

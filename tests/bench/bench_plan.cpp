// Full plan searches (issue 18 targets on 2 cores: 405B on 16,384 H100 <= 1.5 s, 70B on 256 H100
// <= 0.3 s). The Megatron search has twins (selective-attn = AC none under FlashAttention): it
// lowers them to compare, and simulates only the distinct plans.
#include <benchmark/benchmark.h>

#include "plan/planner.hpp"
#include "spec/cluster_loader.hpp"
#include "spec/model_loader.hpp"

using namespace meshplan;

namespace {
void search(benchmark::State& state, const char* model, std::int64_t gpus, std::int64_t batch_tokens,
            Runtime runtime = Runtime::torchtitan_fsdp2) {
  PlanRequest rq;
  rq.model = load_model(model);
  rq.cluster = load_cluster("h100-sxm-80gb");
  rq.n_gpus = gpus;
  rq.global_batch_tokens = batch_tokens;
  rq.runtime = runtime;
  std::int64_t evaluated = 0, merged = 0;
  for (auto _ : state) {
    const PlanSearch s = search_plans(rq);
    evaluated = s.evaluated;
    merged = s.merged;
    benchmark::DoNotOptimize(s.ranked.size());
  }
  state.counters["evaluated"] = static_cast<double>(evaluated);
  state.counters["merged"] = static_cast<double>(merged);
}
}  // namespace

static void BM_Plan_Llama70B_256xH100(benchmark::State& state) { search(state, "llama3.1-70b", 256, 4LL << 20); }
BENCHMARK(BM_Plan_Llama70B_256xH100)->Unit(benchmark::kMillisecond)->UseRealTime()->Iterations(2);

static void BM_Plan_Llama70B_256xH100_Megatron(benchmark::State& state) {
  search(state, "llama3.1-70b", 256, 4LL << 20, Runtime::megatron);
}
BENCHMARK(BM_Plan_Llama70B_256xH100_Megatron)->Unit(benchmark::kMillisecond)->UseRealTime()->Iterations(2);

static void BM_Plan_Llama405B_16384xH100(benchmark::State& state) {
  search(state, "llama3.1-405b", 16384, 16LL << 20);
}
BENCHMARK(BM_Plan_Llama405B_16384xH100)->Unit(benchmark::kMillisecond)->UseRealTime()->Iterations(1);

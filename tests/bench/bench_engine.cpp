// Event-engine throughput: a long chain of compute and communication on several streams.
#include <benchmark/benchmark.h>

#include "sim/allocator_policy.hpp"

#include "sim/engine.hpp"

using namespace meshplan::sim;

static void BM_EngineEvents(benchmark::State& state) {
  const int n_tasks = static_cast<int>(state.range(0));
  std::int64_t events = 0;
  for (auto _ : state) {
    Engine e(EngineOptions{0.1});
    const LinkId nic = e.add_link({"nic", 50e9});
    const LinkId nvl = e.add_link({"nvlink", 370e9});
    const StreamId compute = e.add_stream("compute");
    const StreamId ag = e.add_stream("all_gather");
    const StreamId rs = e.add_stream("reduce_scatter");
    TaskId prev_compute = -1;
    for (int i = 0; i < n_tasks / 3; ++i) {
      Task g;
      g.stream = ag;
      g.kind = TaskKind::flow;
      g.bytes = 4e8;
      g.latency_seconds = 20e-6;
      g.links = {nic, nvl};
      const TaskId gid = e.add_task(g);
      Task c;
      c.stream = compute;
      c.work_seconds = 5e-3;
      c.deps = {gid};
      if (prev_compute >= 0) c.deps.push_back(prev_compute);
      prev_compute = e.add_task(c);
      Task r;
      r.stream = rs;
      r.kind = TaskKind::flow;
      r.bytes = 4e8;
      r.links = {nic};
      r.deps = {prev_compute};
      e.add_task(r);
    }
    const RunResult res = e.run();
    events += res.events_processed;
    benchmark::DoNotOptimize(res.makespan_seconds);
  }
  state.counters["events_per_s"] = benchmark::Counter(static_cast<double>(events), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_EngineEvents)->Arg(3000)->Arg(30000)->Unit(benchmark::kMillisecond);

// The CLI's allocator policy (sim/allocator_policy.hpp), so that the benchmarks time what users run.
int main(int argc, char** argv) {
  meshplan::sim::keep_large_blocks_mapped();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}

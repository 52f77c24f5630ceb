// One simulated optimizer step at three scales (issue targets: 16,384 GPUs in <= 50 ms).
#include <benchmark/benchmark.h>

#include "import/config_loader.hpp"
#include "sim/gpu_speeds.hpp"
#include "sim/step_simulator.hpp"
#include "spec/cluster_loader.hpp"
#include "spec/data_root.hpp"
#include "spec/model_loader.hpp"

using namespace meshplan;

namespace {

void run(benchmark::State& state, const char* model, Plan p, Job j, SimOptions options = {}) {
  const ClusterSpec c = load_cluster("h100-sxm-80gb");
  const ModelSpec m = load_model(model);
  std::int64_t tasks = 0, events = 0;
  for (auto _ : state) {
    const SimulatedStep s = simulate_step(m, p, j, c, options);
    tasks = s.result.n_tasks;
    events = s.result.n_events;
    benchmark::DoNotOptimize(s.result.step_time_s);
  }
  state.counters["tasks"] = static_cast<double>(tasks);
  state.counters["events"] = static_cast<double>(events);
}

}  // namespace

static void BM_Step_Llama8B_8xH100(benchmark::State& state) {
  Plan p;
  p.runtime = Runtime::torchtitan_fsdp2;
  p.mesh.dp_shard = 8;
  p.ac = AcMode::selective_op;
  run(state, "llama3.1-8b", p, Job{8192, 16, 1, 2});
}
BENCHMARK(BM_Step_Llama8B_8xH100)->Unit(benchmark::kMillisecond);

static void BM_Step_Llama70B_1024xH100(benchmark::State& state) {
  Plan p;
  p.runtime = Runtime::torchtitan_fsdp2;
  p.mesh.tp = 8;
  p.mesh.dp_shard = 128;
  p.sequence_parallel = true;
  p.ac = AcMode::full;
  run(state, "llama3.1-70b", p, Job{8192, 1024, 1, 8});
}
BENCHMARK(BM_Step_Llama70B_1024xH100)->Unit(benchmark::kMillisecond);

// torchtitan's 3-D layout at scale: TP 8 with sequence parallel, PP, FSDP kept gathered between
// forward and backward (as under PP), full recompute.
static Plan torchtitan_3d(int pp, int dp_shard) {
  Plan p;
  p.runtime = Runtime::torchtitan_fsdp2;
  p.mesh.tp = 8;
  p.mesh.pp = pp;
  p.mesh.dp_shard = dp_shard;
  p.sequence_parallel = true;
  p.reshard_after_forward = false;
  p.ac = AcMode::full;
  return p;
}

static void BM_Step_Llama405B_16384xH100(benchmark::State& state) {
  run(state, "llama3.1-405b", torchtitan_3d(16, 128), Job{8192, 2048, 1, 16});
}
BENCHMARK(BM_Step_Llama405B_16384xH100)->Unit(benchmark::kMillisecond);

// A long pipelined step (pp 8, 256 micro-batches of one 1F1B run): folded at its periodic steady
// state (every micro-batch: three steps of 10, 11 and 12 micro-batches, 244 periods extrapolated)
// and simulated whole.
Plan pipelined_70b() {
  Plan p;
  p.runtime = Runtime::torchtitan_fsdp2;
  p.mesh.tp = 8;
  p.mesh.pp = 8;
  p.mesh.dp_shard = 4;
  p.schedule = PipelineSchedule::one_f_one_b;
  p.sequence_parallel = true;
  p.reshard_after_forward = false;
  p.ac = AcMode::full;
  return p;
}

static void BM_Step_Llama70B_256xH100_PP8_256mb_Folded(benchmark::State& state) {
  run(state, "llama3.1-70b", pipelined_70b(), Job{8192, 1024, 1, 256});
}
BENCHMARK(BM_Step_Llama70B_256xH100_PP8_256mb_Folded)->Unit(benchmark::kMillisecond);

static void BM_Step_Llama70B_256xH100_PP8_256mb_Exact(benchmark::State& state) {
  SimOptions exact;
  exact.exact = true;
  run(state, "llama3.1-70b", pipelined_70b(), Job{8192, 1024, 1, 256}, exact);
}
BENCHMARK(BM_Step_Llama70B_256xH100_PP8_256mb_Exact)->Unit(benchmark::kMillisecond);

// Issue 33's first row: GPT-3 175B on 128 H100 under Megatron (tp 8, pp 8, dp 2, 1F1B over 128
// micro-batches), folded every micro-batch (10, 11 and 12 simulated) and simulated whole.
Plan gpt3_175b_128() {
  Plan p;
  p.runtime = Runtime::megatron;
  p.mesh.tp = 8;
  p.mesh.pp = 8;
  p.mesh.dp_replicate = 2;
  p.sequence_parallel = true;
  p.schedule = PipelineSchedule::one_f_one_b;
  return p;
}

static void BM_Step_GPT3_175B_128xH100_Folded(benchmark::State& state) {
  run(state, "gpt3-175b", gpt3_175b_128(), Job{2048, 256, 1, 128});
}
BENCHMARK(BM_Step_GPT3_175B_128xH100_Folded)->Unit(benchmark::kMillisecond);

static void BM_Step_GPT3_175B_128xH100_Exact(benchmark::State& state) {
  SimOptions exact;
  exact.exact = true;
  run(state, "gpt3-175b", gpt3_175b_128(), Job{2048, 256, 1, 128}, exact);
}
BENCHMARK(BM_Step_GPT3_175B_128xH100_Exact)->Unit(benchmark::kMillisecond);

// Issue 33's bundle row and its --full row: a shipped bundle's config as `simulate` runs it (the
// fold's three shorter steps on two threads, SimOptions::parallel_fold, except under --full), on
// the profile it names.
namespace {
void bundle(benchmark::State& state, const char* dir, const char* config, bool full, StragglerSpec slow = {}) {
  RunConfig rc = load_run_config((data_root() / "plans" / dir / config).string());
  resolve_layout(rc, rc.plan.mesh.world());
  const ClusterSpec c = load_cluster(rc.cluster.empty() ? "h100-sxm-80gb" : rc.cluster);
  SimOptions options;
  options.parallel_fold = !full;
  options.full = full;
  if (slow.fraction > 0) options.rank_speed = sample_straggler_speeds(rc.plan.mesh.world(), slow, 1);
  std::int64_t tasks = 0;
  for (auto _ : state) {
    const SimulatedStep s = simulate_step(rc.model, rc.plan, rc.job, c, options);
    tasks = s.result.n_tasks;
    benchmark::DoNotOptimize(s.result.step_time_s);
  }
  state.counters["tasks"] = static_cast<double>(tasks);
}
}  // namespace

static void BM_Simulate_Bundle_Llama405B_1024xH100(benchmark::State& state) {
  bundle(state, "llama3.1-405b-1024xh100", "llama3.1-405b.toml", false);
}
BENCHMARK(BM_Simulate_Bundle_Llama405B_1024xH100)->Unit(benchmark::kMillisecond)->UseRealTime();

static void BM_Simulate_Bundle_Llama70B_256xH100_Full(benchmark::State& state) {
  bundle(state, "llama3.1-70b-256xh100", "llama3.1-70b.toml", true);
}
BENCHMARK(BM_Simulate_Bundle_Llama70B_256xH100_Full)->Unit(benchmark::kMillisecond)->UseRealTime()->Iterations(1);

// --full past 512 GPUs: the 16,384-GPU bundle with two slow GPUs (--straggler 0.0001:0.9, seed 1),
// 10 distinct ranks per stage (sim/rank_classes.hpp).
static void BM_Simulate_Full_Llama405B_16384xH100_TwoSlowGpus(benchmark::State& state) {
  bundle(state, "llama3.1-405b-16384xh100", "llama3.1-405b.toml", true, StragglerSpec{0.0001, 0.9});
}
BENCHMARK(BM_Simulate_Full_Llama405B_16384xH100_TwoSlowGpus)->Unit(benchmark::kMillisecond)->UseRealTime()->Iterations(1);

// Issue 33's --full row at its scale: 1 % slow GPUs (0.9x, seed 1) among 4,096 running Llama-3.1-70B
// (pp 4, tp 8, FSDP 128, full recompute, 8 micro-batches of one 8,192-token sequence): 208
// distinct ranks per stage, 2.6 M engine tasks.
static void BM_Simulate_Full_Llama70B_4096xH100_OnePercentSlow(benchmark::State& state) {
  SimOptions options;
  options.full = true;
  options.rank_speed = sample_straggler_speeds(4096, StragglerSpec{0.01, 0.9}, 1);
  run(state, "llama3.1-70b", torchtitan_3d(4, 128), Job{8192, 1024, 1, 8}, options);
}
BENCHMARK(BM_Simulate_Full_Llama70B_4096xH100_OnePercentSlow)->Unit(benchmark::kMillisecond)->UseRealTime()->Iterations(1);

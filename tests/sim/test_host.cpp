// The host thread: one CPU thread per rank issues the step's ops in program order, the GPU
// runs behind it, and synchronizing ops make it wait for the GPU (docs/host.md).
#include <doctest/doctest.h>

#include <algorithm>

#include "cost/host_cost.hpp"
#include "sim/step_simulator.hpp"
#include "spec/cluster_loader.hpp"
#include "spec/model_loader.hpp"

using namespace meshplan;

namespace {

Plan single_gpu(Runtime rt) {
  Plan p;
  p.runtime = rt;
  p.sharding = Sharding::none;
  return p;
}

double total_host_seconds(const StepProgram& prog, const HostModel& h) {
  double s = 0;
  for (const Op& op : prog.expanded()) s += host_seconds(op, h);
  return s;
}

}  // namespace

TEST_CASE("a step whose host work exceeds its GPU work takes the host's time") {
  auto c = load_cluster("h100-sxm-80gb");
  c.host.op_seconds = 1e-3;  // 1 ms per op: every kernel of this small step is far shorter
  const auto m = load_model("llama3.1-8b");
  const Plan p = single_gpu(Runtime::torchtitan_fsdp2);
  const Job j{1024, 1, 1, 1};
  SimOptions so;
  so.keep_timeline = true;
  const SimulatedStep s = simulate_step(m, p, j, c, so);
  const double host = total_host_seconds(s.program, host_model(c, p));
  CHECK(s.result.host_busy_s == doctest::Approx(host).epsilon(1e-12));
  // The GPU finishes each op long before the host issues the next: the step is the host's time
  // plus the GPU time of the last op (the optimizer step, issued last).
  const auto& last = s.timings.back();
  CHECK(s.result.step_time_s >= host);
  CHECK(s.result.step_time_s == doctest::Approx(host + (last.end_seconds - last.start_seconds)).epsilon(1e-9));
  CHECK(s.result.host_bound);
  CHECK(s.result.breakdown_s.at("host_wait") > 0.9 * s.result.step_time_s);
  double sum = 0;
  for (const auto& [k, v] : s.result.breakdown_s) sum += v;
  CHECK(sum == doctest::Approx(s.result.step_time_s).epsilon(1e-9));
}

TEST_CASE("a step whose GPU work exceeds its host work is unchanged by the host within 0.5 %") {
  auto c = load_cluster("h100-sxm-80gb");
  const auto m = load_model("llama3.1-70b");
  Plan p;
  p.runtime = Runtime::torchtitan_fsdp2;
  p.mesh.dp_shard = 8;
  const Job j{8192, 8, 1, 1};
  const double with_host = simulate_step(m, p, j, c).result.step_time_s;
  c.host.op_seconds = 0;
  const double without = simulate_step(m, p, j, c).result.step_time_s;
  CHECK(with_host >= without);
  CHECK(with_host <= without * 1.005);
}

TEST_CASE("a synchronizing op makes the host wait for the GPU") {
  const auto c = load_cluster("h100-sxm-80gb");
  const auto m = load_model("llama3.1-8b");
  // Megatron clips gradients with the norm's .item(): the host issues the optimizer step only
  // once every op it issued before has finished on the GPU.
  Plan p = single_gpu(Runtime::megatron);
  SimOptions so;
  so.keep_timeline = true;
  const SimulatedStep s = simulate_step(m, p, Job{4096, 2, 1, 2}, c, so);
  std::size_t opt = s.program.ops.size();
  double before_end = 0;
  for (std::size_t i = 0; i < s.program.ops.size(); ++i) {
    if (s.program.ops[i].category == OpCategory::optimizer) {
      opt = i;
      break;
    }
    before_end = std::max(before_end, s.timings[i].end_seconds);
  }
  REQUIRE(opt < s.program.ops.size());
  CHECK(s.host_timings[opt].start_seconds == doctest::Approx(before_end).epsilon(1e-12));
  // Without the sync the host would have issued it long before (it runs ahead of the GPU).
  CHECK(s.host_timings[opt - 1].end_seconds < 0.5 * before_end);
}

TEST_CASE("CUDA graphs cut the host's cost to one launch per captured region") {
  const auto c = load_cluster("h100-sxm-80gb");
  const auto m = load_model("llama3.1-8b");
  Plan eager = single_gpu(Runtime::megatron);
  Plan graphs = eager;
  graphs.cuda_graphs = true;
  const Job j{1024, 4, 1, 4};
  SimOptions so;
  so.keep_timeline = true;
  const SimulatedStep e = simulate_step(m, eager, j, c, so);
  const SimulatedStep g = simulate_step(m, graphs, j, c, so);
  // Hand count: every compute op but the optimizer replays as one graph launch; the optimizer's
  // kernels and every collective are dispatched as before.
  const HostModel h = host_model(c, graphs);
  double expect = 0;
  for (const Op& op : g.program.expanded()) {
    if (op.kind == OpKind::compute && op.category != OpCategory::optimizer) expect += c.gpu.kernel_launch_seconds;
    else expect += host_seconds(op, host_model(c, eager));
  }
  CHECK(g.result.host_busy_s == doctest::Approx(expect).epsilon(1e-12));
  CHECK(h.launch_seconds == c.gpu.kernel_launch_seconds);
  CHECK(g.result.host_busy_s < 0.25 * e.result.host_busy_s);
  CHECK(g.result.step_time_s <= e.result.step_time_s);
}

TEST_CASE("a Grace host issues each op 2.6x slower than an x86 one") {
  const auto x86 = load_cluster("h100-sxm-80gb");
  const auto grace = load_cluster("gb200");
  CHECK(x86.host.cpu == "x86");
  CHECK(grace.host.cpu == "grace");
  CHECK(grace.host.op_seconds / x86.host.op_seconds == doctest::Approx(2.6).epsilon(0.02));
}

TEST_CASE("a dropless MoE dispatch makes the host wait for the router's output (DeepEP, all-to-all; not HybridEP)") {
  const auto c = load_cluster("h100-sxm-80gb");
  const auto m = load_model("mixtral-8x7b");
  Plan p;
  p.runtime = Runtime::megatron;
  p.sharding = Sharding::zero1;
  p.mesh.dp_replicate = 8;
  p.mesh.ep = 8;
  SimOptions so;
  so.keep_timeline = true;
  const Job j{4096, 8, 1, 1};
  for (const MoeDispatcher d : {MoeDispatcher::alltoall, MoeDispatcher::deepep, MoeDispatcher::hybridep}) {
    CAPTURE(to_string(d));
    p.moe_dispatcher = d;
    const SimulatedStep s = simulate_step(m, p, j, c, so);
    int dispatches = 0, ran_ahead = 0;
    for (std::size_t i = 0; i < s.program.ops.size(); ++i) {
      const Op op = s.program.op(i);
      if (op.name.find(".ep_dispatch") == std::string::npos || op.name.find("_bwd") != std::string::npos) continue;
      ++dispatches;
      CHECK(op.host_sync == (d != MoeDispatcher::hybridep));
      double producers_end = 0;
      for (int dep : op.deps) producers_end = std::max(producers_end, s.timings[static_cast<std::size_t>(dep)].end_seconds);
      if (op.host_sync) {
        // The host issues the dispatch only once the router's output exists on the GPU.
        CHECK(s.host_timings[i].start_seconds >= producers_end - 1e-12);
      }
      if (s.host_timings[i].end_seconds < producers_end) ++ran_ahead;
    }
    CHECK(dispatches == m.n_layers);  // one per MoE layer's forward (no recompute)
    // Without the read-back the host runs ahead of the GPU and issues dispatches early.
    CHECK((ran_ahead > 0) == (d == MoeDispatcher::hybridep));
  }
  // A capacity factor fixes every expert's buffer: nothing to read back.
  ModelSpec capped = m;
  capped.moe.capacity_factor = 1.25;
  p.moe_dispatcher = MoeDispatcher::alltoall;
  const SimulatedStep s = simulate_step(capped, p, j, c, so);
  for (const Op& op : s.program.expanded()) CHECK_FALSE(op.host_sync);
}

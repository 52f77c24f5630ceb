// FSDP1's forward prefetch under its rate limiter (Composer fsdp_config forward_prefetch,
// forward_prefetch_limit, limit_all_gathers), against hand traces of torch's FSDP1 hooks:
//   _pre_forward_unshard(unit i): unshard i unless prefetched, then _prefetch_handle(FORWARD), which
//     unshards the unit forward_prefetch_limit ahead, before unit i's kernels are issued;
//   _unshard under limit_all_gathers: when two free events are queued (_FreeEventQueue, max 2 in
//     flight) the older is dequeued and the CPU waits for it;
//   _post_forward_reshard(unit i): frees unit i and queues its free event.
// In steady state the pre-forward hook of unit i finds the events of units i-2 and i-1 queued, so
// the gather it issues, unit i + k, starts once unit i-2's forward is done.
#include <doctest/doctest.h>

#include <algorithm>
#include <string>

#include "sim/step_simulator.hpp"
#include "spec/cluster_loader.hpp"
#include "spec/model_loader.hpp"
#include "workload/memory_estimate.hpp"

using namespace meshplan;

namespace {

Plan fsdp1(int dp_shard, bool forward_prefetch, int limit) {
  Plan p;
  p.runtime = Runtime::composer_fsdp1;
  p.mesh.dp_shard = dp_shard;
  p.sharding = Sharding::zero3;
  p.backward_prefetch = BackwardPrefetch::backward_post;
  p.limit_all_gathers = true;
  p.forward_prefetch = forward_prefetch;
  p.forward_prefetch_limit = limit;
  p.root_unsharded = true;
  return p;
}

// From the first start to the last end of the ops whose names start with `prefix`.
double op_seconds(const SimulatedStep& s, const std::string& prefix) {
  double from = 1e300, to = -1;
  for (std::size_t i = 0; i < s.program.ops.size(); ++i)
    if (s.program.name(i).rfind(prefix, 0) == 0) {
      from = std::min(from, s.timings[i].start_seconds);
      to = std::max(to, s.timings[i].end_seconds);
    }
  REQUIRE(to >= 0);
  return to - from;
}

}  // namespace

TEST_CASE("FSDP1 forward_prefetch under the rate limiter: one more unit gathered per unit of prefetch when the "
          "forward is compute-bound, none when the all-gathers are the bottleneck; no exposed all-gather moves") {
  const ModelSpec m = load_model("llama2-7b");
  const Job j{2048, 64, 1, 8};
  SimOptions keep;
  keep.keep_timeline = true;
  const double unit = fsdp_unit_gathered_bytes(m, fsdp1(8, false, 1));

  // One 8-GPU A100 node: a unit's all-gather (A, NVLink) is shorter than its forward (C).
  // Without prefetch, unit u's gather starts when unit u-2's forward ends, i.e. as unit u-1's
  // forward starts: units u-1 and u are gathered. With prefetch k, unit u's gather is issued by
  // unit u-k's hook and starts when unit u-k-2's forward ends: units u-k-1 .. u, k + 2 of them.
  // Each gather still finishes before its unit's forward, so only the first is exposed, as before.
  {
    const ClusterSpec c = load_cluster("a100-80gb");
    const SimulatedStep s0 = simulate_step(m, fsdp1(8, false, 1), j, c, keep);
    REQUIRE(op_seconds(s0, "fsdp_ag.fwd.L1.mb0") < op_seconds(s0, "fwd.L1.mb0."));
    const double g0 = s0.result.stages[0].term_peaks.unsharded_params;
    // The root unit (embedding, final norm, head; FSDP1 keeps it gathered through the step) and
    // two blocks, in bf16.
    const ParamCounts pc = param_counts(m);
    const double root = 2.0 * static_cast<double>(pc.embedding + pc.final_norm + pc.lm_head);
    CHECK(g0 == doctest::Approx(root + 2 * unit).epsilon(1e-9));
    for (int k : {1, 2, 3}) {
      CAPTURE(k);
      const SimulatedStep sk = simulate_step(m, fsdp1(8, true, k), j, c);
      CHECK(sk.result.stages[0].term_peaks.unsharded_params - g0 == doctest::Approx(k * unit).epsilon(1e-9));
      CHECK(sk.result.breakdown_s.at("exposed_comm") ==
            doctest::Approx(s0.result.breakdown_s.at("exposed_comm")).epsilon(1e-6));
      // The host issues the prefetched gather before the unit's kernels instead of after them,
      // which moves when the kernels are issued by a few microseconds per micro-batch.
      CHECK(sk.result.step_time_s == doctest::Approx(s0.result.step_time_s).epsilon(1e-4));
    }
  }
  // Sequences of 256 tokens: A > C, the gathers run back to back whatever the limiter allows
  // (unit u-2's forward ended before unit u-1's gather did), so two units are gathered with or
  // without prefetch, and the exposed all-gather time is the same.
  {
    const ClusterSpec c = load_cluster("a100-80gb");
    const Job short_seq{256, 64, 1, 8};
    const SimulatedStep s0 = simulate_step(m, fsdp1(8, false, 1), short_seq, c, keep);
    REQUIRE(op_seconds(s0, "fsdp_ag.fwd.L1.mb0") > op_seconds(s0, "fwd.L1.mb0."));
    const SimulatedStep s1 = simulate_step(m, fsdp1(8, true, 1), short_seq, c);
    CHECK(s1.result.stages[0].term_peaks.unsharded_params ==
          doctest::Approx(s0.result.stages[0].term_peaks.unsharded_params).epsilon(1e-9));
    CHECK(s1.result.breakdown_s.at("exposed_comm") ==
          doctest::Approx(s0.result.breakdown_s.at("exposed_comm")).epsilon(1e-6));
  }
}

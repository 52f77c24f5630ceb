// Goodput: the Young/Daly interval and the expected useful fraction against hand-derived
// numbers, against a seeded Monte Carlo of the same failure process, and the shipped H100
// profile against the interruption counts it was derived from (Llama 3, Table 5).
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <random>

#include "plan/capacity.hpp"
#include "plan/goodput.hpp"
#include "spec/cluster_loader.hpp"
#include "spec/error.hpp"
#include "spec/model_loader.hpp"

using namespace meshplan;

namespace {

// Useful work / wall time of one long run: segments of `interval_s` work then a blocking
// checkpoint of `checkpoint_s`; exponential failure times of mean `mtbi_s` (none during a
// restart); each failure throws the partial segment away and costs `restart_s`.
double sampled_goodput(double interval_s, double checkpoint_s, double restart_s, double mtbi_s, std::int64_t segments,
                       std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::exponential_distribution<double> time_to_failure(1.0 / mtbi_s);
  const double segment = interval_s + checkpoint_s;
  double wall = 0;
  for (std::int64_t i = 0; i < segments; ++i) {
    for (;;) {
      const double t = time_to_failure(rng);  // memoryless: a fresh draw after every restart
      if (t >= segment) {
        wall += segment;
        break;
      }
      wall += t + restart_s;
    }
  }
  return interval_s * static_cast<double>(segments) / wall;
}

}  // namespace

TEST_CASE("Young/Daly interval and goodput, hand-derived") {
  // C = 60 s, M = 3 h = 10,800 s: tau = sqrt(2 x 60 x 10,800) = sqrt(1,296,000) = 1,138.42 s.
  CHECK(young_daly_interval_seconds(60, 10800) == doctest::Approx(1138.42).epsilon(1e-5));
  // Segment s = 1,198.42 s; E[time] = (M + R)(e^(s/M) - 1) = 11,400 x (e^0.110965 - 1) = 1,337.85 s;
  // goodput = 1,138.42 / 1,337.85 = 0.85093. (First order, 1 - C/tau - (s/2 + R)/M = 0.8363.)
  const double tau = young_daly_interval_seconds(60, 10800);
  CHECK(goodput_fraction(tau, 60, 600, 10800) == doctest::Approx(0.85093).epsilon(1e-4));
  // One planned stop a day costing 700 s: x (1 - 700 / 86,400) = 0.84404.
  CHECK(goodput_fraction(tau, 60, 600, 10800, 1.0 / 86400, 700) == doctest::Approx(0.84404).epsilon(1e-4));
  // Young's interval minimises waste: 20 % either side is worse.
  const double g = goodput_fraction(tau, 60, 600, 10800);
  CHECK(goodput_fraction(0.8 * tau, 60, 600, 10800) < g);
  CHECK(goodput_fraction(1.2 * tau, 60, 600, 10800) < g);
  // No failures: only the checkpoint overhead remains, tau / (tau + C).
  CHECK(goodput_fraction(1000, 10, 600, INFINITY) == doctest::Approx(1000.0 / 1010.0));
}

TEST_CASE("sampled failure times agree with the closed form within 2 %") {
  struct Case {
    double checkpoint_s, restart_s, mtbi_s;
  };
  // The 405B-scale case (2.4 s save, 13 min restart, 2.8 h MTBI) and a harsh one (2 min save,
  // 10 min restart, 1 h MTBI), each over ~10^5 segments: sampling error ~0.3 %.
  for (const Case c : {Case{2.4, 784, 10000}, Case{120, 600, 3600}}) {
    CAPTURE(c.mtbi_s);
    const double tau = young_daly_interval_seconds(c.checkpoint_s, c.mtbi_s);
    const double closed = goodput_fraction(tau, c.checkpoint_s, c.restart_s, c.mtbi_s);
    const double sampled = sampled_goodput(tau, c.checkpoint_s, c.restart_s, c.mtbi_s, 100000, 20260412);
    CHECK(sampled == doctest::Approx(closed).epsilon(0.02));
    // The same seed gives the same answer.
    CHECK(sampled == sampled_goodput(tau, c.checkpoint_s, c.restart_s, c.mtbi_s, 100000, 20260412));
  }
}

TEST_CASE("the H100 profile's rates give back Llama 3's 419 unexpected and 47 planned interruptions in 54 days") {
  const ClusterSpec c = load_cluster("h100-sxm-80gb");
  REQUIRE(c.reliability.present);
  const JobInterruptions j = job_interruptions(c, 16384);
  CHECK(j.unexpected_per_s * 54 * 86400 == doctest::Approx(419).epsilon(1e-3));
  CHECK(j.planned_per_s * 54 * 86400 == doctest::Approx(47).epsilon(1e-3));
  // 54 d x 24 h / 419 = 3.09 h between unexpected interruptions.
  CHECK(j.mtbi_seconds / 3600 == doctest::Approx(54.0 * 24 / 419).epsilon(1e-3));
  // Every component scales with the job: half the GPUs, half the rate.
  CHECK(job_interruptions(c, 8192).unexpected_per_s == doctest::Approx(j.unexpected_per_s / 2));
}

TEST_CASE("checkpoint cost: sync pays copy + write, async only the copy; restart = relaunch + load + warm-up") {
  const ClusterSpec c = load_cluster("h100-sxm-80gb");
  const double rank_bytes = 1e9;
  const CheckpointCost s = checkpoint_cost(rank_bytes, c, CheckpointMode::sync);
  const CheckpointCost a = checkpoint_cost(rank_bytes, c, CheckpointMode::async);
  // 1 GB / 52 GB/s D2H = 19.2 ms; 8 GB per node / 0.651 GB/s = 12.29 s.
  CHECK(a.blocking_seconds == doctest::Approx(1.0 / 52).epsilon(1e-6));
  CHECK(s.write_seconds == doctest::Approx(8.0 / 0.651).epsilon(1e-6));
  CHECK(s.blocking_seconds == doctest::Approx(1.0 / 52 + 8.0 / 0.651).epsilon(1e-6));
  CHECK(restart_seconds(c, s) == doctest::Approx(600 + 8.0 / 0.651 + 180).epsilon(1e-6));
}

TEST_CASE("plan_goodput: whole steps, async no shorter than its write, no interval longer than the run") {
  GoodputInputs in;
  in.interruptions.unexpected_per_s = 1.0 / 10800;
  in.interruptions.mtbi_seconds = 10800;
  in.checkpoint.blocking_seconds = 60;
  in.checkpoint.write_seconds = 60;
  in.restart_s = 600;
  in.step_time_s = 10;
  in.ideal_run_seconds = 30 * 86400;
  const Goodput g = plan_goodput(in);
  CHECK(g.interval_steps == 114);  // 1,138.42 s / 10 s, rounded
  CHECK(g.interval_s == doctest::Approx(1140));
  CHECK(g.goodput_fraction == doctest::Approx(goodput_fraction(1140, 60, 600, 10800)));
  CHECK(g.run_seconds == doctest::Approx(in.ideal_run_seconds / g.goodput_fraction));
  CHECK(g.lost_per_interruption_s == doctest::Approx(0.5 * 1200 + 600));

  GoodputInputs as = in;
  as.mode = CheckpointMode::async;
  as.checkpoint.blocking_seconds = 0.5;  // copy only
  as.checkpoint.write_seconds = 2000;    // slower than Young's interval for C = 0.5 s (104 s)
  const Goodput ga = plan_goodput(as);
  CHECK(ga.interval_steps == 200);
  // The write at risk adds to what a failure costs.
  CHECK(ga.goodput_fraction == doctest::Approx(goodput_fraction(2000, 0.5, 600 + 2000, 10800)));

  GoodputInputs over = in;
  over.interval_override_s = 31 * 86400.0;
  CHECK_THROWS_AS(plan_goodput(over), InputError);
  over.interval_override_s = -1;
  CHECK_THROWS_AS(plan_goodput(over), InputError);
}

TEST_CASE("the shipped bundles' checkpoint interval is Young/Daly in whole steps") {
  const ClusterSpec c = load_cluster("h100-sxm-80gb");
  const JobInterruptions j = job_interruptions(c, 16384);
  CheckpointCost k;
  k.blocking_seconds = 2.5;
  // sqrt(2 x 2.5 s x 11,135 s) = 236 s at 14 s a step = 16.9 -> 17 steps.
  CHECK(young_daly_interval_steps(j, k, CheckpointMode::sync, 14.0) ==
        std::llround(std::sqrt(2 * 2.5 * j.mtbi_seconds) / 14.0));
  CHECK(young_daly_interval_steps(j, k, CheckpointMode::sync, 14.0) == 17);
}

// Issue 32 item 5: a checkpoint writes each distinct byte once (Megatron's torch_dist with its
// fully parallel save, torch DCP), spread over the data-parallel and context-parallel ranks that
// hold a copy, not every rank's resident state.
TEST_CASE("checkpoint bytes per rank: the unique state of a model-parallel shard over its copies") {
  const ModelSpec m = load_model("llama3.1-8b");
  const ClusterSpec c = load_cluster("h100-sxm-80gb");
  const Job j{8192, 64, 1, 8};
  const double n = static_cast<double>(n_params(m));
  // Megatron, tp 2 x dp 8 (DDP, everything replicated): bf16 params (2 B) + fp32 master (4 B) +
  // AdamW moments (8 B) = 14 B per parameter, half the model per TP rank, over 8 data-parallel
  // writers: 14 N / 2 / 8. Before, each rank counted its whole resident 2 + 12 B copy: 8 x more.
  Plan meg;
  meg.runtime = Runtime::megatron;
  meg.mesh.tp = 2;
  meg.mesh.dp_replicate = 8;
  meg.sharding = Sharding::none;
  meg.param_dtype = Dtype::bf16;
  meg.state_dtype = Dtype::fp32;
  const double ddp = checkpoint_state_bytes_per_rank(m, meg, j, c);
  CHECK(ddp == doctest::Approx(14.0 * n / 2 / 8).epsilon(0.02));
  // The distributed optimizer shards the master and moments: the same bytes written, the same share.
  meg.sharding = Sharding::zero1;
  CHECK(checkpoint_state_bytes_per_rank(m, meg, j, c) == doctest::Approx(ddp).epsilon(1e-9));
  // FSDP2 over 16 ranks with fp32 params: 4 + 8 = 12 B per parameter over 16 writers.
  Plan fsdp;
  fsdp.runtime = Runtime::torchtitan_fsdp2;
  fsdp.mesh.dp_shard = 16;
  fsdp.sharding = Sharding::zero3;
  fsdp.state_dtype = Dtype::fp32;
  CHECK(checkpoint_state_bytes_per_rank(m, fsdp, j, c) == doctest::Approx(12.0 * n / 16).epsilon(0.02));
  // HSDP 2 x 8: replicated over two groups; DCP writes each shard once, split over both.
  fsdp.mesh.dp_shard = 8;
  fsdp.mesh.dp_replicate = 2;
  CHECK(checkpoint_state_bytes_per_rank(m, fsdp, j, c) == doctest::Approx(12.0 * n / 16).epsilon(0.02));
}

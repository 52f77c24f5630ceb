// The periodic steady-state fold (sim/periodic_fold.hpp): which steps fold and how, that a figure
// which does not move alike each period refuses the fold, and that folded steps of shipped plans
// equal the whole simulation (issue 33's acceptance asks 0.5 %; periodic schedules give far less).
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "import/config_loader.hpp"
#include "import/import_megatron.hpp"
#include "sim/periodic_fold.hpp"
#include "sim/step_simulator.hpp"
#include "spec/cluster_loader.hpp"
#include "spec/model_loader.hpp"
#include "test_paths.hpp"

using namespace meshplan;

namespace {

Plan pipeline(int pp) {
  Plan p;
  p.mesh.pp = pp;
  return p;
}

Job job(std::int64_t grad_accum, std::int64_t pp_microbatches = 0) {
  Job j;
  j.seq_len = 4096;
  j.micro_batch = 1;
  j.grad_accum = grad_accum;
  j.global_batch = 2 * grad_accum;  // two data-parallel replicas
  j.pp_microbatches = pp_microbatches;
  return j;
}

// The folded step against the whole one: every figure within 1e-9 (periodic schedules give far
// less than the 0.5 % issue 33 asks).
void check_folded_equals_whole(const StepResult& folded, const StepResult& whole) {
  CHECK(folded.folded_periods > 0);
  CHECK(whole.folded_periods == 0);
  CHECK(folded.step_time_s == doctest::Approx(whole.step_time_s).epsilon(1e-9));
  CHECK(folded.tokens_per_s_per_gpu == doctest::Approx(whole.tokens_per_s_per_gpu).epsilon(1e-9));
  CHECK(folded.mfu == doctest::Approx(whole.mfu).epsilon(1e-9));
  CHECK(folded.n_tasks == whole.n_tasks);
  for (const auto& term : whole.breakdown_s) {
    const std::string key = term.first;  // a named copy: CAPTURE is a lambda (clang 14)
    CAPTURE(key);
    CHECK(folded.breakdown_s.at(key) == doctest::Approx(term.second).epsilon(1e-9).scale(whole.step_time_s));
  }
  for (const auto& kind : whole.comm_bytes)
    CHECK(folded.comm_bytes.at(kind.first) == doctest::Approx(kind.second).epsilon(1e-9));
  REQUIRE(folded.stages.size() == whole.stages.size());
  for (std::size_t s = 0; s < whole.stages.size(); ++s) {
    CAPTURE(s);
    CHECK(folded.stages[s].peak_bytes == doctest::Approx(whole.stages[s].peak_bytes).epsilon(1e-9));
    CHECK(folded.stages[s].breakdown.activations == doctest::Approx(whole.stages[s].breakdown.activations).epsilon(1e-9));
  }
}

// The step as simulate_step folds it, and simulated whole (--exact).
struct FoldedAndWhole {
  StepResult folded, whole;
};

FoldedAndWhole folded_and_whole(const ModelSpec& m, const Plan& p, const Job& j, const ClusterSpec& c) {
  SimOptions exact;
  exact.exact = true;
  return {simulate_step(m, p, j, c).result, simulate_step(m, p, j, c, exact).result};
}

}  // namespace

TEST_CASE("fold_plan: the period, the three shorter steps and the periods extrapolated") {
  // One schedule run of 1,024 micro-batches on pp 16 (the shipped 405B bundle): a period is pp
  // micro-batches; the first shorter step holds 2 periods (32), then 48 and 64; the full step is
  // 64 + 60 x 16 = 1,024.
  const auto f = fold_plan(pipeline(16), job(1024, 1024));
  REQUIRE(f);
  CHECK(f->period_microbatches == 16);
  CHECK(f->first_microbatches == 32);
  CHECK(f->periods_beyond == 60);
  CHECK(f->at(0).grad_accum == 32);
  CHECK(f->at(2).grad_accum == 64);
  CHECK(f->at(2).global_batch == 128);     // 2 replicas x 64
  CHECK(f->at(2).pp_microbatches == 64);   // still one run
  // 1,000 micro-batches: the remainder 1000 mod 16 = 8 goes into the first step (40, 56, 72).
  const auto g = fold_plan(pipeline(16), job(1000));
  REQUIRE(g);
  CHECK(g->first_microbatches == 40);
  CHECK(g->periods_beyond == 58);
  CHECK(g->at(2).grad_accum + g->periods_beyond * 16 == 1000);
  // Runs of 8 micro-batches (torchtitan, one schedule per local batch): a period is a run.
  const auto r = fold_plan(pipeline(4), job(128, 8));
  REQUIRE(r);
  CHECK(r->period_microbatches == 8);
  CHECK(r->first_microbatches == 8);
  CHECK(r->at(1).pp_microbatches == 8);
  CHECK(r->periods_beyond == 128 / 8 - 3);
  // Long enough to pay: the three steps simulate 9 pp of 16 pp micro-batches (2, 3 and 4 pp, the
  // largest a quarter of the step); too short: 9 pp of 7 pp is more than the 5/4 it may hold.
  CHECK(fold_plan(pipeline(16), job(256)));
  CHECK_FALSE(fold_plan(pipeline(16), job(112)));
  CHECK(fold_plan(pipeline(16), job(128)));        // 144 <= 5/4 x 128 = 160
  CHECK_FALSE(fold_plan(pipeline(4), job(32, 8)));  // runs of 8: 48 simulated > 5/4 x 32
  CHECK(fold_plan(pipeline(4), job(40, 8)));
  // Without a pipeline, gradient accumulation repeats every micro-batch: 2, 3, 4 then 20 more.
  const auto d = fold_plan(pipeline(1), job(24));
  REQUIRE(d);
  CHECK(d->period_microbatches == 1);
  CHECK(d->periods_beyond == 20);
}

TEST_CASE("fine_fold_plan: a non-interleaved pipeline of one run repeats every micro-batch") {
  // GPT-3 175B's shape on pp 8 x 128 micro-batches: pp + 2 = 10, then 11 and 12, and the full step
  // 12 + 116 x 1 = 128 (the whole-pipeline fold would simulate 16, 24 and 32).
  const auto f = fine_fold_plan(pipeline(8), job(128));
  REQUIRE(f);
  CHECK(f->period_microbatches == 1);
  CHECK(f->first_microbatches == 10);
  CHECK(f->at(2).grad_accum == 12);
  CHECK(f->at(2).global_batch == 24);
  CHECK(f->periods_beyond == 116);
  // It must save work: 3 x 10 + 3 = 33 micro-batches simulated against at least twice that.
  CHECK_FALSE(fine_fold_plan(pipeline(8), job(65)));
  CHECK(fine_fold_plan(pipeline(8), job(66)));
  // Interleaved schedules repeat only every pp micro-batches; runs of a few micro-batches each
  // (torchtitan's local batches) every run; without a pipeline the whole-period fold is already
  // per micro-batch.
  Plan interleaved = pipeline(8);
  interleaved.mesh.vpp = 2;
  CHECK_FALSE(fine_fold_plan(interleaved, job(128)));
  CHECK_FALSE(fine_fold_plan(pipeline(4), job(128, 8)));
  CHECK_FALSE(fine_fold_plan(pipeline(1), job(128)));
  // Tried first, the whole-pipeline fold after it (16, 24 and 32 micro-batches; 56 would be too
  // short for it: 72 simulated > 5/4 x 56, while the fine fold needs 66).
  CHECK(fold_plans(pipeline(8), job(56)).empty());
  const std::vector<FoldPlan> both = fold_plans(pipeline(8), job(128));
  REQUIRE(both.size() == 2);
  CHECK(both[0].period_microbatches == 1);
  CHECK(both[1].period_microbatches == 8);
  CHECK(fold_plans(interleaved, job(256)).size() == 1);
}

TEST_CASE("GPT-3 175B on 128 GPUs (Megatron 1F1B, pp 8, 128 micro-batches) folds every micro-batch, equal to the whole") {
  RunConfig rc = import_megatron_args(
      "gpt3.args",
      "--num-layers 96 --hidden-size 12288 --num-attention-heads 96 --seq-length 2048 --max-position-embeddings 2048 "
      "--vocab-size 50257 --micro-batch-size 1 --global-batch-size 256 --tensor-model-parallel-size 8 "
      "--pipeline-model-parallel-size 8 --bf16 --use-flash-attn --sequence-parallel --use-distributed-optimizer");
  resolve_layout(rc, 128);
  REQUIRE(rc.job.grad_accum == 128);
  const ClusterSpec c = load_cluster("h100-sxm-80gb");
  const auto [folded, whole] = folded_and_whole(rc.model, rc.plan, rc.job, c);
  CHECK(folded.folded_period_microbatches == 1);
  CHECK(folded.folded_periods == 116);
  CHECK(folded.folded_period_in_timeline);  // 11 and 12 micro-batches simulated, the 12th's timeline the proof
  check_folded_equals_whole(folded, whole);
}

TEST_CASE("a host-bound 1F1B step (Megatron-DeepSpeed, timers synchronizing every pass) proves its period too") {
  // Llama-2-7B's shape at tp 8, pp 4, 1,024-token sequences: the host issues slower than the GPU
  // runs, so each stage's host moves by the GPU's own shift, not less.
  RunConfig rc = import_megatron_args(
      "ds.args",
      "--num-layers 32 --hidden-size 4096 --num-attention-heads 32 --ffn-hidden-size 11008 --swiglu "
      "--seq-length 1024 --max-position-embeddings 4096 --vocab-size 32000 --micro-batch-size 1 "
      "--global-batch-size 128 --tensor-model-parallel-size 8 --pipeline-model-parallel-size 4 --bf16 "
      "--use-flash-attn --position-embedding-type rope --normalization RMSNorm");
  rc.plan.deepspeed_engine = true;
  resolve_layout(rc, 64);
  REQUIRE(rc.job.grad_accum == 64);
  const ClusterSpec c = load_cluster("h100-sxm-80gb");
  const auto [folded, whole] = folded_and_whole(rc.model, rc.plan, rc.job, c);
  CHECK(whole.host_bound);
  CHECK(folded.folded_period_microbatches == 1);
  CHECK(folded.folded_period_in_timeline);
  check_folded_equals_whole(folded, whole);
}

TEST_CASE("a dropless MoE 1F1B step (the dispatch reads its token counts on the host) proves its period too") {
  // Qwen3-30B-A3B on 64 H100: pp 4, tp 2 with SP, EP 8, 64 micro-batches. Each forward dispatch
  // ties the host to the GPU; the host ran ahead through the fill, so the window's first op is
  // issued early in its first unit: the host is held to the window's last move.
  const ModelSpec m = load_model("qwen3-30b-a3b");
  Plan p;
  p.runtime = Runtime::megatron;
  p.mesh.pp = 4;
  p.mesh.tp = 2;
  p.mesh.ep = 8;
  p.mesh.dp_replicate = 8;
  p.sequence_parallel = true;
  p.sharding = Sharding::zero3;  // a plan TOML's default: Megatron-FSDP, here over dp_shard 1
  Job j;
  j.seq_len = 4096;
  j.micro_batch = 1;
  j.global_batch = 512;
  j.grad_accum = 64;
  const ClusterSpec c = load_cluster("h100-sxm-80gb");
  const auto [folded, whole] = folded_and_whole(m, p, j, c);
  CHECK(folded.folded_period_microbatches == 1);
  CHECK(folded.folded_period_in_timeline);
  check_folded_equals_whole(folded, whole);
}

TEST_CASE("period_probe and repeats: GPT-3's 12-micro-batch step shows its period in its own timeline") {
  RunConfig rc = import_megatron_args(
      "gpt3.args",
      "--num-layers 96 --hidden-size 12288 --num-attention-heads 96 --seq-length 2048 --max-position-embeddings 2048 "
      "--vocab-size 50257 --micro-batch-size 1 --global-batch-size 24 --tensor-model-parallel-size 8 "
      "--pipeline-model-parallel-size 8 --bf16 --use-flash-attn --sequence-parallel --use-distributed-optimizer");
  resolve_layout(rc, 128);
  REQUIRE(rc.job.grad_accum == 12);  // pp + 4: the longest of the fine fold's steps
  const ClusterSpec c = load_cluster("h100-sxm-80gb");
  SimOptions timeline;
  timeline.keep_timeline = true;
  const SimulatedStep step = simulate_step(rc.model, rc.plan, rc.job, c, timeline);
  const std::optional<PeriodProbe> probe = period_probe(step.program);
  REQUIRE(probe);
  // 1F1B on pp 8 with 12 micro-batches: stage 0 warms up with 7 forwards, then runs 5 units of a
  // forward and a backward, the last of which receives no next forward; units 1, 2 and 3 of every
  // stage are probed, the same ops in each.
  REQUIRE(probe->stage_begin.size() == 9);
  CHECK(probe->unit_ops[0].size() == probe->unit_ops[2].size());
  CHECK(probe->unit_ops[0].size() == probe->stage_begin.back());
  for (std::size_t o = 0; o < probe->unit_ops[0].size(); ++o) {
    CHECK(step.program.ops[static_cast<std::size_t>(probe->unit_ops[0][o])].work ==
          step.program.ops[static_cast<std::size_t>(probe->unit_ops[2][o])].work);
  }
  const double tolerance = 1e-9;
  CHECK(repeats(*probe, step.timings, step.host_timings, tolerance));
  // The shift is the period: one more micro-batch lengthens the whole step by exactly that.
  const double shift = step.timings[static_cast<std::size_t>(probe->unit_ops[1][0])].start_seconds -
                       step.timings[static_cast<std::size_t>(probe->unit_ops[0][0])].start_seconds;
  RunConfig longer = rc;
  longer.job.global_batch += 2;
  longer.job.grad_accum += 1;
  SimOptions exact;
  exact.exact = true;
  const StepResult thirteen = simulate_step(longer.model, longer.plan, longer.job, c, exact).result;
  CHECK(thirteen.step_time_s - step.result.step_time_s == doctest::Approx(shift).epsilon(1e-9));
  // One op of the last unit moved by a microsecond more than the others: not periodic.
  std::vector<sim::TaskTiming> moved = step.timings;
  moved[static_cast<std::size_t>(probe->unit_ops[2][5])].end_seconds += 1e-6;
  CHECK_FALSE(repeats(*probe, moved, step.host_timings, tolerance));
  // A host thread falling behind the GPU's period would come to hold it back: refused.
  std::vector<sim::TaskTiming> slow_host = step.host_timings;
  for (std::size_t o = probe->stage_begin[0]; o < probe->stage_begin[1]; ++o)
    for (int k = 1; k < 3; ++k) {
      sim::TaskTiming& t = slow_host[static_cast<std::size_t>(probe->unit_ops[k][o])];
      t.start_seconds += k * 2 * shift;
      t.end_seconds += k * 2 * shift;
    }
  CHECK_FALSE(repeats(*probe, step.timings, slow_host, tolerance));
  // A GPipe schedule (every forward, then every backward) has no such units.
  RunConfig gpipe = rc;
  gpipe.plan.schedule = PipelineSchedule::gpipe;
  SimOptions gpipe_timeline;
  gpipe_timeline.keep_timeline = true;
  CHECK_FALSE(period_probe(simulate_step(gpipe.model, gpipe.plan, gpipe.job, c, gpipe_timeline).program));
}

TEST_CASE("fold_proven_steps: the second and third steps alone, once the period is shown") {
  const auto f = fine_fold_plan(pipeline(8), job(128));
  REQUIRE(f);
  REQUIRE(f->pass_pair_period);
  StepResult b, c;
  b.step_time_s = 5.5, c.step_time_s = 6.0;  // 11 and 12 micro-batches, 0.5 s each
  b.tokens_per_s = 22 * 4096 / 5.5, c.tokens_per_s = 24 * 4096 / 6.0;
  b.breakdown_s = {{"compute", 5.0}, {"bubble", 0.5}};
  c.breakdown_s = {{"compute", 5.5}, {"bubble", 0.5}};
  b.stages = c.stages = {StageTimeline{}};
  const auto r = fold_proven_steps(*f, b, c);
  REQUIRE(r);
  // 128 micro-batches: 6.0 + 116 x 0.5 = 64 s.
  CHECK(r->folded_periods == 116);
  CHECK(r->step_time_s == doctest::Approx(64.0));
  CHECK(r->breakdown_s.at("compute") == doctest::Approx(63.5));
  CHECK(r->tokens_per_s == doctest::Approx(256.0 * 4096 / 64.0));
  // Steps of different shapes do not fold, proof or not.
  StepResult c2 = c;
  c2.breakdown_s["other"] = 0.1;
  CHECK_FALSE(fold_proven_steps(*f, b, c2));
  c2 = c;
  c2.critical_stage = 1;
  CHECK_FALSE(fold_proven_steps(*f, b, c2));
}

TEST_CASE("fold_steps: figures that move alike extrapolate; one that does not refuses the fold") {
  const auto f = fold_plan(pipeline(1), job(24));
  REQUIRE(f);
  StepResult a, b, c;
  a.step_time_s = 1.0, b.step_time_s = 1.5, c.step_time_s = 2.0;  // 0.5 s per micro-batch
  // 2, 3 and 4 micro-batches of two replicas' sequences.
  a.tokens_per_s = 4 * 4096 / 1.0, b.tokens_per_s = 6 * 4096 / 1.5, c.tokens_per_s = 8 * 4096 / 2.0;
  c.tokens_per_s_per_gpu = c.tokens_per_s / 2;
  a.breakdown_s = {{"compute", 0.9}, {"other", 0.1}};
  b.breakdown_s = {{"compute", 1.4}, {"other", 0.1}};
  c.breakdown_s = {{"compute", 1.9}, {"other", 0.1}};
  a.stages = b.stages = c.stages = {StageTimeline{}};
  a.stages[0].peak_bytes = b.stages[0].peak_bytes = c.stages[0].peak_bytes = 5e10;
  const auto r = fold_steps(*f, a, b, c);
  REQUIRE(r);
  // 24 micro-batches: 2.0 + 20 x 0.5 = 12 s; 48 sequences of 4,096 tokens over it.
  CHECK(r->step_time_s == doctest::Approx(12.0));
  CHECK(r->breakdown_s.at("compute") == doctest::Approx(11.9));
  CHECK(r->breakdown_s.at("other") == doctest::Approx(0.1));
  CHECK(r->tokens_per_s == doctest::Approx(48.0 * 4096 / 12.0));
  CHECK(r->tokens_per_s_per_gpu == doctest::Approx(48.0 * 4096 / 12.0 / 2));
  CHECK(r->stages[0].peak_bytes == 5e10);
  CHECK(r->folded_periods == 20);
  // A peak that grows faster each period (not a steady state) refuses the fold.
  StepResult c2 = c;
  c2.stages[0].peak_bytes = 5.1e10;
  b.stages[0].peak_bytes = 5.05e10;
  CHECK(fold_steps(*f, a, b, c2));   // +0.05e10 per period: a straight line, extrapolated
  c2.stages[0].peak_bytes = 5.2e10;  // +0.05e10, then +0.15e10
  CHECK_FALSE(fold_steps(*f, a, b, c2));
  // A figure present in one step only refuses it too.
  StepResult c3 = c;
  c3.breakdown_s["bubble"] = 0.2;
  CHECK_FALSE(fold_steps(*f, a, b, c3));
}

TEST_CASE("folded steps of shipped plans equal the whole simulation: 1F1B, interleaved, uneven Megatron stages") {
  struct Case {
    const char* config;
    std::int64_t gpus;         // what the bundle was planned for (its file does not fix it)
    std::int64_t batch_scale;  // the example's batch made longer, so that it folds
    bool period_in_timeline;   // 1F1B shows its period of one micro-batch in its own timeline
  };
  const ClusterSpec c = load_cluster("h100-sxm-80gb");
  for (const Case& k : {Case{"plans/llama3.1-70b-64xh100/llama3.1-70b.toml", 64, 1, true},     // torchtitan 1F1B, pp 8
                        Case{"plans/llama3.1-70b-256xh100/llama3.1-70b.toml", 256, 4, false},   // torchtitan interleaved
                        Case{"plans/examples/plan-llama3.1-405b-megatron-pp16-vpp8.toml", 0, 8, false}}) {  // Megatron ceil split
    const std::string config = k.config;
    CAPTURE(config);
    RunConfig rc = load_run_config((test::data_root() / k.config).string());
    resolve_layout(rc, k.gpus > 0 ? std::optional<std::int64_t>{k.gpus} : std::nullopt);
    rc.job.global_batch *= k.batch_scale;
    rc.job.grad_accum *= k.batch_scale;
    if (rc.job.pp_microbatches > 0) rc.job.pp_microbatches *= k.batch_scale;
    const auto [folded, whole] = folded_and_whole(rc.model, rc.plan, rc.job, c);
    check_folded_equals_whole(folded, whole);
    CHECK(folded.folded_period_in_timeline == k.period_in_timeline);  // else three steps
  }
}

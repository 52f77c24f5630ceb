// Issue 15's layouts: Megatron's pipeline split rules (embedding and loss counted as layers,
// fixed first/last stage layers), every stage's real layer range with virtual stages,
// Megatron-FSDP and DeepSpeed ZeRO-3 memory and lowering, and the resolution of settings a run
// leaves to the runtime.
#include <doctest/doctest.h>

#include <algorithm>

#include <fmt/format.h>
#include <string>

#include "sim/step_simulator.hpp"
#include "spec/cluster_loader.hpp"
#include "import/config_loader.hpp"
#include "spec/model_loader.hpp"
#include "spec/pipeline_split.hpp"
#include "test_paths.hpp"
#include "workload/memory_estimate.hpp"
#include "workload/runtime_choices.hpp"
#include "workload/step_program.hpp"

using namespace meshplan;

namespace {

int sum(const std::vector<int>& v) {
  int s = 0;
  for (int x : v) s += x;
  return s;
}

Plan megatron(int pp, int vpp, int tp, int dp, Sharding sh) {
  Plan p;
  p.runtime = Runtime::megatron;
  p.mesh.pp = pp;
  p.mesh.vpp = vpp;
  p.mesh.tp = tp;
  p.mesh.dp_replicate = sh == Sharding::zero3 ? 1 : dp;
  p.mesh.dp_shard = sh == Sharding::zero3 ? dp : 1;
  p.schedule = vpp > 1 ? PipelineSchedule::interleaved_1f1b : PipelineSchedule::one_f_one_b;
  p.sharding = sh;
  p.reshard_after_forward = sh == Sharding::zero3;
  p.backward_prefetch = BackwardPrefetch::none;
  p.sequence_parallel = tp > 1;
  return p;
}

Job job(std::int64_t seq, std::int64_t mb, std::int64_t accum, std::int64_t dp) {
  Job j;
  j.seq_len = seq;
  j.micro_batch = mb;
  j.grad_accum = accum;
  j.global_batch = mb * accum * dp;
  return j;
}

}  // namespace

TEST_CASE("Megatron's split: 126 layers on pp 16 x vpp 8 with the embedding and the loss counted") {
  PipelineSplit rule;
  rule.embedding_as_layer = rule.loss_as_layer = true;
  const auto split = split_pipeline(126, 16, 8, rule);
  REQUIRE(split);
  // (126 + 2) / 128 = 1 per chunk; the first builds 1 - 1 = 0 decoder layers (the embedding
  // alone), the last 0 (the loss alone).
  REQUIRE(split->size() == 128);
  CHECK(split->front() == 0);
  CHECK(split->back() == 0);
  CHECK(std::count(split->begin(), split->end(), 1) == 126);
  CHECK(sum(*split) == 126);
  // Without the rule 126 does not divide into 128 chunks (nor does 128 with torchtitan's split).
  CHECK_FALSE(split_pipeline(126, 16, 8, PipelineSplit{}));

  const auto ranks = chunks_of_ranks(*split, 16);
  // Rank 0 holds model chunks 0, 16, ..., 112: the embedding, then layers 15, 31, ..., 111.
  REQUIRE(ranks[0].size() == 8);
  CHECK(ranks[0][0].n_layers == 0);
  for (int k = 1; k < 8; ++k) {
    CHECK(ranks[0][static_cast<std::size_t>(k)].first_layer == 16 * k - 1);
    CHECK(ranks[0][static_cast<std::size_t>(k)].n_layers == 1);
  }
  // Rank 5: chunks 5 + 16k hold layer 4 + 16k.
  for (int k = 0; k < 8; ++k) CHECK(ranks[5][static_cast<std::size_t>(k)].first_layer == 4 + 16 * k);
  // Rank 15: layers 14, 30, ..., 110, then the loss chunk (127) with no decoder layer.
  CHECK(ranks[15][6].first_layer == 110);
  CHECK(ranks[15][7].n_layers == 0);
}

TEST_CASE("Megatron's split: fixed first and last stage layers") {
  PipelineSplit rule;
  rule.first_stage_layers = 7;
  rule.last_stage_layers = 7;
  // 126 - 14 = 112 over the 14 middle stages: 8 each.
  const auto split = split_pipeline(126, 16, 1, rule);
  REQUIRE(split);
  CHECK(split->front() == 7);
  CHECK(split->back() == 7);
  CHECK((*split)[1] == 8);
  CHECK(sum(*split) == 126);
  // With vpp 2 every rank's count must divide by 2: 7 does not.
  SplitError why;
  CHECK_FALSE(split_pipeline(126, 16, 2, rule, &why));
  CHECK(why.field == "first_stage_layers");
  // 8 + 8 with vpp 2: middle (126 - 16) / 14 is not whole.
  rule.first_stage_layers = rule.last_stage_layers = 8;
  CHECK_FALSE(split_pipeline(126, 16, 2, rule, &why));
  // A first stage larger than the model, or no layer left for the others.
  rule = {};
  rule.first_stage_layers = 127;
  CHECK_FALSE(split_pipeline(126, 16, 1, rule, &why));
  CHECK(why.field == "first_stage_layers");
  CHECK(why.reason.find("the model has 126") != std::string::npos);
  rule.first_stage_layers = 126;
  CHECK_FALSE(split_pipeline(126, 16, 1, rule, &why));
  CHECK(why.reason.find("empty") != std::string::npos);
}

TEST_CASE("memory: every stage's real layer range with virtual stages (70B, pp 4 x vpp 2)") {
  const ModelSpec m = load_model("llama3.1-70b");
  const ClusterSpec c = load_cluster("h100-sxm-80gb");
  const Plan p = megatron(4, 2, 8, 1, Sharding::zero1);
  const MemoryEstimate e = estimate_memory(m, p, job(4096, 1, 8, 1), c);
  REQUIRE(e.stages.size() == 4);
  // 8 chunks of 10 layers; rank r holds chunks r and r + 4.
  std::vector<int> seen(80, 0);
  for (int r = 0; r < 4; ++r) {
    const StageMemory& s = e.stages[static_cast<std::size_t>(r)];
    CAPTURE(r);
    CHECK(s.first_layer == 10 * r);
    CHECK(s.n_layers == 20);
    REQUIRE(s.chunks.size() == 2);
    CHECK(s.chunks[0].first_layer == 10 * r);
    CHECK(s.chunks[1].first_layer == 40 + 10 * r);
    for (const LayerRange& ch : s.chunks)
      for (int l = ch.first_layer; l < ch.first_layer + ch.n_layers; ++l) ++seen[static_cast<std::size_t>(l)];
  }
  CHECK(std::count(seen.begin(), seen.end(), 1) == 80);  // layers 50-79 appear, each once
  CHECK(e.stages[0].holds_embedding);
  CHECK(e.stages[3].holds_loss);
}

TEST_CASE("the 405B Megatron fixture (pp 16 x vpp 8, embedding and loss counted) loads and simulates") {
  RunConfig rc = load_run_config((test::data_root() / "plans/examples/plan-llama3.1-405b-megatron-pp16-vpp8.toml").string());
  resolve_layout(rc, std::nullopt);
  CHECK(rc.plan.pipeline_split.embedding_as_layer);
  CHECK(rc.plan.pipeline_split.loss_as_layer);
  const ClusterSpec c = load_cluster("h100-sxm-80gb");
  const MemoryEstimate e = estimate_memory(rc.model, rc.plan, rc.job, c);
  REQUIRE(e.stages.size() == 16);
  CHECK(e.stages[0].n_layers == 7);
  CHECK(e.stages[0].first_layer == 15);
  CHECK(e.stages[0].chunks.front().n_layers == 0);  // the embedding's chunk
  CHECK(e.stages[1].n_layers == 8);
  CHECK(e.stages[1].first_layer == 0);
  CHECK(e.stages[15].n_layers == 7);
  CHECK(e.stages[15].first_layer == 14);
  CHECK(e.stages[15].chunks.back().n_layers == 0);  // the loss's chunk
  int total = 0;
  for (const auto& s : e.stages) total += s.n_layers;
  CHECK(total == 126);
  // The embedding's parameters sit on stage 0 and the head's on stage 15: each holds one layer
  // fewer than the middle stages, plus 128256 x 16384 / tp 8 vocabulary rows.
  const double block = (e.stages[1].params_per_rank) / 8;
  const double vocab_rows = 128256.0 * 16384 / 8;
  CHECK(e.stages[0].params_per_rank == doctest::Approx(7 * block + vocab_rows).epsilon(1e-6));
  const SimulatedStep sim = simulate_step(rc.model, rc.plan, rc.job, c);
  CHECK(sim.result.tokens_per_s_per_gpu > 0);
  CHECK(sim.result.stages.size() == 16);
}

TEST_CASE("Megatron-FSDP and DeepSpeed ZeRO-3: 16 P / N bytes of state per rank, units gathered and reduce-scattered") {
  const ModelSpec m = load_model("llama3.1-8b");
  const ClusterSpec c = load_cluster("h100-sxm-80gb");
  // Llama-3.1-8B: 8,030,261,248 parameters (untied head). ZeRO-3 over N = 8 ranks: fp32 master
  // (4) + fp32 gradient (4) + two fp32 moments (8) = 16 bytes per parameter, divided by N.
  const double expected_state = 16.0 * 8030261248.0 / 8;
  const Job j = job(4096, 1, 1, 8);
  const Plan ddp = megatron(1, 1, 1, 8, Sharding::zero1);
  const MemoryEstimate ref = estimate_memory(m, ddp, j, c);
  for (bool deepspeed : {false, true}) {
    CAPTURE(deepspeed);
    Plan p = megatron(1, 1, 1, 8, Sharding::zero3);
    p.deepspeed_engine = deepspeed;
    const MemoryEstimate e = estimate_memory(m, p, j, c);
    REQUIRE(e.stages.size() == 1);
    const MemoryBreakdown& b = e.stages[0].breakdown;
    CHECK(b.params + b.grads + b.optimizer == doctest::Approx(expected_state).epsilon(0.01));
    // Activations do not depend on the sharding: the distributed optimizer's run keeps the same.
    CHECK(b.activations == doctest::Approx(ref.stages[0].breakdown.activations).epsilon(1e-9));
    const double state_and_acts = b.params + b.grads + b.optimizer + b.activations;
    CHECK(state_and_acts == doctest::Approx(expected_state + ref.stages[0].breakdown.activations).epsilon(0.01));
    // One 8B block is 218,112,000 parameters: in a block's backward at most the current and the
    // prefetched unit (bf16) are gathered; in the loss's backward the output layer's group, its
    // 128,256 x 4,096 head plus the final norm (4,096).
    CHECK(b.unsharded_params <= std::max(2 * 2 * 218112000.0, 2 * (128256.0 * 4096 + 4096)) * 1.0001);
    CHECK(b.unsharded_params > 0);

    // The lowering: each block, the embedding and the [norm, output] group all-gathered before its
    // forward and again before its backward on the all-gather stream, reduce-scattered after its
    // backward on its own stream (32 blocks + 2 groups); no DDP all-reduce.
    const StepProgram prog = lower_step(m, p, j);
    int ag = 0, rs = 0, ar = 0;
    for (const Op& o : prog.expanded()) {
      if (o.category == OpCategory::fsdp_all_gather) {
        ++ag;
        CHECK(o.stream == StreamKind::fsdp_all_gather);
      }
      if (o.category == OpCategory::fsdp_reduce_scatter) {
        ++rs;
        CHECK(o.stream == StreamKind::fsdp_reduce_scatter);
      }
      if (o.category == OpCategory::dp_all_reduce || o.category == OpCategory::dp_reduce_scatter) ++ar;
    }
    CHECK(ag == 2 * (32 + 2));
    CHECK(rs == 32 + 2);
    CHECK(ar == 0);
    const SimulatedStep sim = simulate_step(m, p, j, c);
    CHECK(sim.result.tokens_per_s_per_gpu > 0);
  }
}

TEST_CASE("settings left to the runtime: the least recompute that fits, the largest micro-batch that fits") {
  const ClusterSpec c = load_cluster("h100-sxm-80gb");
  RunConfig rc;
  rc.model = load_model("llama3.1-8b");
  rc.plan = megatron(1, 1, 2, 4, Sharding::zero1);
  rc.job = job(8192, 2, 1, 4);
  rc.n_gpus = 8;
  // tp 2 x dp 4: about 30 GB of state per rank. No recompute at micro-batch 2 x 8192 tokens adds
  // about 47 GB of saved activations and does not fit; selective (core attention) with a fused
  // attention kernel saves nothing more; full recompute (2 GB of checkpoints) does.
  REQUIRE_FALSE(fits_device(rc.model, rc.plan, rc.job, c));
  rc.left_to_runtime.recompute = true;
  const RuntimeChoices r = resolve_runtime_choices(rc, c);
  CHECK(r.no_fit.empty());
  // Full recompute of a fraction of the layers (Megatron's block method) is less than full: the
  // resolution is the first rung that fits, and the one before it does not.
  REQUIRE(rc.plan.ac == AcMode::selective_layer);
  CHECK(fits_device(rc.model, rc.plan, rc.job, c));
  REQUIRE(r.assumptions.size() == 1);
  CHECK(r.assumptions[0].find(fmt::format("activation recompute not stated: full recompute of 1 layer in {}",
                                          rc.plan.ac_every_n)) != std::string::npos);
  if (rc.plan.ac_every_n < 8) {
    Plan lighter = rc.plan;
    lighter.ac_every_n = rc.plan.ac_every_n == 2 ? 3 : rc.plan.ac_every_n == 3 ? 4 : rc.plan.ac_every_n == 4 ? 6 : 8;
    CHECK_FALSE(fits_device(rc.model, lighter, rc.job, c));
  }
  CHECK_FALSE(rc.left_to_runtime.any());

  SUBCASE("micro-batch: the largest divisor of the per-rank batch that fits") {
    RunConfig mb = rc;
    mb.plan.ac = AcMode::none;
    mb.job = job(8192, 1, 32, 4);  // 32 sequences per rank
    mb.left_to_runtime.micro_batch = true;
    const RuntimeChoices rm = resolve_runtime_choices(mb, c);
    REQUIRE(rm.no_fit.empty());
    CHECK(32 % mb.job.micro_batch == 0);
    CHECK(mb.job.micro_batch * mb.job.grad_accum == 32);
    CHECK(mb.job.global_batch == 128);
    CHECK(fits_device(mb.model, mb.plan, mb.job, c));
    Job bigger = mb.job;
    bigger.micro_batch *= 2;
    bigger.grad_accum /= 2;
    if (bigger.grad_accum >= 1) CHECK_FALSE(fits_device(mb.model, mb.plan, bigger, c));
  }
  SUBCASE("Megatron with pipelines: its default micro-batch 1") {
    RunConfig pp = rc;
    pp.plan = megatron(2, 1, 1, 4, Sharding::zero1);
    pp.plan.ac = AcMode::full;
    pp.job = job(4096, 1, 16, 4);
    pp.left_to_runtime.micro_batch = true;
    const RuntimeChoices rp = resolve_runtime_choices(pp, c);
    REQUIRE(rp.no_fit.empty());
    CHECK(pp.job.micro_batch == 1);
    CHECK(rp.assumptions[0].find("Megatron has no default") != std::string::npos);
  }
  SUBCASE("nothing fits: the reason, and no assumption") {
    RunConfig big = rc;
    big.model = load_model("llama3.1-70b");
    big.plan = megatron(1, 1, 8, 1, Sharding::none);
    big.job = job(8192, 1, 8, 1);
    big.left_to_runtime.recompute = true;
    const RuntimeChoices rb = resolve_runtime_choices(big, c);
    CHECK(rb.assumptions.empty());
    CHECK(rb.no_fit.find("activation recompute") != std::string::npos);
  }
  SUBCASE("sharding: the framework default first, the next ZeRO stage only when nothing else fits") {
    RunConfig sh = rc;
    sh.model = load_model("llama3.1-70b");
    sh.plan = megatron(1, 1, 8, 8, Sharding::none);  // 64 GPUs, plain DDP does not hold 70B / 8
    sh.plan.ac = AcMode::full;
    sh.job = job(4096, 1, 1, 8);
    sh.left_to_runtime.sharding = true;
    const RuntimeChoices rs = resolve_runtime_choices(sh, c);
    REQUIRE(rs.no_fit.empty());
    CHECK(sh.plan.sharding != Sharding::none);
    CHECK(fits_device(sh.model, sh.plan, sh.job, c));
    CHECK(rs.assumptions[0].find("sharding not stated") != std::string::npos);
  }
}

TEST_CASE("chunks that hold only the embedding or only the loss lower and simulate under every runtime") {
  ModelSpec m = load_model("llama3.1-8b");
  m.n_layers = 6;  // (6 + 2) / (pp 4 x vpp 2) = 1 per chunk: chunk 0 and chunk 7 hold no decoder layer
  const ClusterSpec c = load_cluster("h100-sxm-80gb");
  struct Variant {
    const char* name;
    Runtime runtime;
    bool deepspeed;
    Sharding sharding;
  };
  for (const Variant& v : {Variant{"megatron", Runtime::megatron, false, Sharding::zero1},
                           Variant{"megatron-deepspeed", Runtime::megatron, true, Sharding::zero1},
                           Variant{"torchtitan fsdp", Runtime::torchtitan_fsdp2, false, Sharding::zero3},
                           Variant{"generic ddp", Runtime::generic, false, Sharding::none}}) {
    CAPTURE(v.name);
    Plan p = megatron(4, 2, 1, 2, v.sharding);
    p.runtime = v.runtime;
    p.deepspeed_engine = v.deepspeed;
    p.pipeline_split.embedding_as_layer = p.pipeline_split.loss_as_layer = true;
    const Job j = job(2048, 1, 8, 2);
    const StepProgram prog = lower_step(m, p, j);
    // No dependency on a missing op, and the head's forward runs once per micro-batch.
    int head = 0;
    for (const Op& o : prog.expanded()) {
      for (int d : o.deps) REQUIRE(d >= 0);
      if (o.kind != OpKind::compute || o.category != OpCategory::compute) continue;
      if (o.gemms.size() == 1 && o.gemms[0].n == static_cast<std::int64_t>(m.vocab)) ++head;
    }
    CHECK(head == 8);
    const SimulatedStep sim = simulate_step(m, p, j, c);
    CHECK(sim.result.tokens_per_s_per_gpu > 0);
    const MemoryEstimate e = estimate_memory(m, p, j, c);
    CHECK(e.stages[0].n_layers == 1);  // chunk 4 holds layer 3; chunk 0 the embedding alone
    CHECK(e.stages[3].n_layers == 1);  // chunk 3 holds layer 2; chunk 7 the loss alone
  }
}

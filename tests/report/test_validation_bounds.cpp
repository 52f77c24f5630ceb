// The current accuracy of meshplan against the published measurements in ../shared/validation.
// The bounds are the values measured when this test was last tightened plus a margin of about a
// tenth (so that an unrelated change in the last digit does not fail it); they may only be
// tightened (issue 5: targets 10 % overall, 15 % per source, memory 10 %). The test
// validation_bounds_tightest holds them to the tightest each has had
// (validation_bounds_tightest.txt): a bound above it is one whose raise, and why, is recorded there.
// Measured (2026-12-01, second session): dev.csv tokens/s MAPE 6.2 % over 184 rows; per source
// llm-foundry 5.2, korthikanti2022 4.4, megatron-sc21 4.2, megatron-lm-h100 9.8, nemo-24.07 7.3,
// bloom-176b 46.5; memory.csv peak-memory MAPE 12.3 % over 41 runs (worst row -49.6 %, the 2D
// TP x FSDP2 run). Runs the memory model says could not have run: 6 of 184 dev rows (NeMo rows
// whose recompute setting is unknown), 0 of 47 memory rows; before llm-foundry's loss was priced
// as the fused kernel it runs, 68 of its 139 runs were "out of memory" though they ran.
// Issue 15 (2026-12-02): unpublished recompute / micro-batch / sharding resolved as a tuned run
// does: dev.csv 6.46 % over 183 rows, 0 out of memory (6 before), nemo-24.07 10.8 % (the rows that
// now recompute part of their layers are under-predicted), megatron-lm-h100 10.8 % (micro-batch 4
// where it fits); memory.csv unchanged, 0 out of memory.
// memory.csv (2026-12-02, issue 16: one memory model shared with the timeline, FSDP root unit,
// activation offload, chunked cross-entropy and optimizer-in-backward from the row's columns):
// per-run MAPE 10.0 % (torchtune-readme 8.6 %, two of its rows still +20 %: foreach AdamW's
// temporaries where torchtune configures fused AdamW, and the 70B CPU-offload run). Then (same
// day) the unnamed trainers' optimizer implementation resolved as a tuned run sets it (fused AdamW)
// and an unknown memory metric compared with the nearer end of [allocated, reserved]: 9.06 %,
// every torchtune row within +-7.1 %.
// dev-vtrain.csv (2026-12-02, host thread in the simulation): tokens/s MAPE 9.8 % over 720 rows,
// bias -0.65 %, p90 19.6 % (before the host model: 25.7 %, +22 %, p90 67 %).
#include <doctest/doctest.h>

#include <fmt/format.h>

#include <cmath>
#include <filesystem>
#include <map>
#include <string>

#include "validate/cross_validation.hpp"
#include "validate/validation.hpp"
#include "test_paths.hpp"

using namespace meshplan;

namespace {

// Issue 15's acceptance: the overall dev.csv MAPE stays within 6.5 % once unpublished settings are
// resolved. Measured 2026-12-02 with every branch merged (usable device memory, one memory model,
// resolution, measured profiles): 6.38 % over 184 rows (the 185th, opt175b, publishes no batch).
// 2026-12-07: BLOOM-176B's rows on the network their source documents (Jean Zay: 4 Omni-Path links
// of 100 Gb/s per node, not the A100 profile's 8 x 200 Gb/s; validation_row.cpp kStatedNetworks):
// dev.csv 5.86 -> 5.50 %, tightened 6.3 -> 5.6.
constexpr double kDevTokensMapeBoundPct = 5.6;
constexpr int kDevRowsCompared = 184;
constexpr int kDevUnresolvedSkipsBound = 0;
// Per source. bloom-176b (3 rows, two of them bubble-bound at the start of the batch ramp-up) is
// outside the 15 % target; its bound records where it stands. megatron-lm-h100 moved from 9.8 to
// 12.6 % when Megatron's attention became Transformer Engine's cuDNN fused attention on Hopper
// (issue 17, measured kernel curves; was FA2): its two small weak-scaling rows (1.7B, 7.1B at
// seq 2048) were already +19 % and are now +27-29 %; NeMo went from 7.3 to 5.8 %. With the
// unpublished micro-batch resolved to the largest that fits (issue 15) the small weak-scaling
// rows run micro-batch 4 and megatron-lm-h100 stands at 14.5 % (bound raised, not tightened: the
// kernel choice is the framework's, and the H100 profile's sustained-clock factor, fitted when
// attention was priced as FA2, is the suspect; docs/validation.md). nemo-24.07 8.3 %, then 9.0 %
// with the FP8 casts at copy bandwidth (its FP8 rows' bias -4 -> -1.6 %), 8.9 % with delayed
// scaling's amax all-reduce.
// megatron-sc21, raised to 4.5 when GEMMs were priced with their tile overhead, is back at its
// tightest 4.3 (4.16 % on 2026-12-03).
// Issue 31 (2026-12-04): GEMMs priced by their tile schedule (waves, stream-K, the fixed latency
// once) and the H100/H200 sustained clock measured (0.836 on the lent H200 at 700 W, replacing the
// 0.9 fitted while attention was FA2 and GEMMs equivalent squares, the suspect named above):
// megatron-lm-h100 13.5 -> 9.9 %, back to its tightest bound 11; dev.csv 6.37 -> 6.27 %,
// korthikanti2022 4.40 -> 4.28, llm-foundry 5.04 -> 5.22, megatron-sc21 4.16 -> 4.28, nemo-24.07
// 8.88 -> 8.48, bloom-176b 46.1 -> 45.2; dev-vtrain 9.72 % / -0.04 % -> 9.75 % / -0.07 % with
// the Megatron-DeepSpeed host factor refitted 8 -> 8.2; dev-moe 15.31 -> 15.38 %; memory.csv
// 9.06 % unchanged.
// Issue 31 (2026-12-04, second session): a simulated op keeps each GEMM's and attention kernel's
// fixed per-kernel latency as GPU time (the GEMM model is calibrated on times that hold it; the
// H200's hidden-1024 layer GEMMs were 19 % too fast without it): dev.csv 6.27 -> 6.23 % (bound
// tightened 6.5 -> 6.3), llm-foundry 5.22 -> 5.15, nemo-24.07 8.48 -> 8.42, megatron-sc21 4.28 ->
// 4.23, bloom-176b 45.20 -> 45.05, megatron-lm-h100 9.93 -> 10.03, korthikanti2022 4.27 -> 4.44
// (bias -2.7 %: too slow, as the element-wise fraction's refit conflict says, docs/validation.md);
// dev-vtrain 9.75 -> 9.46 %, bias +1.9 -> +1.7 % with the DeepSpeed factor refitted 7.773 ->
// 7.684; dev-moe 15.38 -> 15.33 %; memory.csv 9.06 % unchanged.
// 2026-12-07: bloom-176b on its documented network (Omni-Path, a quarter of the profile's NIC
// bandwidth): +12.5 / +78.4 / +46.9 -> +5.3 / +41.6 / +24.6 %, MAPE 45.9 -> 23.8, tightened 51 -> 24.
const std::map<std::string, double> kDevSourceMapeBoundPct = {
    {"llm-foundry", 5.5},       {"korthikanti2022", 4.5}, {"megatron-sc21", 4.3},
    {"megatron-lm-h100", 11.0}, {"nemo-24.07", 9.2},      {"bloom-176b", 24.0},
};
// Issue 16's acceptance: per-run memory MAPE <= 10 % and no torchtune row beyond +-15 %.
constexpr double kMemoryMapeBoundPct = 10.0;
constexpr double kTorchtuneRowMemoryBoundPct = 15.0;
// memory.csv's throughput (22 runs that publish it): 8.4 % while torchao's float8-README runs were
// simulated on the 700 W H100 80GB (+23...+34 %); 5.0 % since validate places them on the fleet
// torchao documents, Meta's 500 W H100 96GB (2026-12-07); 4.5 % (4.46) since the README's ZeRO-2 rows
// (dp_replicate = #dp) shard over their data-parallel ranks and simulate its all-gathers and
// reduce-scatters, which they skipped (a shard group of one rank).
constexpr double kMemoryTokensMapeBoundPct = 4.5;
// Issue 14's targets for the small-model Megatron-DeepSpeed runs, where host dispatch dominates.
constexpr double kVtrainTokensMapeBoundPct = 10.0;
constexpr double kVtrainBiasBoundPct = 3.0;
constexpr int kVtrainRowsCompared = 720;
// Published runs ran, so they fit. Since unpublished recompute, micro-batch and sharding are
// resolved as a tuned run settles them (issue 15), no dev row is "out of memory" (6 before: NeMo
// rows whose recompute was assumed to be none).
constexpr int kDevPredictedOutOfMemoryBound = 0;

// No row is skipped because a setting it does not publish could not be resolved (beyond `bound`
// rows whose published settings alone do not fit).
void check_no_unresolved_skips(const ValidationReport& rep, int bound = 0) {
  int unresolved = 0;
  for (const ValidationRowResult& r : rep.rows) {
    CAPTURE(r.id);
    if (r.skipped.find("no resolution of the unstated") != std::string::npos) ++unresolved;
    CHECK(r.skipped.find("batch split is unknown") == std::string::npos);
  }
  CHECK(unresolved <= bound);
}

// dev-moe.csv (issue 15: every row compared, MAPE <= 15 %; not met yet). Measured 2026-12-02 on
// the moe branch: 16 of 17 rows compared, tokens/s-or-TFLOP/s MAPE 25.8 %. The row left is
// pp 32 x vpp 3 with 94 layers, Megatron's split counting the embedding and the loss (another
// part of issue 15); the large errors are the GB200/GB300 rows (attention borrowed from H100
// curves, MXFP8 through the FP8 curve, activation offload) and the cross-node EP rows (DeepEP's
// node deduplication is not modeled): docs/validation.md.
// After the merge (2026-12-02): all 17 rows compared (the pp 32 x vpp 3 row with the embedding and
// loss counted as layers, Megatron's only split for 94 layers), MAPE 23.0 %. Then (same day) a
// group spanning trays of one NVL72 rack simulated on NVLink instead of the trays' NICs (GB200 bf16
// -30.6 -> -4.9 %, GB300 -20.9 -> -10.8 % with the measured MXFP8 curve), and the dispatcher
// resolved to Megatron-Core's flex dispatcher, which crosses the network once per remote domain
// (the cross-node EP 32 rows -26.3 / -34.2 -> +4.0 / -7.1 %): MAPE 17.2 %, bias +1.9 %. Left: the
// TP 4 row +81 %, the pp 32 row +40 %, the GB200 MXFP8 rows -42 / -28 %, one dropless row +21 %.
// Then the GB200 MXFP8 row's unstated offload scope resolved to Megatron's least fine-grained
// offload that fits (expert_fc1 + moe_act, what the run's command line used; the offload stall
// 2.1 -> 0.45 s: -42.3 -> -27.6 %) and the GB200/GB300 attention at B200's measured attention
// throttle 0.86 instead of GB200's FP8-GEMM 0.78 (128k row -27.7 -> -22.0 %, GB300 -10.8 ->
// -12.3 %): MAPE 16.0 %, bias +3.1 %. Then Transformer Engine's FP8/FP4 linears keep their
// inputs quantized for the weight gradient (MXFP8: 1 + 1/32 bytes per element instead of 2): the
// 128k GB200 row fits (no run predicted out of memory), the MXFP8 row -25.0 %: MAPE 15.8 %. Then
// the flex dispatcher deduplicates per destination rank as well as per domain (DeepEP's
// is_token_in_rank: 5.34 copies per token instead of 8 for EP 8 with 16 experts a rank), which
// moves the rows whose errors are not about the dispatcher the wrong way (TP 4 +81 -> +87 %, the
// pp 32 row, whose notes name the plain all-to-all, +40 -> +42 %): MAPE 16.1 %. Then context
// parallelism's query slices masked only on their diagonal blocks, the rest at the full-mask rate
// (the forced-balance long-context rows -5.7 / -9.4 / -10.6 -> -4.3 / -6.5 / -6.6 %, their
// dropless twins up as much): MAPE 15.8 %, bias +5.3 %. Then the low-precision casts at copy
// bandwidth (MXFP8 rows -25 / -21 / -12 -> -22 / -20 / -8 %): MAPE 15.4 %. Then the dropless
// dispatch's host wait for the token counts (DeepEP; HybridEP on the NVL72 rows does not wait):
// MAPE 15.36 %, bias +5.7 %. Left beyond the columns: the dispatcher and the all-to-all overlap
// (notes only), router imbalance (dropless vs forced-balance rows share every column).
// Then (issue 31) grouped expert GEMMs priced as the persistent grouped kernel runs them (each
// expert's 256-row cluster steps, twice the tile's fixed cost, no stream-K) and the trained
// router's load imbalance on the dropless rows (the most-loaded EP rank's rows and all-to-all
// bytes, framework.moe_router_load_cv fitted 0.561 on this file), the five main H100 rows, whose
// routing is not stated, read as force-balanced like every printed benchmark command of the
// source: from main's 15.3 % (801f942) the dropless rows +17 / +10 / +2 / -4 -> +5 / +1 / -5 / -8 %,
// the TP 4 and pp 32 rows +80 / +38 -> +65 / +33 %, the forced-balance twins and the EP 32 / FSDP
// rows 1-3 points slower (-6..-12 -> -9..-13 %; +1 / -10 / -6 -> -2 / -13 / -8 %): MAPE 14.2 %.
// Tightened 15.5 -> 14.5.
// Then GB200's BF16 work at B200's measured BF16 sustained clock 0.86 instead of GB200's FP8
// GEMM figure 0.78, which now prices only FP8/FP4 GEMMs (GB200 BF16 row -8.3 -> -3.8 %, MXFP8
// -23.1 -> -22.7 %; 13.5 -> 13.2 %), and Megatron-Core's expert all-to-all overlap, read from the
// notes of the three rows that ran it (EP 32 + 1F1B overlap -14.7 -> +12.7 %, GB200 MXFP8
// -22.7 -> -10.3 %, GB300 MXFP8 -9.1 -> +17.8 %): MAPE 12.9 %, bias -3.6 -> +0.7 %. Tightened
// 14.5 -> 13.0. Then the dispatcher the notes name (the pp 32 row's plain all-to-all, priced as
// DeepEP's deduplicated dispatch before: +18.4 -> +17.2 %): MAPE 12.82 %. Tightened 13.0 -> 12.9.
// 2026-12-07: the Blackwell sustained clocks carried between power caps with power ~ f^3
// (GB200's BF16 work 0.86 -> 0.914 at 1200 W, GB300's attention 0.86 -> 0.962 at 1400 W): the
// GB200 rows -3.8 / -10.3 / -19.8 -> -0.4 / -9.4 / -15.9 %, the GB300 row +17.8 -> +19.9 %:
// MAPE 12.46 %, bias +1.2 %. Tightened 12.9 -> 12.5.
// 2026-12-07 (thirteenth session): Megatron-Core's MoE layer launch by launch (its unfused
// router, token bookkeeping and permutation op by op, one cuBLAS GEMM per local expert;
// workload/moe_launches.hpp): EP 32 + 1F1B overlap +12.7 -> +12.3 %, EP 8 x pp 32 +17.2 -> +15.9 %,
// EP 8 x TP 4 +60.3 -> +52.2 %, every other row unchanged: MAPE 11.89 %, bias +0.6 %. Tightened
// 12.5 -> 11.9.
constexpr int kMoeRowsCompared = 17;
constexpr int kMoeRowsSkippedBound = 0;
constexpr double kMoeMapeBoundPct = 11.9;

// Issue 29's acceptance: leave one source out over dev.csv + dev-vtrain.csv + dev-moe.csv, refit the
// declared parameters on the others, predict the source left out; row-weighted held-out MAPE <= 10 %.
// Measured 2026-12-04 (element-wise fraction, Megatron-DeepSpeed factor; the H100 SXM clock now
// measured, not fitted): held out 9.5 % over 921 runs (in sample 8.9 %, shipped 9.1 %); per source
// held out: bloom-176b 42.6, korthikanti2022 5.3, llm-foundry 4.7, megatron-lm-h100 9.3,
// megatron-moe-modelzoo 15.5, megatron-sc21 5.0, nemo-24.07 8.3, vtrain 10.3. Tightened to 9.9.
// 2026-12-06: a fold keeps a parameter's prior unless its training rows pin it to +-25 % of the
// value it would use within its bounds (not of the unconstrained step: BLOOM's three rows asked the
// dev-vtrain fold for a DeepSpeed factor of 1657 +- 394 and got the bound 20, 29.9 % held out).
// Held out 8.9 % (in sample 8.6, shipped 8.6); vtrain 9.5, megatron-moe-modelzoo 13.5,
// llm-foundry 4.8. Tightened to 9.8.
// Then the expert all-to-all overlap on the three dev-moe rows that ran it: held out 9.3 % (in
// sample 8.6, shipped 8.6); vtrain 9.6 -> 10.1 (its fold's element-wise fraction 0.586 -> 0.558,
// pulled by the two MoE rows now too fast), megatron-moe-modelzoo 13.2 -> 12.9 (12.8 with the
// dispatcher the notes name). Within the bound.
// 2026-12-07: BLOOM-176B on its documented network: held out 8.9 % (in sample 8.5, shipped 8.5;
// bloom-176b 23.9). Tightened to 9.0.
constexpr double kCrossValidatedMapeBoundPct = 9.0;
constexpr int kCrossValidatedRowsCompared = 921;
// The shipped value of every parameter tests/regen_fits.sh refits equals what the fit gives.
constexpr double kShippedFitRelativeTolerance = 0.005;

ValidationReport run(const char* name) {
  const auto path = test::shared_root() / "validation" / name;
  const ValidationReport rep = run_validation_file(path.string(), ValidationOptions{});
  MESSAGE(fmt::format("\n{} ({:.2f} s)\n{}", name, rep.wall_s, validation_group_table(rep)));
  return rep;
}

}  // namespace

TEST_CASE("dev.csv: tokens/s MAPE within the current bound" * SKIP_UNLESS_SHARED("validation/dev.csv")) {
  const ValidationReport rep = run("dev.csv");
  REQUIRE(rep.summary.mape_pct.has_value());
  CHECK(rep.summary.n >= kDevRowsCompared);
  CHECK(*rep.summary.mape_pct <= kDevTokensMapeBoundPct);
  CHECK(rep.summary.predicted_out_of_memory <= kDevPredictedOutOfMemoryBound);
  check_no_unresolved_skips(rep, kDevUnresolvedSkipsBound);
  for (const ValidationSummary& g : rep.groups) {
    // Every llm-foundry configuration is fully published and ran: each must fit.
    if (g.group == "llm-foundry") CHECK(g.predicted_out_of_memory == 0);
    const auto bound = kDevSourceMapeBoundPct.find(g.group);
    if (bound == kDevSourceMapeBoundPct.end()) continue;  // no compared rows (opt-175b)
    CAPTURE(g.group);
    REQUIRE(g.mape_pct.has_value());
    CHECK(*g.mape_pct <= bound->second);
  }
}

TEST_CASE("memory.csv: peak-memory MAPE (per run) within the current bound" *
          SKIP_UNLESS_SHARED("validation/memory.csv")) {
  const ValidationReport rep = run("memory.csv");
  REQUIRE(rep.summary.memory_mape_pct.has_value());
  CHECK(rep.summary.memory_rows > 0);
  CHECK(*rep.summary.memory_mape_pct <= kMemoryMapeBoundPct);
  REQUIRE(rep.summary.mape_pct.has_value());
  CHECK(*rep.summary.mape_pct <= kMemoryTokensMapeBoundPct);
  CHECK(rep.summary.predicted_out_of_memory == 0);
  check_no_unresolved_skips(rep);
  int torchtune_rows = 0;
  for (const auto& r : rep.rows) {
    if (r.source != "torchtune-readme" || !r.memory_error_pct) continue;
    ++torchtune_rows;
    CHECK_MESSAGE(std::abs(*r.memory_error_pct) <= kTorchtuneRowMemoryBoundPct, r.id, " ", *r.memory_error_pct);
  }
  CHECK(torchtune_rows == 8);
}

TEST_CASE("dev-vtrain.csv: small-model runs within the host-model bounds" *
          SKIP_UNLESS_SHARED("validation/dev-vtrain.csv")) {
  const ValidationReport rep = run("dev-vtrain.csv");
  REQUIRE(rep.summary.mape_pct.has_value());
  REQUIRE(rep.summary.mean_error_pct.has_value());
  CHECK(rep.summary.n == kVtrainRowsCompared);
  CHECK(*rep.summary.mape_pct <= kVtrainTokensMapeBoundPct);
  CHECK(std::abs(*rep.summary.mean_error_pct) <= kVtrainBiasBoundPct);
}

TEST_CASE("dev-moe.csv: MoE rows compared, MAPE within the current bound" *
          SKIP_UNLESS_SHARED("validation/dev-moe.csv")) {
  const ValidationReport rep = run("dev-moe.csv");
  REQUIRE(rep.summary.mape_pct.has_value());
  CHECK(rep.summary.skipped <= kMoeRowsSkippedBound);
  CHECK(rep.summary.throughput_skipped == 0);
  CHECK(rep.summary.n >= kMoeRowsCompared);
  CHECK(*rep.summary.mape_pct <= kMoeMapeBoundPct);
  CHECK(rep.summary.predicted_out_of_memory == 0);  // every one of these runs ran
  // The GB200 MXFP8 run offloads activations without saying which: resolved, and written down.
  bool resolved = false;
  for (const auto& r : rep.rows)
    if (r.id == "megatron-moe-modelzoo-qwen3-235b-a22b-gb200-256g-mxfp8")
      for (const auto& a : r.assumptions)
        resolved = resolved || (a.rfind("activation offload scope not stated: fine-grained offload of ", 0) == 0 &&
                                a.find("expert_fc1") != std::string::npos && a.find("moe_act") != std::string::npos);
  CHECK(resolved);
}

TEST_CASE("dev sets cross-validated by source: held-out MAPE within the bound; shipped fits are what the fit gives" *
          SKIP_UNLESS_SHARED("validation/dev-moe.csv")) {
  MeasuredRuns runs;
  for (const char* f : {"dev.csv", "dev-vtrain.csv", "dev-moe.csv"})
    runs.tables.push_back(read_csv_table((test::shared_root() / "validation" / f).string()));
  const CrossValidation cv = cross_validate(runs, GroupBy::source, {});
  MESSAGE(cross_validation_text(cv));
  CHECK(cv.n >= kCrossValidatedRowsCompared);
  CHECK(cv.mape_pct <= kCrossValidatedMapeBoundPct);
  // The joint refit tests/regen_fits.sh ships (the element-wise fraction and the Megatron-DeepSpeed
  // factor): each value is the shipped one.
  FitOptions joint;
  joint.parameters = {&fitted_parameter("elementwise_fraction", "test"), &fitted_parameter("deepspeed_op_factor", "test")};
  const RunsFit shipped = fit_runs(runs, joint);
  for (const ParameterFit& f : shipped.parameters) {
    CAPTURE(f.parameter->name);
    REQUIRE(f.identifiable);
    CHECK(std::fabs(f.value - f.prior) <= kShippedFitRelativeTolerance * f.prior);
  }
  // The trained MoE router's load spread, refitted on dev-moe.csv alone (tests/regen_fits.sh).
  MeasuredRuns moe_runs;
  moe_runs.tables.push_back(read_csv_table((test::shared_root() / "validation" / "dev-moe.csv").string()));
  FitOptions only_router;
  only_router.parameters = {&fitted_parameter("moe_router_load_cv", "test")};
  const RunsFit router = fit_runs(moe_runs, only_router);
  REQUIRE(router.parameters.size() == 1);
  REQUIRE(router.parameters[0].identifiable);
  CHECK(std::fabs(router.parameters[0].value - router.parameters[0].prior) <=
        kShippedFitRelativeTolerance * router.parameters[0].prior);
  // The 500 W H100 96GB's sustained clock, fitted on the dev runs on that part (memory.csv: torchtitan
  // PR #165's and torchao's float8 README's).
  MeasuredRuns memory_runs;
  memory_runs.tables.push_back(read_csv_table((test::shared_root() / "validation" / "memory.csv").string()));
  FitOptions only_clock;
  only_clock.parameters = {&fitted_parameter("sustained_clock_fraction", "test")};
  for (const ParameterFit& f : fit_runs(memory_runs, only_clock).parameters) {
    CAPTURE(f.parameter->name);
    REQUIRE(f.identifiable);
    CHECK(f.runs == 8);  // torchtitan PR #165's five compiled runs, torchao's three
    CHECK(std::fabs(f.value - f.prior) <= kShippedFitRelativeTolerance * f.prior);
  }
}

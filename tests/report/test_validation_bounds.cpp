// The current accuracy of meshplan against the published measurements in ../shared/validation.
// The bounds are the values measured when this test was last tightened plus a margin of about a
// tenth (so that an unrelated change in the last digit does not fail it); they may only be
// tightened (issue 5: targets 10 % overall, 15 % per source, memory 10 %).
// Measured (2026-12-01, second session): dev.csv tokens/s MAPE 6.2 % over 184 rows; per source
// llm-foundry 5.2, korthikanti2022 4.4, megatron-sc21 4.2, megatron-lm-h100 9.8, nemo-24.07 7.3,
// bloom-176b 46.5; memory.csv peak-memory MAPE 12.3 % over 41 runs (worst row -49.6 %, the 2D
// TP x FSDP2 run). Runs the memory model says could not have run: 6 of 184 dev rows (NeMo rows
// whose recompute setting is unknown), 0 of 47 memory rows; before llm-foundry's loss was priced
// as the fused kernel it runs, 68 of its 139 runs were "out of memory" though they ran.
// memory.csv (2026-12-02, issue 16: one memory model shared with the timeline, FSDP root unit,
// activation offload, chunked cross-entropy and optimizer-in-backward from the row's columns):
// per-run MAPE 10.0 % (torchtune-readme 8.6 %, two of its rows still +20 %: foreach AdamW's
// temporaries where torchtune configures fused AdamW, and the 70B CPU-offload run).
// dev-vtrain.csv (2026-12-02, host thread in the simulation): tokens/s MAPE 9.8 % over 720 rows,
// bias -0.65 %, p90 19.6 % (before the host model: 25.7 %, +22 %, p90 67 %).
#include <doctest/doctest.h>

#include <fmt/format.h>

#include <cmath>
#include <filesystem>
#include <map>
#include <string>

#include "report/validation.hpp"
#include "test_paths.hpp"

using namespace meshplan;

namespace {

constexpr double kDevTokensMapeBoundPct = 6.8;
constexpr int kDevRowsCompared = 184;
// Per source. bloom-176b (3 rows, two of them bubble-bound at the start of the batch ramp-up) is
// outside the 15 % target; its bound records where it stands.
const std::map<std::string, double> kDevSourceMapeBoundPct = {
    {"llm-foundry", 5.5},       {"korthikanti2022", 4.5}, {"megatron-sc21", 4.5},
    {"megatron-lm-h100", 11.0}, {"nemo-24.07", 7.5},      {"bloom-176b", 51.0},
};
constexpr double kMemoryMapeBoundPct = 11.0;
// Issue 14's targets for the small-model Megatron-DeepSpeed runs, where host dispatch dominates.
constexpr double kVtrainTokensMapeBoundPct = 10.0;
constexpr double kVtrainBiasBoundPct = 3.0;
constexpr int kVtrainRowsCompared = 720;
// Published runs ran, so they fit. The dev rows the model says could not have: NeMo rows whose
// activation recompute is not published (none is assumed).
constexpr int kDevPredictedOutOfMemoryBound = 6;

ValidationReport run(const char* name) {
  const auto path = test::shared_root() / "validation" / name;
  const ValidationReport rep = run_validation_file(path.string(), ValidationOptions{});
  MESSAGE(fmt::format("\n{} ({:.2f} s)\n{}", name, rep.wall_s, validation_group_table(rep)));
  return rep;
}

}  // namespace

TEST_CASE("dev.csv: tokens/s MAPE within the current bound") {
  if (!std::filesystem::exists(test::shared_root() / "validation" / "dev.csv")) {
    MESSAGE("skipped: ../shared/validation is absent");
    return;
  }
  const ValidationReport rep = run("dev.csv");
  REQUIRE(rep.summary.mape_pct.has_value());
  CHECK(rep.summary.n >= kDevRowsCompared);
  CHECK(*rep.summary.mape_pct <= kDevTokensMapeBoundPct);
  CHECK(rep.summary.predicted_out_of_memory <= kDevPredictedOutOfMemoryBound);
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

TEST_CASE("memory.csv: peak-memory MAPE (per run) within the current bound") {
  if (!std::filesystem::exists(test::shared_root() / "validation" / "memory.csv")) {
    MESSAGE("skipped: ../shared/validation is absent");
    return;
  }
  const ValidationReport rep = run("memory.csv");
  REQUIRE(rep.summary.memory_mape_pct.has_value());
  CHECK(rep.summary.memory_rows > 0);
  CHECK(*rep.summary.memory_mape_pct <= kMemoryMapeBoundPct);
  CHECK(rep.summary.predicted_out_of_memory == 0);
}

TEST_CASE("dev-vtrain.csv: small-model runs within the host-model bounds") {
  if (!std::filesystem::exists(test::shared_root() / "validation" / "dev-vtrain.csv")) {
    MESSAGE("skipped: ../shared/validation is absent");
    return;
  }
  const ValidationReport rep = run("dev-vtrain.csv");
  REQUIRE(rep.summary.mape_pct.has_value());
  REQUIRE(rep.summary.mean_error_pct.has_value());
  CHECK(rep.summary.n == kVtrainRowsCompared);
  CHECK(*rep.summary.mape_pct <= kVtrainTokensMapeBoundPct);
  CHECK(std::abs(*rep.summary.mean_error_pct) <= kVtrainBiasBoundPct);
}

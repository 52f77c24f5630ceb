// The current accuracy of meshplan against the published measurements in ../shared/validation.
// The bounds are the values measured when this test was written, rounded up to the next 5 %;
// they may only be tightened (issue 5: targets 10 % overall, 15 % per source, memory 10 %).
// Measured: dev.csv tokens/s MAPE 26.3 % over 161 rows; memory.csv MAPE 20.3 % over 41 runs.
#include <doctest/doctest.h>

#include <fmt/format.h>

#include <filesystem>

#include "report/validation.hpp"
#include "test_paths.hpp"

using namespace meshplan;

namespace {

constexpr double kDevTokensMapeBoundPct = 30.0;
constexpr double kMemoryMapeBoundPct = 25.0;

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
  CHECK(rep.summary.n > 0);
  CHECK(*rep.summary.mape_pct <= kDevTokensMapeBoundPct);
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
}

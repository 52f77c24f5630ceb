// One memory answer: `memory --json` (the closed form the planner prunes with) and
// `simulate --json` (the timeline of the lowered step) give the same per-stage peak for every
// shipped example and every example the importers read, as run by tests/golden_snapshot.sh.
// The closed form is an upper bound where the timeline knows whether two transients overlap;
// the gap allowed is the 2 % of issue #16.
#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "../cli/run_binary.hpp"
#include "../test_paths.hpp"

namespace fs = std::filesystem;

namespace {

using Run = meshplan::test::BinaryRun;
const auto run = meshplan::test::run_meshplan;

std::vector<double> stage_peaks(const Run& r) {
  std::vector<double> out;
  const auto j = nlohmann::json::parse(r.out);
  for (const auto& s : j.at("stages")) out.push_back(s.at("peak_bytes").get<double>());
  return out;
}

// Answered: 0, or 3 (answered, does not fit in memory).
bool answered(const Run& r) { return (r.exit_code == 0 || r.exit_code == 3) && !r.out.empty(); }

void check_agreement(const fs::path& config, const std::string& extra) {
  CAPTURE(config);
  CAPTURE(extra);
  const Run mem = run("memory --json -c " + config.string() + extra);
  const Run sim = run("simulate --json -c " + config.string() + extra);
  // A config neither command can run (a model meshplan does not ship, a layout that does not
  // split) is rejected by both.
  CHECK(answered(mem) == answered(sim));
  if (!answered(mem) || !answered(sim)) return;
  const std::vector<double> a = stage_peaks(mem), b = stage_peaks(sim);
  REQUIRE(a.size() == b.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    CAPTURE(i);
    CHECK(b[i] == doctest::Approx(a[i]).epsilon(0.02));
  }
}

std::vector<fs::path> configs_under(const fs::path& dir) {
  std::vector<fs::path> out;
  if (!fs::exists(dir)) return out;
  for (const auto& e : fs::recursive_directory_iterator(dir))
    if (e.is_regular_file() && (e.path().extension() == ".toml" || e.path().extension() == ".yaml")) out.push_back(e.path());
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

TEST_CASE("memory and simulate agree on every shipped example") {
  const auto configs = configs_under(meshplan::test::data_root() / "plans" / "examples");
  REQUIRE(!configs.empty());
  for (const auto& f : configs) check_agreement(f, "");
}

TEST_CASE("memory and simulate agree on every example the importers read, on one node and on 64 GPUs") {
  if (!meshplan::test::have_shared()) {
    MESSAGE("../shared/examples is absent; skipping");
    return;
  }
  const auto configs = configs_under(meshplan::test::shared_root() / "examples");
  REQUIRE(!configs.empty());
  for (const auto& f : configs) {
    check_agreement(f, "");
    check_agreement(f, " --gpus 64");
  }
}

// Conventions every command shares (README "Exit status"): 0 success, 1 a finding, 2 bad input,
// 3 does not fit; every command answers --json; an impossible question names its real reason.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include <filesystem>
#include <string>
#include <unistd.h>

#include "run_binary.hpp"

using meshplan::test::run_meshplan;
namespace fs = std::filesystem;

TEST_CASE("--help documents the exit statuses") {
  const auto r = run_meshplan("--help");
  CHECK(r.exit_code == 0);
  CHECK(r.out.find("Exit status: 0 success; 1 a finding") != std::string::npos);
  CHECK(r.out.find("3 does not fit") != std::string::npos);
}

TEST_CASE("plan: no layout divides 7 GPUs is said as such, and exits 3") {
  const auto r = run_meshplan("plan --model llama3.1-70b --gpus 7 --global-batch-tokens 4M --json");
  CHECK(r.exit_code == 3);
  const auto j = nlohmann::json::parse(r.out);
  CHECK(j["evaluated"] == 0);
  const std::string note = j["notes"].dump();
  CHECK(note.find("no layout of 7 GPUs") != std::string::npos);
  CHECK(note.find("fits in memory") == std::string::npos);
}

TEST_CASE("capacity: an impossible deadline exits 3 and names what binds") {
  // 15T tokens in an hour: a 512-sequence batch spreads over at most tp 8 x cp 8 x 512 = 32,768
  // GPUs, and there the run takes days.
  const auto r = run_meshplan("capacity --model llama3.1-8b --tokens 15T --deadline 1h --json");
  CHECK(r.exit_code == 3);
  const auto j = nlohmann::json::parse(r.out);
  std::int64_t widest = 0;
  for (const auto& row : j["rows"])
    if (row["feasible"] == true) widest = std::max<std::int64_t>(widest, row["gpus"].get<std::int64_t>());
  CHECK(widest == 32768);
  const std::string notes = j["notes"].dump();
  CHECK(notes.find("the most GPUs with a plan is 32768") != std::string::npos);
  CHECK(notes.find("cap the run at about 32768 GPUs") != std::string::npos);
  // Text mode: the same status, and one line on stderr saying there is no answer.
  const auto t = run_meshplan("capacity --model llama3.1-8b --tokens 15T --deadline 1h");
  CHECK(t.exit_code == 3);
  CHECK(t.err.find("meshplan: capacity: no answer") != std::string::npos);
  // A deadline that can be met answers with 0.
  CHECK(run_meshplan("capacity --model llama3.1-8b --tokens 15T --deadline 60").exit_code == 0);
}

TEST_CASE("demo and calibrate --fit answer --json") {
  const auto d = run_meshplan("demo --json");
  REQUIRE(d.exit_code == 0);
  const auto j = nlohmann::json::parse(d.out);
  CHECK(j["simulate"]["step_time_s"].get<double>() > 0);
  CHECK(j["memory"]["stages"].size() >= 1);

  const fs::path dir = fs::temp_directory_path() / ("meshplan_conventions." + std::to_string(::getpid()));
  fs::create_directories(dir);
  const fs::path out = dir / "mine.toml";
  const std::string fx = (meshplan::test::data_root() / "tests" / "calibrate" / "data" / "model_generated_h100.json").string();
  const auto c = run_meshplan("calibrate --fit " + fx + " --base h100-sxm-80gb --out " + out.string() + " --json");
  CHECK(c.exit_code == 0);
  const auto k = nlohmann::json::parse(c.out);
  CHECK(k["out"] == out.string());
  CHECK(k["profile"] == "mine");
  CHECK(k["residuals"].size() >= 1);
  CHECK(fs::exists(out));
  fs::remove_all(dir);
}

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
  // An explicit sequence count: a token target would round to one that 7 divides (490).
  const auto r = run_meshplan("plan --model llama3.1-70b --gpus 7 --global-batch 488 --json");
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

TEST_CASE("plan: bf16 gradient reduction over many ranks wins only by more than the tie band, and says so") {
  // Llama-3.1-70B on 256 H100 under llm-foundry: PURE (bf16 reduce-scatter over 256 ranks, what
  // lint warns about) against DEFAULT (fp32).
  const fs::path dir = fs::temp_directory_path() / ("meshplan_tie." + std::to_string(::getpid()));
  const auto r = run_meshplan("plan --model llama3.1-70b --gpus 256 --global-batch-tokens 4Mi --runtime llm-foundry "
                              "--top 20 --json --out " + (dir / "bundle").string());
  REQUIRE(r.exit_code == 0);
  const auto plans = nlohmann::json::parse(r.out)["plans"];
  REQUIRE(plans.size() >= 2);
  // Every bf16 row is marked; a bf16 row ranked above an fp32 one beats it by more than 1 %, and an
  // fp32 row ranked above a faster bf16 one is within 1 % of it.
  for (std::size_t i = 0; i < plans.size(); ++i) {
    CAPTURE(i);
    const bool bf16 = plans[i]["mixed_precision"] == "PURE";
    if (bf16) CHECK(plans[i]["numerics_note"].get<std::string>().find("lint warns") != std::string::npos);
    for (std::size_t k = i + 1; k < plans.size(); ++k) {
      const double a = plans[i]["tokens_per_s_per_gpu"].get<double>(), b = plans[k]["tokens_per_s_per_gpu"].get<double>();
      if (bf16 && plans[k]["mixed_precision"] == "DEFAULT") CHECK(a > b * 1.01);
      if (!bf16 && plans[k]["mixed_precision"] == "PURE" && b > a) {
        CHECK(b <= a * 1.01);
        CHECK(plans[i]["numerics_note"].get<std::string>().find("within the simulator's resolution") !=
              std::string::npos);
      }
    }
  }
  // The bundle is the first row: lint warns about bf16 reduction exactly when that row is PURE.
  std::string yaml;
  for (const auto& e : fs::directory_iterator(dir / "bundle"))
    if (e.path().extension() == ".yaml") yaml = e.path().string();
  REQUIRE_FALSE(yaml.empty());
  const auto l = run_meshplan("lint --config " + yaml + " --gpus 256 --cluster h100-sxm-80gb --json");
  bool warned = false;
  const auto lint = nlohmann::json::parse(l.out);
  for (const auto& f : lint["findings"]) warned = warned || f["key"] == "fsdp_config.mixed_precision";
  CHECK(warned == (plans[0]["mixed_precision"] == "PURE"));
  if (plans[0]["mixed_precision"] == "PURE")
    CHECK(plans[0]["numerics_note"].get<std::string>().find("faster than the best fp32-reduction plan") !=
          std::string::npos);
  fs::remove_all(dir);
}

TEST_CASE("memory: a stage's parameters are labelled before sharding, with the count each rank stores") {
  // Llama-3.1-8B under FSDP on 8 GPUs: 8,030,261,248 parameters in the stage, 1/8 stored per rank.
  const std::string plan = (meshplan::test::data_root() / "plans" / "examples" / "llama3.1-8b-fsdp-h100.toml").string();
  const auto t = run_meshplan("memory -c " + plan);
  CHECK(t.out.find("8.03 B params before sharding, 1 B stored per rank (1/8)") != std::string::npos);
  const auto j = nlohmann::json::parse(run_meshplan("memory --json -c " + plan).out);
  CHECK(j["stages"][0]["params_per_rank"] == 8030261248LL);
  CHECK(j["stages"][0]["params_stored_per_rank"] == 8030261248LL / 8);
}

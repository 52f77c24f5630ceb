// Verdicts a new user reads (issue: what a new user trips over): a config the runtime refuses is
// a lint error, an observation faster than the hardware can execute the step is an accounting
// error, not a pessimistic profile, and a profile of one's own validates.
#include <doctest/doctest.h>

#include <algorithm>
#include <filesystem>
#include <regex>
#include <set>
#include <string>
#include <fstream>
#include <unistd.h>

#include "../test_paths.hpp"
#include "report/diagnose.hpp"
#include "report/html_report.hpp"
#include "report/lint.hpp"
#include "validate/validation.hpp"
#include "report/whatif.hpp"
#include "sim/step_simulator.hpp"
#include "spec/units.hpp"
#include "spec/cluster_loader.hpp"
#include "import/config_loader.hpp"

using namespace meshplan;

namespace {

RunSource source(const std::string& config, std::int64_t gpus, const std::string& cluster) {
  RunSource s;
  s.config = config;
  s.gpus = gpus;
  s.cluster = cluster;
  return s;
}

bool mentions(const std::vector<std::string>& notes, const std::string& what) {
  for (const auto& n : notes)
    if (n.find(what) != std::string::npos) return true;
  return false;
}

}  // namespace

TEST_CASE("lint: a converter name that torchtitan raises KeyError on is an error, not info" * SKIP_UNLESS_SHARED()) {
  const auto toml = (test::shared_root() / "examples" / "torchtitan" / "238fa9953e4a" / "llama3_405b.toml").string();
  const LintReport r = lint_config(source(toml, 512, "h100-sxm-80gb"));
  bool found = false;
  for (const auto& f : r.findings)
    if (f.key == "model.converters") {
      found = true;
      CHECK(f.severity == "error");
      CHECK(f.message.find("KeyError") != std::string::npos);
    }
  CHECK(found);
}

TEST_CASE("diagnose: an observation above the dense peak is a measurement error, not a profile to calibrate") {
  const std::string yaml = (test::data_root() / "plans" / "examples" / "llama3.1-70b-64xh100-foundry.yaml").string();
  RunConfig rc = load_run_config(yaml);
  resolve_layout(rc, 64);
  const ClusterSpec c = load_cluster("h100-sxm-80gb");
  const StepResult pred = simulate_step(rc.model, rc.plan, rc.job, c).result;
  REQUIRE(pred.mfu > 0);
  REQUIRE(pred.hfu >= pred.mfu);

  // 2,000 tokens/s/GPU on Llama-70B: 6 x 70.6e9 FLOPs x 2,000 = 0.85 PFLOP/s of model FLOPs per
  // GPU, 86 % of the H100's 989 TFLOP/s before attention, and more than 100 % with recompute.
  const Diagnosis bad = diagnose_gap(source(yaml, 64, "h100-sxm-80gb"), rc, c, pred, 2000);
  CHECK(bad.observed_mfu == doctest::Approx(pred.mfu * 2000 / pred.tokens_per_s_per_gpu));
  CHECK(bad.observed_mfu > 0.85);
  CHECK(bad.observed_hfu > 1.0);
  CHECK_FALSE(bad.physically_possible);
  CHECK(mentions(bad.notes, "measurement or accounting error"));
  CHECK_FALSE(mentions(bad.notes, "pessimistic"));

  // 10 % faster than predicted is still within what the GPUs can do: a profile question.
  const Diagnosis fast = diagnose_gap(source(yaml, 64, "h100-sxm-80gb"), rc, c, pred, 1.1 * pred.tokens_per_s_per_gpu);
  CHECK(fast.physically_possible);
  CHECK(mentions(fast.notes, "pessimistic"));
}

TEST_CASE("validate --cluster-dir: a gpu name the folder defines is valid, and runs on that profile" *
          SKIP_UNLESS_SHARED("validation/dev.csv")) {
  CsvTable t = read_csv_table((test::shared_root() / "validation" / "dev.csv").string());
  const auto col = [&](const std::string& name) {
    return static_cast<std::size_t>(std::find(t.header.begin(), t.header.end(), name) - t.header.begin());
  };
  const std::size_t gpu = col("gpu"), id = col("id");
  REQUIRE(gpu < t.header.size());
  // The first H100 row that the shipped profile compares.
  ValidationOptions shipped;
  shipped.threads = 1;
  std::size_t pick = t.rows.size();
  ValidationReport before;
  for (std::size_t i = 0; i < t.rows.size() && pick == t.rows.size(); ++i) {
    if (t.rows[i][gpu] != "h100-sxm-80gb") continue;
    shipped.only_ids = {t.rows[i][id]};
    before = run_validation(t, shipped);
    if (before.rows.front().error_pct) pick = i;
  }
  REQUIRE(pick < t.rows.size());

  // The same profile under the user's own name, in a folder of their own.
  const auto dir = std::filesystem::temp_directory_path() / ("meshplan_user_gpu_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::filesystem::copy_file(test::data_root() / "hardware_profiles" / "h100-sxm-80gb.toml", dir / "my-h100.toml",
                             std::filesystem::copy_options::overwrite_existing);
  t.rows[pick][gpu] = "my-h100";
  ValidationOptions mine = shipped;
  mine.cluster_dirs = {dir};
  const ValidationReport after = run_validation(t, mine);
  std::filesystem::remove_all(dir);
  REQUIRE(after.rows.size() == 1);
  CHECK(after.rows.front().skipped.empty());
  REQUIRE(after.rows.front().predicted_metric);
  CHECK(*after.rows.front().predicted_metric == doctest::Approx(*before.rows.front().predicted_metric).epsilon(1e-9));

  // Without the folder the name is still refused, naming the column.
  const ValidationReport refused = run_validation(t, shipped);
  CHECK(refused.rows.front().skipped.find("gpu") != std::string::npos);
}

TEST_CASE("HTML report: the Pareto front holds only plans that fit, and point labels do not overlap") {
  WhatIfReport r;
  r.config = "synthetic";
  auto variant = [](double tokens_per_s, double peak_gib, bool fits) {
    Variant v;
    v.result.tokens_per_s_per_gpu = tokens_per_s;
    v.peak_bytes = peak_gib * kGiB;
    v.gpu_memory_bytes = 80 * kGiB;
    v.fits = fits;
    return v;
  };
  r.variants = {variant(100, 50, true), variant(200, 1349, false), variant(80, 40, true), variant(80, 40, true)};
  // #2 is faster but does not fit: it must not be on the front. #3 and #4 coincide: both are on it.
  const std::vector<std::size_t> front = pareto_front(r);
  CHECK(front == std::vector<std::size_t>{2, 3, 0});

  // The coincident points #3 and #4 get their labels at different places.
  const std::string html = whatif_html(r);
  std::set<std::string> positions;
  const std::regex label(R"re(<text class="plabel" x="([0-9.]+)" y="([0-9.]+)">#([0-9]+)</text>)re");
  int n = 0;
  for (auto it = std::sregex_iterator(html.begin(), html.end(), label); it != std::sregex_iterator(); ++it, ++n)
    positions.insert((*it)[1].str() + "," + (*it)[2].str());
  CHECK(n == 4);
  CHECK(positions.size() == 4);
}

TEST_CASE("whatif: varying torchtitan's TP keeps the global batch, so step times compare like for like" *
          SKIP_UNLESS_SHARED()) {
  const auto toml = (test::shared_root() / "examples" / "torchtitan" / "238fa9953e4a" / "llama3_70b.toml").string();
  // local_batch_size 8 per data-parallel rank: TP 8 on 64 GPUs is 8 ranks x 8 = 64 sequences;
  // TP 1 would be 64 x 8 = 512 unless the batch is held.
  const WhatIfReport r =
      run_whatif(source(toml, 64, "h100-sxm-80gb"), {parse_variation("parallelism.tensor_parallel_degree=8,1")});
  REQUIRE(r.variants.size() == 2);
  REQUIRE(r.variants[0].ok());
  REQUIRE(r.variants[1].ok());
  CHECK(r.variants[0].run.job.global_batch == 64);
  CHECK(r.variants[1].run.job.global_batch == 64);
  CHECK(r.variants[1].run.plan.mesh.dp_shard == 64);
  CHECK(mentions(r.notes, "keeps the global batch of variant #1 at 64 sequences"));
  // The variant is what the user asked for: their settings, not the batch fix.
  CHECK(r.variants[1].settings == Settings{{"parallelism.tensor_parallel_degree", "1"}});
}

TEST_CASE("whatif: a peak change is credited to the terms whose size changed, not to one that moved in time") {
  // DEFAULT -> PURE halves the reduce-scatter buffers; the saved activations are the same bytes
  // in both (the recompute policy and micro-batch do not change), so they must not be listed.
  const std::string yaml = (test::data_root() / "plans" / "examples" / "llama3.1-70b-64xh100-foundry.yaml").string();
  const WhatIfReport r =
      run_whatif(source(yaml, 64, "h100-sxm-80gb"), {parse_variation("fsdp_config.mixed_precision=DEFAULT,PURE")});
  REQUIRE(r.variants.size() == 2);
  REQUIRE(r.variants[0].ok());
  REQUIRE(r.variants[1].ok());
  CHECK(r.variants[1].term_peaks.activations == doctest::Approx(r.variants[0].term_peaks.activations).epsilon(1e-9));
  CHECK(r.variants[1].term_peaks.reduce_buffers < r.variants[0].term_peaks.reduce_buffers);
  REQUIRE(r.explanations.size() == 1);
  const std::string& e = r.explanations.front();
  const auto peak = e.find("peak memory");
  REQUIRE(peak != std::string::npos);
  const std::string memory_part = e.substr(peak);
  CHECK(memory_part.find("reduce buffers -") != std::string::npos);
  CHECK(memory_part.find("activations") == std::string::npos);
}

// Issue 32, item 3: an explanation never contradicts the table above it.
TEST_CASE("whatif: an ep change that moves the numbers is explained, never 'no effect'") {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("meshplan_findings." + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string plan = (dir / "qwen3-30b-a3b-64.toml").string();
  std::ofstream(plan) << "[model]\nname = \"qwen3-30b-a3b\"\n[cluster]\ngpus = 64\n[layout]\ndp_shard = 64\nep = 1\n"
                         "[batch]\nseq_len = 4096\nglobal_batch = 1024\nmicro_batch = 1\n"
                         "[runtime]\nname = \"torchtitan-fsdp2\"\n";
  const WhatIfReport r = run_whatif(source(plan, 0, "h100-sxm-80gb"), {parse_variation("layout.ep=1,8")});
  REQUIRE(r.variants.size() == 2);
  REQUIRE(r.variants[0].ok());
  REQUIRE(r.variants[1].ok());
  CHECK(r.variants[1].run.plan.mesh.ep == 8);
  // FSDP 64 x EP 8 on H100: 5625 -> 7732 tokens/s/GPU (5624 -> 7731 before the pipeline ramp was
  // refitted by calibrate --nccl-tests, 17 -> 16.9 MiB; 5581 -> 7590 before PyTorch's LayerNorm
  // kernels were priced by width and pass and the element-wise fraction refitted 0.60 -> 0.627; the
  // table of issue 32 had 5681 -> 8607 before GEMMs were priced by their tile schedule with their fixed per-kernel latency, issue 31;
  // 5655 -> 8381 before the experts ran as the grouped kernel and the most-loaded EP rank of the
  // trained router set the pace).
  CHECK(r.variants[0].result.tokens_per_s_per_gpu == doctest::Approx(5625.4).epsilon(0.001));
  CHECK(r.variants[1].result.tokens_per_s_per_gpu == doctest::Approx(7731.7).epsilon(0.001));
  REQUIRE(r.explanations.size() == 1);
  const std::string& e = r.explanations.front();
  CAPTURE(e);
  CHECK(e.find("no effect") == std::string::npos);
  CHECK(e.find("tokens/s/GPU 5625.4 → 7731.7") != std::string::npos);
  CHECK(e.find("ep bytes appears") != std::string::npos);
  std::filesystem::remove_all(dir);
}

TEST_CASE("diagnose: the remainder no cause explains is called unexplained and ranked last") {
  const std::string yaml = (test::data_root() / "plans" / "examples" / "llama3.1-70b-64xh100-foundry.yaml").string();
  RunConfig rc = load_run_config(yaml);
  resolve_layout(rc, 64);
  const ClusterSpec c = load_cluster("h100-sxm-80gb");
  const StepResult pred = simulate_step(rc.model, rc.plan, rc.job, c).result;
  // 191 tokens/s/GPU: most of the gap is beyond any simulated cause.
  const Diagnosis d = diagnose_gap(source(yaml, 64, "h100-sxm-80gb"), rc, c, pred, 191);
  REQUIRE(d.causes.size() >= 2);
  CHECK(d.causes.back().unexplained);
  CHECK(d.causes.back().cause.rfind("unexplained", 0) == 0);
  CHECK(d.causes.back().explains_s > d.causes.front().explains_s);  // the largest, and still last
  CHECK_FALSE(d.causes.front().unexplained);
  CHECK(d.causes.front().explains_s > 0);
  for (std::size_t i = 0; i + 1 < d.causes.size(); ++i) CHECK_FALSE(d.causes[i].unexplained);
  for (std::size_t i = 1; i + 1 < d.causes.size(); ++i) CHECK(d.causes[i - 1].explains_s >= d.causes[i].explains_s);
  const std::string text = diagnosis_text(d);
  CHECK(text.find("1. unexplained") == std::string::npos);
  CHECK(text.find("if the gap scales") != std::string::npos);  // a possible observation projects
  CHECK(diagnosis_json(d).at("causes").back().at("unexplained") == true);
}

TEST_CASE("diagnose: no projection from an observation called a measurement error") {
  const std::string yaml = (test::data_root() / "plans" / "examples" / "llama3.1-70b-64xh100-foundry.yaml").string();
  RunConfig rc = load_run_config(yaml);
  resolve_layout(rc, 64);
  const ClusterSpec c = load_cluster("h100-sxm-80gb");
  const StepResult pred = simulate_step(rc.model, rc.plan, rc.job, c).result;
  const Diagnosis bad = diagnose_gap(source(yaml, 64, "h100-sxm-80gb"), rc, c, pred, 2000);
  REQUIRE_FALSE(bad.physically_possible);
  REQUIRE_FALSE(bad.suggestions.empty());  // the suggestions stand: they are simulated, not projected
  const std::string text = diagnosis_text(bad);
  CHECK(text.find("measurement or accounting error") != std::string::npos);
  CHECK(text.find("if the gap scales") == std::string::npos);
  const nlohmann::json j = diagnosis_json(bad);
  for (const auto& s : j.at("suggestions")) CHECK(s.at("projected_observed_tokens_per_s_per_gpu").is_null());
}

// whatif, lint, diagnose, capacity and layout, checked against what the physics says rather than
// against today's numbers (the simulator's constants are calibrated separately): PURE halves the
// reduce-scatter bytes exactly and leaves the stored fp32 gradients alone; reentrant checkpointing
// never lowers the peak; checkpointing lowers activation memory; a what-if row equals a direct
// simulation of the same config; layouts match hand-derived shard and group assignments.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <sys/wait.h>

#include "../test_paths.hpp"
#include "plan/capacity.hpp"
#include "report/config_edit.hpp"
#include "report/diagnose.hpp"
#include "report/html_report.hpp"
#include "report/layout_diagram.hpp"
#include "report/lint.hpp"
#include "report/whatif.hpp"
#include "sim/step_simulator.hpp"
#include "spec/cluster_loader.hpp"
#include "import/config_loader.hpp"
#include "spec/model_loader.hpp"

using namespace meshplan;
namespace fs = std::filesystem;
using meshplan::test::data_root;

namespace {

std::string example(const std::string& name) { return (data_root() / "plans" / "examples" / name).string(); }

RunSource source(const std::string& config, std::int64_t gpus = 8, const std::string& cluster = "a100-80gb") {
  RunSource s;
  s.config = config;
  s.gpus = gpus;
  s.cluster = cluster;
  return s;
}

const Variant& find(const WhatIfReport& r, const Settings& want) {
  for (const auto& v : r.variants)
    if (v.settings == want) return v;
  FAIL("no variant with the requested settings");
  return r.variants.front();
}

double comm(const Variant& v, const std::string& kind) {
  return v.result.comm_bytes.count(kind) ? v.result.comm_bytes.at(kind) : 0.0;
}

fs::path write_temp(const std::string& name, const std::string& text) {
  const fs::path p = fs::temp_directory_path() / "meshplan_whatif_test" / name;
  fs::create_directories(p.parent_path());
  std::ofstream(p) << text;
  return p;
}

std::string run_binary(const std::string& args, int* exit_code = nullptr) {
  const std::string cmd = meshplan::test::meshplan_bin().string() + " " + args + " 2>/dev/null";
  std::string out;
  FILE* p = popen(cmd.c_str(), "r");
  REQUIRE(p != nullptr);
  std::array<char, 4096> buf{};
  while (std::fgets(buf.data(), static_cast<int>(buf.size()), p) != nullptr) out += buf.data();
  const int status = pclose(p);
  if (exit_code != nullptr) *exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return out;
}

// An llm-foundry YAML around an fsdp_config block (MPT-7B shape, 2048 tokens).
std::string foundry_yaml(const std::string& fsdp, std::int64_t global = 64, const std::string& micro = "4") {
  return "max_seq_len: 2048\n"
         "model:\n  name: mpt_causal_lm\n  d_model: 4096\n  n_heads: 32\n  n_layers: 32\n  expansion_ratio: 4\n"
         "  max_seq_len: 2048\n  vocab_size: 50368\n  attn_config:\n    attn_impl: flash\n"
         "global_train_batch_size: " + std::to_string(global) + "\n"
         "device_train_microbatch_size: " + micro + "\nprecision: amp_bf16\n"
         "fsdp_config:\n" + fsdp;
}

bool has_finding(const LintReport& r, const std::string& key, const std::string& severity, const std::string& needle) {
  return std::any_of(r.findings.begin(), r.findings.end(), [&](const LintFinding& f) {
    return f.key == key && f.severity == severity && f.message.find(needle) != std::string::npos;
  });
}

}  // namespace

TEST_CASE("config edits land in the file's own syntax and re-import through the importer") {
  const ConfigDocument doc = read_config_document(example("mpt-7b-8gpu-pure-ac.yaml"));
  CHECK(doc.format == ConfigFormat::llm_foundry_yaml);
  CHECK(value_of(doc, "fsdp_config.mixed_precision") == "PURE");
  const ConfigDocument d2 = with_value(doc, "fsdp_config.mixed_precision", "DEFAULT");
  CHECK(value_of(d2, "fsdp_config.mixed_precision") == "DEFAULT");
  CHECK(import_document(d2).plan.reduce_dtype == Dtype::fp32);
  CHECK(import_document(doc).plan.reduce_dtype == Dtype::bf16);
  // max_seq_len is "${variables.max_seq_len}": the edit goes to the variable, so the model follows.
  const ConfigDocument d3 = with_value(doc, "max_seq_len", "4096");
  CHECK(value_of(d3, "variables.max_seq_len") == "4096");
  CHECK(import_document(d3).job.seq_len == 4096);
  // torchtitan TOML keeps the key's type; a new key gets the type its text parses as.
  const ConfigDocument tt = read_config_document(example("torchtitan-llama3.1-8b-8xh100.toml"));
  CHECK(tt.format == ConfigFormat::torchtitan_toml);
  const ConfigDocument tt2 = with_value(tt, "activation_checkpoint.mode", "full");
  CHECK(import_document(tt2).plan.ac == AcMode::full);
}

TEST_CASE("PURE vs DEFAULT: reduce-scatter bytes halve exactly, all-gathers and stored fp32 grads do not change") {
  const WhatIfReport r = run_whatif(source(example("mpt-7b-8gpu-pure-ac.yaml")),
                                    {parse_variation("fsdp_config.mixed_precision=DEFAULT,PURE")});
  REQUIRE(r.variants.size() == 2);
  const Variant& def = find(r, {{"fsdp_config.mixed_precision", "DEFAULT"}});
  const Variant& pure = find(r, {{"fsdp_config.mixed_precision", "PURE"}});
  REQUIRE(def.ok());
  REQUIRE(pure.ok());
  REQUIRE(comm(def, "fsdp_reduce_scatter") > 0);
  CHECK(comm(pure, "fsdp_reduce_scatter") * 2 == doctest::Approx(comm(def, "fsdp_reduce_scatter")).epsilon(1e-12));
  CHECK(comm(pure, "fsdp_all_gather") == doctest::Approx(comm(def, "fsdp_all_gather")).epsilon(1e-12));
  CHECK(pure.peak_breakdown.grads == doctest::Approx(def.peak_breakdown.grads).epsilon(1e-12));
  CHECK(pure.peak_breakdown.params == doctest::Approx(def.peak_breakdown.params).epsilon(1e-12));
  CHECK(pure.peak_bytes <= def.peak_bytes * (1 + 1e-12));
  REQUIRE(r.explanations.size() == 1);
  CHECK(r.explanations[0].find("halves") != std::string::npos);
  CHECK(r.explanations[0].find("stored gradients stay") != std::string::npos);
}

TEST_CASE("reentrant never lowers peak memory; AC lowers activations; reentrant without AC has no effect") {
  const WhatIfReport r = run_whatif(source(example("mpt-7b-8gpu-pure-ac.yaml")),
                                    {parse_variation("fsdp_config.activation_checkpointing=true,false"),
                                     parse_variation("fsdp_config.activation_checkpointing_reentrant=false,true")});
  REQUIRE(r.variants.size() == 4);
  for (const auto& v : r.variants) REQUIRE(v.ok());
  const Variant& ac_nr = find(r, {{"fsdp_config.activation_checkpointing", "true"}, {"fsdp_config.activation_checkpointing_reentrant", "false"}});
  const Variant& ac_re = find(r, {{"fsdp_config.activation_checkpointing", "true"}, {"fsdp_config.activation_checkpointing_reentrant", "true"}});
  const Variant& no_nr = find(r, {{"fsdp_config.activation_checkpointing", "false"}, {"fsdp_config.activation_checkpointing_reentrant", "false"}});
  const Variant& no_re = find(r, {{"fsdp_config.activation_checkpointing", "false"}, {"fsdp_config.activation_checkpointing_reentrant", "true"}});
  CHECK(ac_re.peak_bytes >= ac_nr.peak_bytes);
  CHECK(ac_nr.peak_breakdown.activations < no_nr.peak_breakdown.activations);
  CHECK(ac_nr.result.breakdown_s.at("recompute") > 0);
  CHECK(no_nr.result.breakdown_s.at("recompute") == 0);
  // Without AC the reentrant flag is ignored by Composer: the same plan, the same numbers.
  CHECK(no_re.result.step_time_s == no_nr.result.step_time_s);
  CHECK(no_re.peak_bytes == no_nr.peak_bytes);
  const bool said_no_effect = std::any_of(r.explanations.begin(), r.explanations.end(), [](const std::string& e) {
    return e.find("reentrant false → true (with fsdp_config.activation_checkpointing=false)") != std::string::npos &&
           e.find("no effect") != std::string::npos;
  });
  CHECK(said_no_effect);
}

TEST_CASE("a what-if row equals a direct simulation of the same config") {
  const WhatIfReport r = run_whatif(source(example("mpt-7b-8gpu-pure-ac.yaml")),
                                    {parse_variation("device_train_microbatch_size=8,4")});
  const Variant& v = find(r, {{"device_train_microbatch_size", "8"}});  // the file's own value
  RunConfig rc = load_run_config(example("mpt-7b-8gpu-pure-ac.yaml"));
  resolve_layout(rc, 8);
  const StepResult direct = simulate_step(rc.model, rc.plan, rc.job, load_cluster("a100-80gb")).result;
  CHECK(v.result.step_time_s == direct.step_time_s);
  CHECK(v.result.tokens_per_s_per_gpu == direct.tokens_per_s_per_gpu);
  CHECK(v.result.comm_bytes == direct.comm_bytes);
  CHECK(v.result.breakdown_s == direct.breakdown_s);

  // The same through the binary: whatif --json against simulate --json.
  const std::string cfg = example("mpt-7b-8gpu-pure-ac.yaml");
  const auto w = nlohmann::json::parse(run_binary("whatif --config " + cfg + " --gpus 8 --cluster a100-80gb --json "
                                                  "--vary fsdp_config.mixed_precision=PURE,DEFAULT"));
  const auto s = nlohmann::json::parse(run_binary("simulate --config " + cfg + " --gpus 8 --cluster a100-80gb --json"));
  REQUIRE(w["variants"].size() == 2);
  const auto& row = w["variants"][0];
  CHECK(row["settings"]["fsdp_config.mixed_precision"] == "PURE");
  CHECK(row["step_time_s"].get<double>() == s["step_time_s"].get<double>());
  CHECK(row["tokens_per_s_per_gpu"].get<double>() == s["tokens_per_s_per_gpu"].get<double>());
  CHECK(row["peak_bytes"].get<std::int64_t>() == s["stages"][0]["peak_bytes"].get<std::int64_t>());
  for (const auto& [k, b] : s["comm_bytes"].items())
    CHECK(row["comm_bytes_per_step"][k].get<double>() == doctest::Approx(b.get<double>()));
  CHECK(row.contains("fits"));
  CHECK(row.contains("breakdown_s"));
  CHECK(w["explanations"].is_array());
}

TEST_CASE("whatif: variants that do not resolve are reported, not fatal") {
  const WhatIfReport r = run_whatif(source(example("mpt-7b-8gpu-pure-ac.yaml")),
                                    {parse_variation("global_train_batch_size=256,100")});
  REQUIRE(r.variants.size() == 2);
  CHECK(r.variants[0].ok());
  CHECK_FALSE(r.variants[1].ok());
  CHECK(r.variants[1].error.find("global_train_batch_size") != std::string::npos);
  CHECK_THROWS(parse_variation("no_equals_sign"));
  CHECK_THROWS(parse_variation("k=a,,b"));
}

TEST_CASE("lint finds the listed problems in hand-written configs") {
  SUBCASE("reentrant without AC, HYBRID_SHARD on a 1-D mesh, misspelled key, limit_all_gathers false") {
    const auto p = write_temp("lint1.yaml", foundry_yaml("  sharding_strategy: HYBRID_SHARD\n"
                                                         "  mixed_precision: PURE\n"
                                                         "  activation_checkpointing: false\n"
                                                         "  activation_checkpointing_reentrant: true\n"
                                                         "  limit_all_gathers: false\n"
                                                         "  activation_cpu_ofload: true\n"));
    const LintReport r = lint_config(source(p.string()));
    CHECK(has_finding(r, "fsdp_config.activation_checkpointing_reentrant", "info", "no effect"));
    CHECK(has_finding(r, "fsdp_config.sharding_strategy", "warning", "1-D mesh"));
    CHECK(has_finding(r, "fsdp_config.activation_cpu_ofload", "warning", "activation_cpu_offload"));
    CHECK(has_finding(r, "fsdp_config.limit_all_gathers", "warning", "run ahead"));
    CHECK(has_finding(r, "fsdp_config.backward_prefetch", "info", "BACKWARD_PRE"));
  }
  SUBCASE("PURE over a large data-parallel group, micro-batch that does not divide the per-rank batch") {
    const auto p = write_temp("lint2.yaml", foundry_yaml("  mixed_precision: PURE\n"
                                                         "  activation_checkpointing: true\n"
                                                         "  activation_checkpointing_reentrant: false\n",
                                                         128 * 8, "3"));
    const LintReport r = lint_config(source(p.string(), 128));
    CHECK(has_finding(r, "fsdp_config.mixed_precision", "warning", "128 data-parallel ranks"));
    CHECK(has_finding(r, "device_train_microbatch_size", "warning", "does not divide the per-rank batch 8"));
  }
  SUBCASE("SHARD_GRAD_OP is not a memory saving; a run that cannot start is an error") {
    const auto p = write_temp("lint3.yaml", foundry_yaml("  sharding_strategy: SHARD_GRAD_OP\n"
                                                         "  activation_checkpointing: true\n"
                                                         "  activation_checkpointing_reentrant: false\n"));
    const LintReport r = lint_config(source(p.string()));
    CHECK(has_finding(r, "fsdp_config.sharding_strategy", "info", "does not save memory"));
    const auto bad = write_temp("lint4.yaml", foundry_yaml("  mixed_precision: PURE\n", 60));
    const LintReport e = lint_config(source(bad.string()));
    CHECK(has_finding(e, "global_train_batch_size", "error", "not divisible"));
    // Through the binary: JSON contract and exit code 1 on an error finding.
    int code = 0;
    const auto j = nlohmann::json::parse(run_binary("lint --config " + bad.string() + " --gpus 8 --json", &code));
    CHECK(code == 1);
    REQUIRE(j["findings"].is_array());
    for (const auto& f : j["findings"]) {
      CHECK(f["key"].is_string());
      CHECK((f["severity"] == "info" || f["severity"] == "warning" || f["severity"] == "error"));
      CHECK(f["message"].is_string());
    }
  }
  SUBCASE("a host-bound Megatron MoE step without the fused MoE kernels") {
    // Qwen3-30B-A3B on 8 H100 as Megatron-Bridge's 8-GPU recipe lays it out (TP 4, PP 2, EP 4:
    // 32 experts per rank, full recompute): each MoE layer issues 107 launches forward.
    const std::string plan =
        "[model]\nname = \"qwen3-30b-a3b\"\n[cluster]\ngpus = 8\nprofile = \"h100-sxm-80gb\"\n"
        "[layout]\npp = 2\ntp = 4\nep = 4\netp = 1\nsequence_parallel = true\nschedule = \"1f1b\"\n"
        "[activation_checkpoint]\nmode = \"full\"\n[batch]\nseq_len = 4096\nglobal_batch = 64\nmicro_batch = 1\n"
        "[runtime]\nname = \"megatron\"\n";
    const LintReport r = lint_config(source(write_temp("lint_moe.toml", plan).string(), 8, "h100-sxm-80gb"));
    CHECK(has_finding(r, "runtime.moe_permute_fusion", "info", "op by op"));
    CHECK(has_finding(r, "runtime.moe_permute_fusion", "info", "simulated with runtime.moe_permute_fusion=true"));
    const LintReport fused = lint_config(source(
        write_temp("lint_moe_fused.toml", plan + "moe_permute_fusion = true\nmoe_router_fusion = true\n").string(), 8,
        "h100-sxm-80gb"));
    CHECK_FALSE(has_finding(fused, "runtime.moe_permute_fusion", "info", "op by op"));
    CHECK_FALSE(has_finding(fused, "runtime.moe_router_fusion", "info", "op by op"));
    // The experts one after another (SequentialMLP): named, with the grouped GEMMs simulated.
    const LintReport seq = lint_config(
        source(write_temp("lint_moe_seq.toml", plan + "moe_grouped_gemm = false\n").string(), 8, "h100-sxm-80gb"));
    CHECK(has_finding(seq, "runtime.moe_grouped_gemm", "info", "32 local experts run one after another"));
    CHECK(has_finding(seq, "runtime.moe_grouped_gemm", "info", "simulated with runtime.moe_grouped_gemm=true"));
    CHECK_FALSE(has_finding(r, "runtime.moe_grouped_gemm", "info", "one after another"));
  }
}

TEST_CASE("diagnose: the gap is the observed minus the predicted step, and causes never explain more than it") {
  RunConfig rc = load_run_config(example("mpt-7b-8gpu-pure-ac.yaml"));
  resolve_layout(rc, 8);
  const ClusterSpec c = load_cluster("a100-80gb");
  const StepResult pred = simulate_step(rc.model, rc.plan, rc.job, c).result;
  const double observed = pred.tokens_per_s_per_gpu * 0.6;
  const Diagnosis d = diagnose_gap(source(example("mpt-7b-8gpu-pure-ac.yaml")), rc, c, pred, observed);
  const double obs_step = static_cast<double>(rc.job.tokens_per_step()) / (observed * 8);
  CHECK(d.observed_step_s == doctest::Approx(obs_step));
  CHECK(d.gap_s == doctest::Approx(obs_step - pred.step_time_s));
  REQUIRE(d.causes.size() >= 3);
  for (std::size_t i = 0; i < d.causes.size(); ++i) {
    CHECK(d.causes[i].explains_s <= d.gap_s + 1e-9);
    CHECK(d.causes[i].explains_s >= 0);
    // Ranked by what each explains; the unexplained remainder comes last whatever its size.
    if (i > 0 && !d.causes[i].unexplained) CHECK(d.causes[i].explains_s <= d.causes[i - 1].explains_s);
    CHECK(d.causes[i].unexplained == (i + 1 == d.causes.size()));
  }
  for (const auto& s : d.suggestions) {
    CHECK(s.fits);
    CHECK(s.tokens_per_s_per_gpu > pred.tokens_per_s_per_gpu);
  }
}

TEST_CASE("capacity: days = tokens / (tokens/s/GPU x GPUs) / 86400, GPU-hours and cost follow") {
  CHECK(training_days(86400.0 * 1000 * 8, 1000, 8) == doctest::Approx(1.0));
  CHECK(training_days(1e12, 0, 8) == 0);
  CapacityRequest rq;
  rq.model = load_model("llama3.1-8b");
  rq.clusters = {load_cluster("h100-sxm-80gb")};
  rq.tokens = 1e12;
  rq.gpus = 16;
  rq.price_per_gpu_hour = 2.5;
  rq.seq_len = 4096;
  rq.global_batch_tokens = 1 << 20;
  rq.simulate_budget = 2;
  rq.price_failures = false;  // the ideal here; failures priced below
  const CapacityReport r = plan_capacity(rq);
  REQUIRE(r.rows.size() == 3);  // 8, 16, 32 GPUs
  int answers = 0;
  for (const auto& x : r.rows) {
    CAPTURE(x.gpus);
    REQUIRE(x.feasible);
    CHECK(x.days == doctest::Approx(rq.tokens / (x.tokens_per_s_per_gpu * static_cast<double>(x.gpus)) / 86400.0));
    CHECK(x.gpu_hours == doctest::Approx(x.days * 24 * static_cast<double>(x.gpus)));
    REQUIRE(x.cost.has_value());
    CHECK(*x.cost == doctest::Approx(x.gpu_hours * 2.5));
    answers += x.answer ? 1 : 0;
    if (x.answer) CHECK(x.gpus == 16);
  }
  CHECK(answers == 1);
  // Priced (the default): the same plans, days stretched by 1 / goodput, GPU-hours and cost alike.
  CapacityRequest pf = rq;
  pf.price_failures = true;
  const CapacityReport f = plan_capacity(pf);
  REQUIRE(f.rows.size() == r.rows.size());
  for (std::size_t i = 0; i < f.rows.size(); ++i) {
    const CapacityRow& x = f.rows[i];
    REQUIRE(x.failures.priced);
    CHECK(x.failures.days_ideal == doctest::Approx(r.rows[i].days));
    CHECK(x.days == doctest::Approx(x.failures.days_ideal / x.failures.goodput.goodput_fraction));
    CHECK(x.failures.goodput.goodput_fraction < 1);
    CHECK(*x.cost == doctest::Approx(x.days * 24 * static_cast<double>(x.gpus) * 2.5));
  }
  // Deadline mode: the answer meets the deadline and half of it (when evaluated) does not.
  CapacityRequest dl = rq;
  dl.gpus = 0;
  dl.deadline_days = r.rows[1].days * 0.9;  // a bit faster than 16 GPUs manage
  const CapacityReport d = plan_capacity(dl);
  const auto ans = std::find_if(d.rows.begin(), d.rows.end(), [](const CapacityRow& x) { return x.answer; });
  REQUIRE(ans != d.rows.end());
  CHECK(ans->meets_deadline);
  CHECK(ans->gpus > 16);
  for (const auto& x : d.rows)
    if (x.gpus == ans->gpus / 2 && x.feasible) CHECK_FALSE(x.meets_deadline);
}

TEST_CASE("layouts of the classic cases match hand-derived shard and group assignments") {
  using Groups = std::vector<std::vector<std::int64_t>>;
  auto groups = [](const LayoutDiagram& d, const std::string& kind) {
    for (const auto& t : d.talk)
      if (t.kind == kind) return t.groups;
    return Groups{};
  };
  auto mesh = [](int pp, int rep, int shard, int tp) {
    Mesh m;
    m.pp = pp;
    m.dp_replicate = rep;
    m.dp_shard = shard;
    m.tp = tp;
    return m;
  };
  SUBCASE("FSDP: every GPU a quarter of every layer; one group of four") {
    const auto d = make_layout(mesh(1, 1, 4, 1), 2, 4);
    CHECK(d.name == "FSDP");
    for (int g = 0; g < 4; ++g) {
      CHECK(d.gpus[g].fsdp_shard == g);
      CHECK(d.gpus[g].fraction_at_rest == 0.25);
      CHECK(d.gpus[g].n_layers == 2);
    }
    CHECK(groups(d, "FSDP") == Groups{{0, 1, 2, 3}});
    CHECK(groups(d, "TP").empty());
  }
  SUBCASE("TP: slice g of every layer on GPU g; one TP group") {
    const auto d = make_layout(mesh(1, 1, 1, 4), 2, 4);
    CHECK(d.name == "TP");
    for (int g = 0; g < 4; ++g) CHECK(d.gpus[g].tp_slice == g);
    CHECK(groups(d, "TP") == Groups{{0, 1, 2, 3}});
  }
  SUBCASE("FSDP x TP: TP innermost, so TP pairs are neighbours and FSDP pairs stride 2") {
    const auto d = make_layout(mesh(1, 1, 2, 2), 2, 4);
    CHECK(d.name == "FSDP×TP");
    const int slice[4] = {0, 1, 0, 1}, shard[4] = {0, 0, 1, 1};
    for (int g = 0; g < 4; ++g) {
      CHECK(d.gpus[g].tp_slice == slice[g]);
      CHECK(d.gpus[g].fsdp_shard == shard[g]);
      CHECK(d.gpus[g].fraction_at_rest == 0.25);
      CHECK(d.gpus[g].fraction_gathered == 0.5);
    }
    CHECK(groups(d, "TP") == Groups{{0, 1}, {2, 3}});
    CHECK(groups(d, "FSDP") == Groups{{0, 2}, {1, 3}});
  }
  SUBCASE("HSDP: shard within {0,1} and {2,3}, replicate across") {
    const auto d = make_layout(mesh(1, 2, 2, 1), 2, 4);
    CHECK(d.name == "HSDP");
    const int rep[4] = {0, 0, 1, 1}, shard[4] = {0, 1, 0, 1};
    for (int g = 0; g < 4; ++g) {
      CHECK(d.gpus[g].replica == rep[g]);
      CHECK(d.gpus[g].fsdp_shard == shard[g]);
      CHECK(d.gpus[g].fraction_at_rest == 0.5);
    }
    CHECK(groups(d, "FSDP") == Groups{{0, 1}, {2, 3}});
    CHECK(groups(d, "replicate") == Groups{{0, 2}, {1, 3}});
  }
  SUBCASE("PP x FSDP: layer 0 on GPUs 0-1, layer 1 on GPUs 2-3") {
    const auto d = make_layout(mesh(2, 1, 2, 1), 2, 4);
    CHECK(d.name == "PP×FSDP");
    const int stage[4] = {0, 0, 1, 1};
    for (int g = 0; g < 4; ++g) {
      CHECK(d.gpus[g].stage == stage[g]);
      CHECK(d.gpus[g].first_layer == stage[g]);
      CHECK(d.gpus[g].n_layers == 1);
    }
    CHECK(groups(d, "FSDP") == Groups{{0, 1}, {2, 3}});
    CHECK(groups(d, "PP") == Groups{{0, 2}, {1, 3}});
  }
  SUBCASE("HSDP x TP on 8 GPUs") {
    const auto d = make_layout(mesh(1, 2, 2, 2), 2, 8);
    CHECK(d.name == "HSDP×TP");
    CHECK(groups(d, "TP") == Groups{{0, 1}, {2, 3}, {4, 5}, {6, 7}});
    CHECK(groups(d, "FSDP") == Groups{{0, 2}, {1, 3}, {4, 6}, {5, 7}});
    CHECK(groups(d, "replicate") == Groups{{0, 4}, {1, 5}, {2, 6}, {3, 7}});
  }
  CHECK_THROWS(make_layout(mesh(1, 1, 2, 2), 2, 8));  // 4 ranks for 8 GPUs
  CHECK_THROWS(make_layout(mesh(4, 1, 1, 1), 2, 4));  // 2 layers over 4 stages
}

TEST_CASE("HTML report: self-contained, one bar per variant in each stacked chart, Pareto front") {
  const WhatIfReport r = run_whatif(source(example("mpt-7b-8gpu-pure-ac.yaml")),
                                    {parse_variation("fsdp_config.activation_checkpointing=true,false")});
  const std::string html = whatif_html(r);
  auto count = [&](const std::string& needle) {
    std::size_t n = 0;
    for (auto p = html.find(needle); p != std::string::npos; p = html.find(needle, p + 1)) ++n;
    return n;
  };
  CHECK(count("<g class=\"bar\"") == 4);
  CHECK(count("<g class=\"point") == 2);
  CHECK(count("http://") == count("http://www.w3.org/2000/svg"));  // only the SVG namespace
  CHECK(count("https://") == 0);
  const auto front = pareto_front(r);
  CHECK_FALSE(front.empty());
  // AC trades speed for memory: without it the step is faster and the peak higher, so both are on the front.
  if (r.variants[1].fits) CHECK(front.size() == 2);
}

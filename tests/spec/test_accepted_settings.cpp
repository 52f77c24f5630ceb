// Every setting an importer accepts is read into the plan, changes neither time nor memory, or is
// named (a warning and RunConfig::unmodelled_settings): the torchtitan and llm-foundry importers'
// keys, each set to a range of values in configs where it could act (the Megatron importer's flags
// are checked the same way in test_import_megatron.cpp).
#include <doctest/doctest.h>

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <unistd.h>
#include <utility>
#include <variant>
#include <vector>

#include "import/config_loader.hpp"
#include "import/import_composer.hpp"
#include "import/import_torchtitan.hpp"
#include "report/lint.hpp"
#include "report/whatif.hpp"
#include "sim/step_simulator.hpp"
#include "spec/cluster_loader.hpp"
#include "spec/error.hpp"
#include "spec/model_loader.hpp"
#include "spec/plan_toml.hpp"
#include "test_paths.hpp"
#include "workload/activation_memory.hpp"
#include "workload/memory_estimate.hpp"

using namespace meshplan;

namespace {

using Value = std::variant<bool, std::int64_t, double, std::string, std::vector<std::string>>;

// Values of every type the importers read, including the ones a modelled key needs to show itself.
const std::vector<Value>& candidates() {
  static const std::vector<Value> v = {
      true, false, std::int64_t{2}, std::int64_t{4}, std::int64_t{1}, std::int64_t{0}, std::int64_t{-1}, 0.25,
      "full", "never", "always", "Interleaved1F1B", "GPipe", "float32", "bfloat16", "op", "deepep", "alltoall",
      "rowwise", "SGD", "foreach", "70B", "memory_budget", "FULL_SHARD", "SHARD_GRAD_OP", "NO_SHARD", "PURE",
      "FULL", "BACKWARD_PRE", "NONE", "amp_fp16", "fp32", "x",
      std::vector<std::string>{"quantize.linear.mx"}, std::vector<std::string>{"output"}};
  return v;
}

bool contains(const std::vector<std::string>& l, const std::string& s) { return std::find(l.begin(), l.end(), s) != l.end(); }

bool warned(const RunConfig& rc, const std::string& key) {
  return std::any_of(rc.warnings.begin(), rc.warnings.end(), [&](const std::string& w) { return w.rfind(key + ":", 0) == 0; });
}

// What a setting's import did, against the base config's import.
struct Outcome {
  bool refused = false;  // an InputError naming the key
  bool changed = false;  // the plan, job, model or GPU count differs
  bool named = false;    // in unmodelled_settings
  bool warned = false;   // a warning starting with the key
};

std::string fingerprint(const RunConfig& rc) { return to_plan_toml(rc) + std::to_string(rc.n_gpus); }

// The fingerprint without the plan TOML line that carries `key` under its own name: a setting of
// no effect may be carried through the plan (keep_low_precision_grads, for lint) but may not move
// anything else.
std::string without_own_line(const std::string& fp, const std::string& key) {
  const std::string name = key.substr(key.rfind('.') + 1) + " = ";
  std::string out;
  std::istringstream in(fp);
  for (std::string line; std::getline(in, line);)
    if (line.rfind(name, 0) != 0) out += line + "\n";
  return out;
}

// What the classification of `key` requires of all its outcomes: a modelled key shows itself in at
// least one, a no-effect key in none, an unmodelled key is named in at least one and read in none.
void check_key(const std::string& key, const std::vector<Outcome>& outs, const std::vector<std::string>& no_effect,
               const std::vector<UnmodelledSetting>& unmodelled) {
  CAPTURE(key);
  auto any = [&](auto pred) { return std::any_of(outs.begin(), outs.end(), pred); };
  if (contains(no_effect, key)) {
    CHECK_FALSE(find_unmodelled(unmodelled, key));
    CHECK_FALSE(any([](const Outcome& o) { return o.changed || o.named; }));
  } else if (find_unmodelled(unmodelled, key) != nullptr) {
    CHECK(any([](const Outcome& o) { return o.named && o.warned; }));
    CHECK_FALSE(any([](const Outcome& o) { return o.changed; }));
  } else {
    CHECK_MESSAGE(any([](const Outcome& o) { return o.changed || o.refused || o.warned; }),
                  key << " is accepted, read by nothing and not named");
  }
}

// ---------------------------------------------------------------- torchtitan

toml::node_view<toml::node> section_of(toml::table& t, const std::string& dotted_section) {
  toml::table* cur = &t;
  std::size_t from = 0;
  while (from <= dotted_section.size()) {
    const std::size_t dot = dotted_section.find('.', from);
    const std::string part = dotted_section.substr(from, dot == std::string::npos ? std::string::npos : dot - from);
    auto [it, _] = cur->emplace<toml::table>(part);
    cur = it->second.as_table();
    if (dot == std::string::npos) break;
    from = dot + 1;
  }
  return toml::node_view<toml::node>(cur);
}

void set_toml(toml::table& t, const std::string& key, const Value& v) {
  const std::size_t dot = key.rfind('.');
  toml::table& sec = *section_of(t, key.substr(0, dot)).as_table();
  const std::string name = key.substr(dot + 1);
  std::visit([&](const auto& x) {
    using T = std::decay_t<decltype(x)>;
    if constexpr (std::is_same_v<T, std::vector<std::string>>) {
      toml::array a;
      for (const auto& e : x) a.push_back(e);
      sec.insert_or_assign(name, std::move(a));
    } else {
      sec.insert_or_assign(name, x);
    }
  }, v);
}

Outcome torchtitan_outcome(const std::string& base_text, const std::string& key, const Value& v) {
  static std::map<std::string, std::string> base_of;
  toml::table t = toml::parse(base_text);
  auto [it, fresh] = base_of.try_emplace(base_text);
  if (fresh) it->second = fingerprint(import_torchtitan("probe.toml", t));
  set_toml(t, key, v);
  Outcome o;
  try {
    const RunConfig rc = import_torchtitan("probe.toml", t);
    o.changed = without_own_line(fingerprint(rc), key) != without_own_line(it->second, key);
    o.named = contains(rc.unmodelled_settings, key);
    o.warned = warned(rc, key);
  } catch (const InputError& e) {
    o.refused = e.key() == key || e.reason().find(key.substr(key.rfind('.') + 1)) != std::string::npos;
  }
  return o;
}

// Configs where each key can act: pipelined and compiled 8B with float8, the same with MX, and
// DeepSeek-V3 with experts over 8 ranks.
std::vector<std::string> torchtitan_bases(TorchtitanLayout l) {
  if (l == TorchtitanLayout::early_2026) {
    const std::string common = "[training]\nlocal_batch_size = 4\n[compile]\nenable = true\n"
                               "[parallelism]\npipeline_parallel_degree = 2\ntensor_parallel_degree = 2\n";
    return {"[model]\nname = \"llama3\"\nflavor = \"8B\"\nconverters = [\"quantize.linear.float8\"]\n" + common,
            "[model]\nname = \"llama3\"\nflavor = \"8B\"\nconverters = [\"quantize.linear.mx\"]\n" + common,
            "[model]\nname = \"deepseek_v3\"\nflavor = \"671B\"\n[parallelism]\nexpert_parallel_degree = 8\n"};
  }
  const std::string common = "[training]\nlocal_batch_size = 4\ncompile = true\n"
                             "[parallelism]\npipeline_parallel_degree = 2\ntensor_parallel_degree = 2\n";
  return {"[model]\nname = \"llama3\"\nflavor = \"8B\"\nconverters = [\"float8\"]\n" + common,
          "[model]\nname = \"llama3\"\nflavor = \"8B\"\nconverters = [\"mx\"]\n" + common};
}

// ---------------------------------------------------------------- llm-foundry

const char* kFoundryBase = R"(max_seq_len: 2048
global_train_batch_size: 64
device_train_microbatch_size: 2
precision: amp_bf16
model:
  name: hf_causal_lm
  pretrained_model_name_or_path: meta-llama/Meta-Llama-3-8B
fsdp_config:
  sharding_strategy: FULL_SHARD
  activation_checkpointing: true
)";

YAML::Node yaml_value(const Value& v) {
  return std::visit([](const auto& x) {
    using T = std::decay_t<decltype(x)>;
    if constexpr (std::is_same_v<T, std::vector<std::string>>) {
      YAML::Node n(YAML::NodeType::Sequence);
      for (const auto& e : x) n.push_back(e);
      return n;
    } else {
      return YAML::Node(x);
    }
  }, v);
}

Outcome foundry_outcome(const std::string& key, const Value& v, bool fsdp2) {
  YAML::Node root = YAML::Load(kFoundryBase);
  if (fsdp2) root["fsdp_config"]["reshard_after_forward"] = true;
  const auto emit = [](const YAML::Node& n) {
    YAML::Emitter e;
    e << n;
    return std::string(e.c_str());
  };
  static const std::string base[2] = {
      fingerprint(import_llm_foundry("probe.yaml", kFoundryBase)),
      fingerprint(import_llm_foundry("probe.yaml", std::string(kFoundryBase) + "  reshard_after_forward: true\n"))};
  if (key.rfind("fsdp_config.", 0) == 0) root["fsdp_config"][key.substr(12)] = yaml_value(v);
  else root[key] = yaml_value(v);
  Outcome o;
  try {
    const RunConfig rc = import_llm_foundry("probe.yaml", emit(root));
    o.changed = without_own_line(fingerprint(rc), key) != without_own_line(base[fsdp2 ? 1 : 0], key);
    o.named = contains(rc.unmodelled_settings, key);
    o.warned = warned(rc, key);
  } catch (const InputError& e) {
    o.refused = e.key().rfind(key, 0) == 0;
  }
  return o;
}

}  // namespace

TEST_CASE("every torchtitan key is read into the plan, of no effect, or named when it leaves the model's value") {
  for (TorchtitanLayout l : {TorchtitanLayout::early_2026, TorchtitanLayout::mid_2025}) {
    const std::vector<std::string> keys = torchtitan_layout_keys(l);
    const std::vector<std::string> no_effect = torchtitan_no_effect_settings();
    const auto& unmodelled = torchtitan_unmodelled_settings();
    for (const std::string& key : keys) {
      std::vector<Outcome> outs;
      for (const std::string& base : torchtitan_bases(l))
        for (const Value& v : candidates()) outs.push_back(torchtitan_outcome(base, key, v));
      check_key(key, outs, no_effect, unmodelled);
    }
  }
  // Every listed key is one torchtitan accepts, under one layout or the other.
  std::vector<std::string> all = torchtitan_layout_keys(TorchtitanLayout::early_2026);
  for (const auto& k : torchtitan_layout_keys(TorchtitanLayout::mid_2025)) all.push_back(k);
  for (const auto& k : torchtitan_no_effect_settings()) CHECK_MESSAGE(contains(all, k), k);
  for (const auto& s : torchtitan_unmodelled_settings()) CHECK_MESSAGE(contains(all, s.key), s.key);
}

TEST_CASE("every llm-foundry key is read into the plan, of no effect, or named when it leaves the model's value") {
  const std::vector<std::string> keys = llm_foundry_accepted_keys();
  const std::vector<std::string> no_effect = llm_foundry_no_effect_settings();
  const auto& unmodelled = llm_foundry_unmodelled_settings();
  for (const std::string& key : keys) {
    if (key == "fsdp_config.reshard_after_forward") continue;  // selects FSDP2 itself (test_importers.cpp)
    std::vector<Outcome> outs;
    for (bool fsdp2 : {false, true})
      for (const Value& v : candidates()) outs.push_back(foundry_outcome(key, v, fsdp2));
    check_key(key, outs, no_effect, unmodelled);
  }
  for (const auto& k : no_effect) CHECK_MESSAGE(contains(keys, k), k);
  for (const auto& s : unmodelled) CHECK_MESSAGE(contains(keys, s.key), s.key);
}

TEST_CASE("a torchtitan file's unmodelled settings are named only where they leave the value the model assumes") {
  const std::string base = "[model]\nname = \"llama3\"\nflavor = \"8B\"\n";
  auto names = [&](const std::string& extra) {
    return import_torchtitan("t.toml", toml::parse(base + extra)).unmodelled_settings;
  };
  // torchtitan's own defaults, written out: nothing to name.
  CHECK(names("[training]\ngc_freq = 50\n[compile]\nenable = false\nbackend = \"inductor\"\n").empty());
  CHECK(names("[training]\ngc_freq = 10\n[compile]\nbackend = \"aot_eager\"\n") ==
        std::vector<std::string>{"compile.backend", "training.gc_freq"});
  // A converter's keys matter only when it runs.
  CHECK(names("[quantize.linear.float8]\nemulate = true\n").empty());
  CHECK(import_torchtitan("t.toml", toml::parse("[model]\nname = \"llama3\"\nflavor = \"8B\"\nconverters = "
                                                "[\"quantize.linear.float8\"]\n[quantize.linear.float8]\nemulate = true\n"))
            .unmodelled_settings == std::vector<std::string>{"quantize.linear.float8.emulate"});
}

TEST_CASE("an llm-foundry file's allocator settings, callbacks and algorithms are named, its monitors are not") {
  auto rc = [](const std::string& extra) { return import_llm_foundry("f.yaml", std::string(kFoundryBase) + extra); };
  CHECK(rc("callbacks:\n  speed_monitor: {}\n  lr_monitor: {}\nalgorithms:\n  gradient_clipping: {}\n")
            .unmodelled_settings.empty());
  const RunConfig named = rc("expandable_segments: true\ncallbacks:\n  speed_monitor: {}\n  scheduled_gc: {}\n"
                             "algorithms:\n  low_precision_layernorm: {}\n");
  CHECK(named.unmodelled_settings == std::vector<std::string>{"algorithms", "callbacks", "expandable_segments"});
  CHECK(warned(named, "callbacks"));
  const auto w = std::find_if(named.warnings.begin(), named.warnings.end(),
                              [](const std::string& s) { return s.rfind("callbacks:", 0) == 0; });
  REQUIRE(w != named.warnings.end());
  CHECK(w->find("[scheduled_gc]") != std::string::npos);
  CHECK(w->find("speed_monitor") == std::string::npos);
}

TEST_CASE("docs/importers.md lists every setting the importers name") {
  std::ifstream in(test::data_root() / "docs" / "importers.md");
  REQUIRE(in);
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string doc = ss.str();
  for (const auto* table : {&torchtitan_unmodelled_settings(), &llm_foundry_unmodelled_settings()})
    for (const UnmodelledSetting& s : *table) CHECK_MESSAGE(doc.find("`" + s.key + "`") != std::string::npos, s.key);
}

namespace {

std::string write_temp(const std::string& name, const std::string& text) {
  const auto p = std::filesystem::temp_directory_path() / ("meshplan_accepted_" + std::to_string(::getpid()) + name);
  std::ofstream(p) << text;
  return p.string();
}

}  // namespace

TEST_CASE("whatif and lint never quantify a setting the model does not read") {
  RunSource src;
  src.config = write_temp(".toml", "[model]\nname = \"llama3\"\nflavor = \"8B\"\n[training]\nlocal_batch_size = 1\n"
                                   "gc_freq = 10\n");
  src.gpus = 8;
  src.cluster = "h100-sxm-80gb";
  const WhatIfReport r = run_whatif(src, {Variation{"training.gc_freq", {"50", "10"}}});
  REQUIRE(r.explanations.size() == 1);
  // The two variants simulate alike because the model ignores gc_freq, not because it has no effect.
  CHECK(r.explanations[0].find("training.gc_freq 50 → 10: not quantified, the model does not read training.gc_freq") ==
        0);
  CHECK(r.explanations[0].find("tokens/s") == std::string::npos);
  CHECK(r.explanations[0].find("no effect") == std::string::npos);
  // lint reports it as a warning and simulates nothing for it.
  const LintReport l = lint_config(src);
  const auto f = std::find_if(l.findings.begin(), l.findings.end(),
                              [](const LintFinding& x) { return x.key == "training.gc_freq"; });
  REQUIRE(f != l.findings.end());
  CHECK(f->severity == "warning");
  CHECK(f->message.find("accepted but not modelled") != std::string::npos);
  CHECK(f->message.find("simulated with training.gc_freq") == std::string::npos);
  std::filesystem::remove(src.config);
}

TEST_CASE("lint quotes a figure as moved only where it moved") {
  RunSource src;
  std::string yaml = std::string(kFoundryBase) + "  limit_all_gathers: false\n";
  yaml.replace(yaml.find("activation_checkpointing: true"), 30, "activation_checkpointing: false");
  src.config = write_temp(".yaml", yaml);
  src.gpus = 8;
  src.cluster = "a100-80gb";
  const LintReport l = lint_config(src);
  const auto f = std::find_if(l.findings.begin(), l.findings.end(),
                              [](const LintFinding& x) { return x.key == "fsdp_config.limit_all_gathers"; });
  REQUIRE(f != l.findings.end());
  CAPTURE(f->message);
  // Every "a → b" lint prints has a != b: an unmoved figure reads "unchanged at a".
  const std::regex change(R"(([0-9.]+) → ([0-9.]+))");
  for (auto it = std::sregex_iterator(f->message.begin(), f->message.end(), change); it != std::sregex_iterator(); ++it)
    CHECK((*it)[1].str() != (*it)[2].str());
  // Here the step's peak falls outside the forward's run of gathered blocks, so the limiter does not
  // move it, and lint says so rather than printing the same figure twice.
  CHECK(f->message.find("peak unchanged at") != std::string::npos);
  std::filesystem::remove(src.config);
}

namespace {

// Llama-3.1 8B's torchtitan file (8192-token sequences, one per rank) with `parallelism` lines,
// without and with `extra`, each resolved on 8 GPUs.
std::pair<RunConfig, RunConfig> titan_8b_without_and_with(const std::string& parallelism, const std::string& extra) {
  const std::string base = "[model]\nname = \"llama3\"\nflavor = \"8B\"\n[training]\nlocal_batch_size = 1\n"
                           "seq_len = 8192\n[parallelism]\n" + parallelism;
  std::pair<RunConfig, RunConfig> out{import_torchtitan("t.toml", toml::parse(base)),
                                      import_torchtitan("t.toml", toml::parse(base + extra))};
  resolve_layout(out.first, 8);
  resolve_layout(out.second, 8);
  CHECK(out.second.unmodelled_settings.empty());
  return out;
}

}  // namespace

TEST_CASE("torchtitan's optimizer.early_step_in_backward: the stored gradient shard leaves the step, as torchtitan "
          "frees each gradient in backward") {
  const auto [off, on] = titan_8b_without_and_with("", "[optimizer]\nearly_step_in_backward = true\n");
  CHECK(on.plan.optimizer_in_backward);
  const ClusterSpec c = load_cluster("h100-sxm-80gb");
  const StageMemory a = estimate_memory(off.model, off.plan, off.job, c).stages.at(0);
  const StageMemory b = estimate_memory(on.model, on.plan, on.job, c).stages.at(0);
  // By hand: FSDP2 keeps each rank's fp32 gradient shard, 4 B x P / 8, once backward has made it;
  // stepped in backward, no gradient is stored. The peak never rises, and falls by at most that
  // much (here it is at the loss's backward, before any block's gradient exists: it stays).
  const double grad_shard = 4.0 * static_cast<double>(param_counts(off.model).total(off.model.n_layers)) / 8;
  CHECK(a.grads_bytes == doctest::Approx(grad_shard).epsilon(1e-9));
  CHECK(b.grads_bytes == 0);
  CHECK(a.peak_moment == "loss backward");
  CHECK(b.peak_bytes <= a.peak_bytes);
  CHECK(a.peak_bytes - b.peak_bytes <= grad_shard * (1 + 1e-9));
  // torchtitan's build_optimizers raises under pipeline parallelism.
  CHECK_THROWS_AS(import_torchtitan("t.toml", toml::parse("[model]\nname = \"llama3\"\nflavor = \"8B\"\n"
                                                         "[optimizer]\nearly_step_in_backward = true\n"
                                                         "[parallelism]\npipeline_parallel_degree = 2\n")),
                  InputError);
}

TEST_CASE("torchtitan's parallelism.disable_loss_parallel: the logits gathered over TP and the loss over the whole "
          "vocabulary, slower and larger as the runtime runs it") {
  const auto [on, off] = titan_8b_without_and_with("tensor_parallel_degree = 8\n", "disable_loss_parallel = true\n");
  CHECK(on.plan.loss_parallel);
  CHECK_FALSE(off.plan.loss_parallel);
  // Kept through the plan TOML.
  CHECK(read_plan_toml("rt.toml", toml::parse(to_plan_toml(off))).plan.loss_parallel == false);
  // By hand: torch's cross-entropy keeps the fp32 log-probs over the logits, 4 B x 8192 tokens x
  // 128256 / 8 per rank under loss parallelism, 8 times that without.
  const MicroBatchShape mbs{8192, 1};
  const double logits = 8192.0 * static_cast<double>(on.model.vocab);
  CHECK(loss_saved_bytes(off.model, off.plan, mbs) - loss_saved_bytes(on.model, on.plan, mbs) ==
        doctest::Approx(4 * logits * (1 - 1.0 / 8)).epsilon(1e-9));
  // The step: one all-gather of the bf16 logits (2 B x 8192 x 128256) over the TP group per
  // micro-batch, and more time and memory.
  const ClusterSpec c = load_cluster("h100-sxm-80gb");
  SimOptions keep;
  keep.keep_timeline = true;  // the program's ops with it
  const SimulatedStep a = simulate_step(on.model, on.plan, on.job, c, keep);
  const SimulatedStep b = simulate_step(off.model, off.plan, off.job, c, keep);
  auto logit_gathers = [&](const SimulatedStep& s) {
    const std::vector<Op> ops = s.program.expanded();
    return std::count_if(ops.begin(), ops.end(), [&](const Op& op) {
      return op.kind == OpKind::collective && op.group == GroupKind::tp && op.collective == CollectiveOp::all_gather &&
             op.bytes == 2 * logits;
    });
  };
  CHECK(logit_gathers(a) == 0);
  CHECK(logit_gathers(b) == on.job.grad_accum);
  CHECK(b.result.step_time_s > a.result.step_time_s);
  CHECK(b.result.stages[0].peak_bytes > a.result.stages[0].peak_bytes);
}

// Importers: real llm-foundry / torchtitan files from ../shared/examples, the shipped
// plans/examples, the runtime quirks that must surface as warnings, and the plan TOML round trip.
#include <doctest/doctest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <unistd.h>

#include "import/config_loader.hpp"
#include "spec/error.hpp"
#include "spec/import_common.hpp"
#include "spec/model_loader.hpp"
#include "spec/plan_toml.hpp"
#include "test_paths.hpp"

using namespace meshplan;
namespace fs = std::filesystem;

namespace {

fs::path temp_dir() {
  static const fs::path dir = [] {
    fs::path d = fs::temp_directory_path() / ("meshplan_test_importers_" + std::to_string(::getpid()));
    fs::create_directories(d);
    return d;
  }();
  return dir;
}

std::string write_temp(const std::string& name, const std::string& text) {
  const fs::path p = temp_dir() / name;
  std::ofstream(p, std::ios::binary) << text;
  return p.string();
}

// The message of the InputError that loading `path` must raise ("" and a failed check if none).
std::string load_error(const std::string& path) {
  try {
    load_run_config(path);
  } catch (const InputError& e) {
    return e.what();
  }
  FAIL_CHECK("expected an InputError from " << path);
  return "";
}

bool has_warning(const RunConfig& rc, const std::string& needle) {
  return std::any_of(rc.warnings.begin(), rc.warnings.end(),
                     [&](const std::string& w) { return w.find(needle) != std::string::npos; });
}

std::string warnings_text(const RunConfig& rc) {
  std::string s;
  for (const auto& w : rc.warnings) s += w + "\n";
  return s;
}

// The plan as text without the provenance comment, for comparing two RunConfigs field by field.
std::string plan_text(RunConfig rc) {
  rc.source_file.clear();
  return to_plan_toml(rc);
}

// to_plan_toml -> file -> load_run_config must give the same plan, before and after resolving.
void check_round_trip(const RunConfig& rc, const std::string& tag) {
  CAPTURE(tag);
  const std::string text = plan_text(rc);
  const std::string path = write_temp("roundtrip_" + std::to_string(std::hash<std::string>{}(tag)) + ".toml", text);
  RunConfig back = load_run_config(path);
  CHECK(back.format == ConfigFormat::meshplan_plan);
  CHECK(plan_text(back) == text);
  CHECK(back.model.name == rc.model.name);
  CHECK(back.model.n_layers == rc.model.n_layers);
  CHECK(back.plan.mesh.dp_shard == rc.plan.mesh.dp_shard);
  CHECK(back.plan.runtime == rc.plan.runtime);
  CHECK(back.job.micro_batch == rc.job.micro_batch);
}

// GPU counts for files that do not fix one (torchtitan and llm-foundry never do).
std::int64_t gpus_for(const std::string& file) {
  static const std::map<std::string, std::int64_t> g = {
      {"llama3_405b.toml", 128},  {"llama3_70b.toml", 64},  {"llama3_8b.toml", 64},
      {"dbrx-full-ft.yaml", 64},  {"hf-llama-3.1-8B.yaml", 8}, {"llama-3-8b_domain_adapt.yaml", 8},
      {"mpt-30b.yaml", 64},       {"mpt-70b.yaml", 64},     {"mpt-7b.yaml", 8},
      {"mpt-7b_dolly_sft.yaml", 8}, {"mpt-7b-8gpu-pure-ac.yaml", 8}, {"mpt-30b-hsdp-32gpu.yaml", 32},
      {"mpt-7b-tp2-16gpu.yaml", 16}, {"torchtitan-llama3.1-8b-8xh100.toml", 8},
      {"torchtitan-llama3.1-70b-tp8-64gpu-mid2025.toml", 64},
  };
  auto it = g.find(fs::path(file).filename().string());
  return it == g.end() ? 8 : it->second;
}

std::vector<fs::path> files_in(const fs::path& dir) {
  std::vector<fs::path> out;
  for (const auto& e : fs::recursive_directory_iterator(dir))
    if (e.is_regular_file()) out.push_back(e.path());
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

TEST_CASE("every shared example imports, resolves and round-trips" * SKIP_UNLESS_SHARED()) {
  int n = 0;
  for (const auto& p : files_in(test::shared_root() / "examples")) {
    const std::string ext = p.extension().string();
    if (ext != ".yaml" && ext != ".toml") continue;
    CAPTURE(p.string());
    if (p.filename() == "dbrx-full-ft.yaml") {
      // DBRX is not shipped: the importer must say which id and how to supply the shape.
      try {
        (void)load_run_config(p.string());
        FAIL("dbrx-full-ft.yaml should need --model");
      } catch (const InputError& e) {
        const std::string w = e.what();
        CHECK(w.find(p.string()) != std::string::npos);
        CHECK(e.key() == "model.pretrained_model_name_or_path");
        CHECK(w.find("databricks/dbrx-instruct") != std::string::npos);
        CHECK(w.find("--model") != std::string::npos);
      }
      // With a caller-side model the rest of the file imports.
      ImportOptions opts;
      opts.model = load_model("mixtral-8x7b");
      RunConfig rc = load_run_config(p.string(), opts);
      CHECK(rc.model.name == "mixtral-8x7b");
      CHECK(rc.plan.ac == AcMode::full);
      CHECK(has_warning(rc, "optimizer.name"));  // decoupled_lionw
      resolve_layout(rc, gpus_for(p.string()));
      ++n;
      continue;
    }
    RunConfig rc = load_run_config(p.string());
    check_round_trip(rc, p.string() + " unresolved");
    resolve_layout(rc, gpus_for(p.string()));
    CHECK(rc.n_gpus == gpus_for(p.string()));
    CHECK(rc.plan.mesh.world() == rc.n_gpus);
    CHECK(rc.job.global_batch > 0);
    CHECK(rc.job.micro_batch > 0);
    CHECK(rc.job.grad_accum > 0);
    check_round_trip(rc, p.string() + " resolved");
    ++n;
  }
  CHECK(n == 13);
}

TEST_CASE("llm-foundry mpt-7b.yaml values" * SKIP_UNLESS_SHARED()) {
  RunConfig rc = load_run_config((test::shared_root() / "examples/llm-foundry/mpt-7b.yaml").string());
  CHECK(rc.format == ConfigFormat::llm_foundry_yaml);
  CHECK(rc.plan.runtime == Runtime::composer_fsdp1);
  CHECK(rc.model.n_layers == 32);
  CHECK(rc.model.d_model == 4096);
  CHECK(rc.model.vocab == 50368);
  CHECK(rc.plan.sharding == Sharding::zero3);
  CHECK(rc.plan.reshard_after_forward);
  CHECK(rc.plan.root_unsharded);
  CHECK(rc.plan.mixed_precision_name == "PURE");
  CHECK(rc.plan.param_dtype == Dtype::bf16);
  CHECK(rc.plan.reduce_dtype == Dtype::bf16);
  CHECK(rc.plan.state_dtype == Dtype::fp32);
  CHECK(rc.plan.ac == AcMode::full);
  CHECK_FALSE(rc.plan.ac_reentrant);
  CHECK(rc.plan.limit_all_gathers);
  CHECK(rc.plan.backward_prefetch == BackwardPrefetch::backward_post);  // Composer's code default
  CHECK(rc.job.micro_batch == 8);
  CHECK(rc.job.global_batch == 1024);
  CHECK(rc.job.seq_len == 2048);
  CHECK(rc.plan.mesh.dp_shard == -1);
  CHECK(rc.n_gpus == 0);
  resolve_layout(rc, 8);
  CHECK(rc.plan.mesh.dp_shard == 8);
  CHECK(rc.job.grad_accum == 16);  // 1024 / 8 = 128 per device, micro 8
}

TEST_CASE("llm-foundry hf-llama-3.1-8B.yaml: interpolated hf id, BACKWARD_PRE" * SKIP_UNLESS_SHARED()) {
  RunConfig rc = load_run_config((test::shared_root() / "examples/llm-foundry/hf-llama-3.1-8B.yaml").string());
  CHECK(rc.model.n_layers == 32);
  CHECK(rc.model.n_kv_heads == 8);
  CHECK(rc.plan.backward_prefetch == BackwardPrefetch::backward_pre);
  CHECK(rc.plan.ac == AcMode::none);
  CHECK(has_warning(rc, "activation_checkpointing_reentrant"));  // set but AC is off
  resolve_layout(rc, 8);
  CHECK(rc.job.micro_batch == 1);
  CHECK(rc.job.grad_accum == 1);
}

TEST_CASE("torchtitan presets: values" * SKIP_UNLESS_SHARED()) {
  const fs::path tt = test::shared_root() / "examples/torchtitan";
  SUBCASE("70B, early-2026 layout") {
    RunConfig rc = load_run_config((tt / "238fa9953e4a/llama3_70b.toml").string());
    CHECK(rc.format == ConfigFormat::torchtitan_toml);
    CHECK(rc.plan.runtime == Runtime::torchtitan_fsdp2);
    CHECK(rc.model.name == "llama3.1-70b");
    CHECK(rc.plan.mesh.tp == 8);
    CHECK(rc.plan.sequence_parallel);
    CHECK(rc.plan.ac == AcMode::full);
    CHECK(rc.job.micro_batch == 8);
    CHECK(rc.job.seq_len == 8192);
    CHECK_FALSE(rc.plan.compile);
    CHECK_FALSE(rc.plan.root_unsharded);
    CHECK(rc.plan.reshard_after_forward);
    CHECK(rc.plan.reduce_dtype == Dtype::fp32);
    resolve_layout(rc, 64);
    CHECK(rc.plan.mesh.dp_shard == 8);
    CHECK(rc.job.global_batch == 64);  // local 8 x dp 8, not x world
    CHECK(rc.job.grad_accum == 1);
  }
  SUBCASE("405B, early-2026 layout: stale float8 converter name") {
    RunConfig rc = load_run_config((tt / "238fa9953e4a/llama3_405b.toml").string());
    CHECK(has_warning(rc, "model.converters"));
    CHECK(rc.plan.fp8 == Fp8Recipe::torchao_tensorwise);
    CHECK(rc.plan.fp8_all_gather);
    CHECK(rc.plan.compile);
    CHECK(rc.plan.async_tp);
    CHECK(rc.plan.ac == AcMode::full);
    resolve_layout(rc, 128);
    CHECK(rc.plan.mesh.dp_shard == 16);
    CHECK(rc.job.global_batch == 32);
  }
  SUBCASE("405B, mid-2025 layout: float8 is registered there") {
    RunConfig rc = load_run_config((tt / "8570415c3/llama3_405b.toml").string());
    CHECK_FALSE(has_warning(rc, "model.converters"));
    CHECK(rc.plan.fp8 == Fp8Recipe::torchao_tensorwise);
    CHECK(rc.plan.compile);
    CHECK(rc.plan.async_tp);
  }
  SUBCASE("8B: per-op SAC") {
    RunConfig rc = load_run_config((tt / "238fa9953e4a/llama3_8b.toml").string());
    CHECK(rc.plan.ac == AcMode::selective_op);
    CHECK(rc.plan.mesh.tp == 1);
    CHECK_FALSE(rc.plan.sequence_parallel);
  }
}

TEST_CASE("both torchtitan layouts give the same plan for the same preset" * SKIP_UNLESS_SHARED()) {
  const fs::path tt = test::shared_root() / "examples/torchtitan";
  for (const char* f : {"llama3_8b.toml", "llama3_70b.toml", "llama3_405b.toml"}) {
    CAPTURE(f);
    RunConfig a = load_run_config((tt / "238fa9953e4a" / f).string());
    RunConfig b = load_run_config((tt / "8570415c3" / f).string());
    CHECK(plan_text(a) == plan_text(b));
    resolve_layout(a, gpus_for(f));
    resolve_layout(b, gpus_for(f));
    CHECK(plan_text(a) == plan_text(b));
  }
}

TEST_CASE("plans/examples all import and resolve") {
  const fs::path dir = test::data_root() / "plans/examples";
  REQUIRE(fs::is_directory(dir));
  int yaml = 0, titan = 0, plan = 0;
  bool pp = false, cp = false, hsdp = false, tp_cfg = false;
  std::set<std::string> layouts;
  for (const auto& p : files_in(dir)) {
    CAPTURE(p.string());
    RunConfig rc = load_run_config(p.string());
    if (rc.format == ConfigFormat::llm_foundry_yaml) ++yaml;
    if (rc.format == ConfigFormat::torchtitan_toml) {
      ++titan;
      layouts.insert(p.filename().string().find("mid2025") != std::string::npos ? "mid" : "early");
    }
    if (rc.format == ConfigFormat::meshplan_plan) ++plan;
    check_round_trip(rc, p.string());
    resolve_layout(rc, rc.n_gpus > 0 ? std::optional<std::int64_t>{} : std::optional<std::int64_t>{gpus_for(p.string())});
    CHECK(rc.plan.mesh.world() == rc.n_gpus);
    pp = pp || rc.plan.mesh.pp > 1;
    cp = cp || rc.plan.mesh.cp > 1;
    hsdp = hsdp || (rc.plan.mesh.dp_replicate > 1 && rc.plan.mesh.dp_shard > 1);
    tp_cfg = tp_cfg || rc.plan.tp_style == TpStyle::mlp_only;
    check_round_trip(rc, p.string() + " resolved");
  }
  CHECK(yaml >= 3);
  CHECK(titan >= 2);
  CHECK(plan >= 2);
  CHECK(layouts.size() == 2);
  CHECK(pp);
  CHECK(cp);
  CHECK(hsdp);
  CHECK(tp_cfg);
}

TEST_CASE("plans/examples values") {
  const fs::path dir = test::data_root() / "plans/examples";
  SUBCASE("HSDP yaml") {
    RunConfig rc = load_run_config((dir / "mpt-30b-hsdp-32gpu.yaml").string());
    resolve_layout(rc, 32);
    CHECK(rc.plan.mesh.dp_replicate == 4);
    CHECK(rc.plan.mesh.dp_shard == 8);
    CHECK(rc.plan.sharding == Sharding::zero3);
    CHECK(rc.job.grad_accum == 4);
  }
  SUBCASE("TP yaml: device batch = global / world, TP included") {
    RunConfig rc = load_run_config((dir / "mpt-7b-tp2-16gpu.yaml").string());
    CHECK(rc.plan.tp_style == TpStyle::mlp_only);
    CHECK_FALSE(rc.plan.sequence_parallel);
    CHECK(rc.plan.mixed_precision_name == "DEFAULT");
    CHECK(rc.plan.reduce_dtype == Dtype::fp32);
    resolve_layout(rc, 16);
    CHECK(rc.plan.mesh.tp == 2);
    CHECK(rc.plan.mesh.dp_shard == 8);
    CHECK(rc.job.grad_accum == 2);  // 128 / 16 = 8 per rank, micro 4
  }
  SUBCASE("PP plan") {
    RunConfig rc = load_run_config((dir / "plan-llama3.1-70b-pp4-tp8.toml").string());
    resolve_layout(rc, std::nullopt);
    CHECK(rc.n_gpus == 64);
    CHECK(rc.plan.mesh.pp == 4);
    CHECK(rc.plan.mesh.vpp == 2);
    CHECK(rc.plan.schedule == PipelineSchedule::interleaved_1f1b);
    CHECK(rc.job.grad_accum == 32);
    CHECK(rc.job.pp_microbatches == 8);
  }
  SUBCASE("CP plan") {
    RunConfig rc = load_run_config((dir / "plan-llama3.1-8b-cp4-32k.toml").string());
    resolve_layout(rc, 16);  // agrees with the file
    CHECK(rc.plan.mesh.cp == 4);
    CHECK(rc.plan.mesh.dp_shard == 4);
    CHECK(rc.job.grad_accum == 4);
  }
  SUBCASE("mid-2025 torchtitan 70B with a global batch") {
    RunConfig rc = load_run_config((dir / "torchtitan-llama3.1-70b-tp8-64gpu-mid2025.toml").string());
    resolve_layout(rc, 64);
    CHECK(rc.job.global_batch == 64);
    CHECK(rc.job.micro_batch == 4);
    CHECK(rc.job.grad_accum == 2);
  }
}

// ---------------------------------------------------------------------------------------------
// Quirks that must surface as warnings, one line each, naming the key.

namespace {
std::string foundry(const std::string& fsdp, const std::string& extra = "") {
  return "max_seq_len: 2048\n"
         "global_train_batch_size: 64\n"
         "device_train_microbatch_size: 4\n"
         "model:\n  name: mpt_causal_lm\n  d_model: 1024\n  n_heads: 16\n  n_layers: 8\n"
         "  expansion_ratio: 4\n  max_seq_len: 2048\n  vocab_size: 50368\n" +
         extra + "fsdp_config:\n" + fsdp;
}
RunConfig load_yaml(const std::string& name, const std::string& text) {
  return load_run_config(write_temp(name, text));
}
}  // namespace

TEST_CASE("llm-foundry warnings") {
  SUBCASE("reentrant without AC has no effect") {
    RunConfig rc = load_yaml("w1.yaml", foundry("  activation_checkpointing_reentrant: false\n"));
    CHECK(has_warning(rc, "fsdp_config.activation_checkpointing_reentrant"));
    CHECK(has_warning(rc, "no effect"));
  }
  SUBCASE("AC with Composer's reentrant default") {
    RunConfig rc = load_yaml("w2.yaml", foundry("  activation_checkpointing: true\n"));
    CHECK(rc.plan.ac_reentrant);
    CHECK(has_warning(rc, "fsdp_config.activation_checkpointing_reentrant"));
    CHECK(has_warning(rc, "non-reentrant"));
  }
  SUBCASE("HYBRID_SHARD without a replicate degree is FULL_SHARD") {
    RunConfig rc = load_yaml("w3.yaml", foundry("  sharding_strategy: HYBRID_SHARD\n"));
    CHECK(has_warning(rc, "fsdp_config.sharding_strategy"));
    resolve_layout(rc, 8);
    CHECK(rc.plan.mesh.dp_replicate == 1);
    CHECK(rc.plan.mesh.dp_shard == 8);
  }
  SUBCASE("FULL_SHARD with a replicate degree becomes HYBRID") {
    RunConfig rc = load_yaml("w4.yaml", foundry("  sharding_strategy: FULL_SHARD\n  data_parallel_replicate_degree: 2\n"));
    CHECK(has_warning(rc, "fsdp_config.data_parallel_replicate_degree"));
    CHECK(has_warning(rc, "HYBRID_SHARD"));
    resolve_layout(rc, 16);
    CHECK(rc.plan.mesh.dp_replicate == 2);
    CHECK(rc.plan.mesh.dp_shard == 8);
  }
  SUBCASE("misspelled fsdp_config key: silently ignored by Composer, suggestion given") {
    RunConfig rc = load_yaml("w5.yaml", foundry("  activation_checkpointng: true\n"));
    CHECK(has_warning(rc, "fsdp_config.activation_checkpointng"));
    CHECK(has_warning(rc, "did you mean 'activation_checkpointing'"));
    CHECK(rc.plan.ac == AcMode::none);
  }
  SUBCASE("auto micro-batch") {
    std::string y = foundry("  mixed_precision: DEFAULT\n");
    y.replace(y.find("device_train_microbatch_size: 4"), 31, "device_train_microbatch_size: auto");
    RunConfig rc = load_yaml("w6.yaml", y);
    CHECK(has_warning(rc, "device_train_microbatch_size"));
    CHECK(rc.job.micro_batch == 0);
    resolve_layout(rc, 8);
    CHECK(rc.job.micro_batch == 8);
    CHECK(rc.job.grad_accum == 1);
  }
  SUBCASE("FSDP2Config key selects composer_fsdp2") {
    RunConfig rc = load_yaml("w7.yaml", foundry("  reshard_after_forward: false\n  limit_all_gathers: true\n"));
    CHECK(rc.plan.runtime == Runtime::composer_fsdp2);
    CHECK(rc.plan.sharding == Sharding::zero2);
    CHECK_FALSE(rc.plan.root_unsharded);
    CHECK(has_warning(rc, "fsdp_config.reshard_after_forward"));
    CHECK(has_warning(rc, "fsdp_config.limit_all_gathers"));
  }
  SUBCASE("mixed precision mapping") {
    RunConfig full = load_yaml("w8.yaml", foundry("  mixed_precision: FULL\n"));
    CHECK(full.plan.param_dtype == Dtype::fp32);
    CHECK(full.plan.reduce_dtype == Dtype::fp32);
    CHECK(full.plan.compute_dtype == Dtype::bf16);
    RunConfig dflt = load_yaml("w9.yaml", foundry("  sharding_strategy: SHARD_GRAD_OP\n"));
    CHECK(dflt.plan.mixed_precision_name == "DEFAULT");
    CHECK(dflt.plan.param_dtype == Dtype::bf16);
    CHECK(dflt.plan.reduce_dtype == Dtype::fp32);
    CHECK(dflt.plan.sharding == Sharding::zero2);
    CHECK_FALSE(dflt.plan.reshard_after_forward);
    RunConfig dict = load_yaml("w10.yaml", foundry("  mixed_precision:\n    param_dtype: bf16\n"));
    CHECK(dict.plan.param_dtype == Dtype::bf16);
    CHECK(dict.plan.reduce_dtype == Dtype::bf16);  // follows param_dtype when missing
    CHECK(dict.plan.mixed_precision_name == "custom");
    std::string fp16 = foundry("  mixed_precision: PURE\n", "precision: amp_fp16\n");
    RunConfig h = load_yaml("w11.yaml", fp16);
    CHECK(h.plan.param_dtype == Dtype::fp16);
    CHECK(h.plan.reduce_dtype == Dtype::fp16);
    CHECK(h.plan.state_dtype == Dtype::fp32);
  }
  SUBCASE("nested interpolation inside strings") {
    std::string y = "variables:\n  seq: 1024\n  tag: s${variables.seq}\n  alias: ${variables.seq}\n"
                    "run_name: run-${variables.tag}\n" +
                    foundry("  mixed_precision: PURE\n");
    y.replace(y.find("max_seq_len: 2048\n"), 18, "max_seq_len: ${variables.alias}\n");
    RunConfig rc = load_yaml("w12.yaml", y);
    CHECK(rc.job.seq_len == 1024);
  }
  SUBCASE("no fsdp_config: DDP") {
    std::string y = foundry("");
    y = y.substr(0, y.find("fsdp_config:"));
    RunConfig rc = load_yaml("w13.yaml", y);
    CHECK(rc.plan.sharding == Sharding::none);
    resolve_layout(rc, 4);
    CHECK(rc.plan.mesh.dp_shard == 4);
  }
  SUBCASE("single GPU drops FSDP") {
    RunConfig rc = load_yaml("w14.yaml", foundry("  mixed_precision: PURE\n"));
    resolve_layout(rc, 1);
    CHECK(rc.plan.sharding == Sharding::none);
    CHECK(has_warning(rc, "single GPU"));
  }
  SUBCASE("every warning is one line") {
    RunConfig rc = load_yaml("w15.yaml", foundry("  activation_checkpointing: true\n  bogus_key: 1\n"));
    for (const auto& w : rc.warnings) CHECK(w.find('\n') == std::string::npos);
    CHECK(rc.warnings.size() >= 2);
    INFO(warnings_text(rc));
  }
}

TEST_CASE("torchtitan defaults and quirks") {
  const std::string base = "[model]\nname = \"llama3\"\nflavor = \"8B\"\n[training]\nseq_len = 4096\n";
  SUBCASE("code defaults: selective AC every 2nd block, local batch 8, dp_shard -1") {
    RunConfig rc = load_run_config(write_temp("t1.toml", base));
    CHECK(rc.plan.ac == AcMode::selective_layer);
    CHECK(rc.plan.ac_every_n == 2);
    CHECK(rc.job.micro_batch == 8);
    CHECK(rc.plan.mesh.dp_shard == -1);
    CHECK(rc.plan.param_dtype == Dtype::bf16);
    CHECK(rc.plan.reduce_dtype == Dtype::fp32);
    resolve_layout(rc, 8);
    CHECK(rc.job.global_batch == 64);
  }
  SUBCASE("DDP when dp_shard is 1 and replicate > 1") {
    RunConfig rc = load_run_config(write_temp("t2.toml", base + "[parallelism]\ndata_parallel_shard_degree = 1\ndata_parallel_replicate_degree = 4\n"));
    resolve_layout(rc, 4);
    CHECK(rc.plan.sharding == Sharding::none);
  }
  SUBCASE("PP: reshard default off, microbatches per local batch") {
    RunConfig rc = load_run_config(write_temp("t3.toml", base + "local_batch_size = 8\n[parallelism]\npipeline_parallel_degree = 2\n"
                                                              "pipeline_parallel_microbatch_size = 2\npipeline_parallel_schedule = \"Interleaved1F1B\"\n"));
    CHECK_FALSE(rc.plan.reshard_after_forward);
    CHECK(rc.plan.mesh.vpp == 2);
    CHECK(rc.job.micro_batch == 2);
    CHECK(rc.job.pp_microbatches == 4);
    resolve_layout(rc, 8);
    CHECK(rc.plan.mesh.dp_shard == 4);
    CHECK(rc.job.global_batch == 32);
    CHECK(rc.job.grad_accum == 4);
  }
  SUBCASE("pure bf16 state, cpu offload, async TP without compile") {
    RunConfig rc = load_run_config(write_temp("t4.toml", base + "dtype = \"bfloat16\"\nenable_cpu_offload = true\n"
                                                              "[parallelism]\ntensor_parallel_degree = 2\nenable_async_tensor_parallel = true\n"));
    CHECK(rc.plan.state_dtype == Dtype::bf16);
    CHECK(rc.plan.param_offload);
    CHECK_FALSE(rc.plan.async_tp);
    CHECK(has_warning(rc, "parallelism.enable_async_tensor_parallel"));
  }
  SUBCASE("caller-side model replaces debugmodel") {
    ImportOptions opts;
    opts.model = load_model("llama2-7b");
    RunConfig rc = load_run_config(write_temp("t5.toml", "[model]\nflavor = \"debugmodel\"\n[training]\nseq_len = 1024\n"), opts);
    CHECK(rc.model.name == "llama2-7b");
  }
}

namespace {
// Mixtral under Megatron on `gpus` GPUs of `cluster`, the rest of the plan at its defaults.
RunConfig megatron_mixtral(const char* cluster, int gpus) {
  RunConfig rc;
  rc.model = load_model("mixtral-8x7b");
  rc.cluster = cluster;
  rc.n_gpus = gpus;
  rc.plan.runtime = Runtime::megatron;
  return rc;
}
}  // namespace

TEST_CASE("plan TOML round trip of a hand-built RunConfig") {
  RunConfig rc = megatron_mixtral("a100-80gb", 32);
  rc.plan.mesh = Mesh{.pp = 2, .vpp = 2, .dp_replicate = 2, .dp_shard = 2, .cp = 2, .tp = 2, .ep = 4};
  rc.model.moe.force_balance = true;
  rc.model.sliding_window = 4096;
  rc.model.full_attention_every = 3;
  rc.plan.sharding = Sharding::zero1;
  rc.plan.reshard_after_forward = false;
  rc.plan.backward_prefetch = BackwardPrefetch::none;
  rc.plan.forward_prefetch_limit = 3;
  rc.plan.limit_all_gathers = false;
  rc.plan.grad_sync_every_microbatch = false;
  rc.plan.param_dtype = Dtype::fp16;
  rc.plan.compute_dtype = Dtype::fp16;
  rc.plan.reduce_dtype = Dtype::bf16;
  rc.plan.mixed_precision_name = "custom \"quoted\"";
  rc.plan.keep_low_precision_grads = true;
  rc.plan.fp8 = Fp8Recipe::te_current;
  rc.plan.fp8_all_gather = true;
  rc.plan.ac = AcMode::selective_attn;
  rc.plan.ac_every_n = 3;
  rc.plan.act_offload = true;
  rc.plan.sequence_parallel = true;
  rc.plan.async_tp = true;
  rc.plan.schedule = PipelineSchedule::interleaved_1f1b;
  rc.plan.flash_attention = false;
  rc.plan.dropout = true;
  rc.plan.optimizer = Optimizer::adamw8bit;
  rc.plan.compile = true;
  rc.job = Job{.seq_len = 4096, .global_batch = 128, .micro_batch = 2, .grad_accum = 16, .pp_microbatches = 0};
  const std::string text = to_plan_toml(rc);
  RunConfig back = load_run_config(write_temp("rt.toml", text));
  CHECK(back.source_file == (temp_dir() / "rt.toml").string());
  CHECK(plan_text(back) == text);
  CHECK(back.plan.mixed_precision_name == rc.plan.mixed_precision_name);
  CHECK(back.plan.mesh.ep == 4);
  CHECK(back.model.moe.n_experts == 8);
  CHECK(back.model.moe.force_balance);
  CHECK(back.model.sliding_window == 4096);
  CHECK(back.model.full_attention_every == 3);
  // A plan that turns a preset's window off turns its full-layer pattern off too; a pattern
  // given without a window is refused, naming the key.
  const std::string off = write_temp("window_off.toml", std::string("[model]\npreset = \"gpt-oss-120b\"\nname = \"oss\"\n"
                                                                    "sliding_window = 0\n\n[cluster]\ngpus = 8\n\n[batch]\nseq_len = 4096\nglobal_batch = 8\nmicro_batch = 1\n"));
  const RunConfig no_window = load_run_config(off);
  CHECK(no_window.model.sliding_window == 0);
  CHECK(no_window.model.full_attention_every == 0);
  const std::string bad = write_temp("window_bad.toml", std::string("[model]\npreset = \"gpt-oss-120b\"\nname = \"oss\"\n"
                                                                    "sliding_window = 0\nfull_attention_every = 2\n\n"
                                                                    "[cluster]\ngpus = 8\n\n[batch]\nseq_len = 4096\nglobal_batch = 8\nmicro_batch = 1\n"));
  try {
    (void)load_run_config(bad);
    FAIL("a full-layer pattern without a window loaded");
  } catch (const InputError& e) {
    CHECK(std::string(e.what()).find("model.full_attention_every") != std::string::npos);
  }
  resolve_layout(back, std::nullopt);
  CHECK(back.job.grad_accum == 16);
}

TEST_CASE("plan TOML keeps the FlashAttention generation; a bad one names the key") {
  RunConfig rc;
  rc.model = load_model("llama3.1-8b");
  rc.cluster = "a100-80gb";
  rc.n_gpus = 8;
  rc.plan.mesh.dp_shard = 8;
  rc.plan.flash_attention_version = 1;
  rc.job = Job{.seq_len = 2048, .global_batch = 64, .micro_batch = 2, .grad_accum = 4, .pp_microbatches = 0};
  const std::string text = to_plan_toml(rc);
  CHECK(text.find("flash_attention_version = 1") != std::string::npos);
  const RunConfig back = load_run_config(write_temp("fa1.toml", text));
  CHECK(back.plan.flash_attention_version == 1);
  // The default generation writes nothing, so existing plan files stay byte-identical.
  rc.plan.flash_attention_version = 2;
  CHECK(to_plan_toml(rc).find("flash_attention_version") == std::string::npos);

  std::string bad = text;
  bad.replace(bad.find("flash_attention_version = 1"), 27, "flash_attention_version = 4");
  const std::string what = load_error(write_temp("fa4.toml", bad));
  CHECK(what.find("flash_attention_version") != std::string::npos);
  CHECK(what.find("must be 1, 2 or 3") != std::string::npos);
  // 3: FlashAttention-3 class (Hopper / Blackwell fused kernels) round-trips.
  std::string fa3 = text;
  fa3.replace(fa3.find("flash_attention_version = 1"), 27, "flash_attention_version = 3");
  CHECK(load_run_config(write_temp("fa3.toml", fa3)).plan.flash_attention_version == 3);
}

TEST_CASE("plan TOML [offload] activation_modules: Megatron's fine-grained offload round-trips; bad names refused") {
  RunConfig rc = megatron_mixtral("h100-sxm-80gb", 8);
  rc.plan.mesh.dp_replicate = 8;
  rc.plan.mesh.ep = 8;
  rc.plan.act_offload = true;
  rc.plan.offload_modules.expert_fc1 = true;
  rc.plan.offload_modules.core_attn = true;
  rc.job = Job{.seq_len = 4096, .global_batch = 64, .micro_batch = 1, .grad_accum = 8, .pp_microbatches = 0};
  const std::string text = to_plan_toml(rc);
  CHECK(text.find("activation_modules = [\"core_attn\", \"expert_fc1\"]") != std::string::npos);
  const RunConfig back = load_run_config(write_temp("offmods.toml", text));
  CHECK(back.plan.offload_modules.core_attn);
  CHECK(back.plan.offload_modules.expert_fc1);
  CHECK_FALSE(back.plan.offload_modules.moe_act);
  CHECK(plan_text(back) == text);
  // Whole-layer offload writes no list, so existing plan files stay byte-identical.
  rc.plan.offload_modules = {};
  CHECK(to_plan_toml(rc).find("activation_modules") == std::string::npos);

  std::string bad = text;
  bad.replace(bad.find("\"core_attn\""), 11, "\"attention\"");
  std::string what = load_error(write_temp("offbad.toml", bad));
  CHECK(what.find("activation_modules") != std::string::npos);
  CHECK(what.find("'attention'") != std::string::npos);
  std::string off = text;
  off.replace(off.find("activations = true"), 18, "activations = false");
  what = load_error(write_temp("offoff.toml", off));
  CHECK(what.find("needs activations = true") != std::string::npos);
}

TEST_CASE("MPT's loss_fn: fused_crossentropy by default, torch_crossentropy on request, anything else an error") {
  CHECK(load_yaml("loss1.yaml", foundry("  sharding_strategy: FULL_SHARD\n")).plan.fused_cross_entropy);
  CHECK_FALSE(load_yaml("loss2.yaml", foundry("  sharding_strategy: FULL_SHARD\n", "  loss_fn: torch_crossentropy\n"))
                  .plan.fused_cross_entropy);
  const std::string what = load_error(write_temp("loss3.yaml", foundry("  sharding_strategy: FULL_SHARD\n", "  loss_fn: focal\n")));
  CHECK(what.find("loss_fn") != std::string::npos);
  CHECK(what.find("focal") != std::string::npos);
  // The plan file keeps it (written only when on) and the llm-foundry emitter states it.
  RunConfig rc = load_yaml("loss4.yaml", foundry("  sharding_strategy: FULL_SHARD\n"));
  resolve_layout(rc, 8);
  const std::string text = to_plan_toml(rc);
  CHECK(text.find("fused_cross_entropy = true") != std::string::npos);
  CHECK(load_run_config(write_temp("loss4.toml", text)).plan.fused_cross_entropy);
  rc.plan.fused_cross_entropy = false;
  CHECK(to_plan_toml(rc).find("fused_cross_entropy") == std::string::npos);
}

TEST_CASE("plan TOML: deepspeed = true is kept and allowed only with the Megatron runtime") {
  RunConfig rc;
  rc.model = load_model("llama3.1-8b");
  rc.cluster = "a100-80gb";
  rc.n_gpus = 16;
  rc.plan.runtime = Runtime::megatron;
  rc.plan.sharding = Sharding::zero1;
  rc.plan.mesh.pp = 2;
  rc.plan.mesh.dp_replicate = 8;
  rc.plan.deepspeed_engine = true;
  rc.job = Job{.seq_len = 2048, .global_batch = 64, .micro_batch = 2, .grad_accum = 4, .pp_microbatches = 0};
  const std::string text = to_plan_toml(rc);
  CHECK(text.find("deepspeed = true") != std::string::npos);
  CHECK(load_run_config(write_temp("ds.toml", text)).plan.deepspeed_engine);
  std::string bad = text;
  bad.replace(bad.find("name = \"megatron\""), 17, "name = \"generic\"");
  const std::string what = load_error(write_temp("ds_bad.toml", bad));
  CHECK(what.find("deepspeed") != std::string::npos);
  CHECK(what.find("Megatron") != std::string::npos);
}

TEST_CASE("llm-foundry compile_config: eager when absent, compile with a map, CUDA graphs in reduce-overhead mode") {
  const std::string fsdp = "  sharding_strategy: FULL_SHARD\n";
  const RunConfig eager = load_yaml("cc0.yaml", foundry(fsdp));
  CHECK_FALSE(eager.plan.compile);
  CHECK_FALSE(eager.plan.cuda_graphs);
  const RunConfig compiled = load_yaml("cc1.yaml", "compile_config: {}\n" + foundry(fsdp));
  CHECK(compiled.plan.compile);
  CHECK_FALSE(compiled.plan.cuda_graphs);
  const RunConfig graphs = load_yaml("cc2.yaml", "compile_config:\n  mode: reduce-overhead\n" + foundry(fsdp));
  CHECK(graphs.plan.compile);
  CHECK(graphs.plan.cuda_graphs);
  CHECK_FALSE(load_yaml("cc3.yaml", "compile_config:\n  mode: max-autotune-no-cudagraphs\n" + foundry(fsdp)).plan.cuda_graphs);
  const std::string what = load_error(write_temp("cc4.yaml", "compile_config:\n  mode: fastest\n" + foundry(fsdp)));
  CHECK(what.find("compile_config.mode") != std::string::npos);
  CHECK(what.find("fastest") != std::string::npos);
  // The plan TOML keeps it, written only when on.
  RunConfig rc = graphs;
  resolve_layout(rc, 8);
  const std::string text = to_plan_toml(rc);
  CHECK(text.find("cuda_graphs = true") != std::string::npos);
  CHECK(load_run_config(write_temp("cc5.toml", text)).plan.cuda_graphs);
}

// torchtitan TOML importer. Key lists and defaults follow torchtitan/config/job_config.py at
// 238fa9953e4a (early 2026) and 8570415c3 (mid 2025); torchtitan's _dict_to_dataclass raises on
// any key it does not know, so meshplan refuses them too instead of silently using defaults.
#include "import/import_torchtitan.hpp"

#include <algorithm>
#include <cctype>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <map>

#include "import/accepted_settings.hpp"
#include "spec/error.hpp"
#include "spec/framework_defaults.hpp"
#include "spec/limits.hpp"
#include "spec/model_loader.hpp"
#include "spec/pipeline_split.hpp"

namespace meshplan {

namespace {

using importer::did_you_mean;
using importer::TomlView;

enum class Tag { both, early, mid };

struct SectionSpec {
  Tag tag;
  std::vector<std::string> both, early, mid;
};

Tag tag_of_layout(TorchtitanLayout l) { return l == TorchtitanLayout::early_2026 ? Tag::early : Tag::mid; }

// Section path -> keys. Sub-sections ("training.dataloader", "quantize.linear.float8") are their
// own entries; "quantize", "quantize.linear", "quantize.grouped_mm" are pure containers.
const std::map<std::string, SectionSpec>& sections() {
  static const std::map<std::string, SectionSpec> s = {
      {"job", {Tag::both, {"config_file", "dump_folder", "description"},
               {"print_config", "save_config_file", "custom_config_module"},
               {"use_for_integration_test", "print_args"}}},
      {"profiling", {Tag::both, {"enable_profiling", "save_traces_folder", "profile_freq",
                                 "enable_memory_snapshot", "save_memory_snapshot_folder"},
                     {"profiler_active", "profiler_warmup"}, {}}},
      {"metrics", {Tag::both, {"log_freq", "enable_tensorboard", "save_tb_folder", "save_for_all_ranks",
                               "enable_wandb", "disable_color_printing"}, {}, {}}},
      {"model", {Tag::both, {"name", "flavor", "tokenizer_path", "converters", "print_after_conversion"},
                 {"hf_assets_path"}, {}}},
      {"optimizer", {Tag::both, {"name", "lr", "beta1", "beta2", "eps", "weight_decay", "implementation",
                                 "early_step_in_backward"}, {}, {}}},
      {"lr_scheduler", {Tag::both, {"warmup_steps", "decay_ratio", "decay_type"},
                        {"total_steps", "min_lr_factor"}, {"lr_min"}}},
      // training.dtype (pure-bf16 state) came after the mid-2025 layout.
      {"training", {Tag::both, {"dataset", "dataset_path", "local_batch_size", "global_batch_size", "seq_len",
                                "max_norm", "steps", "enable_cpu_offload", "mixed_precision_param",
                                "mixed_precision_reduce", "gc_freq", "gc_debug"},
                    {"dtype"}, {"compile", "seed", "deterministic"}}},
      {"training.dataloader", {Tag::early, {"num_workers", "persistent_workers", "pin_memory",
                                            "prefetch_factor"}, {}, {}}},
      {"parallelism", {Tag::both, {"data_parallel_replicate_degree", "data_parallel_shard_degree",
                                   "fsdp_reshard_after_forward", "tensor_parallel_degree",
                                   "disable_loss_parallel", "enable_async_tensor_parallel",
                                   "pipeline_parallel_degree", "pipeline_parallel_layers_per_stage",
                                   "pipeline_parallel_schedule", "pipeline_parallel_schedule_csv",
                                   "pipeline_parallel_microbatch_size", "context_parallel_degree",
                                   "context_parallel_rotate_method", "expert_parallel_degree"},
                       {"module_fqns_per_model_part", "pipeline_parallel_first_stage_less_layers",
                        "pipeline_parallel_last_stage_less_layers", "pipeline_parallel_expert_parallel_overlap",
                        "context_parallel_load_balancer", "expert_tensor_parallel_degree",
                        "expert_parallel_comm_backend"},
                       {"pipeline_parallel_split_points", "enable_compiled_autograd"}}},
      {"checkpoint", {Tag::both, {"folder", "interval", "initial_load_path", "initial_load_model_only",
                                  "export_dtype", "async_mode", "keep_latest_k", "load_step",
                                  "exclude_from_loading", "create_seed_checkpoint"},
                      {"enable", "initial_load_in_hf", "last_save_model_only", "last_save_in_hf",
                       "enable_first_step_checkpoint", "load_only"},
                      {"enable_checkpoint", "model_weights_only"}}},
      {"activation_checkpoint", {Tag::both, {"mode", "selective_ac_option"},
                                 {"per_op_sac_force_recompute_mm_shapes_by_fqns", "early_stop",
                                  "memory_budget", "visualize_memory_budget_pareto", "preserve_rng_state",
                                  "determinism_check", "debug"}, {}}},
      {"compile", {Tag::early, {"enable", "components", "backend"}, {}, {}}},
      {"quantize.linear.float8", {Tag::early, {"enable_fsdp_float8_all_gather",
                                               "precompute_float8_dynamic_scale_for_fsdp", "recipe_name",
                                               "filter_fqns", "emulate"}, {}, {}}},
      {"quantize.linear.mx", {Tag::early, {"mxfp8_dim0_cast_kernel_choice", "mxfp8_dim1_cast_kernel_choice",
                                           "recipe_name", "filter_fqns"}, {}, {}}},
      {"quantize.grouped_mm.float8", {Tag::early, {"fqns"}, {}, {}}},
      {"quantize.grouped_mm.mx", {Tag::early, {"fqns", "recipe_name"}, {}, {}}},
      {"float8", {Tag::mid, {"enable_fsdp_float8_all_gather", "precompute_float8_dynamic_scale_for_fsdp",
                             "force_recompute_fp8_weight_in_bwd", "recipe_name", "filter_fqns", "emulate",
                             "moe_fqns_prototype"}, {}, {}}},
      {"mx", {Tag::mid, {"mxfp8_dim1_cast_kernel_choice", "recipe_name", "filter_fqns"}, {}, {}}},
      {"comm", {Tag::both, {"init_timeout_seconds", "train_timeout_seconds", "trace_buf_size",
                            "save_traces_folder"}, {"save_traces_file_prefix", "mode"}, {}}},
      {"memory_estimation", {Tag::both, {"disable_fake_mode"}, {"enable"}, {"enabled"}}},
      {"fault_tolerance", {Tag::both, {"enable", "process_group", "process_group_timeout_ms", "replica_id",
                                       "group_size", "min_replica_size", "semi_sync_method", "sync_steps",
                                       "should_quantize", "fragment_sync_delay", "fragment_update_alpha"}, {}, {}}},
      {"experimental", {Tag::both, {"custom_import", "custom_args_module"}, {}, {}}},
      {"validation", {Tag::both, {"enable", "dataset", "dataset_path", "local_batch_size", "seq_len", "freq",
                                  "steps"}, {}, {}}},
      {"debug", {Tag::early, {"seed", "deterministic", "deterministic_warn_only", "moe_force_load_balance"}, {}, {}}},
  };
  return s;
}
const std::vector<std::string> kContainers = {"quantize", "quantize.linear", "quantize.grouped_mm"};

// Where a key of one layout lives in the other.
const std::map<std::string, std::string>& renames() {
  static const std::map<std::string, std::string> r = {
      {"training.compile", "[compile] enable"},
      {"compile", "[training] compile"},
      {"checkpoint.enable_checkpoint", "[checkpoint] enable"},
      {"checkpoint.enable", "[checkpoint] enable_checkpoint"},
      {"checkpoint.model_weights_only", "[checkpoint] last_save_model_only"},
      {"checkpoint.last_save_model_only", "[checkpoint] model_weights_only"},
      {"float8", "[quantize.linear.float8]"},
      {"quantize.linear.float8", "[float8]"},
      {"mx", "[quantize.linear.mx]"},
      {"quantize.linear.mx", "[mx]"},
      {"lr_scheduler.lr_min", "[lr_scheduler] min_lr_factor"},
      {"lr_scheduler.min_lr_factor", "[lr_scheduler] lr_min"},
      {"memory_estimation.enabled", "[memory_estimation] enable"},
      {"memory_estimation.enable", "[memory_estimation] enabled"},
      {"model.hf_assets_path", "[model] tokenizer_path"},
      {"training.seed", "[debug] seed"},
      {"training.deterministic", "[debug] deterministic"},
      {"debug", "[training] seed / deterministic"},
      {"parallelism.pipeline_parallel_split_points", "[parallelism] pipeline_parallel_layers_per_stage"},
  };
  return r;
}

// Accepted keys that change neither the simulated step's time nor its memory: the job's files and
// logging, the profiler (a few profiled steps per profile_freq, not the steady step), the
// optimizer's and the schedule's values, the data and its loader, checkpoints and validation
// (between steps), timeouts, seeds. Every other key is read by the mapping below or listed in
// unmodelled_keys().
const std::vector<std::string>& no_effect_keys() {
  static const std::vector<std::string> k = {
      "job.config_file", "job.dump_folder", "job.description", "job.print_config", "job.save_config_file",
      "job.custom_config_module", "job.use_for_integration_test", "job.print_args",
      "profiling.enable_profiling", "profiling.save_traces_folder", "profiling.profile_freq",
      "profiling.enable_memory_snapshot", "profiling.save_memory_snapshot_folder", "profiling.profiler_active",
      "profiling.profiler_warmup",
      "metrics.log_freq", "metrics.enable_tensorboard", "metrics.save_tb_folder", "metrics.save_for_all_ranks",
      "metrics.enable_wandb", "metrics.disable_color_printing",
      "model.tokenizer_path", "model.hf_assets_path", "model.print_after_conversion",
      "optimizer.lr", "optimizer.beta1", "optimizer.beta2", "optimizer.eps", "optimizer.weight_decay",
      "lr_scheduler.warmup_steps", "lr_scheduler.decay_ratio", "lr_scheduler.decay_type", "lr_scheduler.total_steps",
      "lr_scheduler.min_lr_factor", "lr_scheduler.lr_min",
      // max_norm: the gradient-norm clip, one small reduction per step (Megatron's --clip-grad alike).
      "training.dataset", "training.dataset_path", "training.steps", "training.max_norm", "training.seed",
      "training.dataloader.num_workers", "training.dataloader.persistent_workers", "training.dataloader.pin_memory",
      "training.dataloader.prefetch_factor",
      "checkpoint.folder", "checkpoint.interval", "checkpoint.initial_load_path", "checkpoint.initial_load_model_only",
      "checkpoint.export_dtype", "checkpoint.async_mode", "checkpoint.keep_latest_k", "checkpoint.load_step",
      "checkpoint.exclude_from_loading", "checkpoint.create_seed_checkpoint", "checkpoint.enable",
      "checkpoint.initial_load_in_hf", "checkpoint.last_save_model_only", "checkpoint.last_save_in_hf",
      "checkpoint.enable_first_step_checkpoint", "checkpoint.load_only", "checkpoint.enable_checkpoint",
      "checkpoint.model_weights_only",
      // Saving the RNG state around a recomputed block: microseconds per block.
      "activation_checkpoint.visualize_memory_budget_pareto", "activation_checkpoint.preserve_rng_state",
      "comm.init_timeout_seconds", "comm.train_timeout_seconds", "comm.trace_buf_size", "comm.save_traces_folder",
      "comm.save_traces_file_prefix",
      "memory_estimation.disable_fake_mode", "memory_estimation.enable", "memory_estimation.enabled",
      // Only with fault_tolerance.enable, which is named.
      "fault_tolerance.process_group", "fault_tolerance.process_group_timeout_ms", "fault_tolerance.replica_id",
      "fault_tolerance.group_size", "fault_tolerance.min_replica_size", "fault_tolerance.semi_sync_method",
      "fault_tolerance.sync_steps", "fault_tolerance.should_quantize", "fault_tolerance.fragment_sync_delay",
      "fault_tolerance.fragment_update_alpha",
      "experimental.custom_import", "experimental.custom_args_module",
      "validation.enable", "validation.dataset", "validation.dataset_path", "validation.local_batch_size",
      "validation.seq_len", "validation.freq", "validation.steps",
      "debug.seed", "debug.deterministic_warn_only",
  };
  return k;
}

// Accepted keys whose effect on the real step the model lacks, with the value the model assumes:
// torchtitan's default (job_config.py at the pinned commits) unless noted.
const std::vector<UnmodelledSetting>& unmodelled_keys() {
  static const std::vector<UnmodelledSetting> k = {
      {"training.gc_freq", "50", "Python garbage collection every gc_freq steps"},
      {"training.gc_debug", "false", "a full garbage collection every step"},
      {"training.deterministic", "false", "deterministic kernels"},
      {"debug.deterministic", "false", "deterministic kernels"},
      {"parallelism.pipeline_parallel_schedule_csv", "", "a pipeline schedule read from a CSV file"},
      {"parallelism.pipeline_parallel_expert_parallel_overlap", "true", "overlapping the expert all-to-alls of one "
                                                                        "micro-batch with another's compute"},
      {"parallelism.context_parallel_load_balancer", "headtail", "how causal-attention work is balanced over the "
                                                                 "CP ranks"},
      {"parallelism.context_parallel_rotate_method", "allgather", "how CP ranks exchange keys and values"},
      {"parallelism.enable_compiled_autograd", "false", "the backward compiled by compiled autograd"},
      {"activation_checkpoint.per_op_sac_force_recompute_mm_shapes_by_fqns", "[moe.router.gate]",
       "which matmuls per-op selective AC always recomputes"},
      {"activation_checkpoint.early_stop", "false", "recompute stopping once the tensors backward needs exist"},
      {"activation_checkpoint.memory_budget", "0.5", "the activation memory budget the compiler's min-cut aims at"},
      {"activation_checkpoint.determinism_check", "default", "checking recomputed tensors against the originals"},
      {"activation_checkpoint.debug", "false", "recording debug information during recompute"},
      {"compile.components", "[model, loss]", "which parts torch.compile compiles"},
      {"compile.backend", "inductor", "the torch.compile backend"},
      {"comm.mode", "default", "a fake or local communication backend instead of NCCL"},
      {"fault_tolerance.enable", "false", "torchft's fault-tolerant replicas and their synchronization"},
      {"quantize.linear.float8.precompute_float8_dynamic_scale_for_fsdp", "false",
       "one all-reduce of the float8 scales after the optimizer step"},
      // The model keeps the output head out of float8, as torchtitan's shipped configs do.
      {"quantize.linear.float8.filter_fqns", "[output]", "linears kept out of float8"},
      {"quantize.linear.float8.emulate", "false", "float8 emulated in high precision"},
      {"quantize.linear.mx.mxfp8_dim0_cast_kernel_choice", "", "the MX cast kernel"},
      {"quantize.linear.mx.mxfp8_dim1_cast_kernel_choice", "", "the MX cast kernel"},
      {"quantize.linear.mx.recipe_name", "", "the MX recipe"},
      {"quantize.linear.mx.filter_fqns", "", "linears kept out of MX"},
      {"quantize.grouped_mm.float8.fqns", "", "MoE grouped GEMMs in float8"},
      {"quantize.grouped_mm.mx.fqns", "", "MoE grouped GEMMs in MX"},
      {"quantize.grouped_mm.mx.recipe_name", "", "the MX recipe of MoE grouped GEMMs"},
      {"float8.precompute_float8_dynamic_scale_for_fsdp", "false",
       "one all-reduce of the float8 scales after the optimizer step"},
      {"float8.filter_fqns", "[output]", "linears kept out of float8"},
      {"float8.emulate", "false", "float8 emulated in high precision"},
      {"float8.force_recompute_fp8_weight_in_bwd", "false", "float8 weights cast again in backward instead of kept"},
      {"float8.moe_fqns_prototype", "[]", "MoE grouped GEMMs in float8"},
      {"mx.mxfp8_dim1_cast_kernel_choice", "", "the MX cast kernel"},
      {"mx.recipe_name", "", "the MX recipe"},
      {"mx.filter_fqns", "", "linears kept out of MX"},
  };
  return k;
}

}  // namespace

std::vector<std::string> torchtitan_layout_keys(TorchtitanLayout l) {
  const Tag mine = tag_of_layout(l);
  std::vector<std::string> out;
  for (const auto& [section, spec] : sections()) {
    if (spec.tag != Tag::both && spec.tag != mine) continue;
    for (const auto* keys : {&spec.both, mine == Tag::early ? &spec.early : &spec.mid})
      for (const auto& k : *keys) out.push_back(section + "." + k);
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

std::vector<std::string> torchtitan_no_effect_settings() { return no_effect_keys(); }

const std::vector<UnmodelledSetting>& torchtitan_unmodelled_settings() { return unmodelled_keys(); }

namespace {

std::string layout_name(TorchtitanLayout l) {
  return l == TorchtitanLayout::early_2026 ? "early-2026 layout (torchtitan 238fa9953e4a)"
                                           : "mid-2025 layout (torchtitan 8570415c3)";
}
Tag tag_of(TorchtitanLayout l) { return l == TorchtitanLayout::early_2026 ? Tag::early : Tag::mid; }

std::string join(const std::string& a, const std::string& b) { return a.empty() ? b : a + "." + b; }

// Visits every section and key: fn(section_path, key, tag_or_nullopt_if_unknown, is_section).
template <class Fn>
void walk(const toml::table& t, const std::string& path, Fn&& fn) {
  const auto& secs = sections();
  for (const auto& [k, v] : t) {
    const std::string name(k.str());
    const std::string full = join(path, name);
    const bool container = std::find(kContainers.begin(), kContainers.end(), full) != kContainers.end();
    auto it = secs.find(full);
    if (container || it != secs.end()) {
      fn(path, name, std::optional<Tag>(container ? Tag::both : it->second.tag), true, v);
      if (const toml::table* sub = v.as_table()) walk(*sub, full, fn);
      continue;
    }
    std::optional<Tag> tag;
    if (auto s = secs.find(path); s != secs.end()) {
      const auto& spec = s->second;
      auto in = [&](const std::vector<std::string>& l) { return std::find(l.begin(), l.end(), name) != l.end(); };
      if (in(spec.both)) tag = Tag::both;
      else if (in(spec.early)) tag = Tag::early;
      else if (in(spec.mid)) tag = Tag::mid;
    }
    fn(path, name, tag, false, v);
  }
}

// All known names in a section (for suggestions).
std::vector<std::string> names_in(const std::string& path) {
  std::vector<std::string> out;
  if (auto s = sections().find(path); s != sections().end()) {
    for (const auto* l : {&s->second.both, &s->second.early, &s->second.mid}) out.insert(out.end(), l->begin(), l->end());
  }
  const std::string prefix = path.empty() ? "" : path + ".";
  for (const auto& [name, spec] : sections()) {
    (void)spec;
    if (name.rfind(prefix, 0) == 0 && name.find('.', prefix.size()) == std::string::npos) out.push_back(name.substr(prefix.size()));
  }
  for (const auto& c : kContainers)
    if (c.rfind(prefix, 0) == 0 && c.find('.', prefix.size()) == std::string::npos) out.push_back(c.substr(prefix.size()));
  return out;
}

void check_keys(const std::string& file, const toml::table& t, TorchtitanLayout layout) {
  const Tag mine = tag_of(layout);
  walk(t, "", [&](const std::string& path, const std::string& name, std::optional<Tag> tag, bool is_section,
                  const toml::node& v) {
    const std::string full = join(path, name);
    if (!tag) {
      const std::string what = path.empty() ? "unknown section" : "unknown key";
      throw InputError(file, full, fmt::format("{}{}; torchtitan raises ValueError on keys it does not know",
                                               what, did_you_mean(name, names_in(path))));
    }
    if (*tag != Tag::both && *tag != mine) {
      const TorchtitanLayout other = mine == Tag::early ? TorchtitanLayout::mid_2025 : TorchtitanLayout::early_2026;
      std::string hint;
      if (auto r = renames().find(full); r != renames().end()) hint = fmt::format("; this file's layout uses {}", r->second);
      throw InputError(file, full, fmt::format("belongs to the {}, but this file uses the {} (torchtitan "
                                               "raises on keys of the other version){}",
                                               layout_name(other), layout_name(layout), hint));
    }
    if (is_section && !v.is_table())
      throw InputError(file, full, "expected a table ([section])");
  });
}

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}

Dtype torch_dtype(const TomlView& v, std::string_view key, const std::string& dflt) {
  const std::string s = v.get_string(key).value_or(dflt);
  if (s == "bfloat16") return Dtype::bf16;
  if (s == "float32") return Dtype::fp32;
  v.fail(key, fmt::format("'{}' is not accepted (bfloat16 or float32)", s));
}


// The model: a shipped one for the llama3 flavors and deepseek_v3 671B
// (torchtitan/models/llama3/__init__.py), unless --model gives it.
void read_model(const TomlView& model, const ImportOptions& opts, RunConfig& rc) {
  const std::string mname = model.get_string("name").value_or("llama3");
  std::string flavor = model.get_string("flavor").value_or("debugmodel");
  if (opts.model) {
    rc.model = *opts.model;
  } else {
    if (mname == "deepseek_v3") {
      // torchtitan/models/deepseek_v3: the 671B flavor is DeepSeek-V3's shape (no MTP module).
      if (flavor != "671B")
        model.fail("flavor", fmt::format("'{}': meshplan maps only deepseek_v3's 671B flavor to a shipped model "
                                         "(deepseek-v3); pass --model", flavor));
      flavor = "671B";
    } else if (mname != "llama3") {
      model.fail("name", fmt::format("'{}': meshplan maps only torchtitan's llama3 flavors and deepseek_v3 671B to "
                                     "shipped models; pass --model path/to/config.json", mname));
    }
    std::string base = mname == "deepseek_v3" ? "deepseek-v3" : flavor;
    for (const char* suffix : {"_flex_attn", "_varlen_attn", "_flex", "_varlen"})
      if (base.size() > std::string_view(suffix).size() && base.ends_with(suffix)) base.resize(base.size() - std::string_view(suffix).size());
    std::string shipped;
    if (base == "8B") shipped = "llama3.1-8b";
    else if (base == "70B") shipped = "llama3.1-70b";
    else if (base == "405B") shipped = "llama3.1-405b";
    else if (base == "deepseek-v3") shipped = "deepseek-v3";
    else if (base == "debugmodel")
      model.fail("flavor", "debugmodel is torchtitan's tiny smoke-test model (a few layers, small vocab), "
                           "not a training target meshplan ships; use 8B, 70B or 405B or pass --model");
    else
      model.fail("flavor", fmt::format("unknown llama3 flavor '{}' (8B, 70B, 405B)", flavor));
    rc.model = load_model(shipped);
  }
}

// The mesh degrees and the EP and CP backends (torchtitan/distributed/parallel_dims.py).
void read_parallelism(const std::string& path, const TomlView& par, RunConfig& rc) {
  Plan& plan = rc.plan;
  auto degree = [&](const char* key, std::int64_t dflt, bool allow_minus_one) {
    const std::int64_t v = par.get_int(key).value_or(dflt);
    if (allow_minus_one && v == -1) return -1;
    if (v <= 0)
      par.fail(key, allow_minus_one ? fmt::format("must be positive or -1, got {}", v)
                                    : fmt::format("must be positive, got {} (only data_parallel_shard_degree may be -1)", v));
    return limits::check_int(path, par.key(key), v, 1, limits::kMaxGpus, "a mesh degree (the GPU maximum)");
  };
  Mesh& mesh = plan.mesh;
  mesh.dp_replicate = degree("data_parallel_replicate_degree", 1, false);
  mesh.dp_shard = degree("data_parallel_shard_degree", -1, true);
  mesh.tp = degree("tensor_parallel_degree", 1, false);
  mesh.pp = degree("pipeline_parallel_degree", 1, false);
  mesh.cp = degree("context_parallel_degree", 1, false);
  mesh.ep = degree("expert_parallel_degree", 1, false);
  // torchtitan's expert_tensor_parallel_degree defaults to 1 (the experts are not TP-split).
  if (mesh.ep > 1 && rc.model.moe.enabled()) mesh.etp = degree("expert_tensor_parallel_degree", 1, false);
  if (mesh.ep > 1 && !rc.model.moe.enabled())
    rc.warnings.push_back("parallelism.expert_parallel_degree: the model has no experts; EP has no effect");
  // "standard": all-to-all over NCCL; "deepep": DeepEP's per-domain deduplicating dispatch.
  if (auto b = par.get_string("expert_parallel_comm_backend")) {
    if (*b == "deepep") plan.moe_dispatcher = MoeDispatcher::deepep;
    else if (*b != "standard")
      par.fail("expert_parallel_comm_backend", fmt::format("'{}' is not accepted (standard or deepep)", *b));
  }
  if (auto m = par.get_string("context_parallel_rotate_method"); m && *m != "allgather" && *m != "alltoall")
    par.fail("context_parallel_rotate_method", fmt::format("'{}' is not accepted (allgather or alltoall)", *m));
}

// torch.compile, and the TP it enables: TP always comes with sequence parallelism in
// torchtitan (apply_tp); async TP needs compile.
void read_compile_and_tp(bool early, const TomlView& compile, const TomlView& training, const TomlView& par,
                         RunConfig& rc) {
  Plan& plan = rc.plan;
  const Mesh& mesh = plan.mesh;
  plan.compile = early ? compile.get_bool("enable").value_or(false) : training.get_bool("compile").value_or(false);

  plan.tp_style = TpStyle::full;
  plan.sequence_parallel = mesh.tp > 1;
  plan.loss_parallel = !par.get_bool("disable_loss_parallel").value_or(false);
  const bool async_tp = par.get_bool("enable_async_tensor_parallel").value_or(false);
  plan.async_tp = async_tp && plan.compile && mesh.tp > 1;
  if (async_tp && !plan.compile)
    rc.warnings.push_back("parallelism.enable_async_tensor_parallel: only takes effect with compile; ignored");
  else if (async_tp && mesh.tp == 1)
    rc.warnings.push_back("parallelism.enable_async_tensor_parallel: no effect with tensor_parallel_degree 1");
}

// The schedule and the stages per rank.
// "layers.N" -> N, for a layer of the model's `n_layers`; nullopt for any other name.
std::optional<int> layer_index(const std::string& fqn, int n_layers) {
  const std::string prefix = "layers.";
  if (fqn.rfind(prefix, 0) != 0 || fqn.size() == prefix.size() || fqn.size() > prefix.size() + 6) return std::nullopt;
  int n = 0;
  for (std::size_t i = prefix.size(); i < fqn.size(); ++i) {
    if (fqn[i] < '0' || fqn[i] > '9') return std::nullopt;
    n = n * 10 + (fqn[i] - '0');
  }
  if (n >= n_layers) return std::nullopt;
  return n;
}

// The layers of each stage named by parallelism.module_fqns_per_model_part (early-2026 layout),
// the split torchtitan builds when it is given (distributed/pipeline_parallel.py @ 238fa9953e4a):
// the embedding in the first stage, the final norm and the head in the last, the layers in order,
// each once. nullopt when the key is absent.
std::optional<std::vector<int>> module_fqn_stages(const TomlView& par, int n_layers) {
  const char* key = "module_fqns_per_model_part";
  if (!par.has(key)) return std::nullopt;
  const toml::array* parts = par.table().get(key)->as_array();
  if (parts == nullptr || parts->empty()) par.fail(key, "expected a list of lists of module names, one list per stage");
  std::vector<int> layers;
  int next = 0;
  for (std::size_t s = 0; s < parts->size(); ++s) {
    const toml::array* names = (*parts)[s].as_array();
    if (names == nullptr || names->empty())
      par.fail(key, fmt::format("stage {} is not a non-empty list of module names", s));
    int count = 0;
    for (std::size_t i = 0; i < names->size(); ++i) {
      const auto name = (*names)[i].value<std::string>();
      if (!name) par.fail(key, fmt::format("stage {}: entry {} is not a string", s, i));
      const bool first = s == 0, last = s + 1 == parts->size();
      if (*name == "tok_embeddings" && first && i == 0) continue;
      if ((*name == "norm" || *name == "output") && last) continue;
      const std::optional<int> layer = layer_index(*name, n_layers);
      if (!layer)
        par.fail(key, fmt::format("stage {}: '{}' is not tok_embeddings (first stage), layers.0 to layers.{}, norm or "
                                  "output (last stage)", s, *name, n_layers - 1));
      if (*layer != next) par.fail(key, fmt::format("stage {}: '{}' out of order, layers.{} expected", s, *name, next));
      ++next;
      ++count;
    }
    layers.push_back(count);
  }
  if (next != n_layers) par.fail(key, fmt::format("the stages hold {} of the model's {} layers", next, n_layers));
  return layers;
}

// The layers of each stage given by parallelism.pipeline_parallel_split_points (mid-2025 layout):
// each point names the first layer of the next stage. nullopt when the key is absent or empty.
std::optional<std::vector<int>> split_point_stages(const TomlView& par, int n_layers) {
  const char* key = "pipeline_parallel_split_points";
  const auto points = par.get_string_array(key);
  if (!points || points->empty()) return std::nullopt;
  std::vector<int> layers;
  int at = 0;
  for (const std::string& p : *points) {
    const std::optional<int> layer = layer_index(p, n_layers);
    if (!layer || *layer <= at)
      par.fail(key, fmt::format("'{}' is not a layer after {} (layers.{} to layers.{}, in increasing order)", p,
                                at == 0 ? "the first" : fmt::format("layers.{}", at), at + 1, n_layers - 1));
    layers.push_back(*layer - at);
    at = *layer;
  }
  layers.push_back(n_layers - at);
  return layers;
}

void read_pipeline(const std::string& path, bool early, const TomlView& par, RunConfig& rc) {
  Plan& plan = rc.plan;
  Mesh& mesh = plan.mesh;
  const bool pp = mesh.pp > 1;
  const std::string sched = par.get_string("pipeline_parallel_schedule").value_or("1F1B");
  const std::string s = lower(sched);
  bool multi = false;
  if (s == "1f1b") plan.schedule = PipelineSchedule::one_f_one_b;
  else if (s == "gpipe") plan.schedule = PipelineSchedule::gpipe;
  else if (s == "interleaved1f1b") { plan.schedule = PipelineSchedule::interleaved_1f1b; multi = true; }
  else if (s == "loopedbfs" || s == "interleavedzerobubble" || s == "zbvzerobubble" || s == "dualpipev") {
    plan.schedule = PipelineSchedule::interleaved_1f1b;
    multi = true;
    if (pp)
      rc.warnings.push_back(fmt::format("parallelism.pipeline_parallel_schedule: {} is modeled as interleaved "
                                        "1F1B (its bubble is overestimated)", sched));
  } else if (s == "pipelineschedulesingle" || s == "pipelineschedulemulti") {
    if (par.get_string("pipeline_parallel_schedule_csv").value_or("").empty())
      par.fail("pipeline_parallel_schedule", fmt::format("{} needs pipeline_parallel_schedule_csv", sched));
    multi = s == "pipelineschedulemulti";
    plan.schedule = multi ? PipelineSchedule::interleaved_1f1b : PipelineSchedule::one_f_one_b;
    if (pp) rc.warnings.push_back("parallelism.pipeline_parallel_schedule: a CSV schedule is modeled as (interleaved) 1F1B");
  } else {
    par.fail("pipeline_parallel_schedule", fmt::format("unknown schedule '{}' (1F1B, Interleaved1F1B, GPipe, LoopedBFS, "
                                                       "InterleavedZeroBubble, ZBVZeroBubble, DualPipeV, ...)", sched));
  }
  // Stages per rank: from layers_per_stage when given, else 1 for single-stage schedules and
  // 2 for multi-stage ones (torchtitan pipeline_parallel.py).
  mesh.vpp = 1;
  if (pp) {
    // torchtitan takes the named modules over every layer-count setting.
    if (const auto named = early ? module_fqn_stages(par, rc.model.n_layers) : std::nullopt) {
      const auto stages = static_cast<std::int64_t>(named->size());
      if (stages % mesh.pp != 0)
        par.fail("module_fqns_per_model_part", fmt::format("{} stages, not a multiple of pipeline_parallel_degree {}",
                                                           stages, mesh.pp));
      mesh.vpp = static_cast<int>(stages / mesh.pp);
      if (!multi && mesh.vpp != 1)
        par.fail("pipeline_parallel_schedule", fmt::format("{} runs one stage per rank, but "
                                                           "module_fqns_per_model_part gives {}", sched, mesh.vpp));
    } else if (auto lps = par.get_int("pipeline_parallel_layers_per_stage")) {
      if (*lps <= 0) par.fail("pipeline_parallel_layers_per_stage", fmt::format("must be positive, got {}", *lps));
      limits::check_count(path, par.key("pipeline_parallel_layers_per_stage"), *lps, 1, limits::kMaxLayers, "layers");
      const std::int64_t first = limits::check_count(
          path, par.key("pipeline_parallel_first_stage_less_layers"),
          par.get_int("pipeline_parallel_first_stage_less_layers").value_or(1), 0, limits::kMaxLayers, "layers");
      const std::int64_t last = limits::check_count(
          path, par.key("pipeline_parallel_last_stage_less_layers"),
          par.get_int("pipeline_parallel_last_stage_less_layers").value_or(1), 0, limits::kMaxLayers, "layers");
      const std::int64_t eff = rc.model.n_layers + (early ? first + last : 0);
      const std::int64_t stages = (eff + *lps - 1) / *lps;
      if (stages % mesh.pp != 0)
        par.fail("pipeline_parallel_layers_per_stage",
                 fmt::format("{} layers at {} per stage make {} stages, not a multiple of pipeline_parallel_degree {}",
                             eff, *lps, stages, mesh.pp));
      mesh.vpp = static_cast<int>(stages / mesh.pp);
      if (!multi && mesh.vpp != 1)
        par.fail("pipeline_parallel_schedule", fmt::format("{} runs one stage per rank, but "
                                                           "pipeline_parallel_layers_per_stage gives {}", sched, mesh.vpp));
    } else if (auto sp = par.get_string_array("pipeline_parallel_split_points"); sp && !sp->empty()) {
      const auto stages = static_cast<std::int64_t>(sp->size()) + 1;
      if (stages % mesh.pp != 0)
        par.fail("pipeline_parallel_split_points",
                 fmt::format("{} split points make {} stages, not a multiple of pipeline_parallel_degree {}",
                             sp->size(), stages, mesh.pp));
      mesh.vpp = static_cast<int>(stages / mesh.pp);
      if (!multi && mesh.vpp != 1)
        par.fail("pipeline_parallel_schedule", fmt::format("{} runs one stage per rank, but "
                                                           "pipeline_parallel_split_points give {}", sched, mesh.vpp));
    } else {
      mesh.vpp = multi ? 2 : 1;
    }
  }
}

// The layers of each stage, kept as the plan's explicit stage layers where they differ from
// meshplan's default split (spec/pipeline_split.hpp split_layers): the early-2026 layout's named
// modules (module_fqns_per_model_part), else torchtitan's weighted even split
// (torchtitan_stage_layers); the mid-2025 layout's split points, else the default split.
void read_stage_layers(bool early, const TomlView& par, RunConfig& rc) {
  const Mesh& mesh = rc.plan.mesh;
  if (mesh.pp <= 1) return;
  const int stages = mesh.pp * mesh.vpp;
  const auto given = early ? module_fqn_stages(par, rc.model.n_layers) : split_point_stages(par, rc.model.n_layers);
  if (given) {
    if (*given != split_layers(rc.model.n_layers, stages)) rc.plan.pipeline_split.chunk_layers = *given;
    return;
  }
  if (!early) return;
  const auto weight = [&](const char* key) { return static_cast<int>(par.get_int(key).value_or(1)); };
  std::string why;
  const int first = weight("pipeline_parallel_first_stage_less_layers");
  const int last = weight("pipeline_parallel_last_stage_less_layers");
  const auto layers = torchtitan_stage_layers(rc.model.n_layers, stages, first, last, &why);
  if (!layers)
    par.fail(stages > rc.model.n_layers + first + last ? "pipeline_parallel_degree"
                                                       : "pipeline_parallel_first_stage_less_layers",
             fmt::format("{} layers over {} stages: {} (torchtitan raises)", rc.model.n_layers, stages, why));
  for (const char* key : {"pipeline_parallel_first_stage_less_layers", "pipeline_parallel_last_stage_less_layers"})
    if (!par.has(key))
      note_default(rc, par.key(key), fmt::format("1, stages of {} layers", fmt::join(*layers, ", ")),
                   "torchtitan's default: the embedding or the output counted as one layer, "
                   "distributed/pipeline_parallel.py @ 238fa9953e4a");
  if (*layers != split_layers(rc.model.n_layers, stages)) rc.plan.pipeline_split.chunk_layers = *layers;
}

// The batch and the sequence (torchtitan/train.py).
void read_batch(const std::string& path, const TomlView& training, const TomlView& par, RunConfig& rc) {
  const bool pp = rc.plan.mesh.pp > 1;
  const std::int64_t local = training.get_int("local_batch_size").value_or(8);
  if (!training.has("local_batch_size"))
    note_default(rc, training.key("local_batch_size"), "8 sequences", "torchtitan's default, config/job_config.py");
  if (local <= 0) training.fail("local_batch_size", fmt::format("must be positive, got {}", local));
  limits::check_count(path, training.key("local_batch_size"), local, 1, limits::kMaxBatch, "sequences per step");
  const std::int64_t global = training.get_int("global_batch_size").value_or(-1);
  if (global == 0 || global < -1) training.fail("global_batch_size", fmt::format("must be positive or -1, got {}", global));
  const std::int64_t seq = training.get_int("seq_len").value_or(2048);
  if (!training.has("seq_len"))
    note_default(rc, training.key("seq_len"), "2048 tokens", "torchtitan's default, config/job_config.py");
  if (seq <= 0) training.fail("seq_len", fmt::format("must be positive, got {}", seq));
  rc.job.seq_len = seq;
  if (pp) {
    const std::int64_t mb = par.get_int("pipeline_parallel_microbatch_size").value_or(1);
    if (!par.has("pipeline_parallel_microbatch_size")) {
      // Both layouts meshplan reads are of the release range whose default this is.
      const FrameworkDefault* row = torchtitan_pp_microbatch_default(FrameworkRelease{20250407}).row;
      note_default(rc, par.key("pipeline_parallel_microbatch_size"),
                   fmt::format("1: {} micro-batches of one sequence", local),
                   fmt::format("torchtitan's default, {}", row->source));
    }
    if (mb <= 0) par.fail("pipeline_parallel_microbatch_size", fmt::format("must be positive, got {}", mb));
    if (local % mb != 0)
      par.fail("pipeline_parallel_microbatch_size",
               fmt::format("local_batch_size {} is not divisible by the pipeline microbatch size {}", local, mb));
    rc.job.micro_batch = mb;
    rc.job.pp_microbatches = local / mb;
  } else {
    rc.job.micro_batch = local;
    rc.job.pp_microbatches = 0;
  }
  if (global == -1) {
    // One local batch per DP rank per step: global = local x dp_replicate x dp_shard.
    rc.job.global_batch = 0;
    rc.job.grad_accum = pp ? local / rc.job.micro_batch : 1;
  } else {
    rc.job.global_batch = global;
    rc.job.grad_accum = 0;
  }
}

// The dtypes (apply_fsdp's MixedPrecisionPolicy, training.dtype) and CPU offload.
void read_precision(const TomlView& training, RunConfig& rc) {
  Plan& plan = rc.plan;
  plan.param_dtype = torch_dtype(training, "mixed_precision_param", "bfloat16");
  if (const auto r = training.get_string("mixed_precision_reduce").value_or("float32"); r != "float32")
    training.fail("mixed_precision_reduce", fmt::format("'{}' is not accepted: torchtitan only allows \"float32\"", r));
  plan.reduce_dtype = Dtype::fp32;
  plan.state_dtype = torch_dtype(training, "dtype", "float32");
  if (plan.state_dtype == Dtype::bf16) plan.param_dtype = Dtype::bf16;  // pure bf16: nothing is fp32
  plan.compute_dtype = plan.param_dtype;
  plan.mixed_precision_name = "";
  plan.param_offload = training.get_bool("enable_cpu_offload").value_or(false);
}

// The float8 / MX converters, whose names depend on the version (docs/importers.md).
void read_converters(TorchtitanLayout layout, const TomlView& model, const TomlView& float8, RunConfig& rc) {
  Plan& plan = rc.plan;
  const bool early = layout == TorchtitanLayout::early_2026;
  const auto converters = model.get_string_array("converters").value_or(std::vector<std::string>{});
  bool f8_linear = false;
  bool mx_linear = false;
  for (const auto& c : converters) {
    const bool new_f8 = c == "quantize.linear.float8";
    const bool new_mx = c == "quantize.linear.mx";
    const bool grouped = c == "quantize.grouped_mm.float8" || c == "quantize.grouped_mm.mx";
    const bool old_f8 = c == "float8";
    const bool old_mx = c == "mx";
    if (!(new_f8 || new_mx || grouped || old_f8 || old_mx))
      model.fail("converters", fmt::format("unknown converter '{}' ({})", c,
                                           early ? "quantize.linear.float8, quantize.linear.mx, quantize.grouped_mm.float8, quantize.grouped_mm.mx"
                                                 : "float8, mx"));
    const bool registered = early ? !(old_f8 || old_mx) : (old_f8 || old_mx);
    if (!registered)
      rc.warnings.push_back(fmt::format(
          "model.converters: '{}' is not a registered converter name in the {} (torchtitan raises KeyError); "
          "modeled as the intended {} training", c, layout_name(layout),
          (new_mx || old_mx || c == "quantize.grouped_mm.mx") ? "MX" : "float8"));
    if (grouped) {
      static const UnmodelledSetting kGrouped{"model.converters", "",
                                              "MoE grouped GEMMs in float8 or MX, priced in the compute dtype"};
      if (!rc.model.moe.enabled())
        rc.warnings.push_back(fmt::format("model.converters: '{}' converts MoE grouped GEMMs; the model has none", c));
      else
        note_unmodelled(rc, kGrouped, c);
      continue;
    }
    f8_linear = f8_linear || new_f8 || old_f8;
    mx_linear = mx_linear || new_mx || old_mx;
  }
  if (f8_linear) {
    const std::string recipe = float8.get_string("recipe_name").value_or("tensorwise");
    if (recipe == "tensorwise") plan.fp8 = Fp8Recipe::torchao_tensorwise;
    else if (recipe == "rowwise" || recipe == "rowwise_with_gw_hp") plan.fp8 = Fp8Recipe::torchao_rowwise;
    else float8.fail("recipe_name", fmt::format("unknown recipe '{}' (tensorwise, rowwise, rowwise_with_gw_hp)", recipe));
  } else if (mx_linear) {
    plan.fp8 = Fp8Recipe::mxfp8;
  }
  const bool f8_ag = float8.get_bool("enable_fsdp_float8_all_gather").value_or(false);
  if (f8_ag && plan.fp8 == Fp8Recipe::torchao_tensorwise) plan.fp8_all_gather = true;
  else if (f8_ag)
    rc.warnings.push_back(fmt::format("{}: enable_fsdp_float8_all_gather needs the float8 converter with the "
                                      "tensorwise recipe; ignored", float8.key("enable_fsdp_float8_all_gather")));
}

// Activation checkpointing (torchtitan/distributed/activation_checkpoint.py).
void read_recompute(bool early, const TomlView& ac, RunConfig& rc) {
  Plan& plan = rc.plan;
  const std::string mode = ac.get_string("mode").value_or("selective");
  plan.ac_reentrant = false;  // PTD checkpoint_wrapper, non-reentrant
  plan.ac_every_n = 1;
  if (mode == "none") plan.ac = AcMode::none;
  else if (mode == "full") plan.ac = AcMode::full;
  else if (mode == "selective") {
    const std::string opt = ac.get_string("selective_ac_option").value_or("2");
    if (opt == "op") {
      plan.ac = AcMode::selective_op;
    } else {
      const bool digits = !opt.empty() && std::all_of(opt.begin(), opt.end(), [](unsigned char c) { return std::isdigit(c); });
      if (!digits || opt.size() > 9 || std::stoi(opt) <= 0)
        ac.fail("selective_ac_option", fmt::format("'{}' is not accepted (\"op\" or a positive integer string)", opt));
      plan.ac = AcMode::selective_layer;
      plan.ac_every_n = std::stoi(opt);
    }
  } else if (mode == "memory_budget" && early) {
    if (!plan.compile) ac.fail("mode", "memory_budget requires compile (torch._functorch activation_memory_budget)");
    plan.ac = AcMode::selective_op;
    rc.warnings.push_back("activation_checkpoint.mode: memory_budget is modeled as per-op selective AC");
  } else {
    ac.fail("mode", fmt::format("unknown mode '{}' ({})", mode, early ? "none, selective, full, memory_budget" : "none, selective, full"));
  }
}

// FSDP (apply_fsdp): sharding over dp_shard x cp; pure DDP when that is 1 and dp_replicate > 1
// is decided in resolve_layout once -1 is resolved.
void read_fsdp(const TomlView& par, RunConfig& rc) {
  Plan& plan = rc.plan;
  const bool pp = plan.mesh.pp > 1;
  plan.sharding = Sharding::zero3;
  const std::string reshard = par.get_string("fsdp_reshard_after_forward").value_or("default");
  if (reshard == "always") plan.reshard_after_forward = true;
  else if (reshard == "never") plan.reshard_after_forward = false;
  else if (reshard == "default") plan.reshard_after_forward = !pp;
  else par.fail("fsdp_reshard_after_forward", fmt::format("'{}' is not accepted (default, always, never)", reshard));
  plan.root_unsharded = false;
  plan.backward_prefetch = BackwardPrefetch::backward_pre;  // FSDP2 prefetches one group ahead
  plan.forward_prefetch = true;                             // implicit, on the all-gather stream
  plan.limit_all_gathers = false;                           // FSDP2 has no rate limiter
  plan.grad_sync_every_microbatch = true;
  plan.flash_attention = true;
  plan.dropout = false;
}

// The optimizer and its implementation.
void read_optimizer(const TomlView& optim, RunConfig& rc) {
  Plan& plan = rc.plan;
  const std::string oname = optim.get_string("name").value_or("AdamW");
  if (oname == "AdamW" || oname == "Adam") plan.optimizer = Optimizer::adamw;
  else rc.warnings.push_back(fmt::format("optimizer.name: '{}' is modeled as AdamW", oname));
  // torchtitan's default is "fused" (JobConfig Optimizer.implementation); foreach adds the
  // whole-model temporaries of torch's _multi_tensor_adam.
  if (const auto impl = optim.get_string("implementation")) {
    const auto parsed = parse_optimizer_impl(*impl);
    if (!parsed || *parsed == OptimizerImpl::framework)
      optim.fail("implementation", fmt::format("'{}' is not accepted (for-loop, foreach, fused)", *impl));
    plan.optimizer_impl = *parsed;
  }
  // OptimizersInBackwardContainer: each parameter is stepped in its post-accumulate-grad hook and
  // its gradient freed there (the plan's optimizer_in_backward, as torchtune's optimizer_in_bwd).
  if (optim.get_bool("early_step_in_backward").value_or(false)) {
    if (plan.mesh.pp > 1 || plan.mesh.ep > 1)
      optim.fail("early_step_in_backward", "not supported with pipeline or expert parallelism (torchtitan's "
                                           "build_optimizers raises NotImplementedError)");
    plan.optimizer_in_backward = true;
  }
}

// The text of a value as unmodelled_keys() writes defaults: strings bare, lists as "[a, b]".
std::string value_text(const toml::node& n) {
  if (const auto* b = n.as_boolean()) return b->get() ? "true" : "false";
  if (const auto* i = n.as_integer()) return std::to_string(i->get());
  if (const auto* f = n.as_floating_point()) return fmt::format("{}", f->get());
  if (const auto* s = n.as_string()) return s->get();
  if (const auto* a = n.as_array()) {
    std::string out;
    for (const auto& e : *a) out += (out.empty() ? "" : ", ") + value_text(e);
    return "[" + out + "]";
  }
  return "{...}";
}

// The node at a dotted key ("quantize.linear.float8.emulate"), or nullptr.
const toml::node* node_at(const toml::table& t, std::string_view key) {
  const toml::table* tab = &t;
  for (std::size_t from = 0;;) {
    const std::size_t dot = key.find('.', from);
    const toml::node* n = tab->get(key.substr(from, dot == std::string_view::npos ? dot : dot - from));
    if (n == nullptr || dot == std::string_view::npos) return n;
    tab = n->as_table();
    if (tab == nullptr) return nullptr;
    from = dot + 1;
  }
}

// A converter's keys matter only when that converter runs (torchtitan reads them from it).
bool key_applies(const std::string& key, const Plan& p) {
  const bool float8 = p.fp8 == Fp8Recipe::torchao_tensorwise || p.fp8 == Fp8Recipe::torchao_rowwise;
  if (key.starts_with("float8.") || key.starts_with("quantize.linear.float8.")) return float8;
  if (key.starts_with("mx.") || key.starts_with("quantize.linear.mx.")) return p.fp8 == Fp8Recipe::mxfp8;
  return true;
}

// Every unmodelled key the file sets to other than the value the model assumes is named.
void name_unmodelled_keys(const toml::table& t, RunConfig& rc) {
  for (const UnmodelledSetting& s : unmodelled_keys()) {
    const toml::node* n = node_at(t, s.key);
    if (n == nullptr || !key_applies(s.key, rc.plan)) continue;
    const std::string value = value_text(*n);
    if (differs_from_model(s, value)) note_unmodelled(rc, s, value);
  }
}

}  // namespace

TorchtitanLayout detect_torchtitan_layout(const toml::table& t) {
  int early = 0;
  int mid = 0;
  walk(t, "", [&](const std::string&, const std::string&, std::optional<Tag> tag, bool, const toml::node&) {
    if (tag == Tag::early) ++early;
    if (tag == Tag::mid) ++mid;
  });
  // A file mixing both is judged by its majority; its minority keys are then the errors.
  return mid > early ? TorchtitanLayout::mid_2025 : TorchtitanLayout::early_2026;
}

RunConfig import_torchtitan(const std::string& path, const toml::table& t, const ImportOptions& opts) {
  const TorchtitanLayout layout = detect_torchtitan_layout(t);
  check_keys(path, t, layout);
  const bool early = layout == TorchtitanLayout::early_2026;

  RunConfig rc;
  rc.source_file = path;
  rc.format = ConfigFormat::torchtitan_toml;
  Plan& plan = rc.plan;
  plan.runtime = Runtime::torchtitan_fsdp2;

  const toml::table empty;
  const TomlView root(path, t);
  auto section = [&](const char* name) { return root.sub(name).value_or(TomlView(path, empty, name)); };
  const TomlView model = section("model");
  const TomlView training = section("training");
  const TomlView par = section("parallelism");
  const TomlView ac = section("activation_checkpoint");
  const TomlView compile = section("compile");
  const TomlView optim = section("optimizer");
  TomlView float8(path, empty, early ? "quantize.linear.float8" : "float8");
  if (early) {
    if (auto q = root.sub("quantize"))
      if (auto l = q->sub("linear"))
        if (auto f = l->sub("float8")) float8 = *f;
  } else if (auto f = root.sub("float8")) {
    float8 = *f;
  }

  read_model(model, opts, rc);
  read_parallelism(path, par, rc);
  read_compile_and_tp(early, compile, training, par, rc);
  read_pipeline(path, early, par, rc);
  read_stage_layers(early, par, rc);
  read_batch(path, training, par, rc);
  read_precision(training, rc);
  read_converters(layout, model, float8, rc);
  read_recompute(early, ac, rc);
  read_fsdp(par, rc);
  read_optimizer(optim, rc);
  // debug.moe_force_load_balance: tokens routed evenly over the experts for benchmarking, not by
  // the trained router (its load imbalance is then not priced, docs/compute.md).
  if (rc.model.moe.enabled())
    rc.model.moe.force_balance = section("debug").get_bool("moe_force_load_balance").value_or(false);
  name_unmodelled_keys(t, rc);
  return rc;
}

}  // namespace meshplan

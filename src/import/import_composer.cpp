// llm-foundry / Composer YAML importer. Defaults are Composer's *code* defaults
// (composer/utils/parallelism.py FSDPConfig), not its docs; see docs/importers.md for the table.
#include "import/import_composer.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <yaml-cpp/yaml.h>

#include "import/accepted_settings.hpp"
#include "spec/error.hpp"
#include "spec/limits.hpp"
#include "spec/model_loader.hpp"

namespace meshplan {

namespace {

using importer::did_you_mean;
using importer::one_line;

// Top-level keys llm-foundry's TrainConfig accepts (llmfoundry/utils/config_utils.py); anything
// else raises "Unused parameters" there. Families save_* / load_* / icl_* are accepted by prefix.
const std::vector<std::string> kTopLevel = {
    "variables", "run_name", "max_seq_len", "model", "tokenizer", "train_loader", "eval_loader",
    "eval_loaders", "scheduler", "optimizer", "algorithms", "max_duration", "eval_interval",
    "eval_first", "eval_subset_num_batches", "global_train_batch_size", "seed",
    "device_eval_batch_size", "device_train_microbatch_size", "device_train_batch_size",
    "device_train_grad_accum", "precision", "fsdp_config", "tp_config", "progress_bar",
    "log_to_console", "console_log_interval", "python_log_level", "callbacks", "loggers",
    "save_folder", "save_interval", "save_num_checkpoints_to_keep", "save_overwrite",
    "save_weights_only", "save_filename", "save_latest_filename", "save_ignore_keys",
    "load_path", "load_weights_only", "load_strict_model_weights", "load_ignore_keys",
    "only_hf_checkpoint", "only_composer_checkpoint", "autoresume", "dist_timeout",
    "expandable_segments", "max_split_size_mb", "cuda_load_lazy", "icl_tasks", "icl_tasks_str",
    "icl_subset_num_batches", "icl_seq_len", "eval_gauntlet", "eval_gauntlet_str",
    "compile_config", "metadata", "log_config", "profiler", "code_paths", "n_gpus",
};
const std::vector<std::string> kAcceptedPrefixes = {"save_", "load_", "icl_"};

// FSDPConfig fields (FSDP1 path; composer/utils/parallelism.py).
const std::vector<std::string> kFsdp1Keys = {
    "sharding_strategy", "mixed_precision", "keep_low_precision_grads", "activation_checkpointing",
    "activation_checkpointing_reentrant", "activation_cpu_offload", "cpu_offload",
    "limit_all_gathers", "forward_prefetch", "forward_prefetch_limit", "backward_prefetch",
    "backward_prefetch_limit", "use_orig_params", "sync_module_states", "state_dict_type",
    "sharded_ckpt_prefix_dir", "load_monolith_rank0_only", "data_parallel_shard_degree",
    "data_parallel_replicate_degree", "ignored_modules", "process_group", "load_planner",
    "save_planner", "auto_wrap", "te_checkpoint_wrapper", "te_shard_fp8_weight", "verbose",
    "device_mesh",
};
// FSDP2Config fields; reshard_after_forward is the only one FSDP1 lacks.
const std::vector<std::string> kFsdp2Keys = {
    "device_mesh", "reshard_after_forward", "activation_checkpointing", "activation_cpu_offload",
    "state_dict_type", "load_monolith_rank0_only", "mixed_precision", "verbose",
};

// Top-level keys that change neither the simulated step's time nor its memory: names and
// variables, data and tokenizer, the schedule, evaluation and checkpoints (between steps), logging,
// the profiler (a few profiled steps), timeouts and seeds. device_train_grad_accum is what
// llm-foundry derives from the micro-batch and logs back. The save_/load_/icl_ families are too.
const std::vector<std::string> kNoEffectTopLevel = {
    "variables", "run_name", "tokenizer", "train_loader", "eval_loader", "eval_loaders", "scheduler",
    "max_duration", "eval_interval", "eval_first", "eval_subset_num_batches", "seed", "device_eval_batch_size",
    "device_train_grad_accum", "progress_bar", "log_to_console", "console_log_interval", "python_log_level",
    "loggers", "only_hf_checkpoint", "only_composer_checkpoint", "autoresume", "dist_timeout", "eval_gauntlet",
    "eval_gauntlet_str", "metadata", "log_config", "profiler", "code_paths", "cuda_load_lazy",
};
// fsdp_config keys of the same kind: checkpoint formats and loading, start-up broadcasts, logging.
// keep_low_precision_grads: sharded gradients are still accumulated in fp32 and cast down only before
// the optimizer step (docs/importers.md); use_orig_params: FSDP1's flat parameter is used in place
// either way (its combinations Composer refuses are refused).
const std::vector<std::string> kNoEffectFsdp = {
    "keep_low_precision_grads", "use_orig_params", "sync_module_states", "state_dict_type",
    "sharded_ckpt_prefix_dir", "load_monolith_rank0_only", "load_planner", "save_planner", "auto_wrap", "verbose",
};
// Callbacks that only read what the step already has (throughput, learning rate, memory) or that
// run between steps (checkpoint export); any other callback is named. Composer's
// gradient_clipping is the one algorithm of no effect (one small norm reduction per step, as
// Megatron's --clip-grad and torchtitan's max_norm); any other is named.
const std::vector<std::string> kNoEffectCallbacks = {"speed_monitor", "lr_monitor", "memory_monitor",
                                                     "runtime_estimator", "hf_checkpointer"};
const std::vector<std::string> kNoEffectAlgorithms = {"gradient_clipping"};

// Keys whose effect on the real step the model lacks, with the value it assumes (Composer's and
// llm-foundry's code defaults).
const std::vector<UnmodelledSetting>& unmodelled_keys() {
  static const std::vector<UnmodelledSetting> k = {
      {"algorithms", "", "Composer algorithms that change the model or the step"},
      {"callbacks", "", "callbacks that run work in the step (garbage collection, generation, ...)"},
      {"expandable_segments", "false", "the CUDA allocator's expandable segments, which change fragmentation"},
      {"max_split_size_mb", "", "the CUDA allocator's largest split block, which changes fragmentation"},
      {"fsdp_config.ignored_modules", "", "modules FSDP leaves unsharded"},
      {"fsdp_config.process_group", "", "the process group FSDP shards over"},
      {"fsdp_config.te_checkpoint_wrapper", "false", "Transformer Engine's checkpoint wrapper under amp_fp8"},
      {"fsdp_config.te_shard_fp8_weight", "false", "FP8 weights sharded under amp_fp8"},
  };
  return k;
}

bool listed(const std::vector<std::string>& l, const std::string& k) {
  return std::find(l.begin(), l.end(), k) != l.end();
}

std::string upper(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::toupper(c); });
  return s;
}

// ---------------------------------------------------------------------------------------------
// ${...} interpolation, OmegaConf style: absolute dotted paths from the root (llm-foundry uses
// ${variables.x}); a value that is exactly one interpolation takes the referenced node (map,
// list, null), otherwise the referenced scalar's text is spliced into the string.
class Interpolator {
public:
  Interpolator(std::string file, YAML::Node root) : file_(std::move(file)), root_(std::move(root)) {
    // Count the nodes the aliases expand to before building anything: building a copy of an
    // exponential tree costs far more per node than walking it. The walk also bounds the depth:
    // an anchor whose own value holds its alias (`x: &a [*a]`) is a cycle yaml-cpp happily builds.
    std::int64_t budget = kMaxExpandedNodes;
    if (root_.IsMap()) {
      for (const auto& kv : root_)  // name the top-level key whose value is refused
        walk_within(kv.second, budget, 1, kv.first.IsScalar() ? kv.first.Scalar() : "");
    } else {
      walk_within(root_, budget, 0, "");
    }
  }

  YAML::Node resolve(const YAML::Node& n, const std::string& where, int depth = 0) {
    if (depth > 32) throw InputError(file_, one_line(where), "interpolation cycle (more than 32 nested ${...})");
    // Aliases and interpolations share nodes, so a small file can expand exponentially ("billion
    // laughs"): every node and byte the expansion produces counts against one budget.
    if (++nodes_ > kMaxExpandedNodes)
      throw InputError(file_, one_line(where), fmt::format("the file expands (through anchors/aliases or ${{...}}) to more "
                                                 "than {} nodes; refusing it (docs/limits.md)", kMaxExpandedNodes));
    // Interpolation splices trees into trees, so the resolved depth can exceed the parsed one.
    struct Nest {
      int& n;
      explicit Nest(int& x) : n(++x) {}
      ~Nest() { --n; }
    } nest(nest_);
    if (nest_ > kMaxResolvedDepth)
      throw InputError(file_, one_line(where), fmt::format("maps and lists nest more than {} levels deep once ${{...}} "
                                                 "are resolved; refusing it (docs/limits.md)", kMaxResolvedDepth));
    switch (n.Type()) {
      case YAML::NodeType::Map: {
        YAML::Node out(YAML::NodeType::Map);
        for (const auto& kv : n) {
          if (!kv.first.IsScalar())
            throw InputError(file_, one_line(where), "a map key is itself a map or list; keys must be plain names");
          const std::string k = kv.first.Scalar();
          const std::string at = where.empty() ? k : where + "." + k;
          // OmegaConf rejects a repeated key; yaml-cpp would silently keep the first.
          if (out[k]) throw InputError(file_, one_line(at), "duplicate key (OmegaConf rejects it)");
          out[k] = resolve(kv.second, at, depth);
        }
        return out;
      }
      case YAML::NodeType::Sequence: {
        YAML::Node out(YAML::NodeType::Sequence);
        std::size_t i = 0;
        for (const auto& e : n) out.push_back(resolve(e, fmt::format("{}[{}]", where, i++), depth));
        return out;
      }
      case YAML::NodeType::Scalar: return resolve_scalar(n, where, depth);
      default: return YAML::Clone(n);
    }
  }

private:
  void walk_within(const YAML::Node& n, std::int64_t& budget, int depth, const std::string& key) const {
    if (--budget < 0)
      throw InputError(file_, one_line(key), fmt::format("the file expands through anchors/aliases to more than {} nodes; "
                                               "refusing it (docs/limits.md)", kMaxExpandedNodes));
    if (depth > kMaxNestingDepth)
      throw InputError(file_, one_line(key), fmt::format("maps and lists nest more than {} levels deep (an anchor whose "
                                               "value holds its own alias?); refusing it (docs/limits.md)",
                                               kMaxNestingDepth));
    if (n.IsMap()) {
      for (const auto& kv : n) walk_within(kv.second, budget, depth + 1, key);
    } else if (n.IsSequence()) {
      for (const auto& e : n) walk_within(e, budget, depth + 1, key);
    }
  }

  static constexpr std::int64_t kMaxExpandedNodes = 20'000;  // real llm-foundry YAMLs: a few hundred
  static constexpr int kMaxNestingDepth = 64;                  // real ones: under 10 levels
  static constexpr int kMaxResolvedDepth = 256;
  static constexpr std::size_t kMaxExpandedBytes = std::size_t{1} << 24;  // 16 MiB of scalar text

  YAML::Node resolve_scalar(const YAML::Node& n, const std::string& where, int depth) {
    std::string s = n.Scalar();
    bytes_ += s.size();
    if (bytes_ > kMaxExpandedBytes)
      throw InputError(file_, one_line(where), fmt::format("the file expands (through anchors/aliases or ${{...}}) to more "
                                                 "than {} bytes of text; refusing it (docs/limits.md)",
                                                 kMaxExpandedBytes));
    if (s.find("${") == std::string::npos) return YAML::Clone(n);
    // Whole value is one reference: substitute the node itself.
    if (s.rfind("${", 0) == 0 && s.back() == '}' && s.find("${", 2) == std::string::npos &&
        s.find('}') == s.size() - 1) {
      return resolve(lookup(s.substr(2, s.size() - 3), where), where, depth + 1);
    }
    // Splice innermost references first so nested ${a.${b}} work.
    for (int guard = 0; guard < 64; ++guard) {
      const std::size_t close = s.find('}');
      if (close == std::string::npos) break;
      const std::size_t open = s.rfind("${", close);
      if (open == std::string::npos) break;
      const std::string ref = s.substr(open + 2, close - open - 2);
      const YAML::Node v = resolve(lookup(ref, where), where, depth + 1);
      std::string text;
      if (v.IsNull()) text = "None";  // OmegaConf renders a null as Python's None
      else if (v.IsScalar()) text = v.Scalar();
      else throw InputError(file_, one_line(where), fmt::format("interpolation ${{{}}} inside a string refers to a map or list", ref));
      s = s.substr(0, open) + text + s.substr(close + 1);
      bytes_ += s.size();
      if (bytes_ > kMaxExpandedBytes)
        throw InputError(file_, one_line(where), fmt::format("interpolations expand to more than {} bytes of text; refusing it "
                                                   "(docs/limits.md)", kMaxExpandedBytes));
    }
    return YAML::Node(s);
  }

  YAML::Node lookup(const std::string& ref, const std::string& where) {
    if (auto colon = ref.find(':'); colon != std::string::npos) {
      // Resolvers: only oc.env (and the older env) are meaningful offline.
      const std::string fn = ref.substr(0, colon);
      std::string arg = ref.substr(colon + 1);
      std::optional<std::string> dflt;
      if (auto comma = arg.find(','); comma != std::string::npos) {
        dflt = arg.substr(comma + 1);
        arg = arg.substr(0, comma);
      }
      auto trim = [](std::string x) {
        x.erase(0, x.find_first_not_of(" '\""));
        x.erase(x.find_last_not_of(" '\"") + 1);
        return x;
      };
      if (fn == "oc.env" || fn == "env") {
        if (const char* e = std::getenv(trim(arg).c_str()); e != nullptr) return YAML::Node(std::string(e));
        if (dflt) return YAML::Node(trim(*dflt));
        throw InputError(file_, one_line(where), fmt::format("interpolation ${{{}}}: environment variable {} is not set", ref, trim(arg)));
      }
      throw InputError(file_, one_line(where), fmt::format("interpolation ${{{}}}: resolver '{}' is not supported", ref, fn));
    }
    // yaml-cpp nodes are references: operator= would overwrite the node `cur` points at, so the
    // walk rebinds with reset() and reads through const nodes (non-const [] inserts keys).
    YAML::Node cur;
    cur.reset(root_);
    std::string walked;
    std::size_t pos = 0;
    while (pos <= ref.size()) {
      const std::size_t dot = ref.find('.', pos);
      const std::string part = ref.substr(pos, dot == std::string::npos ? std::string::npos : dot - pos);
      walked += (walked.empty() ? "" : ".") + part;
      const YAML::Node& c = cur;
      YAML::Node next;
      if (c.IsMap() && c[part]) next.reset(c[part]);
      // At most 9 digits: a longer index is past any list and would overflow stoul.
      else if (c.IsSequence() && !part.empty() && part.size() <= 9 &&
               std::all_of(part.begin(), part.end(), [](unsigned char ch) { return std::isdigit(ch); }) &&
               std::stoul(part) < c.size())
        next.reset(c[std::stoul(part)]);
      else
        throw InputError(file_, one_line(where), fmt::format("interpolation ${{{}}}: '{}' is not defined", ref, walked));
      cur.reset(next);
      if (dot == std::string::npos) break;
      pos = dot + 1;
    }
    return cur;
  }

  std::string file_;
  YAML::Node root_;
  std::int64_t nodes_ = 0;
  std::size_t bytes_ = 0;
  int nest_ = 0;  // resolve() frames now on the stack
};

// ---------------------------------------------------------------------------------------------
// Typed access to a resolved YAML map with errors naming the dotted key.
class YView {
public:
  YView(const std::string& file, YAML::Node node, std::string prefix)
      : file_(file), node_(std::move(node)), prefix_(std::move(prefix)) {}

  std::string key(std::string_view k) const {
    return prefix_.empty() ? std::string(k) : prefix_ + "." + std::string(k);
  }
  bool has(const std::string& k) const { return node_.IsMap() && node_[k]; }
  // Present and not null.
  bool set(const std::string& k) const { return has(k) && !node_[k].IsNull(); }
  YAML::Node raw(const std::string& k) const { return node_[k]; }
  const YAML::Node& node() const { return node_; }

  [[noreturn]] void fail(std::string_view k, const std::string& reason) const {
    throw InputError(file_, one_line(key(k)), one_line(reason));
  }

  std::optional<std::int64_t> get_int(const std::string& k) const {
    if (!set(k)) return std::nullopt;
    const YAML::Node v = node_[k];
    if (!v.IsScalar()) fail(k, "expected an integer, got a map or list");
    try {
      return v.as<long long>();
    } catch (const YAML::Exception&) {
      fail(k, fmt::format("expected an integer, got '{}'", v.Scalar()));
    }
  }
  std::optional<bool> get_bool(const std::string& k) const {
    if (!set(k)) return std::nullopt;
    const YAML::Node v = node_[k];
    if (!v.IsScalar()) fail(k, "expected true or false, got a map or list");
    try {
      return v.as<bool>();
    } catch (const YAML::Exception&) {
      fail(k, fmt::format("expected true or false, got '{}'", v.Scalar()));
    }
  }
  std::optional<std::string> get_string(const std::string& k) const {
    if (!set(k)) return std::nullopt;
    const YAML::Node v = node_[k];
    if (!v.IsScalar()) fail(k, "expected a string, got a map or list");
    return v.Scalar();
  }
  std::optional<YView> map(const std::string& k) const {
    if (!set(k)) return std::nullopt;
    if (!node_[k].IsMap()) fail(k, "expected a map");
    return YView(file_, node_[k], key(k));
  }
  std::vector<std::string> keys() const {
    std::vector<std::string> out;
    if (node_.IsMap())
      for (const auto& kv : node_) out.push_back(kv.first.Scalar());
    return out;
  }

private:
  const std::string& file_;
  YAML::Node node_;
  std::string prefix_;
};

// YAML -> JSON for import_hf_config: scalars become int, float, bool or string in that order of
// preference, as PyYAML would read them; quoted scalars stay strings.
nlohmann::json to_json(const YAML::Node& n) {
  switch (n.Type()) {
    case YAML::NodeType::Map: {
      nlohmann::json j = nlohmann::json::object();
      for (const auto& kv : n) j[kv.first.Scalar()] = to_json(kv.second);
      return j;
    }
    case YAML::NodeType::Sequence: {
      nlohmann::json j = nlohmann::json::array();
      for (const auto& e : n) j.push_back(to_json(e));
      return j;
    }
    case YAML::NodeType::Scalar: {
      const std::string& s = n.Scalar();
      if (n.Tag() == "!") return s;
      try {
        std::size_t used = 0;
        const long long i = std::stoll(s, &used);
        if (used == s.size()) return i;
      } catch (const std::exception&) {
      }
      try {
        std::size_t used = 0;
        const double d = std::stod(s, &used);
        if (used == s.size()) return d;
      } catch (const std::exception&) {
      }
      if (s == "true" || s == "True") return true;
      if (s == "false" || s == "False") return false;
      return s;
    }
    default: return nullptr;
  }
}

bool accepted_top_level(const std::string& k) {
  if (std::find(kTopLevel.begin(), kTopLevel.end(), k) != kTopLevel.end()) return true;
  return std::any_of(kAcceptedPrefixes.begin(), kAcceptedPrefixes.end(),
                     [&](const std::string& p) { return k.rfind(p, 0) == 0; });
}

YAML::Node parse_yaml(const std::string& file, const std::string& text) {
  try {
    return YAML::Load(text);
  } catch (const YAML::ParserException& e) {
    throw InputError(file, fmt::format("line {}, column {}", e.mark.line + 1, e.mark.column + 1),
                     one_line("YAML syntax error: " + e.msg));
  } catch (const YAML::Exception& e) {
    throw InputError(file, "", one_line(std::string("YAML error: ") + e.what()));
  }
}

// Composer's trainer precision -> the autocast dtype (composer/core/precision.py).
struct Amp {
  Dtype dtype;
  bool fp8;
};
Amp parse_precision(const YView& top, std::vector<std::string>& warnings) {
  const std::string p = top.get_string("precision").value_or("amp_bf16");
  if (p == "amp_bf16") return {Dtype::bf16, false};
  if (p == "amp_fp16") return {Dtype::fp16, false};
  if (p == "fp32") return {Dtype::fp32, false};
  if (p == "amp_fp8") {
    warnings.push_back("precision: amp_fp8 runs Transformer Engine FP8 matmuls (delayed scaling) "
                       "with bf16 as the FSDP mixed-precision dtype");
    return {Dtype::bf16, true};
  }
  top.fail("precision", fmt::format("unknown precision '{}' (Composer accepts amp_bf16, amp_fp16, "
                                    "amp_fp8, fp32)", p));
}

// Every llm-foundry model key (MPT and Hugging Face families) in the order its YAML has them:
// long by the number of keys, each read once.
void read_model(const std::string& file, const YView& top, const ImportOptions& opts, RunConfig& rc) {
  auto model = top.map("model");
  if (!model) top.fail("model", "required: llm-foundry needs a model section");
  const std::string name = model->get_string("name").value_or("");
  if (name.empty()) model->fail("name", "required (mpt_causal_lm or hf_causal_lm)");
  if (model->has("activation_checkpointing_target"))
    rc.warnings.push_back("model.activation_checkpointing_target: modeled as checkpointing every block");
  // Dropout (MPT: resid_pdrop, emb_pdrop, attn_config.attn_pdrop) keeps masks for backward.
  auto positive_float = [](const YAML::Node& n) {
    if (!n || !n.IsScalar()) return false;
    try {
      return n.as<double>() > 0.0;
    } catch (const YAML::Exception&) {
      return false;
    }
  };
  const YAML::Node& m = model->node();
  rc.plan.dropout = positive_float(m["resid_pdrop"]) || positive_float(m["emb_pdrop"]) ||
                    (m["attn_config"] && m["attn_config"].IsMap() && positive_float(m["attn_config"]["attn_pdrop"]));
  if (m["attn_config"] && m["attn_config"].IsMap() && m["attn_config"]["attn_impl"] &&
      m["attn_config"]["attn_impl"].IsScalar()) {
    const std::string impl = m["attn_config"]["attn_impl"].Scalar();
    rc.plan.flash_attention = impl != "torch";
    // MPT's Triton kernel is the flash-attn 1.x-era Triton port: FlashAttention-1 class.
    if (impl == "triton") rc.plan.flash_attention_version = 1;
  }
  // ComposerMPTCausalLM's loss_fn defaults to fused_crossentropy (flash-attn's xentropy kernel on
  // the bf16 logits); hf_causal_lm models compute HF's loss (fp32 upcast, torch cross-entropy).
  if (name == "mpt_causal_lm") {
    const std::string loss = model->get_string("loss_fn").value_or("fused_crossentropy");
    if (loss != "fused_crossentropy" && loss != "torch_crossentropy")
      model->fail("loss_fn", fmt::format("unknown loss_fn '{}' (MPT accepts fused_crossentropy, torch_crossentropy)", loss));
    rc.plan.fused_cross_entropy = loss == "fused_crossentropy";
  }

  if (opts.model) {
    rc.model = *opts.model;
    return;
  }
  if (name == "mpt_causal_lm") {
    nlohmann::json j = to_json(m);
    j.erase("name");
    j.erase("init_device");
    j["model_type"] = "mpt";
    try {
      rc.model = import_hf_config(j, file);
    } catch (const InputError& e) {
      // The shape keys live under model: in the YAML.
      throw InputError(file, one_line(e.key().empty() ? "model" : "model." + e.key()), one_line(e.reason()));
    }
    if (rc.model.name.empty() || rc.model.name == "mpt") rc.model.name = importer::file_stem(file);
    return;
  }
  if (name == "hf_causal_lm") {
    const auto id = model->get_string("pretrained_model_name_or_path");
    if (!id) model->fail("pretrained_model_name_or_path", "required for hf_causal_lm");
    const auto shipped = shipped_model_for_hf_id(*id);
    if (!shipped)
      model->fail("pretrained_model_name_or_path",
                  hf_id_names_a_supported_family(*id)
                      ? fmt::format("'{}' is not a model meshplan ships; pass --model path/to/config.json "
                                    "(its Hugging Face config.json)", *id)
                      : fmt::format("'{}' is not a model meshplan ships, and its name is none of the families "
                                    "meshplan reads (config.json model_type {}): meshplan cannot model it; only if "
                                    "its config.json has one of those model_types, pass --model path/to/config.json",
                                    *id, hf_supported_model_types()));
    rc.model = load_model(*shipped);
    if (auto ov = model->map("config_overrides")) {
      for (const auto& k : ov->keys()) {
        if (k == "max_seq_len" || k == "max_position_embeddings") {
          if (auto v = ov->get_int(k))
            rc.model.max_seq_len = limits::check_count(file, ov->key(k), *v, 1, limits::kMaxSeqLen, "the sequence length");
        } else if (k == "attn_config" || k == "use_cache" || k.find("pdrop") != std::string::npos ||
                   k.find("dropout") != std::string::npos) {
          // Runtime-only settings: no effect on shapes.
        } else {
          rc.warnings.push_back(fmt::format(
              "model.config_overrides.{}: not applied to the shipped {} shape; pass --model with "
              "an edited config.json if it changes the architecture", k, *shipped));
        }
      }
    }
    return;
  }
  model->fail("name", fmt::format("unknown model class '{}' (meshplan reads mpt_causal_lm and "
                                  "hf_causal_lm; pass --model for others)", name));
}

// compile_config: None (absent) is eager; a map is torch.compile's kwargs (Composer's
// Trainer(compile_config=...)). The "reduce-overhead" and "max-autotune" modes capture CUDA graphs.
void read_compile(const YAML::Node& root, const YView& top, RunConfig& rc) {
  Plan& plan = rc.plan;
  if (const YAML::Node cc = root["compile_config"]; cc && !cc.IsNull()) {
    if (!cc.IsMap()) top.fail("compile_config", "must be a map of torch.compile arguments (or null for eager)");
    plan.compile = true;
    if (const YAML::Node mode = cc["mode"]; mode && !mode.IsNull()) {
      const std::string m = mode.IsScalar() ? mode.Scalar() : std::string();
      if (m != "default" && m != "reduce-overhead" && m != "max-autotune" && m != "max-autotune-no-cudagraphs")
        top.fail("compile_config.mode", fmt::format("unknown torch.compile mode '{}' (default, reduce-overhead, "
                                                    "max-autotune, max-autotune-no-cudagraphs)", m));
      plan.cuda_graphs = m == "reduce-overhead" || m == "max-autotune";
    }
  }
}

// The batch and the sequence (llmfoundry/utils/config_utils.py calculate_batch_size_info).
void read_batch(const std::string& path, const YView& top, RunConfig& rc) {
  const auto seq = top.get_int("max_seq_len");
  if (!seq) top.fail("max_seq_len", "required");
  if (*seq <= 0) top.fail("max_seq_len", fmt::format("must be positive, got {}", *seq));
  limits::check_count(path, "max_seq_len", *seq, 1, limits::kMaxSeqLen, "the sequence length");
  rc.job.seq_len = *seq;
  const auto global = top.get_int("global_train_batch_size");
  if (!global) top.fail("global_train_batch_size", "required");
  if (*global <= 0) top.fail("global_train_batch_size", fmt::format("must be positive, got {}", *global));
  rc.job.global_batch = *global;
  rc.job.grad_accum = 0;  // ceil(device batch / micro), once the world size is known
  {
    const std::string mk = "device_train_microbatch_size";
    const std::string mv = top.get_string(mk).value_or("auto");
    if (mv == "auto") {
      // Composer's auto-microbatching starts at the whole device batch and halves on OOM; the
      // first try (no accumulation) is what meshplan models, so a plan that does not fit tells
      // the user to pick a number.
      rc.job.micro_batch = 0;
      rc.left_to_runtime.micro_batch = true;
      rc.warnings.push_back("device_train_microbatch_size: 'auto' (Composer halves on OOM from the whole device "
                            "batch); modeled as the largest halving that fits once the cluster is known");
    } else {
      const auto mb = top.get_int(mk);
      if (*mb <= 0) top.fail(mk, fmt::format("must be positive or 'auto', got {}", *mb));
      rc.job.micro_batch = *mb;
    }
  }
}

// The optimizer: its memory depends on the number of moments.
void read_optimizer(const YView& top, RunConfig& rc) {
  Plan& plan = rc.plan;
  if (auto opt = top.map("optimizer")) {
    const std::string n = opt->get_string("name").value_or("decoupled_adamw");
    if (n == "decoupled_adamw" || n == "adamw" || n == "adam") plan.optimizer = Optimizer::adamw;
    else if (n == "decoupled_sgdw" || n == "sgd") plan.optimizer = Optimizer::sgd;
    else
      rc.warnings.push_back(fmt::format("optimizer.name: '{}' is modeled as AdamW (two fp32 moments)", n));
  }
}

// No fsdp_config: Composer wraps the model in DDP.
void read_ddp(Plan& plan) {
  plan.runtime = Runtime::composer_fsdp1;
  plan.sharding = Sharding::none;
  plan.reshard_after_forward = false;
  // DDP keeps fp32 params and all-reduces fp32 grads; only autocast runs in amp.
  plan.param_dtype = Dtype::fp32;
  plan.reduce_dtype = Dtype::fp32;
  plan.mixed_precision_name = "";
  plan.mesh.dp_shard = -1;
}

// The fsdp_config keys the FSDP version reads; the others are warned about, device_mesh refused.
void check_fsdp_keys(bool fsdp2, const YView& fsdp, RunConfig& rc) {
  const auto& valid = fsdp2 ? kFsdp2Keys : kFsdp1Keys;
  if (fsdp2)
    rc.warnings.push_back("fsdp_config.reshard_after_forward: an FSDP2Config-only key; assuming the "
                          "run is launched with FSDP_VERSION=2 (FSDP1 would silently ignore it)");
  for (const auto& k : fsdp.keys()) {
    if (std::find(valid.begin(), valid.end(), k) != valid.end()) continue;
    const bool fsdp1_only = std::find(kFsdp1Keys.begin(), kFsdp1Keys.end(), k) != kFsdp1Keys.end();
    if (fsdp2 && fsdp1_only)
      rc.warnings.push_back(fmt::format("fsdp_config.{}: FSDP1-only; FSDP2Config.from_compatible_attrs "
                                        "drops it", k));
    else
      rc.warnings.push_back(fmt::format("fsdp_config.{}: unknown key, silently ignored by Composer{}",
                                        k, did_you_mean(k, valid)));
  }
  if (fsdp.has("device_mesh"))
    fsdp.fail("device_mesh", "Composer raises on device_mesh in fsdp_config; use "
                              "data_parallel_shard_degree / data_parallel_replicate_degree");
}

// Mixed precision (composer/distributed/mosaic_parallelism.py get_mixed_precision): a map of
// dtypes or the name of a policy.
void read_mixed_precision(const std::string& path, const YView& fsdp, const Amp& amp, RunConfig& rc) {
  Plan& plan = rc.plan;
  const YAML::Node mp = fsdp.raw("mixed_precision");
  if (mp && mp.IsMap()) {
    const YView d(path, mp, fsdp.key("mixed_precision"));
    auto dt = [&](const std::string& k) -> std::optional<Dtype> {
      const auto s = d.get_string(k);
      if (!s || *s == "None" || *s == "null") return std::nullopt;
      const auto v = parse_dtype(*s);
      if (!v) d.fail(k, fmt::format("unknown dtype '{}'", *s));
      return v;
    };
    for (const auto& k : d.keys())
      if (k != "param_dtype" && k != "reduce_dtype" && k != "buffer_dtype")
        rc.warnings.push_back(fmt::format("fsdp_config.mixed_precision.{}: unknown key, ignored by "
                                          "Composer", k));
    const auto p = dt("param_dtype");
    const auto r = dt("reduce_dtype");
    dt("buffer_dtype");
    // Missing param dtype = the fp32 original; missing reduce dtype follows param_dtype (torch
    // MixedPrecision), fp32 when both are missing.
    plan.param_dtype = p.value_or(Dtype::fp32);
    plan.reduce_dtype = r.value_or(plan.param_dtype);
    plan.mixed_precision_name = "custom";
  } else {
    const std::string name = upper(fsdp.get_string("mixed_precision").value_or("DEFAULT"));
    if (name == "FULL") {
      plan.param_dtype = Dtype::fp32;
      plan.reduce_dtype = Dtype::fp32;
    } else if (name == "DEFAULT") {
      plan.param_dtype = amp.dtype;
      plan.reduce_dtype = Dtype::fp32;
    } else if (name == "PURE") {
      plan.param_dtype = amp.dtype;
      plan.reduce_dtype = amp.dtype;
    } else {
      fsdp.fail("mixed_precision", fmt::format("unknown mixed precision '{}' (FULL, DEFAULT, PURE "
                                                "or a dict of dtypes)", name));
    }
    plan.mixed_precision_name = name;
  }
}

// Activation checkpointing and offload; returns use_orig_params, which TP also needs.
bool read_fsdp_recompute_offload(bool fsdp2, const YView& fsdp, RunConfig& rc) {
  Plan& plan = rc.plan;
  const bool ac = fsdp.get_bool("activation_checkpointing").value_or(false);
  const auto reentrant = fsdp2 ? std::optional<bool>{} : fsdp.get_bool("activation_checkpointing_reentrant");
  plan.ac = ac ? AcMode::full : AcMode::none;
  plan.ac_every_n = 1;
  if (fsdp2) {
    plan.ac_reentrant = false;  // Composer's FSDP2 apply_ac always uses NO_REENTRANT
  } else if (ac) {
    plan.ac_reentrant = reentrant.value_or(true);
    if (plan.ac_reentrant)
      rc.warnings.push_back(
          "fsdp_config.activation_checkpointing_reentrant: true (Composer's default when unset) "
          "recomputes whole blocks and holds a block's activations at once in backward; "
          "non-reentrant (false) is never worse for memory");
  } else {
    plan.ac_reentrant = false;
    if (fsdp.has("activation_checkpointing_reentrant"))
      rc.warnings.push_back("fsdp_config.activation_checkpointing_reentrant: has no effect without "
                            "activation_checkpointing: true");
  }
  plan.act_offload = fsdp.get_bool("activation_cpu_offload").value_or(false);
  const bool orig = fsdp2 ? true : fsdp.get_bool("use_orig_params").value_or(true);
  if (plan.act_offload && !orig)
    fsdp.fail("activation_cpu_offload", "requires use_orig_params: true (Composer raises)");

  if (!fsdp2 && fsdp.get_bool("cpu_offload").value_or(false))
    fsdp.fail("cpu_offload", "Composer's FSDP1 path raises ValueError('FSDP CPU Offload not "
                              "supported yet.'); use activation_cpu_offload for activations");
  plan.param_offload = false;

  if (auto sd = fsdp.get_string("state_dict_type"); sd && *sd != "full" && *sd != "sharded")
    fsdp.fail("state_dict_type", fmt::format("'{}' is not accepted (full or sharded)", *sd));

  return orig;
}

// FSDP2: reshard_after_forward decides ZeRO-3 vs ZeRO-2; no limiter, implicit prefetch that
// behaves like BACKWARD_PRE, and the mesh degrees are not read (shard fixed at -1).
void read_fsdp2_sharding(const YView& fsdp, RunConfig& rc) {
  Plan& plan = rc.plan;
  const YAML::Node r = fsdp.raw("reshard_after_forward");
  bool reshard = true;
  try {
    reshard = r.as<bool>();
  } catch (const YAML::Exception&) {
    const auto n = fsdp.get_int("reshard_after_forward");
    if (*n <= 1) fsdp.fail("reshard_after_forward", fmt::format("an int must be a divisor > 1 of the shard group, got {}", *n));
    rc.warnings.push_back(fmt::format("fsdp_config.reshard_after_forward: {} (reshard to a smaller "
                                      "group) is modeled as resharding to the full group", *n));
  }
  plan.sharding = reshard ? Sharding::zero3 : Sharding::zero2;
  plan.reshard_after_forward = reshard;
  plan.backward_prefetch = BackwardPrefetch::backward_pre;
  plan.forward_prefetch = true;
  plan.limit_all_gathers = false;
  plan.root_unsharded = false;
  plan.mesh.dp_shard = -1;
  plan.mesh.dp_replicate = 1;
}

// FSDP1: the sharding strategy and the mesh, which decides HSDP whatever the strategy's name.
void read_fsdp1_sharding(const std::string& path, const YView& fsdp, RunConfig& rc) {
  Plan& plan = rc.plan;
  const std::string strategy = upper(fsdp.get_string("sharding_strategy").value_or("FULL_SHARD"));
  const auto rep = fsdp.get_int("data_parallel_replicate_degree");
  const auto shard = fsdp.get_int("data_parallel_shard_degree").value_or(-1);
  auto degree_ok = [&](const std::string& k, std::int64_t v) {
    if (v == 0 || v < -1) fsdp.fail(k, fmt::format("must be positive or -1, got {}", v));
  };
  degree_ok("data_parallel_shard_degree", shard);
  if (rep) degree_ok("data_parallel_replicate_degree", *rep);
  if (rep && *rep == -1 && shard == -1)
    fsdp.fail("data_parallel_replicate_degree", "at most one mesh degree may be -1");
  auto narrow = [&](const std::string& k, std::int64_t v) {
    return v == -1 ? -1 : limits::check_int(path, fsdp.key(k), v, 1, limits::kMaxGpus, "a mesh degree (the GPU maximum)");
  };
  plan.mesh.dp_shard = narrow("data_parallel_shard_degree", shard);
  plan.mesh.dp_replicate = rep ? narrow("data_parallel_replicate_degree", *rep) : 1;
  if (strategy == "FULL_SHARD" || strategy == "HYBRID_SHARD") {
    plan.sharding = Sharding::zero3;
    plan.reshard_after_forward = true;
  } else if (strategy == "SHARD_GRAD_OP" || strategy == "_HYBRID_SHARD_ZERO2") {
    plan.sharding = Sharding::zero2;
    plan.reshard_after_forward = false;
  } else if (strategy == "NO_SHARD") {
    plan.sharding = Sharding::none;
    plan.reshard_after_forward = false;
  } else {
    fsdp.fail("sharding_strategy", fmt::format("unknown strategy '{}' (FULL_SHARD, SHARD_GRAD_OP, "
                                                "HYBRID_SHARD, _HYBRID_SHARD_ZERO2, NO_SHARD)", strategy));
  }
  // The mesh, not the string, decides HSDP (dist_strategy.py).
  const bool hybrid_name = strategy == "HYBRID_SHARD" || strategy == "_HYBRID_SHARD_ZERO2";
  if (hybrid_name && !rep)
    rc.warnings.push_back(fmt::format(
        "fsdp_config.sharding_strategy: {} without data_parallel_replicate_degree runs on a 1-D mesh "
        "and Composer silently uses {}", strategy, strategy == "HYBRID_SHARD" ? "FULL_SHARD" : "SHARD_GRAD_OP"));
  if (!hybrid_name && rep && *rep != 1 && plan.sharding != Sharding::none)
    rc.warnings.push_back(fmt::format(
        "fsdp_config.data_parallel_replicate_degree: a 2-D mesh turns {} into {} (shard within "
        "the shard group, replicate across groups)", strategy,
        strategy == "FULL_SHARD" ? "HYBRID_SHARD" : "_HYBRID_SHARD_ZERO2"));
}

// FSDP1's prefetch and all-gather limiter, and its unsharded root unit.
void read_fsdp1_prefetch(const std::string& path, const YView& fsdp, RunConfig& rc) {
  Plan& plan = rc.plan;
  // Composer's FSDP1 defaults (composer/utils/parallelism.py FSDPConfig) for the knobs that change
  // the simulated step, when the file leaves them out.
  for (const auto& [key, value] : {std::pair{"backward_prefetch", "BACKWARD_POST"},
                                   std::pair{"forward_prefetch", "false"}, std::pair{"limit_all_gathers", "true"}})
    if (!fsdp.has(key))
      note_default(rc, fsdp.key(key), value, "Composer's default, composer/utils/parallelism.py FSDPConfig");
  const std::string bp = upper(fsdp.get_string("backward_prefetch").value_or("BACKWARD_POST"));
  if (bp == "NONE") plan.backward_prefetch = BackwardPrefetch::none;
  else if (auto b = parse_backward_prefetch(bp)) plan.backward_prefetch = *b;
  else fsdp.fail("backward_prefetch", fmt::format("unknown value '{}' (BACKWARD_PRE, BACKWARD_POST, NONE)", bp));
  plan.forward_prefetch = fsdp.get_bool("forward_prefetch").value_or(false);
  plan.limit_all_gathers = fsdp.get_bool("limit_all_gathers").value_or(true);
  auto limit = [&](const std::string& k) {
    const auto v = fsdp.get_int(k).value_or(1);
    if (v <= 0) fsdp.fail(k, fmt::format("must be positive, got {}", v));
    return limits::check_int(path, fsdp.key(k), v, 1, limits::kMaxLayers, "prefetched layers (the layer maximum)");
  };
  plan.forward_prefetch_limit = limit("forward_prefetch_limit");
  plan.backward_prefetch_limit = limit("backward_prefetch_limit");
  // FSDP1 never frees the root unit's params after forward (_post_forward_reshard), and in
  // Composer the root holds the embeddings, final norm and head.
  plan.root_unsharded = plan.sharding != Sharding::none;
}

// tp_config: llm-foundry's FFN-only tensor parallelism, which needs use_orig_params.
void read_tp(const std::string& path, const YView& top, const YView& fsdp, bool orig, RunConfig& rc) {
  Plan& plan = rc.plan;
  if (auto tp = top.map("tp_config")) {
    const auto strat = tp->get_string("strategy");
    if (!strat) tp->fail("strategy", "required (llm-foundry registers 'ffn')");
    if (*strat != "ffn") tp->fail("strategy", fmt::format("unknown TP strategy '{}' (llm-foundry registers only 'ffn')", *strat));
    const auto deg = tp->get_int("tensor_parallel_degree");
    if (!deg) tp->fail("tensor_parallel_degree", "required");
    if (*deg <= 0) tp->fail("tensor_parallel_degree", fmt::format("must be positive, got {}", *deg));
    if (!orig) fsdp.fail("use_orig_params", "tensor parallelism requires use_orig_params: true (Composer raises)");
    if (rc.model.moe.enabled()) tp->fail("strategy", "llm-foundry rejects TP for MoE FFNs");
    if (*deg == 1) {
      rc.warnings.push_back("tp_config.tensor_parallel_degree: 1 is dropped by Composer (no TP)");
    } else {
      plan.mesh.tp = limits::check_int(path, tp->key("tensor_parallel_degree"), *deg, 1, limits::kMaxGpus,
                                       "a mesh degree (the GPU maximum)");
      plan.tp_style = TpStyle::mlp_only;
      plan.sequence_parallel = false;
    }
  }
}

// The text of a value as unmodelled_keys() writes the model's: scalars as written, lists as "[a, b]".
std::string value_text(const YAML::Node& n) {
  if (n.IsScalar()) return n.Scalar();
  std::string out;
  if (n.IsSequence()) {
    for (const auto& e : n) out += (out.empty() ? "" : ", ") + value_text(e);
    return "[" + out + "]";
  }
  if (n.IsMap()) {
    for (const auto& kv : n) out += (out.empty() ? "" : ", ") + kv.first.Scalar();
    return "{" + out + "}";
  }
  return "";
}

// The entries of an algorithms / callbacks map that are not of no effect, as "[a, b]"; "" when none.
std::string entries_with_effect(const YAML::Node& n, const std::vector<std::string>& no_effect) {
  if (!n.IsMap()) return value_text(n);
  std::string out;
  for (const auto& kv : n)
    if (!listed(no_effect, kv.first.Scalar())) out += (out.empty() ? "" : ", ") + kv.first.Scalar();
  return out.empty() ? "" : "[" + out + "]";
}

// Every unmodelled key the file sets to other than what the model assumes is named; fsdp_config's
// only where this FSDP version reads them (the others are warned about as dropped).
void name_unmodelled_keys(const YView& top, const std::optional<YView>& fsdp, bool fsdp2, RunConfig& rc) {
  for (const UnmodelledSetting& s : unmodelled_keys()) {
    std::string value;
    if (s.key == "algorithms" || s.key == "callbacks") {
      if (!top.set(s.key)) continue;
      value = entries_with_effect(top.raw(s.key), s.key == "algorithms" ? kNoEffectAlgorithms : kNoEffectCallbacks);
      if (value.empty()) continue;
    } else if (s.key.starts_with("fsdp_config.")) {
      const std::string k = s.key.substr(std::string_view("fsdp_config.").size());
      if (!fsdp || !fsdp->set(k) || !listed(fsdp2 ? kFsdp2Keys : kFsdp1Keys, k)) continue;
      value = value_text(fsdp->raw(k));
    } else {
      if (!top.set(s.key)) continue;
      value = value_text(top.raw(s.key));
    }
    if (differs_from_model(s, value)) note_unmodelled(rc, s, value);
  }
}

}  // namespace

bool looks_like_llm_foundry(const std::string& text) {
  try {
    const YAML::Node n = YAML::Load(text);
    if (!n.IsMap()) return false;
    if (n["fsdp_config"] || n["global_train_batch_size"]) return true;
    return n["model"] && n["model"].IsMap() && n["model"]["name"];
  } catch (const YAML::Exception&) {
    return false;
  }
}

RunConfig import_llm_foundry(const std::string& path, const std::string& text, const ImportOptions& opts) {
  const YAML::Node raw = parse_yaml(path, text);
  if (!raw.IsMap()) throw InputError(path, "", "expected a YAML map at the top level");
  const YAML::Node root = Interpolator(path, raw).resolve(raw, "");
  const YView top(path, root, "");

  RunConfig rc;
  rc.source_file = path;
  rc.format = ConfigFormat::llm_foundry_yaml;
  Plan& plan = rc.plan;

  for (const auto& k : top.keys())
    if (!accepted_top_level(k))
      top.fail(k, fmt::format("unknown top-level key{}; llm-foundry raises 'Unused parameters' on it "
                              "(put free variables under variables:)", did_you_mean(k, kTopLevel)));

  read_compile(root, top, rc);
  read_batch(path, top, rc);

  // ---- precision
  const Amp amp = parse_precision(top, rc.warnings);
  if (!top.has("precision")) note_default(rc, "precision", "amp_bf16", "llm-foundry's default, scripts/train/train.py");
  plan.compute_dtype = amp.dtype;
  if (amp.fp8) plan.fp8 = Fp8Recipe::te_delayed;
  plan.state_dtype = Dtype::fp32;  // FSDP keeps fp32 sharded master params in every mode

  read_optimizer(top, rc);
  read_model(path, top, opts, rc);

  auto fsdp = top.map("fsdp_config");
  if (top.has("fsdp_config") && !fsdp && !top.raw("fsdp_config").IsNull())
    top.fail("fsdp_config", "expected a map");
  plan.root_unsharded = false;
  plan.grad_sync_every_microbatch = true;  // Composer uses no_sync only for DDP
  if (!fsdp) {
    read_ddp(plan);
  } else {
    const bool fsdp2 = fsdp->has("reshard_after_forward");
    plan.runtime = fsdp2 ? Runtime::composer_fsdp2 : Runtime::composer_fsdp1;
    check_fsdp_keys(fsdp2, *fsdp, rc);
    read_mixed_precision(path, *fsdp, amp, rc);
    if (!fsdp2) plan.keep_low_precision_grads = fsdp->get_bool("keep_low_precision_grads").value_or(false);
    const bool orig = read_fsdp_recompute_offload(fsdp2, *fsdp, rc);
    if (fsdp2) {
      read_fsdp2_sharding(*fsdp, rc);
    } else {
      read_fsdp1_sharding(path, *fsdp, rc);
      read_fsdp1_prefetch(path, *fsdp, rc);
    }
    read_tp(path, top, *fsdp, orig, rc);
  }
  if (!fsdp && top.map("tp_config"))
    top.fail("tp_config", "Composer requires fsdp_config for tensor parallelism");
  name_unmodelled_keys(top, fsdp, plan.runtime == Runtime::composer_fsdp2, rc);

  // The world size where the file states it: llm-foundry's update_batch_size_info writes n_gpus
  // and device_train_batch_size (= global / world, calculate_batch_size_info) into the config it
  // logs, so a config saved from a run says how many GPUs ran it.
  if (const auto n = top.get_int("n_gpus"))
    rc.n_gpus = limits::check_count(path, "n_gpus", *n, 1, limits::kMaxGpus, "GPUs");
  if (const auto device = top.get_int("device_train_batch_size")) {
    if (*device <= 0 || rc.job.global_batch % *device != 0)
      top.fail("device_train_batch_size", fmt::format("must be a positive integer dividing global_train_batch_size {}",
                                                      rc.job.global_batch));
    const std::int64_t world = rc.job.global_batch / *device;
    if (rc.n_gpus > 0 && rc.n_gpus != world)
      top.fail("device_train_batch_size",
               fmt::format("{} per device is {} GPUs, but n_gpus is {}", *device, world, rc.n_gpus));
    rc.n_gpus = limits::check_count(path, "device_train_batch_size", world, 1, limits::kMaxGpus, "GPUs");
  }
  return rc;
}

std::vector<std::string> llm_foundry_accepted_keys() {
  std::vector<std::string> out = kTopLevel;
  for (const auto* keys : {&kFsdp1Keys, &kFsdp2Keys})
    for (const auto& k : *keys) out.push_back("fsdp_config." + k);
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

std::vector<std::string> llm_foundry_no_effect_settings() {
  std::vector<std::string> out = kNoEffectTopLevel;
  for (const auto& k : kNoEffectFsdp) out.push_back("fsdp_config." + k);
  for (const auto& k : kTopLevel)
    for (const auto& prefix : kAcceptedPrefixes)
      if (k.starts_with(prefix)) out.push_back(k);
  return out;
}

const std::vector<UnmodelledSetting>& llm_foundry_unmodelled_settings() { return unmodelled_keys(); }

}  // namespace meshplan

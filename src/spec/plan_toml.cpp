// meshplan plan TOML reader and writer (format: docs/plan_format.md).
#include "spec/runtimes.hpp"
#include "spec/plan_toml.hpp"

#include "spec/offload_modules.hpp"
#include "spec/recompute_modules.hpp"

#include <algorithm>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "spec/error.hpp"
#include "spec/limits.hpp"
#include "spec/model_loader.hpp"
#include "spec/pipeline_split.hpp"

namespace meshplan {

namespace {

using importer::TomlView;

const std::vector<std::string> kSections = {"model", "cluster", "layout", "sharding", "precision",
                                            "activation_checkpoint", "offload", "batch", "runtime"};
const std::vector<std::string> kModelKeys = {
    "name", "preset", "hf_config", "n_layers", "d_model", "n_heads", "n_kv_heads", "head_dim",
    "ffn_hidden", "mlp", "vocab", "tied_embeddings", "pos_emb", "norm", "linear_bias", "norm_bias",
    "max_seq_len", "moe_experts", "moe_top_k", "moe_expert_ffn", "moe_shared_experts",
    "n_params_published", "n_params_source", "moe_dense_layers", "moe_capacity_factor", "moe_force_balance", "qk_norm", "attention",
    "mla_q_lora_rank", "mla_kv_lora_rank", "mla_rope_head_dim", "mla_v_head_dim", "n_mtp_layers", "sliding_window",
    "full_attention_every"};
const std::vector<std::string> kShapeKeys = {
    "n_layers", "d_model", "n_heads", "n_kv_heads", "head_dim", "ffn_hidden", "mlp", "vocab",
    "tied_embeddings", "pos_emb", "norm", "linear_bias", "norm_bias", "max_seq_len", "moe_experts",
    "moe_top_k", "moe_expert_ffn", "moe_shared_experts", "n_params_published", "n_params_source",
    "moe_dense_layers", "moe_capacity_factor", "moe_force_balance", "qk_norm", "attention", "mla_q_lora_rank",
    "mla_kv_lora_rank", "mla_rope_head_dim", "mla_v_head_dim", "n_mtp_layers", "sliding_window", "full_attention_every"};
const std::vector<std::string> kClusterKeys = {"profile", "gpus"};
const std::vector<std::string> kLayoutKeys = {"pp", "vpp", "dp_replicate", "dp_shard", "cp", "tp", "ep", "etp",
                                              "tp_style", "sequence_parallel", "async_tp", "loss_parallel", "schedule",
                                              "account_for_embedding_in_pipeline_split",
                                              "account_for_loss_in_pipeline_split",
                                              "pipeline_layout",
                                              "decoder_first_pipeline_num_layers", "decoder_last_pipeline_num_layers"};
const std::vector<std::string> kShardingKeys = {"strategy", "reshard_after_forward", "root_unsharded",
                                                "backward_prefetch", "forward_prefetch", "forward_prefetch_limit",
                                                "backward_prefetch_limit", "limit_all_gathers",
                                                "grad_sync_every_microbatch"};
const std::vector<std::string> kPrecisionKeys = {"param", "compute", "reduce", "state", "name",
                                                 "keep_low_precision_grads", "fp8", "fp8_all_gather",
                                                 "fp8_attention"};
const std::vector<std::string> kAcKeys = {"mode", "every_n", "reentrant", "recompute_modules"};
const std::vector<std::string> kOffloadKeys = {"activations", "params", "activation_modules"};
const std::vector<std::string> kBatchKeys = {"seq_len", "global_batch", "micro_batch", "grad_accum",
                                             "pp_microbatches"};
const std::vector<std::string> kRuntimeKeys = {"name", "optimizer", "compile", "flash_attention",
                                              "flash_attention_version", "dropout", "fused_cross_entropy",
                                              "deepspeed", "cuda_graphs", "attention_kernel", "cudnn_version", "loss_kernel", "loss_chunks",
                                              "optimizer_in_backward", "optimizer_implementation",
                                              "moe_dispatcher", "moe_a2a_overlap", "moe_permute_fusion",
                                              "moe_router_fusion", "moe_grouped_gemm", "cuda_graph_scope"};

constexpr const char* kStrict = "meshplan plan files are strict (see docs/plan_format.md)";

template <class E, class Parse>
E get_enum(const TomlView& v, std::string_view key, E dflt, Parse parse, const char* choices) {
  const auto s = v.get_string(key);
  if (!s) return dflt;
  const auto e = parse(*s);
  if (!e) v.fail(key, fmt::format("unknown value '{}' ({})", *s, choices));
  return *e;
}

std::int64_t positive(const TomlView& v, std::string_view key, std::int64_t dflt, std::int64_t max,
                      const char* what) {
  const std::int64_t x = v.get_int(key).value_or(dflt);
  if (x <= 0) v.fail(key, fmt::format("must be positive, got {}", x));
  return limits::check_count(v.file(), v.key(key), x, 1, max, what);
}

Dtype get_dtype(const TomlView& v, std::string_view key, Dtype dflt) {
  const auto s = v.get_string(key);
  if (!s) return dflt;
  const auto d = parse_dtype(*s);
  if (!d) v.fail(key, fmt::format("unknown dtype '{}' (fp32, tf32, bf16, fp16, fp8, fp8_block, mxfp8, fp4)", *s));
  return *d;
}

bool looks_like_path(const std::string& s) {
  return s.find('/') != std::string::npos || s.ends_with(".toml") || s.ends_with(".json");
}

// Every [model] key of the plan format, in the order docs/plan_format.md lists them: long by the
// number of keys, each a read and a range check.
ModelSpec read_model(const std::string& path, const TomlView& m) {
  m.require_known(kModelKeys, kStrict);
  const auto name = m.get_string("name");
  const auto preset = m.get_string("preset");
  const auto hf = m.get_string("hf_config");
  const bool has_shape = std::any_of(kShapeKeys.begin(), kShapeKeys.end(), [&](const std::string& k) { return m.has(k); });
  if (preset && hf) m.fail("hf_config", "give either preset or hf_config, not both");

  // Model files report errors against themselves; the user needs the plan key that named them.
  auto load = [&](const char* key, const std::string& what) {
    const std::string target = looks_like_path(what) ? importer::relative_to(path, what) : what;
    try {
      return load_model(target);
    } catch (const InputError& e) {
      throw InputError(path, m.key(key), importer::one_line(fmt::format("'{}': {}", what, e.what())));
    }
  };
  ModelSpec spec;
  bool from_base = true;
  if (preset) spec = load("preset", *preset);
  else if (hf) spec = load("hf_config", *hf);
  else if (name && !has_shape) spec = load("name", *name);
  else if (has_shape) from_base = false;
  else m.fail("name", "required: a shipped model name, preset, hf_config, or inline shape fields");

  if (name && (preset || hf || has_shape)) spec.name = *name;
  if (!from_base) {
    for (const char* k : {"n_layers", "d_model", "n_heads", "vocab"})
      if (!m.has(k)) m.fail(k, "required for an inline model (no preset or hf_config)");
    if (!name) m.fail("name", "required for an inline model (a label for reports)");
  }
  // Bounds before narrowing: a count that does not fit an int must not wrap to a small one.
  auto i64 = [&](const char* k, std::int64_t& field, std::int64_t max, const char* what) {
    if (auto v = m.get_int(k)) field = limits::check_count(path, m.key(k), *v, 0, max, what);
  };
  auto i32 = [&](const char* k, int& field, std::int64_t max, const char* what) {
    if (auto v = m.get_int(k)) field = limits::check_int(path, m.key(k), *v, 0, max, what);
  };
  auto flag = [&](const char* k, bool& field) {
    if (auto v = m.get_bool(k)) field = *v;
  };
  i32("n_layers", spec.n_layers, limits::kMaxLayers, "layers");
  i64("d_model", spec.d_model, limits::kMaxWidth, "the model width");
  i32("n_heads", spec.n_heads, limits::kMaxHeads, "attention heads");
  i32("n_kv_heads", spec.n_kv_heads, limits::kMaxHeads, "kv heads");
  i64("head_dim", spec.head_dim, limits::kMaxHeadDim, "the head dimension");
  i64("ffn_hidden", spec.ffn_hidden, limits::kMaxWidth, "the MLP width");
  i64("vocab", spec.vocab, limits::kMaxVocab, "the vocabulary");
  flag("tied_embeddings", spec.tied_embeddings);
  flag("linear_bias", spec.linear_bias);
  flag("norm_bias", spec.norm_bias);
  i64("max_seq_len", spec.max_seq_len, limits::kMaxSeqLen, "the sequence length");
  i32("moe_experts", spec.moe.n_experts, limits::kMaxExperts, "experts");
  i32("moe_top_k", spec.moe.top_k, limits::kMaxExperts, "experts");
  i64("moe_expert_ffn", spec.moe.expert_ffn, limits::kMaxWidth, "the MLP width");
  i32("moe_shared_experts", spec.moe.n_shared_experts, limits::kMaxExperts, "experts");
  i32("moe_dense_layers", spec.moe.n_dense_layers, limits::kMaxLayers, "layers");
  if (auto v = m.get_number("moe_capacity_factor")) {
    if (!(*v >= 0) || *v > 1e3) m.fail("moe_capacity_factor", fmt::format("must be 0 (dropless) or up to 1000, got {}", *v));
    spec.moe.capacity_factor = *v;
  }
  flag("moe_force_balance", spec.moe.force_balance);
  flag("qk_norm", spec.qk_norm);
  spec.attention = get_enum(m, "attention", spec.attention, parse_attention_kind, "gqa, mla");
  i64("mla_q_lora_rank", spec.mla.q_lora_rank, limits::kMaxWidth, "the model width");
  i64("mla_kv_lora_rank", spec.mla.kv_lora_rank, limits::kMaxWidth, "the model width");
  i64("mla_rope_head_dim", spec.mla.rope_head_dim, limits::kMaxHeadDim, "the head dimension");
  i64("mla_v_head_dim", spec.mla.v_head_dim, limits::kMaxHeadDim, "the head dimension");
  i32("n_mtp_layers", spec.n_mtp_layers, limits::kMaxLayers, "layers");
  i64("sliding_window", spec.sliding_window, limits::kMaxSeqLen, "the sequence length");
  i32("full_attention_every", spec.full_attention_every, limits::kMaxLayers, "layers");
  // Switching a preset's window off switches its pattern of full layers off with it; a pattern
  // the plan gives without a window is its own mistake.
  if (spec.sliding_window == 0 && !m.has("full_attention_every")) spec.full_attention_every = 0;
  if (const char* why = sliding_window_conflict(spec)) m.fail("full_attention_every", why);
  spec.mlp = get_enum(m, "mlp", spec.mlp, parse_mlp_kind, "gelu, swiglu, relu2");
  spec.pos_emb = get_enum(m, "pos_emb", spec.pos_emb, parse_pos_emb, "rope, learned, alibi, none");
  spec.norm = get_enum(m, "norm", spec.norm, parse_norm_kind, "rmsnorm, layernorm");
  if (auto v = m.get_int("n_params_published")) spec.n_params_published = *v;
  if (auto v = m.get_string("n_params_source")) spec.n_params_source = *v;
  // Derived defaults: MHA when kv heads are not given; head_dim from the width when the width or
  // head count changed without an explicit head_dim.
  if (!from_base && !m.has("n_kv_heads")) spec.n_kv_heads = spec.n_heads;
  if (!m.has("head_dim") && (m.has("d_model") || m.has("n_heads")) && spec.n_heads > 0) {
    // The other loaders reject a width the heads do not divide; flooring would change the model.
    if (spec.d_model % spec.n_heads != 0)
      m.fail("n_heads", fmt::format("d_model {} is not divisible by n_heads {}; give head_dim explicitly",
                                    spec.d_model, spec.n_heads));
    spec.head_dim = spec.d_model / spec.n_heads;
  }
  // Errors name the plan key: [model] + the ModelSpec field.
  try {
    validate(spec, path);
  } catch (const InputError& e) {
    throw InputError(path, "model." + e.key(), e.reason());
  }
  return spec;
}

std::string quote(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out.push_back('\\');
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out.push_back(c);
  }
  return out + "\"";
}
const char* b(bool v) { return v ? "true" : "false"; }

}  // namespace

bool looks_like_plan_toml(const toml::table& t) {
  for (const auto& [k, v] : t) {
    (void)v;
    if (std::find(kSections.begin(), kSections.end(), std::string(k.str())) != kSections.end()) return true;
  }
  return false;
}

namespace {

// [cluster]
void read_cluster(RunConfig& rc, const TomlView& cluster, const std::string& path) {
  rc.cluster = cluster.get_string("profile").value_or("");
  if (auto g = cluster.get_int("gpus")) {
    if (*g <= 0) cluster.fail("gpus", fmt::format("must be positive, got {}", *g));
    rc.n_gpus = limits::check_count(path, cluster.key("gpus"), *g, 1, limits::kMaxGpus, "GPUs");
  }
}

// [layout]: the mesh degrees (-1 absorbs the rest of the GPUs), TP and pipeline settings.
void read_layout(Plan& plan, const TomlView& layout, const std::string& path) {
  auto degree = [&](const char* k, int dflt) {
    const std::int64_t v = layout.get_int(k).value_or(dflt);
    if (v == -1) return -1;
    if (v <= 0) layout.fail(k, fmt::format("must be positive or -1 (absorbs the rest of the GPUs), got {}", v));
    return limits::check_int(path, layout.key(k), v, 1, limits::kMaxGpus, "a mesh degree (the GPU maximum)");
  };
  Mesh& mesh = plan.mesh;
  mesh.pp = degree("pp", 1);
  mesh.dp_replicate = degree("dp_replicate", 1);
  mesh.dp_shard = degree("dp_shard", -1);
  mesh.cp = degree("cp", 1);
  mesh.tp = degree("tp", 1);
  mesh.vpp = static_cast<int>(positive(layout, "vpp", 1, limits::kMaxLayers, "virtual stages (the layer maximum)"));
  mesh.ep = static_cast<int>(positive(layout, "ep", 1, limits::kMaxGpus, "a mesh degree (the GPU maximum)"));
  if (layout.has("etp"))
    mesh.etp = static_cast<int>(positive(layout, "etp", 1, limits::kMaxGpus, "a mesh degree (the GPU maximum)"));
  plan.tp_style = get_enum(layout, "tp_style", TpStyle::full,
                           [](std::string_view s) -> std::optional<TpStyle> {
                             if (s == "full") return TpStyle::full;
                             if (s == "mlp-only" || s == "mlp_only") return TpStyle::mlp_only;
                             return std::nullopt;
                           },
                           "full, mlp-only");
  plan.sequence_parallel = layout.get_bool("sequence_parallel").value_or(false);
  plan.async_tp = layout.get_bool("async_tp").value_or(false);
  plan.loss_parallel = layout.get_bool("loss_parallel").value_or(true);
  plan.schedule = get_enum(layout, "schedule",
                           mesh.vpp > 1 ? PipelineSchedule::interleaved_1f1b : PipelineSchedule::one_f_one_b,
                           parse_schedule, "gpipe, 1f1b, interleaved-1f1b");
  if (mesh.vpp > 1 && plan.schedule != PipelineSchedule::interleaved_1f1b)
    layout.fail("vpp", "virtual stages need schedule = \"interleaved-1f1b\"");
  // Megatron's pipeline split rules (spec/pipeline_split.hpp); resolve_layout checks them against the model.
  PipelineSplit& split = plan.pipeline_split;
  split.embedding_as_layer = layout.get_bool("account_for_embedding_in_pipeline_split").value_or(false);
  split.loss_as_layer = layout.get_bool("account_for_loss_in_pipeline_split").value_or(false);
  for (auto [key, field] : {std::pair{"decoder_first_pipeline_num_layers", &split.first_stage_layers},
                            std::pair{"decoder_last_pipeline_num_layers", &split.last_stage_layers}}) {
    if (auto n = layout.get_int(key)) {
      if (*n < 0) layout.fail(key, fmt::format("must be a layer count (0 or more), got {}", *n));
      *field = static_cast<int>(limits::check_count(path, layout.key(key), *n, 0, limits::kMaxLayers, "layers"));
    }
  }
  if (auto text = layout.get_string("pipeline_layout")) {
    std::string why;
    const auto pl = parse_pipeline_layout(*text, &why);
    if (!pl) layout.fail("pipeline_layout", fmt::format("'{}': {}", *text, why));
    set_layout(split, *pl);
  }
}

// [sharding]
void read_sharding(Plan& plan, const TomlView& sh) {
  plan.sharding = get_enum(sh, "strategy", Sharding::zero3, parse_sharding, "none, zero1, zero2, zero3");
  plan.reshard_after_forward = sh.get_bool("reshard_after_forward").value_or(plan.sharding == Sharding::zero3);
  plan.root_unsharded = sh.get_bool("root_unsharded").value_or(false);
  plan.backward_prefetch = get_enum(sh, "backward_prefetch", BackwardPrefetch::backward_pre,
                                    parse_backward_prefetch, "none, BACKWARD_PRE, BACKWARD_POST");
  plan.forward_prefetch = sh.get_bool("forward_prefetch").value_or(false);
  plan.forward_prefetch_limit = static_cast<int>(positive(sh, "forward_prefetch_limit", 1, limits::kMaxLayers, "prefetched layers (the layer maximum)"));
  plan.backward_prefetch_limit = static_cast<int>(positive(sh, "backward_prefetch_limit", 1, limits::kMaxLayers, "prefetched layers (the layer maximum)"));
  plan.limit_all_gathers = sh.get_bool("limit_all_gathers").value_or(true);
  plan.grad_sync_every_microbatch = sh.get_bool("grad_sync_every_microbatch").value_or(true);
}

// [precision]
void read_precision(Plan& plan, const TomlView& pr) {
  plan.param_dtype = get_dtype(pr, "param", Dtype::bf16);
  plan.compute_dtype = get_dtype(pr, "compute", plan.param_dtype);
  plan.reduce_dtype = get_dtype(pr, "reduce", Dtype::fp32);
  plan.state_dtype = get_dtype(pr, "state", Dtype::fp32);
  plan.mixed_precision_name = pr.get_string("name").value_or("");
  plan.keep_low_precision_grads = pr.get_bool("keep_low_precision_grads").value_or(false);
  plan.fp8 = get_enum(pr, "fp8", Fp8Recipe::none, parse_fp8,
                      "none, te-delayed, te-current, te-blockwise, mxfp8, nvfp4, torchao-tensorwise, torchao-rowwise");
  plan.fp8_all_gather = pr.get_bool("fp8_all_gather").value_or(false);
  if (plan.fp8_all_gather && plan.fp8 == Fp8Recipe::none)
    pr.fail("fp8_all_gather", "needs an fp8 recipe");
  plan.fp8_attention = pr.get_bool("fp8_attention").value_or(false);
  if (plan.fp8_attention && !supports_fp8_attention(plan.fp8))
    pr.fail("fp8_attention", fmt::format("needs a Transformer Engine recipe whose attention runs in FP8 "
                                         "(te-delayed, te-current, mxfp8), not fp8 = \"{}\"",
                                         to_string(plan.fp8)));
}

// [activation_checkpoint]
void read_activation_checkpoint(Plan& plan, const TomlView& ac) {
  plan.ac = get_enum(ac, "mode", AcMode::none, parse_ac_mode,
                     "none, full, selective-layer, selective-op, selective-attn");
  plan.ac_every_n = static_cast<int>(positive(ac, "every_n", 1, limits::kMaxLayers, "layers"));
  plan.ac_reentrant = ac.get_bool("reentrant").value_or(false);
  if (auto mods = ac.get_string_array("recompute_modules")) {
    for (const std::string& name : *mods) {
      const RecomputeModuleName k = apply_recompute_module(name, plan.recompute_modules);
      if (k == RecomputeModuleName::core_attn)
        ac.fail("recompute_modules", "core_attn is mode = \"selective-attn\"");
      if (k == RecomputeModuleName::known_unmodeled || k == RecomputeModuleName::unknown)
        ac.fail("recompute_modules", fmt::format("'{}' is not modelled (layernorm, moe_act, moe)", name));
    }
    if (plan.ac == AcMode::full && plan.recompute_modules.any())
      ac.fail("recompute_modules", "full recompute already recomputes every module");
  }
}

// [offload]
void read_offload(Plan& plan, const TomlView& off) {
  plan.act_offload = off.get_bool("activations").value_or(false);
  plan.param_offload = off.get_bool("params").value_or(false);
  if (auto mods = off.get_string_array("activation_modules")) {
    if (!plan.act_offload) off.fail("activation_modules", "needs activations = true");
    if (mods->empty()) off.fail("activation_modules", fmt::format("empty: list the modules to offload ({})", offload_module_list()));
    for (const std::string& name : *mods)
      if (!apply_offload_module(name, plan.offload_modules))
        off.fail("activation_modules", fmt::format("'{}' is not an offload module ({})", name, offload_module_list()));
  }
}

// [batch]
void read_batch(RunConfig& rc, const TomlView& bt) {
  if (!bt.has("seq_len")) bt.fail("seq_len", "required");
  rc.job.seq_len = positive(bt, "seq_len", 0, limits::kMaxSeqLen, "the sequence length");
  if (const toml::node* mb = bt.table().get("micro_batch"); mb != nullptr && mb->is_string()) {
    if (mb->value_or(std::string()) != "auto") bt.fail("micro_batch", "expected a positive integer or \"auto\"");
    rc.job.micro_batch = 0;
    rc.left_to_runtime.micro_batch = true;  // the largest that fits (workload/runtime_choices)
  } else {
    rc.job.micro_batch = positive(bt, "micro_batch", 1, limits::kMaxBatch, "sequences per step");
  }
  rc.job.global_batch = bt.has("global_batch") ? positive(bt, "global_batch", 0, limits::kMaxBatch, "sequences per step") : 0;
  rc.job.grad_accum = bt.has("grad_accum") ? positive(bt, "grad_accum", 0, limits::kMaxGradAccum, "micro-batches per step") : 0;
  if (rc.job.global_batch == 0 && rc.job.grad_accum == 0)
    bt.fail("global_batch", "required (or grad_accum, from which global = dp x micro_batch x grad_accum)");
  rc.job.pp_microbatches = bt.has("pp_microbatches") ? positive(bt, "pp_microbatches", 0, limits::kMaxGradAccum, "micro-batches per step") : 0;
}

// [runtime]: the framework and its kernels.
void read_runtime(Plan& plan, const TomlView& rt) {
  plan.runtime = get_enum(rt, "name", Runtime::generic, parse_runtime,
                          "generic, composer-fsdp1 (or llm-foundry), composer-fsdp2, torchtitan-fsdp2 (or torchtitan), "
                          "megatron");
  plan.optimizer = get_enum(rt, "optimizer", Optimizer::adamw, parse_optimizer, "adamw, adamw8bit, sgd");
  plan.optimizer_impl = get_enum(rt, "optimizer_implementation", OptimizerImpl::framework, parse_optimizer_impl,
                                 "framework, foreach, fused, for-loop");
  plan.moe_dispatcher = get_enum(rt, "moe_dispatcher", MoeDispatcher::alltoall, parse_moe_dispatcher,
                                 "alltoall, deepep, hybridep");
  plan.moe_a2a_overlap = rt.get_bool("moe_a2a_overlap").value_or(false);
  // Megatron-Core's fused MoE kernels and SequentialMLP; other runtimes run their own MoE code.
  const bool megatron_moe = runtime_traits(plan.runtime, false).moe_layer_op_by_op;
  for (const auto& [key, field] : {std::pair{"moe_permute_fusion", &Plan::moe_permute_fusion},
                                   std::pair{"moe_router_fusion", &Plan::moe_router_fusion}}) {
    plan.*field = rt.get_bool(key).value_or(false);
    if (plan.*field && !megatron_moe)
      rt.fail(key, fmt::format("is a Megatron-Core flag; runtime '{}' runs its own MoE kernels", to_string(plan.runtime)));
  }
  plan.moe_grouped_gemm = rt.get_bool("moe_grouped_gemm").value_or(true);
  if (!plan.moe_grouped_gemm && !megatron_moe)
    rt.fail("moe_grouped_gemm",
            fmt::format("false is Megatron's SequentialMLP; runtime '{}' runs its experts as grouped GEMMs", to_string(plan.runtime)));
  plan.compile = rt.get_bool("compile").value_or(false);
  plan.cuda_graphs = rt.get_bool("cuda_graphs").value_or(false);
  if (auto names = rt.get_string_array("cuda_graph_scope")) {
    std::string bad;
    const auto scope = parse_cuda_graph_scope(*names, &bad);
    if (!scope)
      rt.fail("cuda_graph_scope", fmt::format("'{}' is not a scope ({})", bad, cuda_graph_scope_choices()));
    plan.cuda_graph_scope = *scope;
  }
  plan.flash_attention = rt.get_bool("flash_attention").value_or(true);
  if (const auto v = rt.get_int("flash_attention_version")) {
    if (*v < 1 || *v > 3) rt.fail("flash_attention_version", fmt::format("must be 1, 2 or 3, got {}", *v));
    plan.flash_attention_version = static_cast<int>(*v);
  }
  plan.attention_kernel = get_enum(rt, "attention_kernel", AttentionKernel::framework, parse_attention_kernel,
                                   "framework, fa2, fa3, fa4, cudnn");
  if (const auto v = rt.get_string("cudnn_version")) {
    const std::optional<int> parsed = parse_library_version(*v);
    if (!parsed) rt.fail("cudnn_version", fmt::format("must be a cuDNN release like \"9.17\", got \"{}\"", *v));
    plan.cudnn_version = *parsed;
  }
  // flash_attention_version = 3 names FlashAttention-3's kernel unless attention_kernel says otherwise.
  if (plan.flash_attention_version == 3 && plan.attention_kernel == AttentionKernel::framework)
    plan.attention_kernel = AttentionKernel::fa3;
  plan.dropout = rt.get_bool("dropout").value_or(false);
  plan.fused_cross_entropy = rt.get_bool("fused_cross_entropy").value_or(false);
  if (const auto lk = rt.get_string("loss_kernel")) {
    if (*lk == "torch") plan.fused_cross_entropy = false;
    else if (*lk == "fused") plan.fused_cross_entropy = true;
    else if (*lk == "chunked") plan.chunked_cross_entropy = true;
    else rt.fail("loss_kernel", fmt::format("unknown value '{}' (torch, chunked, fused)", *lk));
    if (*lk != "fused" && rt.get_bool("fused_cross_entropy").value_or(false))
      rt.fail("fused_cross_entropy", fmt::format("contradicts loss_kernel = \"{}\"", *lk));
  }
  if (const auto n = rt.get_int("loss_chunks")) {
    if (*n < 1 || *n > 1024) rt.fail("loss_chunks", fmt::format("must be 1 to 1024, got {}", *n));
    plan.loss_chunks = static_cast<int>(*n);
  }
}

// The [runtime] keys that depend on other sections (grad_accum, the runtime, the sharding and pp),
// and the runtime's limits on those sections, read once all of them are.
void read_runtime_across_sections(RunConfig& rc, const TomlView& rt, const TomlView& sh) {
  Plan& plan = rc.plan;
  plan.optimizer_in_backward = rt.get_bool("optimizer_in_backward").value_or(false);
  if (plan.optimizer_in_backward && rc.job.grad_accum > 1)
    rt.fail("optimizer_in_backward", "steps the optimizer inside every backward: needs grad_accum = 1");
  plan.deepspeed_engine = rt.get_bool("deepspeed").value_or(false);
  // An unstated strategy is the runtime's own default: Megatron-LM (and DeepSpeed's engine) run
  // plain data parallelism unless --use-distributed-optimizer or Megatron-FSDP is asked for, and a
  // higher stage only where that does not fit (workload/runtime_choices, once the device is
  // known); the FSDP runtimes shard fully.
  if (!sh.has("strategy") && runtime_info(plan).traits.sharding_by_distributed_optimizer) {
    plan.sharding = Sharding::none;
    plan.reshard_after_forward = sh.get_bool("reshard_after_forward").value_or(false);
    rc.left_to_runtime.sharding = true;
  }
  if (plan.deepspeed_engine && !runtime_info(plan).traits.accepts_deepspeed_engine)
    rt.fail("deepspeed", "DeepSpeed's pipeline engine drives Megatron models only (name = \"megatron\")");
  if (!runtime_info(plan).traits.zero2_modelled && plan.sharding == Sharding::zero2)
    sh.fail("strategy", "zero2 under Megatron (Megatron-FSDP optim_grads, DeepSpeed ZeRO-2: whole bf16 params, "
                        "sharded gradients) is not modeled; zero1 or zero3");
  if (plan.deepspeed_engine && plan.mesh.pp > 1 &&
      (plan.sharding == Sharding::zero2 || plan.sharding == Sharding::zero3))
    rt.fail("deepspeed", fmt::format("DeepSpeed's pipeline engine runs ZeRO stages 0 and 1 only, not {} with pp {}",
                                     to_string(plan.sharding), plan.mesh.pp));
}

}  // namespace

RunConfig read_plan_toml(const std::string& path, const toml::table& t, const ImportOptions& opts) {
  const TomlView root(path, t);
  root.require_known(kSections, kStrict);
  for (const auto& s : kSections) (void)root.sub(s);  // each must be a table

  RunConfig rc;
  rc.source_file = path;
  rc.format = ConfigFormat::meshplan_plan;
  Plan& plan = rc.plan;
  const toml::table empty;
  auto section = [&](const std::string& name, const std::vector<std::string>& keys) {
    TomlView v = root.sub(name).value_or(TomlView(path, empty, name));
    v.require_known(keys, kStrict);
    return v;
  };

  // [model]
  if (opts.model) rc.model = *opts.model;
  else {
    auto m = root.sub("model");
    if (!m) throw InputError(path, "model", "required: a [model] section");
    rc.model = read_model(path, *m);
  }

  read_cluster(rc, section("cluster", kClusterKeys), path);
  read_layout(plan, section("layout", kLayoutKeys), path);
  const TomlView sh = section("sharding", kShardingKeys);
  read_sharding(plan, sh);
  read_precision(plan, section("precision", kPrecisionKeys));
  read_activation_checkpoint(plan, section("activation_checkpoint", kAcKeys));
  read_offload(plan, section("offload", kOffloadKeys));
  read_batch(rc, section("batch", kBatchKeys));
  const TomlView rt = section("runtime", kRuntimeKeys);
  read_runtime(plan, rt);
  read_runtime_across_sections(rc, rt, sh);
  return rc;
}

namespace {

// The plan TOML as written, one line at a time.
struct TomlLines {
  std::string text;
  void line(const std::string& s) { text += s + "\n"; }
};

// [model]: the whole architecture, so the file stands without the shipped models.
void write_model(TomlLines& t, const ModelSpec& m) {
  t.line("[model]");
  t.line("name = " + quote(m.name));
  t.line(fmt::format("n_layers = {}", m.n_layers));
  t.line(fmt::format("d_model = {}", m.d_model));
  t.line(fmt::format("n_heads = {}", m.n_heads));
  t.line(fmt::format("n_kv_heads = {}", m.n_kv_heads));
  t.line(fmt::format("head_dim = {}", m.head_dim));
  t.line(fmt::format("ffn_hidden = {}", m.ffn_hidden));
  t.line(fmt::format("mlp = {}", quote(std::string(to_string(m.mlp)))));
  t.line(fmt::format("vocab = {}", m.vocab));
  t.line(fmt::format("tied_embeddings = {}", b(m.tied_embeddings)));
  t.line(fmt::format("pos_emb = {}", quote(std::string(to_string(m.pos_emb)))));
  t.line(fmt::format("norm = {}", quote(std::string(to_string(m.norm)))));
  t.line(fmt::format("linear_bias = {}", b(m.linear_bias)));
  t.line(fmt::format("norm_bias = {}", b(m.norm_bias)));
  t.line(fmt::format("max_seq_len = {}", m.max_seq_len));
  t.line(fmt::format("moe_experts = {}", m.moe.n_experts));
  t.line(fmt::format("moe_top_k = {}", m.moe.top_k));
  t.line(fmt::format("moe_expert_ffn = {}", m.moe.expert_ffn));
  t.line(fmt::format("moe_shared_experts = {}", m.moe.n_shared_experts));
  if (m.moe.n_dense_layers > 0) t.line(fmt::format("moe_dense_layers = {}", m.moe.n_dense_layers));
  if (m.moe.capacity_factor > 0) t.line(fmt::format("moe_capacity_factor = {}", m.moe.capacity_factor));
  if (m.moe.force_balance) t.line("moe_force_balance = true");
  if (m.qk_norm) t.line("qk_norm = true");
  if (m.attention == AttentionKind::mla) {
    t.line("attention = \"mla\"");
    t.line(fmt::format("mla_q_lora_rank = {}", m.mla.q_lora_rank));
    t.line(fmt::format("mla_kv_lora_rank = {}", m.mla.kv_lora_rank));
    t.line(fmt::format("mla_rope_head_dim = {}", m.mla.rope_head_dim));
    t.line(fmt::format("mla_v_head_dim = {}", m.mla.v_head_dim));
  }
  if (m.n_mtp_layers > 0) t.line(fmt::format("n_mtp_layers = {}", m.n_mtp_layers));
  if (m.sliding_window > 0) t.line(fmt::format("sliding_window = {}", m.sliding_window));
  if (m.full_attention_every > 0) t.line(fmt::format("full_attention_every = {}", m.full_attention_every));
  if (m.n_params_published) t.line(fmt::format("n_params_published = {}", *m.n_params_published));
  if (!m.n_params_source.empty()) t.line("n_params_source = " + quote(m.n_params_source));
}

void write_cluster_and_layout(TomlLines& t, const RunConfig& rc) {
  const Plan& p = rc.plan;
  t.line("[cluster]");
  if (!rc.cluster.empty()) t.line("profile = " + quote(rc.cluster));
  if (rc.n_gpus > 0) t.line(fmt::format("gpus = {}", rc.n_gpus));
  t.line("");
  t.line("[layout]");
  t.line(fmt::format("pp = {}", p.mesh.pp));
  t.line(fmt::format("vpp = {}", p.mesh.vpp));
  t.line(fmt::format("dp_replicate = {}", p.mesh.dp_replicate));
  t.line(fmt::format("dp_shard = {}", p.mesh.dp_shard));
  t.line(fmt::format("cp = {}", p.mesh.cp));
  t.line(fmt::format("tp = {}", p.mesh.tp));
  t.line(fmt::format("ep = {}", p.mesh.ep));
  if (p.mesh.etp > 0) t.line(fmt::format("etp = {}", p.mesh.etp));
  t.line(fmt::format("tp_style = {}", quote(std::string(to_string(p.tp_style)))));
  t.line(fmt::format("sequence_parallel = {}", b(p.sequence_parallel)));
  t.line(fmt::format("async_tp = {}", b(p.async_tp)));
  if (!p.loss_parallel) t.line("loss_parallel = false");
  t.line(fmt::format("schedule = {}", quote(std::string(to_string(p.schedule)))));
  if (p.pipeline_split.embedding_as_layer) t.line("account_for_embedding_in_pipeline_split = true");
  if (p.pipeline_split.loss_as_layer) t.line("account_for_loss_in_pipeline_split = true");
  if (p.pipeline_split.first_stage_layers >= 0)
    t.line(fmt::format("decoder_first_pipeline_num_layers = {}", p.pipeline_split.first_stage_layers));
  if (p.pipeline_split.last_stage_layers >= 0)
    t.line(fmt::format("decoder_last_pipeline_num_layers = {}", p.pipeline_split.last_stage_layers));
  if (!p.pipeline_split.chunk_layers.empty())
    t.line(fmt::format("pipeline_layout = \"{}\"", format_pipeline_layout(layout_of(p.pipeline_split))));
}

void write_sharding_and_precision(TomlLines& t, const Plan& p) {
  t.line("[sharding]");
  t.line(fmt::format("strategy = {}", quote(std::string(to_string(p.sharding)))));
  t.line(fmt::format("reshard_after_forward = {}", b(p.reshard_after_forward)));
  t.line(fmt::format("root_unsharded = {}", b(p.root_unsharded)));
  t.line(fmt::format("backward_prefetch = {}", quote(std::string(to_string(p.backward_prefetch)))));
  t.line(fmt::format("forward_prefetch = {}", b(p.forward_prefetch)));
  t.line(fmt::format("forward_prefetch_limit = {}", p.forward_prefetch_limit));
  t.line(fmt::format("backward_prefetch_limit = {}", p.backward_prefetch_limit));
  t.line(fmt::format("limit_all_gathers = {}", b(p.limit_all_gathers)));
  t.line(fmt::format("grad_sync_every_microbatch = {}", b(p.grad_sync_every_microbatch)));
  t.line("");
  t.line("[precision]");
  t.line(fmt::format("param = {}", quote(std::string(to_string(p.param_dtype)))));
  t.line(fmt::format("compute = {}", quote(std::string(to_string(p.compute_dtype)))));
  t.line(fmt::format("reduce = {}", quote(std::string(to_string(p.reduce_dtype)))));
  t.line(fmt::format("state = {}", quote(std::string(to_string(p.state_dtype)))));
  t.line("name = " + quote(p.mixed_precision_name));
  t.line(fmt::format("keep_low_precision_grads = {}", b(p.keep_low_precision_grads)));
  t.line(fmt::format("fp8 = {}", quote(std::string(to_string(p.fp8)))));
  t.line(fmt::format("fp8_all_gather = {}", b(p.fp8_all_gather)));
  if (p.fp8_attention) t.line("fp8_attention = true");
}

void write_recompute_offload_and_batch(TomlLines& t, const RunConfig& rc) {
  const Plan& p = rc.plan;
  t.line("[activation_checkpoint]");
  t.line(fmt::format("mode = {}", quote(std::string(to_string(p.ac)))));
  t.line(fmt::format("every_n = {}", p.ac_every_n));
  t.line(fmt::format("reentrant = {}", b(p.ac_reentrant)));
  if (p.recompute_modules.any()) {
    std::string mods;
    for (auto [on, name] : {std::pair{p.recompute_modules.norms, "layernorm"}, std::pair{p.recompute_modules.moe_act, "moe_act"},
                            std::pair{p.recompute_modules.moe, "moe"}})
      if (on) mods += (mods.empty() ? "\"" : ", \"") + std::string(name) + "\"";
    t.line("recompute_modules = [" + mods + "]");
  }
  t.line("");
  t.line("[offload]");
  t.line(fmt::format("activations = {}", b(p.act_offload)));
  t.line(fmt::format("params = {}", b(p.param_offload)));
  if (p.act_offload && p.offload_modules.any())
    t.line("activation_modules = [" + offload_modules_text(p.offload_modules, "\"") + "]");
  t.line("");
  t.line("[batch]");
  t.line(fmt::format("seq_len = {}", rc.job.seq_len));
  if (rc.job.global_batch > 0) t.line(fmt::format("global_batch = {}", rc.job.global_batch));
  if (rc.job.micro_batch > 0) t.line(fmt::format("micro_batch = {}", rc.job.micro_batch));
  else t.line("micro_batch = \"auto\"");
  if (rc.job.grad_accum > 0) t.line(fmt::format("grad_accum = {}", rc.job.grad_accum));
  if (rc.job.pp_microbatches > 0) t.line(fmt::format("pp_microbatches = {}", rc.job.pp_microbatches));
}

void write_runtime(TomlLines& t, const Plan& p) {
  t.line("[runtime]");
  t.line(fmt::format("name = {}", quote(std::string(to_string(p.runtime)))));
  t.line(fmt::format("optimizer = {}", quote(std::string(to_string(p.optimizer)))));
  if (p.optimizer_impl != OptimizerImpl::framework)
    t.line(fmt::format("optimizer_implementation = {}", quote(std::string(to_string(p.optimizer_impl)))));
  if (p.moe_dispatcher != MoeDispatcher::alltoall)
    t.line(fmt::format("moe_dispatcher = {}", quote(std::string(to_string(p.moe_dispatcher)))));
  if (p.moe_a2a_overlap) t.line("moe_a2a_overlap = true");
  if (p.moe_permute_fusion) t.line("moe_permute_fusion = true");
  if (p.moe_router_fusion) t.line("moe_router_fusion = true");
  if (!p.moe_grouped_gemm) t.line("moe_grouped_gemm = false");
  t.line(fmt::format("compile = {}", b(p.compile)));
  if (p.cuda_graphs) t.line("cuda_graphs = true");
  if (!p.cuda_graph_scope.full) {  // kept without cuda_graphs too, as Megatron keeps the flag (unused)
    t.line(fmt::format("cuda_graph_scope = [\"{}\"]", fmt::join(cuda_graph_scope_names(p.cuda_graph_scope), "\", \"")));
  }
  t.line(fmt::format("flash_attention = {}", b(p.flash_attention)));
  if (p.flash_attention && p.flash_attention_version != 2)
    t.line(fmt::format("flash_attention_version = {}", p.flash_attention_version));
  if (p.attention_kernel != AttentionKernel::framework)
    t.line(fmt::format("attention_kernel = \"{}\"", to_string(p.attention_kernel)));
  if (p.cudnn_version > 0) t.line(fmt::format("cudnn_version = \"{}\"", library_version_text(p.cudnn_version)));
  t.line(fmt::format("dropout = {}", b(p.dropout)));
  if (p.fused_cross_entropy) t.line("fused_cross_entropy = true");
  if (p.chunked_cross_entropy) {
    t.line("loss_kernel = \"chunked\"");
    if (p.loss_chunks != 8) t.line(fmt::format("loss_chunks = {}", p.loss_chunks));
  }
  if (p.optimizer_in_backward) t.line("optimizer_in_backward = true");
  if (p.deepspeed_engine) t.line("deepspeed = true");
}

}  // namespace

std::string to_plan_toml(const RunConfig& rc) {
  TomlLines t;
  t.line("# meshplan plan (format: docs/plan_format.md)");
  if (!rc.source_file.empty()) t.line("# from " + rc.source_file);
  t.line("");
  write_model(t, rc.model);
  t.line("");
  write_cluster_and_layout(t, rc);
  t.line("");
  write_sharding_and_precision(t, rc.plan);
  t.line("");
  write_recompute_offload_and_batch(t, rc);
  t.line("");
  write_runtime(t, rc.plan);
  return t.text;
}

}  // namespace meshplan

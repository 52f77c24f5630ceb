// llm-foundry emitter. Keys and defaults: Composer composer/utils/parallelism.py (FSDPConfig,
// FSDP2Config; HEAD 6405188805a0), llm-foundry llmfoundry/utils/config_utils.py (tp_config, batch
// arithmetic) and scripts/train/yamls/pretrain/*.yaml (YAML structure; llm-foundry 8c8dd48f7216).
#include "emit/foundry_emitter.hpp"

#include <fmt/format.h>

#include "spec/model_loader.hpp"
#include "spec/runtimes.hpp"

namespace meshplan {

namespace {

constexpr std::string_view kRt = "llm-foundry";
using emit::refuse;

// A small YAML writer: block maps only, two-space indent, keys in insertion order. Values are
// written plain; every value emitted here is a number, bool, null or a plain-safe string.
class Yaml {
public:
  void key(std::string_view k, std::string_view v) { text_ += fmt::format("{}{}: {}\n", pad(), k, v); }
  void key(std::string_view k, std::int64_t v) { key(k, std::to_string(v)); }
  void flag(std::string_view k, bool v) { key(k, v ? "true" : "false"); }
  void open(std::string_view k) {
    text_ += fmt::format("{}{}:\n", pad(), k);
    ++depth_;
  }
  void close() { --depth_; }
  void blank() { text_ += "\n"; }
  void comment(std::string_view c) { text_ += fmt::format("{}# {}\n", pad(), c); }
  const std::string& text() const { return text_; }

private:
  std::string pad() const { return std::string(static_cast<std::size_t>(2 * depth_), ' '); }
  std::string text_;
  int depth_ = 0;
};

std::string amp_name(Dtype d) {
  switch (d) {
    case Dtype::bf16: return "bf16";
    case Dtype::fp16: return "fp16";
    default: return "fp32";
  }
}

}  // namespace

std::optional<std::string> foundry_hf_id(const ModelSpec& m) {
  // Canonical hub ids; each must map back to the same shipped model through the importer's
  // table (shipped_model_for_hf_id), which the check below enforces.
  static const std::pair<std::string_view, std::string_view> kIds[] = {
      {"llama3.1-8b", "meta-llama/Llama-3.1-8B"},   {"llama3.1-70b", "meta-llama/Llama-3.1-70B"},
      {"llama3.1-405b", "meta-llama/Llama-3.1-405B"}, {"llama2-7b", "meta-llama/Llama-2-7b-hf"},
      {"llama2-13b", "meta-llama/Llama-2-13b-hf"},  {"llama2-70b", "meta-llama/Llama-2-70b-hf"},
      {"mixtral-8x7b", "mistralai/Mixtral-8x7B-v0.1"},
  };
  for (const auto& [name, id] : kIds)
    if (m.name == name && shipped_model_for_hf_id(id) == std::string(name)) return std::string(id);
  return std::nullopt;
}

bool foundry_uses_fsdp2(const RunConfig& rc) {
  const RuntimeInfo& r = runtime_info(rc.plan);
  return r.framework == Framework::llm_foundry && r.traits.fsdp_version == 2;
}

namespace {

// What llm-foundry cannot express of the layout, sharding and recompute.
void refuse_unexpressible_layout(const RunConfig& rc, bool fsdp2) {
  const Plan& p = rc.plan;
  const Mesh& m = p.mesh;
  if (m.pp > 1) refuse(kRt, "pp", "llm-foundry has no pipeline parallelism");
  if (m.cp > 1) refuse(kRt, "cp", "llm-foundry has no context parallelism");
  if (m.ep > 1) refuse(kRt, "ep", "llm-foundry's MegaBlocks expert parallelism is not emitted by meshplan");
  if (m.tp > 1) {
    if (p.tp_style != TpStyle::mlp_only)
      refuse(kRt, "tp_style", "llm-foundry's only TP strategy ('ffn') shards the MLP; full TP cannot be expressed");
    if (p.sequence_parallel) refuse(kRt, "sequence_parallel", "the 'ffn' TP strategy has no sequence parallelism");
    if (rc.model.moe.enabled()) refuse(kRt, "tp", "llm-foundry rejects TP for MoE FFNs");
    if (fsdp2) refuse(kRt, "tp", "meshplan emits llm-foundry TP only on Composer's FSDP1 path");
    if (m.dp_shard < 2) refuse(kRt, "dp_shard", "Composer TP needs data_parallel_shard_degree >= 2 (torch requirement)");
  }
  if (p.sharding == Sharding::zero1)
    refuse(kRt, "sharding", "Composer has no optimizer-only sharding (ZeRO-1); use zero2 (SHARD_GRAD_OP) or zero3");
  if (p.state_dtype != Dtype::fp32)
    refuse(kRt, "state_dtype", "Composer keeps fp32 master params and optimizer state in every mode");
  if (p.param_offload) refuse(kRt, "param_offload", "Composer's FSDP1 raises on cpu_offload ('not supported yet')");
  if (p.ac == AcMode::selective_layer && p.ac_every_n == 1) {
    // every block = full; accepted below as full
  } else if (p.ac != AcMode::none && p.ac != AcMode::full) {
    refuse(kRt, "ac", fmt::format("'{}': Composer's activation_checkpointing wraps every block (full) or none",
                                  to_string(p.ac)));
  }
  const bool ac = p.ac != AcMode::none;
  if (fsdp2 && ac && p.ac_reentrant) refuse(kRt, "ac_reentrant", "Composer's FSDP2 path is always non-reentrant");
  if (p.optimizer == Optimizer::adamw8bit) refuse(kRt, "optimizer", "8-bit AdamW is not an llm-foundry optimizer");
  if (fsdp2 && p.sharding == Sharding::none) refuse(kRt, "sharding", "FSDP2 has no NO_SHARD; use FSDP1 (composer-fsdp1)");
  if (fsdp2 && m.dp_replicate > 1) refuse(kRt, "dp_replicate", "Composer's FSDP2 path does not read the mesh degrees (no HSDP)");
  if (fsdp2 && p.keep_low_precision_grads) refuse(kRt, "keep_low_precision_grads", "an FSDP1-only key");
}

// The trainer's `precision` and FSDP's mixed_precision name (empty: written as dtypes).
struct FoundryPrecision {
  std::string precision;
  std::string mp_name;
};

// Precision: trainer autocast, then FSDP's MixedPrecision relative to it
// (composer/distributed/mosaic_parallelism.py::get_mixed_precision).
FoundryPrecision foundry_precision(const Plan& p) {
  FoundryPrecision out;
  if (p.fp8 == Fp8Recipe::te_delayed) {
    if (p.compute_dtype != Dtype::bf16) refuse(kRt, "compute_dtype", "amp_fp8 runs its non-FP8 ops in bf16");
    out.precision = "amp_fp8";
  } else if (p.fp8 != Fp8Recipe::none) {
    refuse(kRt, "fp8", fmt::format("'{}': Composer's only FP8 mode is amp_fp8 (Transformer Engine, delayed scaling)",
                                   to_string(p.fp8)));
  } else if (p.compute_dtype == Dtype::bf16) out.precision = "amp_bf16";
  else if (p.compute_dtype == Dtype::fp16) out.precision = "amp_fp16";
  else if (p.compute_dtype == Dtype::fp32) out.precision = "fp32";
  else refuse(kRt, "compute_dtype", fmt::format("{} is not a Composer precision", to_string(p.compute_dtype)));
  if (p.fp8_all_gather) refuse(kRt, "fp8_all_gather", "Composer has no FSDP float8 all-gather");
  if (p.fp8_attention)
    refuse(kRt, "fp8_attention", "llm-foundry's attention is flash-attn or torch SDPA, which amp_fp8 leaves in 16-bit");
  const Dtype amp = p.compute_dtype;
  if (p.param_dtype == Dtype::fp32 && p.reduce_dtype == Dtype::fp32) out.mp_name = "FULL";
  else if (p.param_dtype == amp && p.reduce_dtype == Dtype::fp32) out.mp_name = "DEFAULT";
  else if (p.param_dtype == amp && p.reduce_dtype == amp) out.mp_name = "PURE";
  for (Dtype d : {p.param_dtype, p.reduce_dtype})
    if (d != Dtype::fp32 && d != Dtype::bf16 && d != Dtype::fp16)
      refuse(kRt, "param_dtype", fmt::format("{} is not an FSDP mixed-precision dtype", to_string(d)));
  return out;
}

// Batch (llm-foundry config_utils.py::calculate_batch_size_info): the device batch is global /
// world (TP ranks included), accumulation ceil(device / micro); meshplan emits only exact splits.
std::int64_t foundry_device_batch(const RunConfig& rc) {
  const Job& j = rc.job;
  if (j.global_batch % rc.n_gpus != 0)
    refuse(kRt, "global_batch", fmt::format("{} is not divisible by the world size {} (llm-foundry divides by world, "
                                            "not by the data-parallel degree)", j.global_batch, rc.n_gpus));
  const std::int64_t device = j.global_batch / rc.n_gpus;
  if (device != j.micro_batch * j.grad_accum)
    refuse(kRt, "micro_batch", fmt::format("device batch {} (global {} / {} GPUs) != micro {} x accumulation {}", device,
                                           j.global_batch, rc.n_gpus, j.micro_batch, j.grad_accum));
  if (j.pp_microbatches > 0) refuse(kRt, "pp_microbatches", "set without pipeline parallelism");
  return device;
}

// A model without a shipped hub id is written as an MPT: what MPT cannot describe is refused.
void refuse_unexpressible_model(const RunConfig& rc, const std::optional<std::string>& hf) {
  const ModelSpec& model = rc.model;
  const Plan& p = rc.plan;
  if (!hf) {
    if (model.moe.enabled()) refuse(kRt, "model", fmt::format("'{}' is MoE and has no shipped hf_causal_lm id", model.name));
    if (model.head_dim * model.n_heads != model.d_model)
      refuse(kRt, "model", fmt::format("'{}': MPT derives head_dim = d_model / n_heads, but head_dim is {}", model.name, model.head_dim));
    if (model.mlp == MlpKind::relu2) refuse(kRt, "model", "MPT has no squared-ReLU MLP (mptmlp or mptglu)");
    if (model.norm == NormKind::layernorm && model.norm_bias != model.linear_bias)
      refuse(kRt, "model", "MPT's no_bias switches linear and LayerNorm biases together");
    if (model.pos_emb == PosEmb::learned && rc.job.seq_len > model.max_seq_len)
      refuse(kRt, "seq_len", fmt::format("{} exceeds the learned position table of {} rows", rc.job.seq_len, model.max_seq_len));
    if (model.vocab < 50277)
      refuse(kRt, "model", fmt::format("vocab {} is smaller than the gpt-neox-20b tokenizer (50277) MPT presets use", model.vocab));
  } else if (!p.flash_attention || p.dropout) {
    refuse(kRt, p.dropout ? "dropout" : "flash_attention",
           "hf_causal_lm models are emitted with flash attention and without dropout");
  }
}

void write_mpt_model(Yaml& y, const ModelSpec& model, const Plan& p) {
  y.key("name", "mpt_causal_lm");
  y.key("init_device", "meta");
  y.key("d_model", model.d_model);
  y.key("n_heads", model.n_heads);
  y.key("n_layers", model.n_layers);
  if (model.ffn_hidden % model.d_model == 0) y.key("expansion_ratio", model.ffn_hidden / model.d_model);
  y.key("max_seq_len", model.max_seq_len);
  y.key("vocab_size", model.vocab);
  y.flag("no_bias", !model.linear_bias);
  y.key("norm_type", model.norm == NormKind::rmsnorm ? "rmsnorm" : "low_precision_layernorm");
  y.flag("learned_pos_emb", model.pos_emb == PosEmb::learned);
  if (!model.tied_embeddings) y.flag("tie_word_embeddings", false);
  if (p.dropout) {
    y.key("resid_pdrop", "0.1");
    y.key("emb_pdrop", "0.1");
  }
  y.open("attn_config");
  y.key("attn_impl", p.flash_attention ? "flash" : "torch");
  if (model.n_kv_heads == 1 && model.n_heads > 1) {
    y.key("attn_type", "multiquery_attention");
  } else if (model.n_kv_heads != model.n_heads) {
    y.key("attn_type", "grouped_query_attention");
    y.key("kv_n_heads", model.n_kv_heads);
  }
  if (model.pos_emb == PosEmb::alibi) y.flag("alibi", true);
  if (model.pos_emb == PosEmb::rope) y.flag("rope", true);
  if (p.dropout) y.key("attn_pdrop", "0.1");
  y.close();
  if (model.mlp == MlpKind::swiglu || model.ffn_hidden % model.d_model != 0) {
    y.open("ffn_config");
    y.key("ffn_type", model.mlp == MlpKind::swiglu ? "mptglu" : "mptmlp");
    if (model.ffn_hidden % model.d_model != 0) y.key("ffn_hidden_size", model.ffn_hidden);
    y.close();
  }
  // Written explicitly: the simulated loss kernel and its memory depend on it.
  y.key("loss_fn", p.fused_cross_entropy ? "fused_crossentropy" : "torch_crossentropy");
}

void write_model(Yaml& y, const RunConfig& rc, const std::optional<std::string>& hf) {
  y.open("model");
  if (hf) {
    y.key("name", "hf_causal_lm");
    y.key("init_device", "meta");
    y.key("pretrained_model_name_or_path", *hf);
    y.flag("pretrained", false);
    y.flag("use_auth_token", true);
    y.flag("use_flash_attention_2", true);
  } else {
    write_mpt_model(y, rc.model, rc.plan);
  }
  y.close();
  y.blank();
  y.open("tokenizer");
  y.key("name", hf ? *hf : std::string("EleutherAI/gpt-neox-20b"));
  y.open("kwargs");
  y.key("model_max_length", rc.job.seq_len);
  y.close();
  y.close();
  y.blank();
}

// The data, schedule and optimizer: values a user replaces, but a complete, runnable file.
void write_data_and_optimizer(Yaml& y, const RunConfig& rc) {
  y.open("train_loader");
  y.key("name", "text");
  y.open("dataset");
  y.key("local", "./my-copy-c4");
  y.key("split", "train");
  y.flag("shuffle", true);
  y.key("max_seq_len", rc.job.seq_len);
  y.key("shuffle_seed", 17);
  y.close();
  y.flag("drop_last", true);
  y.key("num_workers", 8);
  y.close();
  y.blank();
  y.open("scheduler");
  y.key("name", "cosine_with_warmup");
  y.key("t_warmup", "100ba");
  y.key("alpha_f", "0.1");
  y.close();
  y.open("optimizer");
  if (rc.plan.optimizer == Optimizer::sgd) {
    y.key("name", "decoupled_sgdw");
    y.key("lr", "0.01");
    y.key("momentum", "0.9");
    y.key("weight_decay", "0.0");
  } else {
    y.key("name", "decoupled_adamw");
    y.key("lr", "1.2e-4");
    y.key("betas", "[0.9, 0.95]");
    y.key("eps", "1.0e-08");
    y.key("weight_decay", "0.0");
  }
  y.close();
  y.open("algorithms");
  y.open("gradient_clipping");
  y.key("clipping_type", "norm");
  y.key("clipping_threshold", "1.0");
  y.close();
  y.close();
  y.blank();
}

void write_trainer(Yaml& y, const RunConfig& rc, std::int64_t device, const std::string& precision) {
  const Job& j = rc.job;
  const Plan& p = rc.plan;
  y.key("max_duration", "1000ba");
  y.key("eval_interval", "1000ba");
  if (rc.checkpoint_interval_steps > 0) {
    y.comment("Young/Daly checkpoint interval for this job's failure rate (docs/goodput.md), into $CHECKPOINT_DIR "
              "(launch.sh requires it)");
    y.key("save_folder", "${oc.env:CHECKPOINT_DIR,./checkpoints}");
    y.key("save_interval", fmt::format("{}ba", rc.checkpoint_interval_steps));
  }
  y.flag("eval_first", false);
  y.key("global_train_batch_size", j.global_batch);
  y.comment(fmt::format("device batch = {} / {} GPUs = {} = micro-batch {} x {} accumulation steps", j.global_batch,
                        rc.n_gpus, device, j.micro_batch, j.grad_accum));
  y.key("seed", 17);
  y.key("device_eval_batch_size", j.micro_batch);
  y.key("device_train_microbatch_size", j.micro_batch);
  y.key("precision", precision);
  // An empty map turns torch.compile on with Composer's defaults (None, the default, is off).
  // mode reduce-overhead: torch.compile captures CUDA graphs.
  if (p.cuda_graphs) y.key("compile_config", "{mode: reduce-overhead}");
  else if (p.compile) y.key("compile_config", "{}");
  y.blank();
}

void write_fsdp_config(Yaml& y, const Plan& p, bool fsdp2, const std::string& mp_name) {
  const Mesh& m = p.mesh;
  y.open("fsdp_config");
  if (fsdp2) {
    // FSDP2Config (composer/utils/parallelism.py): the FSDP1-only keys would be dropped with a
    // warning, so none are written.
    y.flag("reshard_after_forward", p.sharding == Sharding::zero3 && p.reshard_after_forward);
  } else {
    const bool hybrid = m.dp_replicate > 1 && p.sharding != Sharding::none;
    std::string strategy;
    switch (p.sharding) {
      case Sharding::zero3: strategy = hybrid ? "HYBRID_SHARD" : "FULL_SHARD"; break;
      case Sharding::zero2: strategy = hybrid ? "_HYBRID_SHARD_ZERO2" : "SHARD_GRAD_OP"; break;
      default: strategy = "NO_SHARD"; break;
    }
    y.key("sharding_strategy", strategy);
    if (hybrid) {
      // HSDP is decided by the 2-D mesh (Composer dist_strategy.py): replicate across groups, shard within.
      y.key("data_parallel_replicate_degree", m.dp_replicate);
      y.key("data_parallel_shard_degree", m.dp_shard);
    } else {
      // Without sharding the split of the data-parallel degree is moot: one flat dimension.
      y.key("data_parallel_shard_degree", p.sharding == Sharding::none ? m.dp() : m.dp_shard);
    }
  }
  if (mp_name.empty()) {
    y.open("mixed_precision");
    y.key("param_dtype", amp_name(p.param_dtype));
    y.key("reduce_dtype", amp_name(p.reduce_dtype));
    y.key("buffer_dtype", amp_name(p.param_dtype));
    y.close();
  } else {
    y.key("mixed_precision", mp_name);
  }
  const bool ac = p.ac != AcMode::none;
  y.flag("activation_checkpointing", ac);
  if (ac && !fsdp2) y.flag("activation_checkpointing_reentrant", p.ac_reentrant);
  y.flag("activation_cpu_offload", p.act_offload);
  if (!fsdp2) {
    y.flag("keep_low_precision_grads", p.keep_low_precision_grads);
    y.flag("limit_all_gathers", p.limit_all_gathers);
    y.flag("forward_prefetch", p.forward_prefetch);
    y.key("forward_prefetch_limit", p.forward_prefetch_limit);
    y.key("backward_prefetch", p.backward_prefetch == BackwardPrefetch::none ? "NONE" : std::string(to_string(p.backward_prefetch)));
    y.key("backward_prefetch_limit", p.backward_prefetch_limit);
    y.flag("use_orig_params", true);
  }
  y.key("state_dict_type", "sharded");
  y.close();
  if (m.tp > 1) {
    y.open("tp_config");
    y.key("strategy", "ffn");
    y.key("tensor_parallel_degree", m.tp);
    y.close();
  }
  y.blank();
}

void write_logging(Yaml& y) {
  y.flag("progress_bar", false);
  y.flag("log_to_console", true);
  y.key("console_log_interval", "1ba");
  y.open("callbacks");
  y.open("speed_monitor");
  y.key("window_size", 10);
  y.close();
  y.key("lr_monitor", "{}");
  y.key("memory_monitor", "{}");
  y.key("runtime_estimator", "{}");
  y.close();
}

}  // namespace

std::string emit_foundry_yaml(const RunConfig& rc) {
  emit::require_resolved(rc, kRt);
  const bool fsdp2 = foundry_uses_fsdp2(rc);
  // Every refusal before anything is written, in the order a user fixes them: layout, precision,
  // batch, model.
  refuse_unexpressible_layout(rc, fsdp2);
  const FoundryPrecision precision = foundry_precision(rc.plan);
  const std::int64_t device = foundry_device_batch(rc);
  const auto hf = foundry_hf_id(rc.model);
  refuse_unexpressible_model(rc, hf);

  Yaml y;
  y.comment(fmt::format("llm-foundry training YAML written by meshplan for {} on {} GPUs ({}).", rc.model.name,
                        rc.n_gpus, fsdp2 ? "Composer FSDP2: launch with FSDP_VERSION=2" : "Composer FSDP1"));
  y.comment("Top-level keys are checked by llm-foundry; fsdp_config keys are not: keep the spellings.");
  y.key("max_seq_len", rc.job.seq_len);
  y.key("run_name", "meshplan-" + rc.model.name);
  y.blank();
  write_model(y, rc, hf);
  write_data_and_optimizer(y, rc);
  write_trainer(y, rc, device, precision.precision);
  write_fsdp_config(y, rc.plan, fsdp2, precision.mp_name);
  write_logging(y);
  return y.text();
}

}  // namespace meshplan

// torchtitan emitter. Values follow the spellings torchtitan/config/job_config.py accepts; the
// layout of the file follows the shipped llama3 train_configs of each pinned commit.
#include "emit/torchtitan_emitter.hpp"

#include "spec/pipeline_split.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <utility>

#include "emit/torchtitan_keys.hpp"

namespace meshplan {

namespace {

constexpr std::string_view kRt = "torchtitan";
using emit::refuse;

// Preset hyper-parameters of torchtitan's llama3 train_configs (torchtitan/models/llama3/
// train_configs/llama3_{8b,70b,405b}.toml at 238fa9953e4a): they do not change memory or time,
// but a launchable file needs them and these are what torchtitan ships.
struct FlavorInfo {
  std::string flavor;      // [model] flavor
  std::string registry;    // registry-era --config name
  std::string hf_assets;   // early-2026 hf_assets_path
  std::string lr;          // TOML float text
  int warmup_steps;
  int steps;
  // What the preset itself sets; the registry era can only keep these (see registry_args).
  AcMode preset_ac;
  bool preset_compile;
  bool preset_float8;
  std::string model_name = "llama3";  // [model] name: the torchtitan model family
  std::string title = "Llama 3";      // for the description
  // Whether lr / warmup / steps above are the family's shipped preset; otherwise they are
  // meshplan's (no effect on memory or time) and the registry era, which keeps presets, is refused.
  bool preset_pinned = true;
};

FlavorInfo flavor_info(const ModelSpec& m) {
  // Name and shape both: a --model override that reuses a shipped name with another shape must
  // not be launched as the shipped flavor.
  if (m.name == "llama3.1-8b" && m.n_layers == 32 && m.d_model == 4096)
    return {"8B", "llama3_8b", "./assets/hf/Llama-3.1-8B", "3e-4", 200, 1000, AcMode::selective_op, false, false};
  if (m.name == "llama3.1-70b" && m.n_layers == 80 && m.d_model == 8192)
    return {"70B", "llama3_70b", "./assets/hf/Llama-3.1-70B", "1.5e-4", 200, 1000, AcMode::full, false, false};
  if (m.name == "llama3.1-405b" && m.n_layers == 126 && m.d_model == 16384)
    return {"405B", "llama3_405b", "./assets/hf/Llama-3.1-405B", "8e-5", 600, 3000, AcMode::full, true, true};
  // torchtitan's deepseek_v3 family (torchtitan/models/deepseek_v3, flavor "671B": 61 layers, 3
  // dense, 256 routed + 1 shared expert, top-8, MLA ranks 1536 / 512, no MTP module), the MoE model
  // whose flavor matches a shipped model. Its train_config values are not pinned in meshplan's
  // references, so the optimizer values are meshplan's (as the Megatron emitter's are).
  if (m.name == "deepseek-v3" && m.n_layers == 61 && m.d_model == 7168 && m.moe.n_experts == 256 && m.n_mtp_layers == 0)
    return {.flavor = "671B", .registry = "", .hf_assets = "./assets/hf/DeepSeek-V3", .lr = "3e-4",
            .warmup_steps = 100, .steps = 1000, .preset_ac = AcMode::full, .preset_compile = false,
            .preset_float8 = false, .model_name = "deepseek_v3", .title = "DeepSeek-V3", .preset_pinned = false};
  refuse(kRt, "model",
         fmt::format("'{}' has no torchtitan flavor (llama3 8B, 70B, 405B are llama3.1-8b, llama3.1-70b, "
                     "llama3.1-405b; deepseek_v3 671B is deepseek-v3); torchtitan builds models from its own "
                     "flavor tables", m.name));
}

std::string quoted(std::string_view s) { return fmt::format("\"{}\"", s); }
std::string boolean(bool b) { return b ? "true" : "false"; }
std::string torch_dtype(Dtype d) { return d == Dtype::bf16 ? "bfloat16" : "float32"; }

std::string schedule_name(PipelineSchedule s) {
  switch (s) {
    case PipelineSchedule::gpipe: return "GPipe";
    case PipelineSchedule::one_f_one_b: return "1F1B";
    case PipelineSchedule::interleaved_1f1b: return "Interleaved1F1B";
  }
  return "1F1B";
}

// Everything the plan asks for, checked and translated once for both eras.
struct Settings {
  FlavorInfo info;
  std::int64_t local_batch = 0;       // training.local_batch_size
  std::string reshard;                // default | always | never
  bool fsdp = false;                  // dp_shard x cp > 1
  std::string ac_mode, ac_option;     // activation_checkpoint.mode / selective_ac_option ("" = none)
  std::string converter_kind;         // "" | float8 | mx
  std::string float8_recipe;          // "" (tensorwise default) | rowwise
};

// Expert, tensor and async-tensor parallelism as torchtitan's parallel_dims accepts them.
void check_parallelism(const RunConfig& rc) {
  const Plan& p = rc.plan;
  const Mesh& m = p.mesh;
  if (m.ep > 1) {
    if (!rc.model.moe.enabled())
      refuse(kRt, "ep", fmt::format("{} is dense; expert parallelism has nothing to shard", rc.model.name));
    // torchtitan/distributed/parallel_dims.py: experts are tensor-parallel over 1 or tp ranks; EP
    // borrows all of cp (and of tp when etp is 1) and part of dp_shard, never dp_replicate.
    const int etp = m.expert_tp();
    if (etp != 1 && etp != m.tp)
      refuse(kRt, "etp", fmt::format("expert tensor parallel {} must be 1 or tp {}", etp, m.tp));
    const std::int64_t borrowed = static_cast<std::int64_t>(m.cp) * (etp == 1 ? m.tp : 1);
    const std::int64_t pool = static_cast<std::int64_t>(m.dp_shard) * borrowed;
    if (m.ep % borrowed != 0 || pool % m.ep != 0)
      refuse(kRt, "ep", fmt::format("expert parallel {} must be a multiple of cp{} = {} and divide dp_shard x cp{} = {} "
                                    "(torchtitan's EP borrows no dp_replicate ranks)", m.ep,
                                    etp == 1 ? " x tp" : "", borrowed, etp == 1 ? " x tp" : "", pool));
  }
  if (p.cuda_graphs) refuse(kRt, "cuda_graphs", "torchtitan's training loop has no CUDA-graph option");
  if (m.tp > 1) {
    if (p.tp_style != TpStyle::full)
      refuse(kRt, "tp_style", "torchtitan's TP plan shards attention and MLP; MLP-only TP is llm-foundry's");
    if (!p.sequence_parallel)
      refuse(kRt, "sequence_parallel", "torchtitan always pairs TP with sequence parallelism (apply_tp)");
  }
  if (p.async_tp && (m.tp == 1 || !p.compile))
    refuse(kRt, "async_tp", "async TP takes effect only with tp > 1 and compile");
}

// FSDP2 shards over dp_shard x cp; with no such dimension the model is replicated (DDP).
void check_sharding(const RunConfig& rc, Settings& s) {
  const Plan& p = rc.plan;
  const Mesh& m = p.mesh;
  s.fsdp = static_cast<std::int64_t>(m.dp_shard) * m.cp > 1;
  if (s.fsdp) {
    if (p.sharding == Sharding::none)
      refuse(kRt, "sharding", fmt::format("torchtitan always shards over dp_shard x cp = {}; for DDP put the "
                                          "data-parallel degree in dp_replicate", m.dp_shard * m.cp));
    if (p.sharding == Sharding::zero1)
      refuse(kRt, "sharding", "torchtitan has no ZeRO-1 (optimizer-only sharding); use zero2 or zero3");
    // zero2 is FSDP2 without resharding after forward; zero3 may keep params too (PP default).
    const bool reshard = p.sharding == Sharding::zero3 && p.reshard_after_forward;
    const bool dflt = m.pp == 1;  // torchtitan: "default" reshards unless PP
    s.reshard = reshard == dflt ? "default" : (reshard ? "always" : "never");
  } else {
    if (p.sharding != Sharding::none)
      refuse(kRt, "sharding", fmt::format("{} needs a shard group, but dp_shard x cp is 1", to_string(p.sharding)));
    s.reshard = "default";
  }
}

// Precision: MixedPrecisionPolicy(param, reduce) + training.dtype, and the float8 / mx converter.
void check_precision(const RunConfig& rc, Settings& s) {
  const Plan& p = rc.plan;
  if (p.reduce_dtype != Dtype::fp32)
    refuse(kRt, "reduce_dtype", "torchtitan's mixed_precision_reduce accepts only float32");
  if (p.param_dtype != Dtype::bf16 && p.param_dtype != Dtype::fp32)
    refuse(kRt, "param_dtype", fmt::format("{} is not accepted (bfloat16 or float32)", to_string(p.param_dtype)));
  if (p.compute_dtype != p.param_dtype)
    refuse(kRt, "compute_dtype", "torchtitan computes in the FSDP param dtype (mixed_precision_param)");
  if (p.state_dtype != Dtype::fp32 && p.state_dtype != Dtype::bf16)
    refuse(kRt, "state_dtype", fmt::format("{} is not accepted (training.dtype float32 or bfloat16)", to_string(p.state_dtype)));
  if (p.state_dtype == Dtype::bf16 && p.param_dtype != Dtype::bf16)
    refuse(kRt, "param_dtype", "pure-bf16 state (training.dtype bfloat16) computes in bf16");
  if (p.keep_low_precision_grads) refuse(kRt, "keep_low_precision_grads", "an FSDP1 option; FSDP2 has none");

  switch (p.fp8) {
    case Fp8Recipe::none: break;
    case Fp8Recipe::torchao_tensorwise: s.converter_kind = "float8"; break;
    case Fp8Recipe::torchao_rowwise: s.converter_kind = "float8"; s.float8_recipe = "rowwise"; break;
    case Fp8Recipe::mxfp8: s.converter_kind = "mx"; break;
    default:
      refuse(kRt, "fp8", fmt::format("{} is a Transformer Engine / NVFP4 recipe; torchtitan's converters are "
                                     "torchao float8 (tensorwise, rowwise) and mx", to_string(p.fp8)));
  }
  if (p.fp8_all_gather && p.fp8 != Fp8Recipe::torchao_tensorwise)
    refuse(kRt, "fp8_all_gather", "float8 all-gather works only with the tensorwise float8 recipe");
  if (p.fp8_all_gather && !s.fsdp) refuse(kRt, "fp8_all_gather", "needs FSDP (dp_shard x cp > 1)");
}

// Activation checkpointing, and what torchtitan's llama3 has no option for.
void check_recompute_and_features(const RunConfig& rc, Settings& s) {
  const Plan& p = rc.plan;
  switch (p.ac) {
    case AcMode::none: s.ac_mode = "none"; break;
    case AcMode::full: s.ac_mode = "full"; break;
    case AcMode::selective_op: s.ac_mode = "selective"; s.ac_option = "op"; break;
    case AcMode::selective_layer:
      if (p.ac_every_n <= 0) refuse(kRt, "ac_every_n", fmt::format("must be positive, got {}", p.ac_every_n));
      s.ac_mode = "selective";
      s.ac_option = std::to_string(p.ac_every_n);
      break;
    case AcMode::selective_attn:
      refuse(kRt, "ac", "attention-only recompute is Megatron's selective mode; torchtitan has full, per-layer "
                        "and per-op");
  }
  if (p.ac != AcMode::none && p.ac_reentrant)
    refuse(kRt, "ac_reentrant", "torchtitan always uses non-reentrant checkpoint_wrapper");
  if (p.act_offload) refuse(kRt, "act_offload", "torchtitan has no activation offload option");
  if (p.param_offload && !s.fsdp) refuse(kRt, "param_offload", "CPU offload is an FSDP policy; needs dp_shard x cp > 1");
  if (!p.flash_attention) refuse(kRt, "flash_attention", "torchtitan's llama3 always runs fused SDPA attention");
  if (p.dropout) refuse(kRt, "dropout", "torchtitan's llama3 has no dropout");
  if (p.optimizer != Optimizer::adamw)
    refuse(kRt, "optimizer", fmt::format("{} is not one of torchtitan's optimizers (AdamW)", to_string(p.optimizer)));
}

// Pipeline: vpp stages per rank need a multi-stage schedule; the layer split is explicit.
void check_pipeline(const RunConfig& rc) {
  const Plan& p = rc.plan;
  const Mesh& m = p.mesh;
  if (m.pp > 1) {
    if (m.vpp > 1 && p.schedule != PipelineSchedule::interleaved_1f1b)
      refuse(kRt, "schedule", fmt::format("vpp {} needs Interleaved1F1B, not {}", m.vpp, schedule_name(p.schedule)));
    if (m.vpp == 1 && p.schedule == PipelineSchedule::interleaved_1f1b)
      refuse(kRt, "vpp", "Interleaved1F1B runs at least 2 stages per rank (vpp >= 2)");
    // Any split that places the layers is written as the stages' layers it gives (write_pipeline_stages).
    if (SplitError why; !split_pipeline(rc.model.n_layers, m.pp, m.vpp, p.pipeline_split, &why))
      refuse(kRt, p.pipeline_split.given() ? "pipeline_split" : "vpp",
             fmt::format("{} layers do not split into pp x vpp = {} stages: {}", rc.model.n_layers, m.pp * m.vpp,
                         why.reason));
  } else if (m.vpp != 1) {
    refuse(kRt, "vpp", "virtual stages need pp > 1");
  }
}

// Batch (train.py): local_batch_size per DP rank per step of accumulation; with PP it is split
// into local / pipeline_parallel_microbatch_size microbatches, one schedule run per local batch.
void check_batch(const RunConfig& rc, Settings& s) {
  const Mesh& m = rc.plan.mesh;
  const Job& j = rc.job;
  const std::int64_t dp = m.dp();
  if (j.global_batch != dp * j.micro_batch * j.grad_accum)
    refuse(kRt, "global_batch", fmt::format("{} != data-parallel {} x micro {} x accumulation {}", j.global_batch, dp,
                                            j.micro_batch, j.grad_accum));
  if (m.pp > 1) {
    const std::int64_t per_run = j.pp_microbatches > 0 ? j.pp_microbatches : j.grad_accum;
    if (j.grad_accum % per_run != 0)
      refuse(kRt, "pp_microbatches", fmt::format("{} micro-batches per pipeline run do not divide the accumulation {}",
                                                 per_run, j.grad_accum));
    s.local_batch = j.micro_batch * per_run;
  } else {
    if (j.pp_microbatches > 0) refuse(kRt, "pp_microbatches", "set without pipeline parallelism");
    s.local_batch = j.micro_batch;
  }
  const std::int64_t seq_div = (m.cp > 1 ? 2 * m.cp : 1) * m.tp;
  if (j.seq_len % seq_div != 0)
    refuse(kRt, "seq_len", fmt::format("{} is not divisible by {} (torchtitan needs seq % (2 x cp x tp) == 0)", j.seq_len, seq_div));
}

// What torchtitan cannot express is refused, in the order of the sections of its job config.
Settings check(const RunConfig& rc) {
  emit::require_resolved(rc, kRt);
  Settings s;
  s.info = flavor_info(rc.model);
  check_parallelism(rc);
  check_sharding(rc, s);
  check_precision(rc, s);
  check_recompute_and_features(rc, s);
  check_pipeline(rc);
  check_batch(rc, s);
  return s;
}

// A TOML document built in order, every key checked against the pinned version's list.
class TomlDoc {
public:
  explicit TomlDoc(TorchtitanVersion v) : v_(v) {}
  void section(std::string name) {
    text_ += fmt::format("{}[{}]\n", text_.empty() ? "" : "\n", name);
    section_ = std::move(name);
  }
  void key(std::string_view k, const std::string& value, std::string_view comment = {}) {
    const std::string dotted = fmt::format("{}.{}", section_, k);
    if (!torchtitan_key_known(v_, dotted))
      refuse(kRt, dotted, fmt::format("internal: not a key of torchtitan {}", to_string(v_)));
    text_ += fmt::format("{} = {}{}\n", k, value, comment.empty() ? std::string() : fmt::format("  # {}", comment));
  }
  void comment(std::string_view c) { text_ += fmt::format("# {}\n", c); }
  const std::string& text() const { return text_; }

private:
  TorchtitanVersion v_;
  std::string text_;
  std::string section_;
};

std::string string_array(const std::vector<std::string>& v) {
  std::string out = "[";
  for (std::size_t i = 0; i < v.size(); ++i) out += fmt::format("{}{}", i ? ", " : "", quoted(v[i]));
  return out + "]";
}

}  // namespace

std::string torchtitan_flavor(const ModelSpec& m) { return flavor_info(m).flavor; }

namespace {

// The job, metrics, model and optimizer sections: what the run is.
void write_job_and_model(TomlDoc& d, const Settings& s, bool early) {
  d.section("job");
  d.key("dump_folder", quoted("./outputs"));
  d.key("description", quoted(fmt::format("{} {} training (meshplan plan)", s.info.title, s.info.flavor)));

  d.section("metrics");
  d.key("log_freq", "10");

  d.section("model");
  d.key("name", quoted(s.info.model_name));
  d.key("flavor", quoted(s.info.flavor));
  if (early) d.key("hf_assets_path", quoted(s.info.hf_assets));
  else d.key("tokenizer_path", quoted("./assets/tokenizer/original/tokenizer.model"));
  if (!s.converter_kind.empty()) {
    // Registered converter names changed with the quantization refactor 8a2686c4a
    // (torchtitan/components/quantization/{float8,mx}.py).
    const std::string name = early ? "quantize.linear." + s.converter_kind : s.converter_kind;
    d.key("converters", string_array({name}));
  }

  d.section("optimizer");
  if (!s.info.preset_pinned)
    d.comment(fmt::format("lr, warmup_steps and steps are meshplan's values (torchtitan's {} preset is not pinned); "
                          "they change neither memory nor time", s.info.model_name));
  d.key("name", quoted("AdamW"));
  d.key("lr", s.info.lr);
  d.key("eps", "1e-8");

  d.section("lr_scheduler");
  d.key("warmup_steps", std::to_string(s.info.warmup_steps));
}

void write_training(TomlDoc& d, const RunConfig& rc, const Settings& s, bool early) {
  const Plan& p = rc.plan;
  d.section("training");
  d.key("local_batch_size", std::to_string(s.local_batch));
  d.key("global_batch_size", std::to_string(rc.job.global_batch));
  d.key("seq_len", std::to_string(rc.job.seq_len));
  d.key("max_norm", "1.0");
  d.key("steps", std::to_string(s.info.steps));
  d.key("dataset", quoted("c4"));
  if (early) d.key("dtype", quoted(torch_dtype(p.state_dtype)));
  d.key("mixed_precision_param", quoted(torch_dtype(p.param_dtype)));
  d.key("mixed_precision_reduce", quoted("float32"));
  d.key("enable_cpu_offload", boolean(p.param_offload));
  if (!early) d.key("compile", boolean(p.compile));
}

// The modules of each stage by name, as torchtitan's module_fqns_per_model_part lists them (its
// generate_llm_fqn_per_model_part writes the same names): the embedding first, the layers, the
// final norm and the head last.
std::string module_fqns(const std::vector<int>& stage_layers) {
  std::vector<std::string> parts;
  int layer = 0;
  for (std::size_t s = 0; s < stage_layers.size(); ++s) {
    std::vector<std::string> fqns;
    if (s == 0) fqns.push_back("tok_embeddings");
    for (int i = 0; i < stage_layers[s]; ++i) fqns.push_back(fmt::format("layers.{}", layer++));
    if (s + 1 == stage_layers.size()) {
      fqns.push_back("norm");
      fqns.push_back("output");
    }
    parts.push_back(string_array(fqns));
  }
  std::string out = "[";
  for (std::size_t i = 0; i < parts.size(); ++i) out += (i ? ", " : "") + parts[i];
  return out + "]";
}

// The pipeline schedule and how the layers split into stages, in each layout's own keys: the
// early-2026 layout by torchtitan's weighted rule where it gives the plan's stages (the embedding
// and output weighing 0, or 1 each as by default), else each stage's modules by name; the mid-2025
// layout by split points, which place any split.
void write_pipeline_stages(TomlDoc& d, const RunConfig& rc, bool early) {
  const Plan& p = rc.plan;
  const Mesh& m = p.mesh;
  d.key("pipeline_parallel_schedule", quoted(schedule_name(p.schedule)));
  d.key("pipeline_parallel_microbatch_size", std::to_string(rc.job.micro_batch));
  const int stages = m.pp * m.vpp;
  const int layers = rc.model.n_layers;
  const std::vector<int> split = *split_pipeline(layers, m.pp, m.vpp, p.pipeline_split);
  const bool even = split == std::vector<int>(static_cast<std::size_t>(stages), layers / stages);
  const bool end_stages_fewer = split_layers(layers, stages) == split;
  if (early) {
    for (int weight : {0, 1}) {
      const int per = (layers + 2 * weight + stages - 1) / stages;
      if (torchtitan_stage_layers(layers, stages, weight, weight) != split ||
          (layers + 2 * weight + per - 1) / per != stages)
        continue;
      d.key("pipeline_parallel_layers_per_stage", std::to_string(per));
      d.key("pipeline_parallel_first_stage_less_layers", std::to_string(weight));
      d.key("pipeline_parallel_last_stage_less_layers", std::to_string(weight));
      return;
    }
    d.key("module_fqns_per_model_part", module_fqns(split),
          fmt::format("stages of {} layers", fmt::join(split, ", ")));
  } else {
    std::vector<std::string> splits;
    int at = 0;
    for (int i = 0; i + 1 < stages; ++i) {
      at += split[static_cast<std::size_t>(i)];
      splits.push_back(fmt::format("layers.{}", at));
    }
    d.key("pipeline_parallel_split_points", string_array(splits),
          even ? "equal stages" : end_stages_fewer ? "end stages one layer fewer"
                                                   : fmt::format("stages of {} layers", fmt::join(split, ", ")));
  }
}

void write_parallelism(TomlDoc& d, const RunConfig& rc, const Settings& s, bool early) {
  const Plan& p = rc.plan;
  const Mesh& m = p.mesh;
  d.section("parallelism");
  d.key("data_parallel_replicate_degree", std::to_string(m.dp_replicate));
  d.key("data_parallel_shard_degree", std::to_string(m.dp_shard));
  d.key("fsdp_reshard_after_forward", quoted(s.reshard));
  d.key("tensor_parallel_degree", std::to_string(m.tp));
  d.key("enable_async_tensor_parallel", boolean(p.async_tp));
  d.key("pipeline_parallel_degree", std::to_string(m.pp));
  if (m.pp > 1) write_pipeline_stages(d, rc, early);
  d.key("context_parallel_degree", std::to_string(m.cp));
  if (m.ep > 1) {
    d.key("expert_parallel_degree", std::to_string(m.ep));
    d.key("expert_tensor_parallel_degree", std::to_string(m.expert_tp()));  // early-2026 only: MoE models are refused for mid-2025
    if (p.moe_dispatcher == MoeDispatcher::deepep) d.key("expert_parallel_comm_backend", quoted("deepep"));
  }
  if (rc.model.moe.enabled() && rc.model.moe.force_balance) {  // benchmarking: tokens routed evenly
    d.section("debug");
    d.key("moe_force_load_balance", boolean(true));
  }
}

// Checkpointing, activation checkpointing, compile and the float8 converter's section.
void write_checkpoint_to_float8(TomlDoc& d, const RunConfig& rc, const Settings& s, bool early) {
  const Plan& p = rc.plan;
  d.section("checkpoint");
  // On with the plan's interval; the launch scripts set the folder to $CHECKPOINT_DIR.
  d.key(early ? "enable" : "enable_checkpoint", rc.checkpoint_interval_steps > 0 ? "true" : "false");
  d.key("folder", quoted("checkpoint"));
  if (rc.checkpoint_interval_steps > 0)
    d.key("interval", std::to_string(rc.checkpoint_interval_steps), "Young/Daly interval for this job's failure rate (docs/goodput.md)");
  else
    d.key("interval", "500");
  d.key(early ? "last_save_model_only" : "model_weights_only", early ? "true" : "false");
  d.key("export_dtype", quoted("float32"));
  d.key("async_mode", quoted("disabled"));

  d.section("activation_checkpoint");
  d.key("mode", quoted(s.ac_mode));
  if (!s.ac_option.empty()) d.key("selective_ac_option", quoted(s.ac_option));

  if (early) {
    d.section("compile");
    d.key("enable", boolean(p.compile));
    d.key("components", string_array({"model", "loss"}));
  }

  if (s.converter_kind == "float8") {
    d.section(early ? "quantize.linear.float8" : "float8");
    d.key("enable_fsdp_float8_all_gather", boolean(p.fp8_all_gather));
    d.key("precompute_float8_dynamic_scale_for_fsdp", boolean(p.fp8_all_gather));
    if (!s.float8_recipe.empty()) d.key("recipe_name", quoted(s.float8_recipe));
    d.key("filter_fqns", string_array({"output"}), "the LM head stays in bf16, as torchtitan's presets do");
  }
}

}  // namespace

std::string emit_torchtitan_toml(const RunConfig& rc, TorchtitanVersion v) {
  if (v == TorchtitanVersion::registry)
    refuse(kRt, "version", "the registry era (after 9810191bb) has no TOML job files; use emit_torchtitan_registry_args");
  const Settings s = check(rc);
  const Plan& p = rc.plan;
  const Mesh& m = p.mesh;
  const bool early = v == TorchtitanVersion::early_2026;
  if (s.info.model_name != "llama3" && !early)
    refuse(kRt, "model", fmt::format("torchtitan's {} family is emitted for the early-2026 layout (238fa9953e4a) "
                                     "only; its mid-2025 flavors are not pinned", s.info.model_name));
  if (p.state_dtype == Dtype::bf16 && !early)
    refuse(kRt, "state_dtype", "pure-bf16 state needs training.dtype, which the mid-2025 layout does not have");

  TomlDoc d(v);
  d.comment(fmt::format("torchtitan job config for torchtitan commit {} ({} TOML layout), written by meshplan.",
                        to_string(v), early ? "early-2026" : "mid-2025"));
  d.comment(fmt::format("{} GPUs: pp {} x dp_replicate {} x dp_shard {} x cp {} x tp {}. {}", rc.n_gpus, m.pp,
                        m.dp_replicate, m.dp_shard, m.cp, m.tp,
                        early ? "Unknown keys are fatal in this torchtitan (ValueError): edit only the keys present."
                              : "This torchtitan ignores keys it does not know, so a misspelled key is silently "
                                "dropped: edit only the keys present."));
  write_job_and_model(d, s, early);
  write_training(d, rc, s, early);
  write_parallelism(d, rc, s, early);
  write_checkpoint_to_float8(d, rc, s, early);
  return d.text();
}

std::vector<std::string> emit_torchtitan_registry_args(const RunConfig& rc) {
  const Settings s = check(rc);
  if (!s.info.preset_pinned)
    refuse(kRt, "model", fmt::format("the registry era keeps a preset's values, and torchtitan's {} preset is not "
                                     "pinned (torchtitan PR #2386); emit for torchtitan 238fa9953e4a instead",
                                     s.info.model_name));
  const Plan& p = rc.plan;
  const Mesh& m = p.mesh;
  const Job& j = rc.job;
  // Of the registry era (torchtitan PR #2386, commit 9810191bb) only the launch form, the
  // parallelism names and the new TrainingConfig batch fields are pinned. Anything else must
  // already be what the preset does (assumed to be the llama3 train_configs values at 238fa995),
  // or the plan cannot be launched faithfully.
  auto keep = [&](bool same, std::string_view key, const std::string& what) {
    if (!same)
      refuse(kRt, key, fmt::format("{} differs from the {} preset and its registry-era override name is not pinned "
                                   "(torchtitan PR #2386); emit for torchtitan 238fa9953e4a instead", what, s.info.registry));
  };
  keep(p.ac == s.info.preset_ac, "ac", fmt::format("activation checkpointing '{}'", to_string(p.ac)));
  keep(p.compile == s.info.preset_compile, "compile", fmt::format("compile {}", p.compile ? "on" : "off"));
  keep((p.fp8 != Fp8Recipe::none) == s.info.preset_float8 &&
           (p.fp8 == Fp8Recipe::none || (p.fp8 == Fp8Recipe::torchao_tensorwise && p.fp8_all_gather)),
       "fp8", fmt::format("float8 '{}'", to_string(p.fp8)));
  keep(p.param_dtype == Dtype::bf16 && p.state_dtype == Dtype::fp32, "param_dtype",
       "the precision (preset: bfloat16 params, float32 state)");
  keep(!p.param_offload, "param_offload", "CPU offload");
  // The global batch has no pinned registry-era name: one local batch per DP rank per step.
  const std::int64_t per_step = m.pp > 1 ? s.local_batch / j.micro_batch : 1;
  keep(j.grad_accum == per_step, "grad_accum", fmt::format("gradient accumulation ({} local batches per step)",
                                                          j.grad_accum / per_step));

  // Stage counts: the registry era's layer-split overrides are not pinned either, so only the
  // inferred split is used (1 stage per rank for 1F1B/GPipe, 2 for Interleaved1F1B).
  if (m.pp > 1 && m.vpp > 2)
    refuse(kRt, "vpp", fmt::format("vpp {} needs an explicit layer split, whose registry-era override is not "
                                   "pinned (torchtitan PR #2386); emit for torchtitan 238fa9953e4a instead", m.vpp));

  std::vector<std::string> a = {"--module", "llama3", "--config", s.info.registry};
  auto add = [&](std::string k, std::string v) {
    a.push_back(std::move(k));
    a.push_back(std::move(v));
  };
  add("--parallelism.data_parallel_replicate_degree", std::to_string(m.dp_replicate));
  add("--parallelism.data_parallel_shard_degree", std::to_string(m.dp_shard));
  add("--parallelism.tensor_parallel_degree", std::to_string(m.tp));
  add("--parallelism.pipeline_parallel_degree", std::to_string(m.pp));
  add("--parallelism.context_parallel_degree", std::to_string(m.cp));
  add("--parallelism.fsdp_reshard_after_forward", s.reshard);
  if (p.async_tp) add("--parallelism.enable_async_tensor_parallel", "true");
  if (m.pp > 1) {
    add("--parallelism.pipeline_parallel_schedule", schedule_name(p.schedule));
    add("--parallelism.pipeline_parallel_microbatch_size", std::to_string(j.micro_batch));
  }
  add("--training.max_context_length", std::to_string(j.seq_len));
  add("--training.num_tokens_per_microbatch_per_dp_rank", std::to_string(s.local_batch * j.seq_len));
  return a;
}

}  // namespace meshplan

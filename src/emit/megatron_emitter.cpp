// Megatron-LM emitter (megatron/training/arguments.py @ core_v0.15.0).
#include "emit/megatron_emitter.hpp"

#include <algorithm>
#include <fmt/format.h>

#include "emit/foundry_emitter.hpp"
#include "spec/offload_modules.hpp"
#include "spec/pipeline_split.hpp"

namespace meshplan {

namespace {
constexpr std::string_view kRt = "megatron";
using emit::refuse;

// The argument list being written: a flag alone, or a flag and its value.
class ArgList {
public:
  void flag(std::string f) { a_.push_back(std::move(f)); }
  template <class V>
  void arg(std::string f, const V& v) {
    a_.push_back(std::move(f));
    a_.push_back(fmt::format("{}", v));
  }
  // A flag that takes several values (argparse nargs='+').
  void args(std::string f, const std::vector<std::string>& vs) {
    a_.push_back(std::move(f));
    a_.insert(a_.end(), vs.begin(), vs.end());
  }
  std::vector<std::string> take() { return std::move(a_); }

private:
  std::vector<std::string> a_;
};

// The pipeline: its schedule, its split and the virtual stages.
void emit_pipeline(const RunConfig& rc, ArgList& a) {
  const Plan& p = rc.plan;
  const Mesh& m = p.mesh;
  const Job& j = rc.job;
  const ModelSpec& model = rc.model;
  if (p.schedule == PipelineSchedule::gpipe) refuse(kRt, "schedule", "Megatron runs 1F1B or interleaved 1F1B, not GPipe");
  if ((m.vpp > 1) != (p.schedule == PipelineSchedule::interleaved_1f1b))
    refuse(kRt, "vpp", fmt::format("vpp {} with schedule {}: Megatron interleaves exactly when vpp > 1", m.vpp,
                                   to_string(p.schedule)));
  const PipelineSplit& split = p.pipeline_split;
  if (SplitError why; !split_pipeline(model.n_layers, m.pp, m.vpp, split, &why))
    refuse(kRt, "pipeline_split", why.reason);
  if (!split.given() && model.n_layers % (m.pp * m.vpp) != 0)
    refuse(kRt, "vpp", fmt::format("{} layers do not split into pp x vpp = {} stages (Megatron splits unevenly only "
                                   "when told how: set the layout's pipeline split keys)",
                                   model.n_layers, m.pp * m.vpp));
  if (split.embedding_as_layer) a.flag("--account-for-embedding-in-pipeline-split");
  if (split.loss_as_layer) a.flag("--account-for-loss-in-pipeline-split");
  if (split.first_stage_layers >= 0) a.arg("--decoder-first-pipeline-num-layers", split.first_stage_layers);
  if (split.last_stage_layers >= 0) a.arg("--decoder-last-pipeline-num-layers", split.last_stage_layers);
  // The layout string fixes vpp itself; Megatron takes no virtual-stage flag beside it.
  if (!split.chunk_layers.empty()) a.arg("--pipeline-model-parallel-layout", format_pipeline_layout(layout_of(split)));
  // Layers per virtual stage is ambiguous once the split is uneven; the chunk count is not.
  else if (m.vpp > 1 && split.given()) a.arg("--num-virtual-stages-per-pipeline-rank", m.vpp);
  else if (m.vpp > 1) a.arg("--num-layers-per-virtual-pipeline-stage", model.n_layers / (m.pp * m.vpp));
  // Megatron runs every micro-batch of a step in one schedule run.
  if (j.pp_microbatches != 0 && j.pp_microbatches != j.grad_accum)
    refuse(kRt, "pp_microbatches", "Megatron runs all micro-batches of a step in one pipeline schedule");
}

// The mesh degrees. DP = world / (tp x pp x cp); Megatron has no HSDP split of it.
void emit_parallelism(const RunConfig& rc, ArgList& a) {
  const Plan& p = rc.plan;
  const Mesh& m = p.mesh;
  const Job& j = rc.job;
  const ModelSpec& model = rc.model;
  if (m.tp > 1 && p.tp_style != TpStyle::full)
    refuse(kRt, "tp_style", "Megatron's TP shards attention and MLP; MLP-only TP is llm-foundry's");
  a.arg("--tensor-model-parallel-size", m.tp);
  a.arg("--pipeline-model-parallel-size", m.pp);
  if (m.pp > 1) {
    emit_pipeline(rc, a);
  } else if (m.vpp != 1) {
    refuse(kRt, "vpp", "virtual stages need pp > 1");
  }
  if (m.cp > 1) {
    if (j.seq_len % (2 * m.cp) != 0) refuse(kRt, "seq_len", fmt::format("{} is not divisible by 2 x cp = {}", j.seq_len, 2 * m.cp));
    a.arg("--context-parallel-size", m.cp);
  }
  // --sequence-parallel is silently dropped at TP 1; emit it only where it acts.
  if (p.sequence_parallel && m.tp > 1) {
    if (j.seq_len % m.tp != 0) refuse(kRt, "seq_len", fmt::format("{} is not divisible by tp {}", j.seq_len, m.tp));
    a.flag("--sequence-parallel");
  }
  if (p.async_tp) {
    if (!(p.sequence_parallel && m.tp > 1)) refuse(kRt, "async_tp", "--tp-comm-overlap requires --sequence-parallel and tp > 1");
    a.flag("--tp-comm-overlap");
  }
  if (m.ep > 1) {
    if (!model.moe.enabled()) refuse(kRt, "ep", "the model has no experts");
    if (model.moe.n_experts % m.ep != 0)
      refuse(kRt, "ep", fmt::format("{} experts are not divisible by ep {}", model.moe.n_experts, m.ep));
    a.arg("--expert-model-parallel-size", m.ep);
  }
  // Megatron defaults --expert-tensor-parallel-size to tp; emit it only where it differs.
  if (model.moe.enabled() && m.expert_tp() != m.tp) a.arg("--expert-tensor-parallel-size", m.expert_tp());
}

// Data-parallel sharding: DDP, the distributed optimizer (ZeRO-1) or Megatron-FSDP (ZeRO-2/3).
void emit_sharding(const RunConfig& rc, ArgList& a) {
  const Plan& p = rc.plan;
  const Mesh& m = p.mesh;
  if (p.deepspeed_engine) refuse(kRt, "deepspeed", "Megatron-DeepSpeed launches are not emitted (Megatron-LM only)");
  switch (p.sharding) {
    case Sharding::none:
      if (m.dp() > 1) a.flag("--overlap-grad-reduce");
      break;
    case Sharding::zero1:
      a.flag("--use-distributed-optimizer");
      a.flag("--overlap-grad-reduce");
      a.flag("--overlap-param-gather");  // requires both flags above (arguments.py)
      break;
    case Sharding::zero2:
      refuse(kRt, "sharding", "zero2 (Megatron-FSDP optim_grads) is not modeled, so not emitted; zero1 or zero3");
    case Sharding::zero3:
      // Megatron-Core's own FSDP (megatron/core/distributed/fsdp; --use-custom-fsdp before
      // core_v0.14) with optim_grads_params: parameters, gradients and optimizer state sharded.
      // Its guide pairs it with the distributed optimizer and both overlaps.
      if (m.dp() == 1 && m.cp == 1)
        refuse(kRt, "sharding", fmt::format("{} without data-parallel ranks to shard over", to_string(p.sharding)));
      a.flag("--use-megatron-fsdp");
      a.arg("--data-parallel-sharding-strategy", "optim_grads_params");
      a.flag("--use-distributed-optimizer");
      a.flag("--overlap-grad-reduce");
      a.flag("--overlap-param-gather");
      break;
  }
}

// The layers and the attention: MHA / GQA or MLA, QK norm, MTP.
void emit_attention(const RunConfig& rc, ArgList& a) {
  const ModelSpec& model = rc.model;
  a.arg("--num-layers", model.n_layers);
  a.arg("--hidden-size", model.d_model);
  a.arg("--num-attention-heads", model.n_heads);
  if (model.attention == AttentionKind::mla) {
    // MLA (Megatron-Core MLASelfAttention): no GQA flags; --kv-channels is the non-rotary width.
    a.flag("--multi-latent-attention");
    if (model.mla.q_lora_rank > 0) a.arg("--q-lora-rank", model.mla.q_lora_rank);
    a.arg("--kv-lora-rank", model.mla.kv_lora_rank);
    a.arg("--qk-head-dim", model.head_dim);
    a.arg("--qk-pos-emb-head-dim", model.mla.rope_head_dim);
    a.arg("--v-head-dim", model.mla.v_head_dim);
  } else {
    if (model.head_dim * model.n_heads != model.d_model) a.arg("--kv-channels", model.head_dim);
    if (model.n_kv_heads != model.n_heads) {
      a.flag("--group-query-attention");
      a.arg("--num-query-groups", model.n_kv_heads);
    }
  }
  if (model.qk_norm) a.flag("--qk-layernorm");
  if (model.n_mtp_layers > 0) a.arg("--mtp-num-layers", model.n_mtp_layers);
  // Without the window the launched run would train a different model; meshplan has no source
  // for the arguments that set it in each Megatron release, so it emits none rather than guess.
  if (model.sliding_window > 0)
    refuse(kRt, "model.sliding_window",
           fmt::format("sliding-window attention ({} tokens) is not emitted for Megatron-LM", model.sliding_window));
}

// The MLP: dense, or the experts with their dispatcher; its activation.
void emit_mlp(const RunConfig& rc, ArgList& a) {
  const Plan& p = rc.plan;
  const ModelSpec& model = rc.model;
  if (model.moe.enabled()) {
    // Dense leading layers keep --ffn-hidden-size; the experts have their own width.
    a.arg("--ffn-hidden-size", model.moe.n_dense_layers > 0 ? model.ffn_hidden : model.moe.expert_ffn);
    a.arg("--num-experts", model.moe.n_experts);
    a.arg("--moe-router-topk", model.moe.top_k);
    if (p.moe_dispatcher != MoeDispatcher::alltoall) {
      a.arg("--moe-token-dispatcher-type", "flex");
      if (p.moe_dispatcher == MoeDispatcher::deepep) a.flag("--moe-enable-deepep");
      else a.arg("--moe-flex-dispatcher-backend", "hybridep");
    }
    if (p.moe_a2a_overlap) a.flag("--overlap-moe-expert-parallel-comm");
    if (p.moe_permute_fusion) a.flag("--moe-permute-fusion");
    if (p.moe_router_fusion) a.flag("--moe-router-fusion");
    a.arg("--moe-ffn-hidden-size", model.moe.expert_ffn);
    if (model.moe.n_shared_experts > 0)
      a.arg("--moe-shared-expert-intermediate-size", model.moe.expert_ffn * model.moe.n_shared_experts);
    if (model.moe.n_dense_layers > 0)
      a.arg("--moe-layer-freq", fmt::format("([0]*{}+[1]*{})", model.moe.n_dense_layers,
                                          model.n_layers - model.moe.n_dense_layers));
    if (model.moe.capacity_factor > 0) {
      a.arg("--moe-expert-capacity-factor", model.moe.capacity_factor);
      a.flag("--moe-pad-expert-input-to-capacity");
    }
    if (model.moe.force_balance) a.flag("--moe-router-force-load-balancing");
    if (p.moe_grouped_gemm) a.flag("--moe-grouped-gemm");  // without it: SequentialMLP
  } else {
    a.arg("--ffn-hidden-size", model.ffn_hidden);
  }
  switch (model.mlp) {
    case MlpKind::swiglu: a.flag("--swiglu"); break;
    case MlpKind::gelu: break;  // Megatron's default activation
    case MlpKind::relu2: refuse(kRt, "model", "squared-ReLU MLPs are not emitted");
  }
}

// Norms, biases, positions and the embeddings.
void emit_norms_and_positions(const RunConfig& rc, ArgList& a) {
  const Job& j = rc.job;
  const ModelSpec& model = rc.model;
  if (model.norm == NormKind::rmsnorm) {
    a.arg("--normalization", "RMSNorm");
  } else {
    if (!model.norm_bias) refuse(kRt, "model", "Megatron's LayerNorm always has a bias");
    a.arg("--normalization", "LayerNorm");
  }
  a.arg("--norm-epsilon", fmt::format("{:g}", model.norm_eps));
  if (!model.linear_bias) a.flag("--disable-bias-linear");
  switch (model.pos_emb) {
    case PosEmb::rope:
      a.arg("--position-embedding-type", "rope");
      a.arg("--rotary-base", fmt::format("{:g}", model.rope.theta));
      if (model.rope.scaling == "llama3") {
        // Megatron-Core's apply_rope_scaling (Llama 3.1) takes the factor and fixes the rest:
        // low 1, high 4, original context 8192.
        if (model.rope.low_freq_factor != 1 || model.rope.high_freq_factor != 4 ||
            model.rope.original_max_position != 8192)
          refuse(kRt, "model.rope_scaling",
                 "Megatron's Llama 3 RoPE scaling fixes low_freq_factor 1, high_freq_factor 4, original context 8192");
        a.flag("--use-rope-scaling");
        a.arg("--rope-scaling-factor", fmt::format("{:g}", model.rope.factor));
      } else if (!model.rope.scaling.empty()) {
        refuse(kRt, "model.rope_scaling", fmt::format("'{}' RoPE scaling is not emitted", model.rope.scaling));
      }
      break;
    case PosEmb::learned:
      if (j.seq_len > model.max_seq_len)
        refuse(kRt, "seq_len", fmt::format("{} exceeds the learned position table of {} rows", j.seq_len, model.max_seq_len));
      a.arg("--position-embedding-type", "learned_absolute");
      break;
    default: refuse(kRt, "model", fmt::format("{} positions are not a Megatron GPT option (rope, learned_absolute)",
                                              to_string(model.pos_emb)));
  }
  a.arg("--max-position-embeddings", std::max(model.max_seq_len, j.seq_len));
  if (!model.tied_embeddings) a.flag("--untie-embeddings-and-output-weights");
}

// The attention kernel, CUDA graphs and dropout.
void emit_kernels(const RunConfig& rc, ArgList& a) {
  const Plan& p = rc.plan;
  if (!p.flash_attention) refuse(kRt, "flash_attention", "Megatron plans are emitted with fused attention (Transformer Engine)");
  if (p.cuda_graphs && p.cuda_graph_scope.full) a.flag("--enable-cuda-graph");  // each layer's passes captured
  if (p.cuda_graphs && !p.cuda_graph_scope.full) {
    // Scoped graphs are Transformer Engine's (core_v0.14 on).
    a.arg("--cuda-graph-impl", "transformer_engine");
    a.args("--cuda-graph-scope", cuda_graph_scope_names(p.cuda_graph_scope));
  }
  if (!p.dropout) {
    a.arg("--attention-dropout", "0.0");
    a.arg("--hidden-dropout", "0.0");
  }
}

// The batch: global = micro x DP x number of micro-batches.
void emit_batch(const RunConfig& rc, ArgList& a) {
  const Mesh& m = rc.plan.mesh;
  const Job& j = rc.job;
  const std::int64_t dp = m.dp();
  if (j.global_batch != j.micro_batch * dp * j.grad_accum)
    refuse(kRt, "global_batch", fmt::format("{} != micro {} x data-parallel {} x accumulation {}", j.global_batch,
                                            j.micro_batch, dp, j.grad_accum));
  a.arg("--micro-batch-size", j.micro_batch);
  a.arg("--global-batch-size", j.global_batch);
  a.arg("--seq-length", j.seq_len);
}

// Precision: params in bf16/fp16, fp32 main params, grads reduced in fp32 unless asked.
void emit_precision(const RunConfig& rc, ArgList& a) {
  const Plan& p = rc.plan;
  if (p.state_dtype != Dtype::fp32) refuse(kRt, "state_dtype", "meshplan emits Megatron with fp32 main params and moments");
  if (p.keep_low_precision_grads) refuse(kRt, "keep_low_precision_grads", "an FSDP1 option");
  if (p.compute_dtype != p.param_dtype) refuse(kRt, "compute_dtype", "Megatron computes in the parameter dtype");
  switch (p.param_dtype) {
    case Dtype::bf16:
      a.flag("--bf16");
      if (p.reduce_dtype == Dtype::bf16) a.flag("--grad-reduce-in-bf16");
      else if (p.reduce_dtype != Dtype::fp32) refuse(kRt, "reduce_dtype", "bf16 runs reduce gradients in fp32 or bf16");
      break;
    case Dtype::fp16:
      a.flag("--fp16");
      if (p.reduce_dtype != Dtype::fp32) refuse(kRt, "reduce_dtype", "fp16 runs reduce gradients in fp32");
      break;
    case Dtype::fp32:
      if (p.reduce_dtype != Dtype::fp32) refuse(kRt, "reduce_dtype", "fp32 runs reduce gradients in fp32");
      break;
    default: refuse(kRt, "param_dtype", fmt::format("{} is not a Megatron parameter dtype", to_string(p.param_dtype)));
  }
}

// Activation recompute: full, selective or the listed modules.
void emit_recompute(const RunConfig& rc, ArgList& a) {
  const Plan& p = rc.plan;
  switch (p.ac) {
    case AcMode::none: break;
    case AcMode::full:
      a.arg("--recompute-granularity", "full");
      a.arg("--recompute-method", "uniform");
      a.arg("--recompute-num-layers", 1);
      break;
    case AcMode::selective_attn:
      if (!p.recompute_modules.any()) a.flag("--recompute-activations");  // selective, core_attn
      break;
    case AcMode::selective_layer:
      if (p.ac_every_n == 1) {
        a.arg("--recompute-granularity", "full");
        a.arg("--recompute-method", "uniform");
        a.arg("--recompute-num-layers", 1);
        break;
      }
      refuse(kRt, "ac", "checkpointing every N-th block is torchtitan's; Megatron has full (uniform/block) and selective");
    case AcMode::selective_op: refuse(kRt, "ac", "per-op SAC is torchtitan's; Megatron's selective mode recomputes attention");
  }
  if (p.recompute_modules.any() && p.ac != AcMode::full) {
    if (p.ac != AcMode::none && p.ac != AcMode::selective_attn)
      refuse(kRt, "recompute_modules", "Megatron's --recompute-modules go with selective granularity only");
    a.arg("--recompute-granularity", "selective");
    a.flag("--recompute-modules");
    if (p.ac == AcMode::selective_attn) a.flag("core_attn");
    if (p.recompute_modules.norms) a.flag("layernorm");
    if (p.recompute_modules.moe_act) a.flag("moe_act");
    if (p.recompute_modules.moe) a.flag("moe");
  }
}

// Activation offload of the listed modules; whole-layer and parameter offload are not emitted.
void emit_offload(const RunConfig& rc, ArgList& a) {
  const Plan& p = rc.plan;
  if (p.act_offload && p.offload_modules.any()) {
    a.flag("--fine-grained-activation-offloading");
    a.flag("--offload-modules");
    for (const auto& [name, on] : offload_module_names())
      if (p.offload_modules.*on) a.flag(std::string(name));
  } else if (p.act_offload) {
    refuse(kRt, "act_offload", "whole-layer activation offload is not emitted for Megatron; name the modules "
                               "([offload] activation_modules, --offload-modules)");
  }
  if (p.param_offload) refuse(kRt, "param_offload", "parameter offload is not emitted for Megatron");
}

// FP8 through Transformer Engine (and the refusal of torch.compile, which Megatron-LM lacks).
void emit_fp8(const RunConfig& rc, ArgList& a) {
  const Plan& p = rc.plan;
  switch (p.fp8) {
    case Fp8Recipe::none: break;
    case Fp8Recipe::te_delayed: a.arg("--fp8-format", "hybrid"); a.arg("--fp8-recipe", "delayed"); break;
    case Fp8Recipe::te_current: a.arg("--fp8-format", "hybrid"); a.arg("--fp8-recipe", "tensorwise"); break;
    case Fp8Recipe::mxfp8: a.arg("--fp8-format", "e4m3"); a.arg("--fp8-recipe", "mxfp8"); break;
    case Fp8Recipe::te_blockwise: a.arg("--fp8-format", "e4m3"); a.arg("--fp8-recipe", "blockwise"); break;
    default: refuse(kRt, "fp8", fmt::format("{} is not a Transformer Engine recipe Megatron names", to_string(p.fp8)));
  }
  if (p.fp8_all_gather) {
    if (p.fp8 == Fp8Recipe::none || p.sharding != Sharding::zero1)
      refuse(kRt, "fp8_all_gather", "--fp8-param-gather needs FP8 and the distributed optimizer");
    a.flag("--fp8-param-gather");
  }
  if (p.fp8_attention) {
    if (!supports_fp8_attention(p.fp8))
      refuse(kRt, "fp8_attention", "--fp8-dot-product-attention needs the delayed, tensorwise or mxfp8 recipe");
    a.flag("--fp8-dot-product-attention");
  }
  if (p.compile) refuse(kRt, "compile", "Megatron-LM does not torch.compile the model");
}

// The optimizer and schedule (values from Megatron's Llama examples; no effect on time).
void emit_optimizer(const RunConfig& rc, ArgList& a) {
  const Plan& p = rc.plan;
  if (p.optimizer == Optimizer::adamw) {
    a.arg("--optimizer", "adam");  // Megatron's adam is AdamW (decoupled weight decay)
    a.arg("--adam-beta1", "0.9");
    a.arg("--adam-beta2", "0.95");
  } else if (p.optimizer == Optimizer::sgd) {
    a.arg("--optimizer", "sgd");
  } else {
    refuse(kRt, "optimizer", "8-bit AdamW is not a Megatron optimizer");
  }
  a.arg("--lr", "3e-4");
  a.arg("--min-lr", "3e-5");
  a.arg("--lr-decay-style", "cosine");
  a.arg("--lr-warmup-iters", 100);
  a.arg("--weight-decay", "0.1");
  a.arg("--clip-grad", "1.0");
  a.arg("--init-method-std", "0.02");
  // The run's length is the user's to set: 1000 steps, or the plan's checkpoint interval when longer,
  // so that the first checkpoint is always written.
  a.arg("--train-iters", std::max<std::int64_t>(1000, rc.checkpoint_interval_steps));
}

// Data and tokenizer: mock data runs without a dataset (swap for --data-path).
void emit_data(const RunConfig& rc, ArgList& a) {
  const ModelSpec& model = rc.model;
  a.flag("--mock-data");
  if (auto hf = foundry_hf_id(model)) {
    a.arg("--tokenizer-type", "HuggingFaceTokenizer");
    a.arg("--tokenizer-model", *hf);
  } else {
    a.arg("--tokenizer-type", "NullTokenizer");
    a.arg("--vocab-size", model.vocab);
  }
  a.arg("--log-interval", 10);
  a.arg("--eval-interval", 1000);
  // Young/Daly's interval for this job's failure rate; the launch scripts add --save "$CHECKPOINT_DIR".
  if (rc.checkpoint_interval_steps > 0) a.arg("--save-interval", rc.checkpoint_interval_steps);
  a.arg("--eval-iters", 0);
}

}  // namespace

std::vector<std::string> emit_megatron_args(const RunConfig& rc) {
  emit::require_resolved(rc, kRt);
  // The order of the sections is the order of the flags in the launch file (and its goldens).
  ArgList a;
  emit_parallelism(rc, a);
  emit_sharding(rc, a);
  emit_attention(rc, a);
  emit_mlp(rc, a);
  emit_norms_and_positions(rc, a);
  emit_kernels(rc, a);
  emit_batch(rc, a);
  emit_precision(rc, a);
  emit_recompute(rc, a);
  emit_offload(rc, a);
  emit_fp8(rc, a);
  emit_optimizer(rc, a);
  emit_data(rc, a);
  return a.take();
}

std::string megatron_args_text(const std::vector<std::string>& args) {
  std::string out;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const bool is_flag = args[i].rfind("--", 0) == 0;
    out += is_flag ? fmt::format("{}  {}", out.empty() ? "" : " \\\n", args[i]) : fmt::format(" {}", args[i]);
  }
  return out + "\n";
}

}  // namespace meshplan

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
}  // namespace

std::vector<std::string> emit_megatron_args(const RunConfig& rc) {
  emit::require_resolved(rc, kRt);
  const Plan& p = rc.plan;
  const Mesh& m = p.mesh;
  const Job& j = rc.job;
  const ModelSpec& model = rc.model;
  std::vector<std::string> a;
  auto flag = [&](std::string f) { a.push_back(std::move(f)); };
  auto arg = [&](std::string f, auto v) {
    a.push_back(std::move(f));
    a.push_back(fmt::format("{}", v));
  };

  // ---- parallelism. DP = world / (tp x pp x cp); Megatron has no HSDP split of it.
  if (m.tp > 1 && p.tp_style != TpStyle::full)
    refuse(kRt, "tp_style", "Megatron's TP shards attention and MLP; MLP-only TP is llm-foundry's");
  arg("--tensor-model-parallel-size", m.tp);
  arg("--pipeline-model-parallel-size", m.pp);
  if (m.pp > 1) {
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
    if (split.embedding_as_layer) flag("--account-for-embedding-in-pipeline-split");
    if (split.loss_as_layer) flag("--account-for-loss-in-pipeline-split");
    if (split.first_stage_layers >= 0) arg("--decoder-first-pipeline-num-layers", split.first_stage_layers);
    if (split.last_stage_layers >= 0) arg("--decoder-last-pipeline-num-layers", split.last_stage_layers);
    // The layout string fixes vpp itself; Megatron takes no virtual-stage flag beside it.
    if (!split.chunk_layers.empty()) arg("--pipeline-model-parallel-layout", format_pipeline_layout(layout_of(split)));
    // Layers per virtual stage is ambiguous once the split is uneven; the chunk count is not.
    else if (m.vpp > 1 && split.given()) arg("--num-virtual-stages-per-pipeline-rank", m.vpp);
    else if (m.vpp > 1) arg("--num-layers-per-virtual-pipeline-stage", model.n_layers / (m.pp * m.vpp));
    // Megatron runs every micro-batch of a step in one schedule run.
    if (j.pp_microbatches != 0 && j.pp_microbatches != j.grad_accum)
      refuse(kRt, "pp_microbatches", "Megatron runs all micro-batches of a step in one pipeline schedule");
  } else if (m.vpp != 1) {
    refuse(kRt, "vpp", "virtual stages need pp > 1");
  }
  if (m.cp > 1) {
    if (j.seq_len % (2 * m.cp) != 0) refuse(kRt, "seq_len", fmt::format("{} is not divisible by 2 x cp = {}", j.seq_len, 2 * m.cp));
    arg("--context-parallel-size", m.cp);
  }
  // --sequence-parallel is silently dropped at TP 1; emit it only where it acts.
  if (p.sequence_parallel && m.tp > 1) {
    if (j.seq_len % m.tp != 0) refuse(kRt, "seq_len", fmt::format("{} is not divisible by tp {}", j.seq_len, m.tp));
    flag("--sequence-parallel");
  }
  if (p.async_tp) {
    if (!(p.sequence_parallel && m.tp > 1)) refuse(kRt, "async_tp", "--tp-comm-overlap requires --sequence-parallel and tp > 1");
    flag("--tp-comm-overlap");
  }
  if (m.ep > 1) {
    if (!model.moe.enabled()) refuse(kRt, "ep", "the model has no experts");
    if (model.moe.n_experts % m.ep != 0)
      refuse(kRt, "ep", fmt::format("{} experts are not divisible by ep {}", model.moe.n_experts, m.ep));
    arg("--expert-model-parallel-size", m.ep);
  }
  // Megatron defaults --expert-tensor-parallel-size to tp; emit it only where it differs.
  if (model.moe.enabled() && m.expert_tp() != m.tp) arg("--expert-tensor-parallel-size", m.expert_tp());

  // ---- data-parallel sharding: DDP, the distributed optimizer (ZeRO-1) or Megatron-FSDP (ZeRO-2/3).
  if (p.deepspeed_engine) refuse(kRt, "deepspeed", "Megatron-DeepSpeed launches are not emitted (Megatron-LM only)");
  switch (p.sharding) {
    case Sharding::none:
      if (m.dp() > 1) flag("--overlap-grad-reduce");
      break;
    case Sharding::zero1:
      flag("--use-distributed-optimizer");
      flag("--overlap-grad-reduce");
      flag("--overlap-param-gather");  // requires both flags above (arguments.py)
      break;
    case Sharding::zero2:
      refuse(kRt, "sharding", "zero2 (Megatron-FSDP optim_grads) is not modeled, so not emitted; zero1 or zero3");
    case Sharding::zero3:
      // Megatron-Core's own FSDP (megatron/core/distributed/fsdp; --use-custom-fsdp before
      // core_v0.14) with optim_grads_params: parameters, gradients and optimizer state sharded.
      // Its guide pairs it with the distributed optimizer and both overlaps.
      if (m.dp() == 1 && m.cp == 1)
        refuse(kRt, "sharding", fmt::format("{} without data-parallel ranks to shard over", to_string(p.sharding)));
      flag("--use-megatron-fsdp");
      arg("--data-parallel-sharding-strategy", "optim_grads_params");
      flag("--use-distributed-optimizer");
      flag("--overlap-grad-reduce");
      flag("--overlap-param-gather");
      break;
  }

  // ---- model shape
  arg("--num-layers", model.n_layers);
  arg("--hidden-size", model.d_model);
  arg("--num-attention-heads", model.n_heads);
  if (model.attention == AttentionKind::mla) {
    // MLA (Megatron-Core MLASelfAttention): no GQA flags; --kv-channels is the non-rotary width.
    flag("--multi-latent-attention");
    if (model.mla.q_lora_rank > 0) arg("--q-lora-rank", model.mla.q_lora_rank);
    arg("--kv-lora-rank", model.mla.kv_lora_rank);
    arg("--qk-head-dim", model.head_dim);
    arg("--qk-pos-emb-head-dim", model.mla.rope_head_dim);
    arg("--v-head-dim", model.mla.v_head_dim);
  } else {
    if (model.head_dim * model.n_heads != model.d_model) arg("--kv-channels", model.head_dim);
    if (model.n_kv_heads != model.n_heads) {
      flag("--group-query-attention");
      arg("--num-query-groups", model.n_kv_heads);
    }
  }
  if (model.qk_norm) flag("--qk-layernorm");
  if (model.n_mtp_layers > 0) arg("--mtp-num-layers", model.n_mtp_layers);
  if (model.moe.enabled()) {
    // Dense leading layers keep --ffn-hidden-size; the experts have their own width.
    arg("--ffn-hidden-size", model.moe.n_dense_layers > 0 ? model.ffn_hidden : model.moe.expert_ffn);
    arg("--num-experts", model.moe.n_experts);
    arg("--moe-router-topk", model.moe.top_k);
    if (p.moe_dispatcher != MoeDispatcher::alltoall) {
      arg("--moe-token-dispatcher-type", "flex");
      if (p.moe_dispatcher == MoeDispatcher::deepep) flag("--moe-enable-deepep");
      else arg("--moe-flex-dispatcher-backend", "hybridep");
    }
    arg("--moe-ffn-hidden-size", model.moe.expert_ffn);
    if (model.moe.n_shared_experts > 0)
      arg("--moe-shared-expert-intermediate-size", model.moe.expert_ffn * model.moe.n_shared_experts);
    if (model.moe.n_dense_layers > 0)
      arg("--moe-layer-freq", fmt::format("([0]*{}+[1]*{})", model.moe.n_dense_layers,
                                          model.n_layers - model.moe.n_dense_layers));
    if (model.moe.capacity_factor > 0) {
      arg("--moe-expert-capacity-factor", model.moe.capacity_factor);
      flag("--moe-pad-expert-input-to-capacity");
    }
    flag("--moe-grouped-gemm");  // grouped GEMMs for the experts, as the lowering prices them
  } else {
    arg("--ffn-hidden-size", model.ffn_hidden);
  }
  switch (model.mlp) {
    case MlpKind::swiglu: flag("--swiglu"); break;
    case MlpKind::gelu: break;  // Megatron's default activation
    case MlpKind::relu2: refuse(kRt, "model", "squared-ReLU MLPs are not emitted");
  }
  if (model.norm == NormKind::rmsnorm) {
    arg("--normalization", "RMSNorm");
  } else {
    if (!model.norm_bias) refuse(kRt, "model", "Megatron's LayerNorm always has a bias");
    arg("--normalization", "LayerNorm");
  }
  arg("--norm-epsilon", fmt::format("{:g}", model.norm_eps));
  if (!model.linear_bias) flag("--disable-bias-linear");
  switch (model.pos_emb) {
    case PosEmb::rope:
      arg("--position-embedding-type", "rope");
      arg("--rotary-base", fmt::format("{:g}", model.rope.theta));
      if (model.rope.scaling == "llama3") {
        // Megatron-Core's apply_rope_scaling (Llama 3.1) takes the factor and fixes the rest:
        // low 1, high 4, original context 8192.
        if (model.rope.low_freq_factor != 1 || model.rope.high_freq_factor != 4 ||
            model.rope.original_max_position != 8192)
          refuse(kRt, "model.rope_scaling",
                 "Megatron's Llama 3 RoPE scaling fixes low_freq_factor 1, high_freq_factor 4, original context 8192");
        flag("--use-rope-scaling");
        arg("--rope-scaling-factor", fmt::format("{:g}", model.rope.factor));
      } else if (!model.rope.scaling.empty()) {
        refuse(kRt, "model.rope_scaling", fmt::format("'{}' RoPE scaling is not emitted", model.rope.scaling));
      }
      break;
    case PosEmb::learned:
      if (j.seq_len > model.max_seq_len)
        refuse(kRt, "seq_len", fmt::format("{} exceeds the learned position table of {} rows", j.seq_len, model.max_seq_len));
      arg("--position-embedding-type", "learned_absolute");
      break;
    default: refuse(kRt, "model", fmt::format("{} positions are not a Megatron GPT option (rope, learned_absolute)",
                                              to_string(model.pos_emb)));
  }
  arg("--max-position-embeddings", std::max(model.max_seq_len, j.seq_len));
  if (!model.tied_embeddings) flag("--untie-embeddings-and-output-weights");
  if (!p.flash_attention) refuse(kRt, "flash_attention", "Megatron plans are emitted with fused attention (Transformer Engine)");
  if (p.cuda_graphs) flag("--enable-cuda-graph");  // Transformer Engine captures each layer's passes
  if (!p.dropout) {
    arg("--attention-dropout", "0.0");
    arg("--hidden-dropout", "0.0");
  }

  // ---- batch: global = micro x DP x number of micro-batches.
  const std::int64_t dp = m.dp();
  if (j.global_batch != j.micro_batch * dp * j.grad_accum)
    refuse(kRt, "global_batch", fmt::format("{} != micro {} x data-parallel {} x accumulation {}", j.global_batch,
                                            j.micro_batch, dp, j.grad_accum));
  arg("--micro-batch-size", j.micro_batch);
  arg("--global-batch-size", j.global_batch);
  arg("--seq-length", j.seq_len);

  // ---- precision: params in bf16/fp16, fp32 main params, grads reduced in fp32 unless asked.
  if (p.state_dtype != Dtype::fp32) refuse(kRt, "state_dtype", "meshplan emits Megatron with fp32 main params and moments");
  if (p.keep_low_precision_grads) refuse(kRt, "keep_low_precision_grads", "an FSDP1 option");
  if (p.compute_dtype != p.param_dtype) refuse(kRt, "compute_dtype", "Megatron computes in the parameter dtype");
  switch (p.param_dtype) {
    case Dtype::bf16:
      flag("--bf16");
      if (p.reduce_dtype == Dtype::bf16) flag("--grad-reduce-in-bf16");
      else if (p.reduce_dtype != Dtype::fp32) refuse(kRt, "reduce_dtype", "bf16 runs reduce gradients in fp32 or bf16");
      break;
    case Dtype::fp16:
      flag("--fp16");
      if (p.reduce_dtype != Dtype::fp32) refuse(kRt, "reduce_dtype", "fp16 runs reduce gradients in fp32");
      break;
    case Dtype::fp32:
      if (p.reduce_dtype != Dtype::fp32) refuse(kRt, "reduce_dtype", "fp32 runs reduce gradients in fp32");
      break;
    default: refuse(kRt, "param_dtype", fmt::format("{} is not a Megatron parameter dtype", to_string(p.param_dtype)));
  }

  // ---- activation recompute
  switch (p.ac) {
    case AcMode::none: break;
    case AcMode::full:
      arg("--recompute-granularity", "full");
      arg("--recompute-method", "uniform");
      arg("--recompute-num-layers", 1);
      break;
    case AcMode::selective_attn:
      if (!p.recompute_modules.any()) flag("--recompute-activations");  // selective, core_attn
      break;
    case AcMode::selective_layer:
      if (p.ac_every_n == 1) {
        arg("--recompute-granularity", "full");
        arg("--recompute-method", "uniform");
        arg("--recompute-num-layers", 1);
        break;
      }
      refuse(kRt, "ac", "checkpointing every N-th block is torchtitan's; Megatron has full (uniform/block) and selective");
    case AcMode::selective_op: refuse(kRt, "ac", "per-op SAC is torchtitan's; Megatron's selective mode recomputes attention");
  }
  if (p.recompute_modules.any() && p.ac != AcMode::full) {
    if (p.ac != AcMode::none && p.ac != AcMode::selective_attn)
      refuse(kRt, "recompute_modules", "Megatron's --recompute-modules go with selective granularity only");
    arg("--recompute-granularity", "selective");
    flag("--recompute-modules");
    if (p.ac == AcMode::selective_attn) flag("core_attn");
    if (p.recompute_modules.norms) flag("layernorm");
    if (p.recompute_modules.moe_act) flag("moe_act");
    if (p.recompute_modules.moe) flag("moe");
  }
  if (p.act_offload && p.offload_modules.any()) {
    flag("--fine-grained-activation-offloading");
    flag("--offload-modules");
    for (const auto& [name, on] : offload_module_names())
      if (p.offload_modules.*on) flag(std::string(name));
  } else if (p.act_offload) {
    refuse(kRt, "act_offload", "whole-layer activation offload is not emitted for Megatron; name the modules "
                               "([offload] activation_modules, --offload-modules)");
  }
  if (p.param_offload) refuse(kRt, "param_offload", "parameter offload is not emitted for Megatron");

  // ---- fp8 through Transformer Engine
  switch (p.fp8) {
    case Fp8Recipe::none: break;
    case Fp8Recipe::te_delayed: arg("--fp8-format", "hybrid"); arg("--fp8-recipe", "delayed"); break;
    case Fp8Recipe::te_current: arg("--fp8-format", "hybrid"); arg("--fp8-recipe", "tensorwise"); break;
    case Fp8Recipe::mxfp8: arg("--fp8-format", "e4m3"); arg("--fp8-recipe", "mxfp8"); break;
    case Fp8Recipe::te_blockwise: arg("--fp8-format", "e4m3"); arg("--fp8-recipe", "blockwise"); break;
    default: refuse(kRt, "fp8", fmt::format("{} is not a Transformer Engine recipe Megatron names", to_string(p.fp8)));
  }
  if (p.fp8_all_gather) {
    if (p.fp8 == Fp8Recipe::none || p.sharding != Sharding::zero1)
      refuse(kRt, "fp8_all_gather", "--fp8-param-gather needs FP8 and the distributed optimizer");
    flag("--fp8-param-gather");
  }
  if (p.fp8_attention) {
    if (!supports_fp8_attention(p.fp8))
      refuse(kRt, "fp8_attention", "--fp8-dot-product-attention needs the delayed, tensorwise or mxfp8 recipe");
    flag("--fp8-dot-product-attention");
  }
  if (p.compile) refuse(kRt, "compile", "Megatron-LM does not torch.compile the model");

  // ---- optimizer and schedule (values from Megatron's Llama examples; no effect on time)
  if (p.optimizer == Optimizer::adamw) {
    arg("--optimizer", "adam");  // Megatron's adam is AdamW (decoupled weight decay)
    arg("--adam-beta1", "0.9");
    arg("--adam-beta2", "0.95");
  } else if (p.optimizer == Optimizer::sgd) {
    arg("--optimizer", "sgd");
  } else {
    refuse(kRt, "optimizer", "8-bit AdamW is not a Megatron optimizer");
  }
  arg("--lr", "3e-4");
  arg("--min-lr", "3e-5");
  arg("--lr-decay-style", "cosine");
  arg("--lr-warmup-iters", 100);
  arg("--weight-decay", "0.1");
  arg("--clip-grad", "1.0");
  arg("--init-method-std", "0.02");
  // A placeholder run length, but never one that ends before the first checkpoint of the plan's interval.
  arg("--train-iters", std::max<std::int64_t>(1000, rc.checkpoint_interval_steps));

  // ---- data and tokenizer: mock data runs without a dataset (swap for --data-path).
  flag("--mock-data");
  if (auto hf = foundry_hf_id(model)) {
    arg("--tokenizer-type", "HuggingFaceTokenizer");
    arg("--tokenizer-model", *hf);
  } else {
    arg("--tokenizer-type", "NullTokenizer");
    arg("--vocab-size", model.vocab);
  }
  arg("--log-interval", 10);
  arg("--eval-interval", 1000);
  // Young/Daly's interval for this job's failure rate; the launch scripts add --save "$CHECKPOINT_DIR".
  if (rc.checkpoint_interval_steps > 0) arg("--save-interval", rc.checkpoint_interval_steps);
  arg("--eval-iters", 0);
  return a;
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

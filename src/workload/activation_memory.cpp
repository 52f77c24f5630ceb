#include "workload/activation_memory.hpp"

#include <algorithm>
#include <vector>

#include "spec/runtime_traits.hpp"
#include "workload/eager_ops.hpp"

namespace meshplan {

namespace {

// How the TP group splits one block's tensors on this rank.
struct TpSplit {
  double heads = 1;        // divides Q, K, V, O and the s^2 scores
  double mlp_inner = 1;    // divides the MLP inner-width tensors
  double seq_sharded = 1;  // divides tensors that sequence parallelism shards (norm inputs, masks)
  double linear_input = 1; // divides the saved inputs of QKV and MLP-up projections
  double mlp_input_batch = 1;  // llm-foundry "ffn" TP all-gathers the MLP input over the batch
};

TpSplit tp_split(const Plan& p) {
  TpSplit s;
  const double t = p.mesh.tp;
  if (t <= 1) return s;
  if (p.tp_style == TpStyle::mlp_only) {
    // llm-foundry ffn strategy: attention is not split; the MLP input is gathered along the
    // batch (each rank brings its own micro-batch) and the inner width is split.
    s.mlp_input_batch = t;
    s.mlp_inner = 1;  // b*t sequences x f/t width = b*f per rank
    return s;
  }
  s.heads = t;
  s.mlp_inner = t;
  if (p.sequence_parallel) {
    s.seq_sharded = t;
    // Megatron keeps the sequence-sharded input and all-gathers it again in backward
    // (Korthikanti §4.2.3); DTensor SequenceParallel -> ColwiseParallel saves the gathered input.
    s.linear_input = runtime_traits(p).sp_saves_sharded_linear_input ? t : 1;
  }
  return s;
}

double mlp_inner_tensors(MlpKind k) {
  switch (k) {
    case MlpKind::gelu: return 2;    // activation input and output (= down-proj input)
    case MlpKind::swiglu: return 4;  // gate out, silu(gate), up out, their product
    case MlpKind::relu2: return 2;   // relu output (shared by square), square output
  }
  return 2;
}

struct Dims {
  double s, b, h, q_width, kv_width, heads, ffn, e;  // e = bytes per activation element
  double residual_e;  // bytes per element of the residual stream (block input, norm inputs)
  double norm_e;      // bytes a norm saves per element of its input
  double linear_e;    // bytes a block linear saves per element of its input (for its weight gradient)
  double attn_e;      // bytes the fused attention saves per element of Q, K, V and O
};

// Transformer Engine's FP8/FP4 linears (Linear, LayerNormLinear, GroupedLinear) save their input
// quantized, in the column-wise layout the weight-gradient GEMM reads, with its scales, instead of
// the high-precision tensor. torchao's float8 linears save the high-precision input and re-cast it
// in backward.
double saved_linear_input_bytes(const Plan& p, double e) {
  switch (p.fp8) {
    case Fp8Recipe::te_delayed:
    case Fp8Recipe::te_current:
    case Fp8Recipe::te_blockwise:
    case Fp8Recipe::mxfp8:
    case Fp8Recipe::nvfp4: {
      const Dtype q = low_precision_gemm_dtype(p.fp8);
      return std::min(e, bytes_per_element(q) + scale_bytes_per_element(q));
    }
    default: return e;
  }
}

// An eager RMSNorm (x.float() * rsqrt(mean(x^2) + eps), cast back, times the weight: torchtitan's,
// torchtune's, HF's and litgpt's modules) saves the fp32 upcast for pow/mul backward and the cast
// output for the weight multiply. Fused norms (LayerNorm's kernel, Transformer Engine, Inductor
// under torch.compile) save only their input.
double norm_saved_bytes_per_element(const ModelSpec& m, const Plan& p, double residual_e) {
  const bool eager_rmsnorm = m.norm == NormKind::rmsnorm && eager_composites(p);
  return eager_rmsnorm ? 4.0 + residual_e : residual_e;
}

Dims dims(const ModelSpec& m, const Plan& p, MicroBatchShape mb) {
  Dims d{};
  d.s = static_cast<double>(mb.seq_len);
  d.b = static_cast<double>(mb.micro_batch);
  d.h = static_cast<double>(m.d_model);
  d.q_width = static_cast<double>(m.n_heads) * static_cast<double>(m.head_dim);
  d.kv_width = static_cast<double>(m.n_kv_heads) * static_cast<double>(m.head_dim);
  d.heads = m.n_heads;
  d.e = bytes_per_element(p.compute_dtype);
  d.residual_e = autocast_fp32_weights(p) ? 4.0 : d.e;
  d.norm_e = norm_saved_bytes_per_element(m, p, d.residual_e);
  d.linear_e = saved_linear_input_bytes(p, d.e);
  // Transformer Engine's FP8 attention keeps the FP8 Q, K, V and O it ran on for its backward.
  const Dtype a8 = fp8_attention_dtype(p.fp8);
  d.attn_e = p.fp8_attention && p.flash_attention ? bytes_per_element(a8) + scale_bytes_per_element(a8) : d.e;
  if (m.moe.enabled()) {
    // Each token visits top_k experts (plus shared ones): that many inner-width tensors; a
    // capacity factor pads every expert's buffer to capacity.
    const double capacity = m.moe.capacity_factor > 0 ? m.moe.capacity_factor : 1.0;
    d.ffn = static_cast<double>(m.moe.expert_ffn) * (m.moe.top_k * capacity + m.moe.n_shared_experts);
  } else {
    d.ffn = static_cast<double>(m.ffn_hidden);
  }
  return d;
}

}  // namespace

BlockActivations block_activations(const ModelSpec& m, const Plan& p, MicroBatchShape mb) {
  const Dims d = dims(m, p, mb);
  const TpSplit t = tp_split(p);
  const double sb = d.s * d.b;
  BlockActivations a;
  a.norms_bytes = 2 * d.norm_e * sb * d.h / t.seq_sharded;
  // QKV input, Q, K, V, and the attention output O (which is also the out-proj input; a
  // quantizing out-proj keeps its own low-precision copy of it besides the kernel's).
  const double proj_copy = d.linear_e < d.e ? d.linear_e : 0.0;
  a.attention_bytes = d.linear_e * sb * d.h / t.linear_input +
                      d.attn_e * sb * (2 * d.q_width + 2 * d.kv_width) / t.heads + proj_copy * sb * d.q_width / t.heads;
  if (!p.flash_attention) {
    // Softmax output, plus with dropout its mask (1 byte) and the dropped-out copy.
    const double scores = d.heads * d.s * d.s * d.b / t.heads;
    a.attention_scores_bytes = d.e * scores + (p.dropout ? (1 + d.e) * scores : 0);
  } else {
    // FlashAttention keeps the fp32 log-sum-exp per head and token instead of the scores.
    a.attention_scores_bytes = 4 * d.heads * sb / t.heads;
  }
  // The up projection's input and the inner tensors, the last of which is the down projection's
  // input. An MoE block's input feeds the router (not quantized) and the dispatch; the experts'
  // own inputs are the routed copies (moe_routing_saved_bytes).
  const double mlp_input_e = m.moe.enabled() ? d.e : d.linear_e;
  a.mlp_bytes = mlp_input_e * sb * d.h * t.mlp_input_batch / t.linear_input +
                ((mlp_inner_tensors(m.mlp) - 1) * d.e + d.linear_e) * sb * d.ffn / t.mlp_inner;
  if (m.attention == AttentionKind::mla) {
    // MLA keeps its two latents (the compressed query and the compressed KV with the rotary key,
    // replicated over TP) and the expanded Q, K (d_nope + d_rope per head), V and O (d_v per head)
    // that the attention kernel reads; the q_a and kv_a inputs are the block's norm output.
    const double heads = m.n_heads;
    const double qk = static_cast<double>(m.head_dim + m.mla.rope_head_dim);
    a.attention_bytes = d.linear_e * sb * d.h / t.linear_input +
                        d.e * sb * static_cast<double>(m.mla.q_lora_rank + m.mla.kv_lora_rank + m.mla.rope_head_dim) +
                        d.attn_e * sb * heads * (2 * qk + 2 * static_cast<double>(m.mla.v_head_dim)) / t.heads +
                        proj_copy * sb * heads * static_cast<double>(m.mla.v_head_dim) / t.heads;
  }
  if (m.qk_norm) a.attention_bytes += d.e * sb * (d.q_width + d.kv_width) / t.heads;  // pre-norm Q and K
  a.mlp_bytes += moe_routing_saved_bytes(m, p, mb);
  if (p.dropout) a.dropout_masks_bytes = 2 * sb * d.h / t.seq_sharded;
  a.block_input_bytes = d.residual_e * sb * d.h / t.seq_sharded;
  return a;
}

namespace {

// The routed token copies one rank's experts see per micro-batch: top_k per token, padded by the
// capacity factor; experts on the sequence-parallel shard (etp < tp, Megatron) see sb * etp / tp
// tokens (`split` = tp / etp).
struct RoutedCopies {
  int etp = 1;  // expert tensor parallelism, capped by tp
  double split = 1, copies = 0;
};

RoutedCopies routed_copies(const ModelSpec& m, const Plan& p, double sb) {
  const double capacity = m.moe.capacity_factor > 0 ? m.moe.capacity_factor : 1.0;
  const int tp = p.mesh.tp;
  RoutedCopies r;
  r.etp = std::max(1, std::min(tp, p.mesh.expert_tp()));
  r.split = (p.tp_style == TpStyle::full && tp > 1 && r.etp < tp && p.sequence_parallel)
                ? static_cast<double>(tp) / r.etp
                : 1.0;
  r.copies = sb * m.moe.top_k * capacity / r.split;
  return r;
}

}  // namespace

double moe_routing_saved_bytes(const ModelSpec& m, const Plan& p, MicroBatchShape mb) {
  if (!m.moe.enabled()) return 0;
  const Dims d = dims(m, p, mb);
  const double sb = d.s * d.b;
  const RoutedCopies r = routed_copies(m, p, sb);
  // The permuted expert inputs (read by the first grouped GEMM's weight gradient, so kept as that
  // GEMM saves its input), the expert outputs (read by the weighted combine's backward for the
  // routing probabilities' gradient), and the router's fp32 logits and probabilities.
  return (d.linear_e + d.e) * r.copies * d.h + 2 * 4 * sb / r.split * m.moe.n_experts;
}

double moe_block_saved_bytes(const ModelSpec& m, const Plan& p, MicroBatchShape mb) {
  if (!m.moe.enabled()) return 0;
  const Dims d = dims(m, p, mb);
  const TpSplit t = tp_split(p);
  return moe_routing_saved_bytes(m, p, mb) +
         ((mlp_inner_tensors(m.mlp) - 1) * d.e + d.linear_e) * d.s * d.b * d.ffn / t.mlp_inner;
}

double recompute_modules_freed_bytes(const ModelSpec& m, const Plan& p, MicroBatchShape mb) {
  const Plan::RecomputeModules& r = p.recompute_modules;
  if (!r.any() || p.ac == AcMode::full) return 0;
  const Dims d = dims(m, p, mb);
  const TpSplit t = tp_split(p);
  const double sb = d.s * d.b;
  double freed = 0;
  // layernorm: the norms' outputs (the QKV and MLP inputs) are dropped and recomputed from the
  // norms' inputs, which the residual stream keeps anyway.
  if (r.norms) freed += (d.linear_e + (m.moe.enabled() ? d.e : d.linear_e)) * sb * d.h / t.linear_input;
  if (r.moe && m.moe.enabled()) {
    freed += moe_block_saved_bytes(m, p, mb);
  } else if (r.moe_act && m.moe.enabled()) {
    // moe_act: only the activation's own outputs (SwiGLU: silu(gate) and the product; GELU,
    // ReLU^2: the activation output) of the routed experts.
    const double capacity = m.moe.capacity_factor > 0 ? m.moe.capacity_factor : 1.0;
    const double routed_ffn = static_cast<double>(m.moe.expert_ffn) * m.moe.top_k * capacity;
    // The last of them is the down projection's input, kept as that GEMM saves it.
    freed += ((m.mlp == MlpKind::swiglu ? 1.0 : 0.0) * d.e + d.linear_e) * sb * routed_ffn / t.mlp_inner;
  }
  return freed;
}

namespace {

// torchtitan per-op SAC (llama3 `_op_sac_save_list`): the outputs of every second matmul
// (1st, 3rd, ...), the attention kernel's outputs and reduce-scatter outputs are saved.
struct OpSacSaved {
  double needed = 0;    // saved outputs that backward reads (directly or to recompute the rest)
  double unneeded = 0;  // saved outputs nothing in backward reads: the block's last matmul (down
                        // projection) and the TP reduce-scatter outputs, which only feed residual adds
};

OpSacSaved op_sac_saved(const ModelSpec& m, const Plan& p, MicroBatchShape mb) {
  const Dims d = dims(m, p, mb);
  const TpSplit t = tp_split(p);
  const double sb = d.s * d.b;
  std::vector<double> mm_outputs = {d.q_width / t.heads, d.kv_width / t.heads, d.kv_width / t.heads,
                                    d.h};  // wq, wk, wv, wo (rowwise output before reduction)
  const double f = d.ffn / t.mlp_inner;
  if (m.mlp == MlpKind::swiglu) {
    mm_outputs.insert(mm_outputs.end(), {f, f, d.h});  // w1, w3, w2
  } else {
    mm_outputs.insert(mm_outputs.end(), {f, d.h});  // up, down
  }
  OpSacSaved saved;
  const std::size_t last = mm_outputs.size() - 1;
  for (std::size_t i = 0; i < mm_outputs.size(); i += 2)
    (i == last ? saved.unneeded : saved.needed) += d.e * sb * mm_outputs[i];
  saved.needed += d.e * sb * d.q_width / t.heads + 4 * d.heads * sb / t.heads;  // attention out + lse
  if (p.mesh.tp > 1 && p.sequence_parallel) saved.unneeded += 2 * d.e * sb * d.h / t.seq_sharded;
  return saved;
}

// Eager SAC (torch.utils.checkpoint's caching dispatch mode) stores the output of every op the
// policy saves, read by backward or not, until the block's backward; under torch.compile the
// policy only tags graph nodes and the partitioner saves just what backward reads.
double op_sac_saved_bytes(const ModelSpec& m, const Plan& p, MicroBatchShape mb) {
  const OpSacSaved s = op_sac_saved(m, p, mb);
  return s.needed + (p.compile ? 0.0 : s.unneeded);
}

bool block_is_checkpointed(const Plan& p, int block_index) {
  switch (p.ac) {
    case AcMode::full: return true;
    case AcMode::selective_layer: return block_index % std::max(1, p.ac_every_n) == 0;
    default: return false;
  }
}

}  // namespace

double saved_block_bytes(const ModelSpec& m, const Plan& p, MicroBatchShape mb, int block_index) {
  const BlockActivations a = block_activations(m, p, mb);
  const double freed = recompute_modules_freed_bytes(m, p, mb);
  switch (p.ac) {
    case AcMode::none: return a.total() - freed;
    case AcMode::full:
    case AcMode::selective_layer:
      return block_is_checkpointed(p, block_index) ? a.block_input_bytes : a.total();
    case AcMode::selective_attn:
      // Megatron recomputes only core attention: the s^2 terms are not kept.
      return (p.flash_attention ? a.total() : a.total() - a.attention_scores_bytes) - freed;
    case AcMode::selective_op: return a.block_input_bytes + op_sac_saved_bytes(m, p, mb);
  }
  return a.total();
}

double offloaded_block_bytes(const ModelSpec& m, const Plan& p, MicroBatchShape mb, int block_index) {
  if (!p.act_offload) return 0;
  const double saved = saved_block_bytes(m, p, mb, block_index);
  const Plan::OffloadModules& o = p.offload_modules;
  // A checkpointed block keeps only its input: there is nothing per submodule to pick from.
  if (!o.any() || block_is_checkpointed(p, block_index)) return saved;
  const Dims d = dims(m, p, mb);
  const TpSplit t = tp_split(p);
  const double sb = d.s * d.b;
  const double norm_input = d.norm_e * sb * d.h / t.seq_sharded;
  double bytes = 0;
  if (o.attn_norm) bytes += norm_input;
  if (o.mlp_norm) bytes += norm_input;
  // --recompute-modules layernorm drops the norm outputs: the QKV input is not saved then.
  if (o.qkv_linear && !p.recompute_modules.norms) bytes += d.linear_e * sb * d.h / t.linear_input;
  const bool attention_recomputed = p.ac == AcMode::selective_attn && !p.flash_attention;
  if (o.core_attn && !attention_recomputed) {
    // Q, K, V and the softmax log-sum-exp; MLA's expanded heads are d_nope + d_rope wide.
    const double qk = m.attention == AttentionKind::mla
                          ? static_cast<double>(m.n_heads) * static_cast<double>(m.head_dim + m.mla.rope_head_dim)
                          : d.q_width;
    const double kv = m.attention == AttentionKind::mla ? qk : d.kv_width;
    const double v = m.attention == AttentionKind::mla
                         ? static_cast<double>(m.n_heads) * static_cast<double>(m.mla.v_head_dim)
                         : d.kv_width;
    bytes += d.attn_e * sb * (qk + kv + v) / t.heads + 4 * d.heads * sb / t.heads;
  }
  if (o.attn_proj) {
    const double out = m.attention == AttentionKind::mla
                           ? static_cast<double>(m.n_heads) * static_cast<double>(m.mla.v_head_dim)
                           : d.q_width;
    bytes += d.linear_e * sb * out / t.heads;  // the projection's own copy where it quantizes
  }
  if (m.moe.enabled() && !p.recompute_modules.moe) {
    const RoutedCopies r = routed_copies(m, p, sb);
    if (o.expert_fc1) bytes += d.linear_e * r.copies * d.h;
    // The activation's input is the first GEMM's output: gate and up under SwiGLU, over the
    // expert tensor-parallel split of the inner width.
    if (o.moe_act)
      bytes += (m.mlp == MlpKind::swiglu ? 2.0 : 1.0) * d.e * r.copies * static_cast<double>(m.moe.expert_ffn) / r.etp;
  }
  return std::min(bytes, saved);
}

double recompute_working_bytes(const ModelSpec& m, const Plan& p, MicroBatchShape mb) {
  const BlockActivations a = block_activations(m, p, mb);
  double working = 0;
  switch (p.ac) {
    case AcMode::none: return 0;
    case AcMode::full:
    case AcMode::selective_layer: working = a.total(); break;
    case AcMode::selective_attn:
      working = p.flash_attention ? 0 : a.attention_scores_bytes;
      break;
    case AcMode::selective_op: working = a.total() - op_sac_saved(m, p, mb).needed; break;
  }
  // Reentrant also rebuilds the block's output (non-reentrant stops early before it).
  if (p.ac_reentrant && working > 0) working += a.block_input_bytes;
  return working;
}

double mtp_input_saved_bytes(const ModelSpec& m, const Plan& p, MicroBatchShape mb) {
  const Dims d = dims(m, p, mb);
  const TpSplit t = tp_split(p);
  const double sb = d.s * d.b;
  return 2 * d.norm_e * sb * d.h / t.seq_sharded + d.linear_e * sb * 2 * d.h / t.linear_input;
}

namespace {
// The loss's share of the vocabulary: its TP shard under loss parallelism, else all of it.
double vocab_split(const Plan& p) {
  return (p.mesh.tp > 1 && p.tp_style == TpStyle::full && p.loss_parallel) ? p.mesh.tp : 1.0;
}
}  // namespace

double loss_saved_bytes(const ModelSpec& m, const Plan& p, MicroBatchShape mb) {
  const Dims d = dims(m, p, mb);
  const TpSplit t = tp_split(p);
  const double sb = d.s * d.b;
  const double final_norm_input = d.norm_e * sb * d.h / t.seq_sharded;
  const double head_input = d.e * sb * d.h;
  const double logits = sb * static_cast<double>(m.vocab) / vocab_split(p);
  // Fused: the low-precision logits and an fp32 log-sum-exp per row; torch: the fp32 log-probs.
  // Chunked (torchtune CEWithChunkedOutputLoss): each chunk's log_softmax saves its fp32 output,
  // so all chunks' log-probs are kept as with torch; what chunking saves is transient.
  const double kept = p.fused_cross_entropy ? d.e * logits + 4 * sb : 4 * logits;
  return final_norm_input + head_input + kept;
}

double loss_backward_working_bytes(const ModelSpec& m, const Plan& p, MicroBatchShape mb) {
  const double sb = static_cast<double>(mb.seq_len) * static_cast<double>(mb.micro_batch);
  const double logits = sb * static_cast<double>(m.vocab) / vocab_split(p);
  // The fused kernel writes softmax - onehot once, in the logits' dtype. torch: nll_loss backward
  // materialises a dense fp32 gradient over the vocab, and log_softmax backward a second one,
  // before the cast back to the head's dtype.
  if (p.fused_cross_entropy) return bytes_per_element(p.compute_dtype) * logits;
  // Chunked: the two fp32 gradients and the cast back exist for one chunk at a time (each chunk
  // has its own output projection, whose backward consumes the chunk's gradient).
  if (p.chunked_cross_entropy)
    return (2 * 4 + bytes_per_element(p.compute_dtype)) * logits / std::max(1, p.loss_chunks);
  return 2 * 4 * logits;
}

double loss_forward_peak_bytes(const ModelSpec& m, const Plan& p, MicroBatchShape mb) {
  // log_softmax reads the fp32 logits (autocast's fp32 cast or an explicit .float()) and writes
  // the fp32 log-probs, which loss_saved_bytes counts: both exist until the kernel returns; the
  // head's low-precision output was freed by the cast. The fused kernel reads the saved logits.
  if (p.fused_cross_entropy) return loss_saved_bytes(m, p, mb);
  const double sb = static_cast<double>(mb.seq_len) * static_cast<double>(mb.micro_batch);
  const double logits = sb * static_cast<double>(m.vocab) / vocab_split(p);
  // Chunked: the low-precision logits of every chunk (the model returns them as a list) and one
  // chunk's fp32 upcast.
  if (p.chunked_cross_entropy)
    return loss_saved_bytes(m, p, mb) + bytes_per_element(p.compute_dtype) * logits + 4 * logits / std::max(1, p.loss_chunks);
  return loss_saved_bytes(m, p, mb) + 4 * logits;
}

double block_backward_working_bytes(const ModelSpec& m, const Plan& p, MicroBatchShape mb) {
  const Dims d = dims(m, p, mb);
  const TpSplit t = tp_split(p);
  const double sb = d.s * d.b;
  // The gradient flowing into the block (same shape and dtype as its output).
  const double incoming = d.residual_e * sb * d.h / t.seq_sharded;
  // MLP backward, down-projection done (its input freed): SwiGLU's mul backward holds d(silu(gate))
  // and d(up) while the product's gradient is released; GELU and ReLU^2 hold d(activation input)
  // while the activation output is released.
  const double f = d.ffn / t.mlp_inner;  // per rank, as in block_activations
  const double inner_grads = (m.mlp == MlpKind::swiglu ? 2.0 : 1.0) * d.e * sb * f;
  // Attention backward: dO, then dQ, dK, dV while Q, K, V stay saved.
  const double attn_grads = d.e * sb * (2 * d.q_width + 2 * d.kv_width) / t.heads;
  return incoming + std::max(inner_grads, attn_grads);
}

double pipeline_boundary_bytes(const ModelSpec& m, const Plan& p, MicroBatchShape mb, double microbatches_in_flight) {
  if (runtime_traits(p).frees_sent_pipeline_outputs) return 0;
  const Dims d = dims(m, p, mb);
  const TpSplit t = tp_split(p);
  return microbatches_in_flight * d.residual_e * d.s * d.b * d.h / t.seq_sharded;
}

}  // namespace meshplan

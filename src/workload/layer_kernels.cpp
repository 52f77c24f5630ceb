#include "workload/layer_kernels.hpp"

#include <algorithm>
#include <cmath>

#include "workload/eager_ops.hpp"
#include "workload/moe_launches.hpp"
#include "workload/moe_routing.hpp"

namespace meshplan {

namespace {

// Launches of a block's forward with fused element-wise kernels, GEMMs included (the simulator
// counts at least one launch per GEMM and attention kernel):
// norm + QKV GEMM, and with RoPE its two rotations (q, k);
constexpr int kQkvKernels = 2, kRopeKernels = 2;
// core attention + output projection + residual add + second norm;
constexpr int kAttentionOutKernels = 4;
// the up GEMM(s) + activation + down GEMM + residual add (kMlpKernelsBesideUp beside the up GEMMs).
constexpr int kMlpKernelsBesideUp = 3;
// Unfused attention: QK^T, softmax, PV forward (+ dropout); backward the dgrad and wgrad of both
// batched GEMMs and the softmax backward (+ dropout's).
constexpr int kScoreKernelsForward = 3, kScoreKernelsBackward = 5;
// Backward of a fused block: twice the forward's bytes and launches (each kernel's data and
// weight gradient, or its input gradient and a reduction).
constexpr double kBackwardOverForward = 2;

// Delayed scaling keeps an amax history per FP8 tensor; 1024 is the length of Transformer Engine's
// DelayedScaling recipe default (and NeMo's fp8_amax_history_len).
constexpr double kAmaxHistoryLen = 1024;
constexpr double kFp8TensorsPerLinear = 3;  // input, weight, output gradient
constexpr double kFp32Bytes = 4;

// Eager PyTorch runs the norms, RoPE and the SwiGLU gate op by op (workload/eager_ops.hpp).
void add_eager_composites(const ModelSpec& m, const LayerDims& d, LayerKernels& k, bool moe_layer) {
  auto add = [](const ElementwiseCost& c, double elements, double& fwd, double& bwd, int& fwd_k, int& bwd_k) {
    fwd += c.forward_bytes_per_element * elements;
    bwd += c.backward_bytes_per_element * elements;
    fwd_k += c.forward_kernels;
    bwd_k += c.backward_kernels;
  };
  const double t = static_cast<double>(d.tokens);
  if (m.norm == NormKind::rmsnorm) {
    const double norm_elements = t * static_cast<double>(d.h) / d.sp_split;
    add(eager_rmsnorm_extra(d.e), norm_elements, k.pre_attention_bytes, k.pre_attention_bytes_bwd, k.pre_kernels,
        k.pre_kernels_bwd);
    add(eager_rmsnorm_extra(d.e), norm_elements, k.post_attention_bytes, k.post_attention_bytes_bwd, k.attn_kernels,
        k.attn_kernels_bwd);
  }
  if (m.pos_emb == PosEmb::rope)
    add(eager_rope_extra(d.e), t * static_cast<double>(d.q_width + d.kv_width) / static_cast<double>(d.attn_split),
        k.pre_attention_bytes, k.pre_attention_bytes_bwd, k.pre_kernels, k.pre_kernels_bwd);
  if (m.mlp == MlpKind::swiglu) {
    const bool moe = moe_layer && m.moe.enabled();
    const double inner = moe ? static_cast<double>(d.per_expert_tokens) * d.local_experts * static_cast<double>(d.f_expert_local)
                             : static_cast<double>(d.mlp_tokens) * static_cast<double>(d.f_dense_local);
    add(eager_swiglu_extra(d.e), inner, k.mlp_bytes, k.mlp_bytes_bwd, k.mlp_kernels, k.mlp_kernels_bwd);
  }
}

// The MoE router beside its GEMM, as Megatron-Core runs it with its fused router kernels
// (--moe-router-fusion; router.py TopKRouter.aux_loss_load_balancing): per token and expert, the
// top-k softmax reads the logits and writes dense fp32 probabilities and a 1-byte routing map
// (e + 5); the auxiliary loss's scores read them again and write fp32 scores and their map (e + 5);
// the loss sums the map and the scores over the tokens (1 + 4). The rest (top-k indices, the
// loss's arithmetic on E values) is per token or per expert, negligible beside it.
constexpr double kRouterBytesPerScoreBeyond2e = 15;
// The auxiliary loss's launches: its scores (one fused kernel) and the two sums over the tokens.
constexpr int kAuxLossKernels = 3;

double moe_router_bytes(const ModelSpec& m, const LayerDims& d) {
  return static_cast<double>(d.moe_tokens) * m.moe.n_experts * (2 * d.e + kRouterBytesPerScoreBeyond2e);
}

// Unfused attention: the score matrix in HBM, QK^T and PV as batched GEMMs.
void add_unfused_attention(const Plan& p, const LayerDims& d, LayerKernels& k) {
  const AttentionShape& a = k.attention;
  const std::int64_t bh = a.batch * a.heads;
  k.fused_attention = false;
  k.score_gemms = {{a.seq_q, a.seq_kv, a.head_dim, bh},   // S = Q K^T (every pair: no causal skip)
                   {a.seq_q, a.head_dim, a.seq_kv, bh}};  // O = P V
  const double scores = static_cast<double>(bh) * static_cast<double>(a.seq_q) * static_cast<double>(a.seq_kv);
  // Fused scale-mask-softmax reads and writes the scores; dropout writes the kept values and a
  // 1-byte mask. Backward: dropout (read grad and mask, write), softmax (read y and dy, write).
  k.score_bytes_fwd = scores * (2 * d.e + (p.dropout ? 2 * d.e + 1 : 0.0));
  k.score_bytes_bwd = scores * (3 * d.e + (p.dropout ? 2 * d.e + 1 : 0.0));
  k.score_kernels_fwd = kScoreKernelsForward + (p.dropout ? 1 : 0);
  k.score_kernels_bwd = kScoreKernelsBackward + (p.dropout ? 1 : 0);
}

// The MLP's GEMMs and element-wise bytes: dense, or MoE's router, routed and shared experts.
// The routed experts of a rank run as grouped GEMMs (one launch over its local experts, as
// Megatron's TEGroupedMLP / GroupedMLP and torchtitan's grouped_mm do): `local_experts` groups of
// the simulated (most-loaded) rank's mean rows, spread over its experts with expert_rows_cv.
void add_mlp(const ModelSpec& m, const Plan& p, const LayerDims& d, LayerKernels& k, bool moe_layer) {
  const double t = static_cast<double>(d.tokens);
  const int n_up = m.mlp == MlpKind::swiglu ? 2 : 1;
  const double act_io = m.mlp == MlpKind::swiglu ? 3 : 2;  // silu*mul reads 2, writes 1
  if (moe_layer && m.moe.enabled()) {
    const double mt = static_cast<double>(d.moe_tokens);
    const std::int64_t pe = d.per_expert_tokens;
    const auto cv = static_cast<float>(d.expert_rows_cv);
    k.mlp.push_back({d.moe_tokens, m.moe.n_experts, d.h, 1});  // router
    // Megatron without --moe-grouped-gemm (SequentialMLP): each local expert's GEMMs launched one
    // after another, at the mean rows.
    const bool op_by_op = runtime_traits(p).moe_layer_op_by_op;
    const bool sequential = !p.moe_grouped_gemm && op_by_op;
    const GemmGroup experts = sequential ? GemmGroup::sequential : GemmGroup::rows;
    const float spread = sequential ? 0.0F : cv;
    for (int i = 0; i < n_up; ++i) k.mlp.push_back({pe, d.f_expert_local, d.h, d.local_experts, experts, spread});
    k.mlp.push_back({pe, d.h, d.f_expert_local, d.local_experts, experts, spread});
    // What the most-loaded rank's experts compute beyond the mean rank's: not model FLOPs.
    k.mlp_excess_flops = 2.0 * (static_cast<double>(pe) * d.local_experts - d.routed_tokens) *
                         static_cast<double>(d.h) * static_cast<double>(d.f_expert_local) * (n_up + 1);
    // Shared experts see every token of the block, split over TP like a dense MLP.
    for (int sh = 0; sh < m.moe.n_shared_experts; ++sh) {
      for (int i = 0; i < n_up; ++i) k.mlp.push_back({d.tokens, d.f_local, d.h, 1});
      k.mlp.push_back({d.tokens, d.h, d.f_local, 1});
    }
    // Activation over each received copy; permute + unpermute of the received copies (read +
    // write each, twice), the weighted combine of the rank's own tokens (read top_k copies, write
    // one) and the residual add; the router's scores (moe_router_bytes).
    const double received = static_cast<double>(pe) * d.local_experts;
    k.mlp_bytes = act_io * d.e * received * static_cast<double>(d.f_expert_local) +
                  act_io * d.e * t * m.moe.n_shared_experts * static_cast<double>(d.f_local) +
                  4 * d.e * received * static_cast<double>(d.h) +
                  d.e * (d.routed_tokens + mt) * static_cast<double>(d.h) + 3 * d.e * mt * static_cast<double>(d.h) +
                  moe_router_bytes(m, d);
    // Each shared expert as a dense MLP. Megatron-Core: its MoE layer op by op (moe_launches.hpp).
    // Otherwise router + softmax/top-k + permute + the grouped up, activation, grouped down +
    // unpermute + combine + residual add, and the auxiliary loss.
    const int shared = m.moe.n_shared_experts * (n_up + 2);
    if (op_by_op) {
      const MoeLaunches n = megatron_moe_launches(
          {.dispatcher = p.moe_dispatcher,
           .across_ranks = p.mesh.ep > 1 || (p.moe_dispatcher == MoeDispatcher::alltoall && p.mesh.tp > 1),
           .local_experts = d.local_experts,
           .permute_fusion = p.moe_permute_fusion,
           .router_fusion = p.moe_router_fusion,
           .grouped_gemm = p.moe_grouped_gemm});
      k.mlp_kernels = n.forward + shared;
      k.mlp_kernels_bwd = n.backward + static_cast<int>(kBackwardOverForward) * shared;
      k.router_kernels = n.router_forward;
      k.router_kernels_bwd = n.router_backward;
      k.preprocess_kernels = n.preprocess_forward;
      return;
    }
    k.mlp_kernels = 3 + n_up + kMlpKernelsBesideUp + 2 + shared + kAuxLossKernels;
    return;
  }
  for (int i = 0; i < n_up; ++i) k.mlp.push_back({d.mlp_tokens, d.f_dense_local, d.h, 1});
  k.mlp.push_back({d.mlp_tokens, d.h, d.f_dense_local, 1});
  k.mlp_bytes = act_io * d.e * static_cast<double>(d.mlp_tokens) * static_cast<double>(d.f_dense_local) +
                3 * d.e * t * static_cast<double>(d.h) / d.sp_split;  // activation + residual add
  k.mlp_kernels = n_up + kMlpKernelsBesideUp;
}

// Multi-head latent attention (DeepSeek-V2 §2.1): the down projections (q_a, kv_a: the latent and
// the shared rotary key) are replicated over TP, as Megatron's MLASelfAttention leaves them; the up
// projections (q_b, kv_b) are column-parallel over heads; each latent has its RMSNorm.
void add_mla_projections(const ModelSpec& m, const LayerDims& d, LayerKernels& k) {
  const MlaSpec& a = m.mla;
  const std::int64_t heads = m.n_heads / d.attn_split;
  const std::int64_t qk = m.head_dim + a.rope_head_dim;
  if (a.q_lora_rank > 0) {
    k.pre_attention.push_back({d.tokens, a.q_lora_rank, d.h, 1});
    k.pre_attention.push_back({d.tokens, heads * qk, a.q_lora_rank, 1});
  } else {
    k.pre_attention.push_back({d.tokens, heads * qk, d.h, 1});
  }
  k.pre_attention.push_back({d.tokens, a.kv_lora_rank + a.rope_head_dim, d.h, 1});
  k.pre_attention.push_back({d.tokens, heads * (m.head_dim + a.v_head_dim), a.kv_lora_rank, 1});
  // The latents' norms (read + write each) and the rotary key broadcast to every head.
  const double t = static_cast<double>(d.tokens);
  k.pre_attention_bytes += 2 * d.e * t * static_cast<double>(a.q_lora_rank + a.kv_lora_rank) +
                           d.e * t * static_cast<double>(heads * a.rope_head_dim);
  k.pre_kernels += (a.q_lora_rank > 0 ? 3 : 1) + 2;
}

}  // namespace

LayerDims layer_dims(const ModelSpec& m, const Plan& p, const Job& j, double moe_router_load_cv) {
  LayerDims d;
  const int tp = p.mesh.tp;
  const bool full_tp = p.tp_style == TpStyle::full;
  d.e = bytes_per_element(p.compute_dtype);
  d.s_full = j.seq_len;
  d.s_local = j.seq_len / std::max(1, p.mesh.cp);
  d.b = j.micro_batch;
  d.tokens = d.s_local * d.b;
  d.h = m.d_model;
  d.q_width = static_cast<std::int64_t>(m.n_heads) * m.head_dim;
  d.kv_width = static_cast<std::int64_t>(m.n_kv_heads) * m.head_dim;
  d.f = m.moe.enabled() ? m.moe.expert_ffn : m.ffn_hidden;
  d.attn_split = full_tp ? tp : 1;
  d.mlp_tokens = d.tokens * (full_tp ? 1 : tp);  // llm-foundry's ffn TP gathers the batch
  d.f_local = std::max<std::int64_t>(1, d.f / tp);
  d.f_dense_local = std::max<std::int64_t>(1, m.ffn_hidden / tp);
  d.vocab_local = full_tp ? m.vocab / tp : m.vocab;
  d.sp_split = (full_tp && tp > 1 && p.sequence_parallel) ? tp : 1;
  if (m.attention == AttentionKind::mla) {
    // Q and K carry the rotary part; V is v_head_dim wide. kv_width stands for (K + V) / 2.
    const std::int64_t qk = m.head_dim + m.mla.rope_head_dim;
    d.q_width = static_cast<std::int64_t>(m.n_heads) * qk;
    d.kv_width = static_cast<std::int64_t>(m.n_heads) * (qk + m.mla.v_head_dim) / 2;
  }
  if (m.moe.enabled()) {
    const int etp = std::max(1, std::min(tp, p.mesh.expert_tp()));
    // Megatron requires sequence parallelism for MoE with TP; without it the experts stay TP-split.
    d.moe_skips_tp_gather = full_tp && tp > 1 && etp < tp && p.sequence_parallel;
    d.moe_tokens = d.moe_skips_tp_gather ? std::max<std::int64_t>(1, d.tokens * etp / tp) : d.tokens;
    const double capacity = m.moe.capacity_factor > 0 ? m.moe.capacity_factor : 1.0;
    d.routed_tokens = static_cast<double>(d.moe_tokens) * m.moe.top_k * capacity;
    const int ep = std::max(1, p.mesh.ep);
    d.local_experts = std::max(1, m.moe.n_experts / ep);
    // Capacity-padded buffers are full by construction. Dropless routing is balanced by the
    // auxiliary loss on average only: the most-loaded rank receives more, and with forced balance
    // (random routing) the sampling noise remains (moe_routing.hpp).
    if (m.moe.capacity_factor <= 0) {
      const RoutedLoad load = routed_load(m.moe.n_experts, m.moe.top_k, ep, static_cast<double>(d.moe_tokens),
                                          m.moe.force_balance ? 0.0 : moe_router_load_cv);
      d.moe_rank_load = load.rank_load_factor;
      d.expert_rows_cv = load.expert_rows_cv;
    }
    d.per_expert_tokens = std::max<std::int64_t>(
        1, static_cast<std::int64_t>(std::llround(d.received_tokens() * ep / std::max(1, m.moe.n_experts))));
    d.f_expert_local = std::max<std::int64_t>(1, m.moe.expert_ffn / etp);
  }
  return d;
}

LayerKernels layer_kernels(const ModelSpec& m, const Plan& p, const LayerDims& d, bool moe_layer) {
  LayerKernels k;
  const double t = static_cast<double>(d.tokens);
  const bool mla = m.attention == AttentionKind::mla;
  if (!mla) k.pre_attention.push_back({d.tokens, (d.q_width + 2 * d.kv_width) / d.attn_split, d.h, 1});
  // norm (read + write); RoPE models rotate q and k (read + write)
  const bool rope = m.pos_emb == PosEmb::rope;
  k.pre_attention_bytes = 2 * d.e * t * static_cast<double>(d.h) / d.sp_split +
                          (rope ? 2 * d.e * t * static_cast<double>(d.q_width + d.kv_width) / d.attn_split : 0.0);
  k.pre_kernels = kQkvKernels + (rope ? kRopeKernels : 0);
  if (mla) add_mla_projections(m, d, k);
  // QK-norm: an RMSNorm over every query and key head (read + write each), one kernel each.
  if (m.qk_norm) {
    k.pre_attention_bytes += 2 * d.e * t * static_cast<double>(d.q_width + d.kv_width) / d.attn_split;
    k.pre_kernels += 2;
  }
  // MLA's attention: QK^T over head_dim + rope_head_dim and PV over v_head_dim; one kernel shape
  // whose head width is their mean has exactly those FLOPs (4 b h s_q s_kv (d_qk + d_v) / 2).
  const std::int64_t attn_head_dim =
      mla ? (m.head_dim + m.mla.rope_head_dim + m.mla.v_head_dim) / 2 : m.head_dim;
  k.attention = {d.b, m.n_heads / d.attn_split, std::max<std::int64_t>(1, m.n_kv_heads / d.attn_split),
                 d.s_local, d.s_full, attn_head_dim, true, p.flash_attention_version};
  k.attention.backend = runtime_traits(p).attention_backend;
  k.attention.kernel = p.attention_kernel;
  k.attention.cudnn_version = p.cudnn_version;
  if (!p.flash_attention) add_unfused_attention(p, d, k);
  const std::int64_t o_in = mla ? static_cast<std::int64_t>(m.n_heads) * m.mla.v_head_dim : d.q_width;
  k.post_attention.push_back({d.tokens, d.h, o_in / d.attn_split, 1});
  // residual add (2 reads + 1 write), second norm
  k.post_attention_bytes = 3 * d.e * t * static_cast<double>(d.h) / d.sp_split +
                           2 * d.e * t * static_cast<double>(d.h) / d.sp_split;
  k.attn_kernels = kAttentionOutKernels;
  add_mlp(m, p, d, k, moe_layer);
  k.pre_attention_bytes_bwd = kBackwardOverForward * k.pre_attention_bytes;
  k.post_attention_bytes_bwd = kBackwardOverForward * k.post_attention_bytes;
  k.mlp_bytes_bwd = kBackwardOverForward * k.mlp_bytes;
  k.pre_kernels_bwd = static_cast<int>(kBackwardOverForward) * k.pre_kernels;
  k.attn_kernels_bwd = static_cast<int>(kBackwardOverForward) * k.attn_kernels;
  if (k.mlp_kernels_bwd == 0) k.mlp_kernels_bwd = static_cast<int>(kBackwardOverForward) * k.mlp_kernels;
  if (eager_composites(p)) {
    add_eager_composites(m, d, k, moe_layer);
    if (m.norm == NormKind::layernorm) {
      k.layernorm_bytes_fwd = 2 * d.e * t * static_cast<double>(d.h) / d.sp_split;
      k.layernorm_bytes_bwd = kBackwardOverForward * k.layernorm_bytes_fwd;
    }
  }
  return k;
}

Gemms grads_of(const Gemms& forward) {
  Gemms out;
  for (const auto& g : forward) {
    out.push_back(dgrad(g));
    out.push_back(wgrad(g));
  }
  return out;
}

double gemm_flops(const Gemms& gs) {
  double f = 0;
  for (const auto& g : gs) f += g.flops();
  return f;
}

QuantRecipe quant_recipe(Fp8Recipe r, bool compiled) {
  QuantRecipe q;
  q.eager_casts = !compiled && (r == Fp8Recipe::torchao_tensorwise || r == Fp8Recipe::torchao_rowwise);
  switch (r) {
    case Fp8Recipe::none: break;
    case Fp8Recipe::te_delayed:
      // Scales come from the amax history, so the cast needs no reduction first and records the
      // new amax as it goes; after each forward the history of every FP8 tensor (input, weight,
      // output gradient: kFp8TensorsPerLinear) is rolled and its scale recomputed.
      q.caches_weights = true;
      q.scale_update_bytes_per_linear =
          kFp8TensorsPerLinear * (2.0 * kAmaxHistoryLen * kFp32Bytes + 2.0 * kFp32Bytes);
      break;
    case Fp8Recipe::te_current:
      q.caches_weights = true;
      q.amax_pass = true;  // the scale of this very tensor: amax kernel, then the cast
      break;
    case Fp8Recipe::te_blockwise:
      q.caches_weights = true;
      q.act_scale_bytes = scale_bytes_per_element(Dtype::fp8_block);  // fp32 per 1x128
      q.weight_scale_bytes = kFp32Bytes / (128.0 * 128.0);           // fp32 per 128x128 block
      break;
    case Fp8Recipe::mxfp8:
      q.caches_weights = true;
      q.act_scale_bytes = q.weight_scale_bytes = scale_bytes_per_element(Dtype::mxfp8);
      break;
    case Fp8Recipe::nvfp4:
      q.caches_weights = true;
      q.data_bytes = bytes_per_element(Dtype::fp4);
      q.act_scale_bytes = scale_bytes_per_element(Dtype::fp4);  // E4M3 per 16 along the row
      q.weight_scale_bytes = 1.0 / (16.0 * 16.0);                // E4M3 per 16x16 block
      q.amax_pass = true;  // the fp32 per-tensor scale above the block scales
      break;
    case Fp8Recipe::torchao_tensorwise:
      // torchao's float8 linear saves the 16-bit input and weight and casts them (and the output
      // gradient) on every call; dynamic scaling reduces each tensor's amax before its cast.
      q.forward_copies = 1;
      q.amax_pass = true;
      q.recasts_inputs = true;
      break;
    case Fp8Recipe::torchao_rowwise:
      // Row-wise scales are local to a row: the forward casts fuse their amax. The backward's
      // GEMMs contract the other dimension (torchao's float8 linear: the output gradient scaled
      // per row for the data gradient and per column for the weight gradient, the input and the
      // weight along the dimension the forward did not), so the output gradient is cast twice and
      // the column-wise casts reduce in a pass of their own.
      q.forward_copies = 1;
      q.recasts_inputs = true;
      q.column_casts_reduce_separately = true;
      break;
  }
  return q;
}

double quantize_forward_bytes(const Gemms& linears, double e, const QuantRecipe& q, bool weights) {
  const double read = q.amax_pass ? 2 * e : e;
  // Eager: every copy is a cast chain of its own.
  const double act = q.eager_casts ? q.forward_copies * (eager_cast_bytes(e, q.data_bytes) + q.act_scale_bytes)
                                   : read + q.forward_copies * (q.data_bytes + q.act_scale_bytes);
  const double wt = q.eager_casts ? q.forward_copies * (eager_cast_bytes(e, q.data_bytes) + q.weight_scale_bytes)
                                  : read + q.forward_copies * (q.data_bytes + q.weight_scale_bytes);
  double bytes = 0;
  for (const GemmShape& g : linears) {
    const double b = static_cast<double>(g.batch);
    bytes += act * b * static_cast<double>(g.m) * static_cast<double>(g.k);
    if (weights) bytes += wt * b * static_cast<double>(g.k) * static_cast<double>(g.n);
    bytes += q.scale_update_bytes_per_linear;
  }
  return bytes;
}

double quantize_weight_shard_bytes(const Gemms& linears, double e, const QuantRecipe& q, int shards) {
  double bytes = 0;
  const double per_element =
      q.eager_casts ? eager_cast_bytes(e, q.data_bytes) + q.weight_scale_bytes : 2 * e + q.data_bytes + q.weight_scale_bytes;
  for (const GemmShape& g : linears)
    bytes += static_cast<double>(g.batch) * static_cast<double>(g.k) * static_cast<double>(g.n) * per_element;
  return bytes / std::max(shards, 1);
}

double quantize_backward_bytes(const Gemms& linears, double e, const QuantRecipe& q, bool weights) {
  const double read = q.amax_pass ? 2 * e : e;
  const double recast_read = q.column_casts_reduce_separately ? 2 * e : read;
  // Eager: a cast chain per scaling axis (row-wise: one per copy); a per-tensor scale's second
  // copy is the first one transposed (read and write `data` bytes).
  const double act_chain = eager_cast_bytes(e, q.data_bytes) + q.act_scale_bytes;
  // Fused: one kernel writes every copy of the output gradient; with column-wise scales its column
  // copy is a cast of its own after its own reduction (two more reads).
  const double grad =
      q.eager_casts ? (q.column_casts_reduce_separately ? q.grad_copies * act_chain
                                                        : act_chain + (q.grad_copies - 1) * 2 * q.data_bytes)
      : q.column_casts_reduce_separately ? read + 2 * e + q.grad_copies * (q.data_bytes + q.act_scale_bytes)
                                         : read + q.grad_copies * (q.data_bytes + q.act_scale_bytes);
  const double act_recast = q.eager_casts ? act_chain : recast_read + q.data_bytes + q.act_scale_bytes;
  const double wt_recast = q.eager_casts ? eager_cast_bytes(e, q.data_bytes) + q.weight_scale_bytes
                                         : recast_read + q.data_bytes + q.weight_scale_bytes;
  double bytes = 0;
  for (const GemmShape& g : linears) {
    const double b = static_cast<double>(g.batch);
    bytes += grad * b * static_cast<double>(g.m) * static_cast<double>(g.n);
    if (q.recasts_inputs)
      bytes += b * (act_recast * static_cast<double>(g.m) * static_cast<double>(g.k) +
                    (weights ? wt_recast : 0.0) * static_cast<double>(g.k) * static_cast<double>(g.n));
  }
  return bytes;
}

double attention_cast_bytes(const AttentionShape& a, Pass pass, double e, const QuantRecipe& q) {
  const double tokens = static_cast<double>(a.batch) * static_cast<double>(a.seq_q);
  const double q_elems = tokens * static_cast<double>(a.heads) * static_cast<double>(a.head_dim);
  const double kv_elems = tokens * static_cast<double>(a.kv_heads) * static_cast<double>(a.head_dim);
  const double low = q.data_bytes + q.act_scale_bytes;
  const double in = (q.amax_pass ? 2 * e : e) + low;  // read 16-bit (and its amax), write FP8 + scales
  const double out = low + e;                         // read FP8 + scales, write 16-bit
  if (pass == Pass::forward) return in * (q_elems + 2 * kv_elems) + out * q_elems;
  return in * q_elems + out * (q_elems + 2 * kv_elems);
}

int quantize_forward_kernels(const Gemms& linears, const QuantRecipe& q, bool weights) {
  const int per_tensor = q.eager_casts ? q.forward_copies * kEagerCastKernels : q.amax_pass ? 2 : 1;
  return static_cast<int>(linears.size()) * per_tensor * (weights ? 2 : 1);
}

int quantize_backward_kernels(const Gemms& linears, const QuantRecipe& q, bool weights) {
  const int per_tensor = q.amax_pass ? 2 : 1;
  const int recast_tensors = q.recasts_inputs ? (weights ? 2 : 1) : 0;
  if (q.eager_casts) {  // the gradient's chains (or one chain and a transpose), each recast's chain
    const int grad = q.column_casts_reduce_separately ? q.grad_copies * kEagerCastKernels
                                                      : kEagerCastKernels + (q.grad_copies - 1);
    return static_cast<int>(linears.size()) * (grad + recast_tensors * kEagerCastKernels);
  }
  if (q.column_casts_reduce_separately)  // the gradient's row cast, then a reduction + cast per column cast
    return static_cast<int>(linears.size()) * (per_tensor + 2 + 2 * recast_tensors);
  return static_cast<int>(linears.size()) * per_tensor * (1 + recast_tensors);
}

}  // namespace meshplan

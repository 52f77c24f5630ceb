#pragma once
// The kernels of one transformer block on one rank, for one micro-batch: GEMM shapes after the
// TP/CP/EP splits, the fused attention shape (or the unfused score GEMMs and softmax), and the
// bytes and launches of the memory-bound kernels around them. The lowering copies these into ops;
// they are the same for every block and micro-batch of a step.
#include <cstdint>

#include "spec/model_spec.hpp"
#include "spec/plan.hpp"
#include "workload/step_program.hpp"

namespace meshplan {

// Rank-local sizes of one micro-batch on one layer.
struct LayerDims {
  double e = 2;            // activation bytes per element
  std::int64_t tokens = 0; // s/cp * b
  std::int64_t s_local = 0, s_full = 0, b = 1;
  std::int64_t h = 0, q_width = 0, kv_width = 0, f = 0;
  std::int64_t attn_split = 1, mlp_tokens = 0, f_local = 0, vocab_local = 0;
  std::int64_t f_dense_local = 0;  // a dense MLP's width on this rank (ffn_hidden / tp); f_local is
                                   // the expert width (shared experts) in an MoE model
  double sp_split = 1;     // sequence-parallel split of norm / residual tensors
  // MoE layers. moe_tokens enter the block on this rank: all `tokens` when the experts are
  // tensor-parallel like the rest (etp = tp), the sequence-parallel shard tokens * etp / tp when
  // the EP group borrows TP ranks (Megatron with --expert-tensor-parallel-size < tp).
  std::int64_t moe_tokens = 0;
  double routed_tokens = 0;       // token copies sent to experts: moe_tokens * top_k (* capacity)
  // Dropless routing (moe_routing.hpp): the most-loaded EP rank receives moe_rank_load x the mean
  // copies, and every rank waits for it at the next all-to-all; the rank simulated is that one.
  // Its experts' rows spread with expert_rows_cv. Capacity-padded routing: 1 and 0.
  double moe_rank_load = 1;
  double expert_rows_cv = 0;
  std::int64_t per_expert_tokens = 0;  // mean rows of the simulated rank's local experts' GEMMs
  int local_experts = 1;          // n_experts / ep
  std::int64_t f_expert_local = 0; // expert_ffn / etp
  bool moe_skips_tp_gather = false;  // etp < tp: the MoE block runs on the SP shard, no TP gather
  // Token copies the simulated rank's experts receive: the mean routed copies x its load.
  double received_tokens() const { return routed_tokens * moe_rank_load; }
  // Bytes of one direction of the EP all-to-all (dispatch, or combine) per rank: every routed
  // token copy crosses; the collective moves the (ep - 1) / ep that leave the rank. The most-loaded
  // rank receives (dispatch) and returns (combine) its received copies, which set the pace.
  double a2a_bytes() const { return e * received_tokens() * static_cast<double>(h); }
  // Bytes of one activation tensor of the block's input shape (the TP collectives' payload).
  double activation_bytes() const { return e * static_cast<double>(tokens) * static_cast<double>(h); }
  // K and V of the whole CP group, as torchtitan's all-gather rotation collects them.
  double cp_kv_bytes(int cp) const {
    return 2 * e * static_cast<double>(tokens) * static_cast<double>(kv_width) / static_cast<double>(attn_split) * cp;
  }
};

// `moe_router_load_cv`: the trained router's per-expert load coefficient of variation under
// dropless routing (the profile's framework.moe_router_load_cv; unused with a capacity factor or
// forced balance).
LayerDims layer_dims(const ModelSpec& m, const Plan& p, const Job& j, double moe_router_load_cv = 0);

// Kernels of one layer's forward, split where communication can interrupt them.
struct LayerKernels {
  Gemms pre_attention;   // QKV
  AttentionShape attention;
  // Unfused attention (no FlashAttention): QK^T and PV as batched GEMMs over the full s x s
  // score matrix, and the softmax (+ dropout) over it as memory-bound kernels.
  bool fused_attention = true;
  Gemms score_gemms;
  double score_bytes_fwd = 0, score_bytes_bwd = 0;
  int score_kernels_fwd = 0, score_kernels_bwd = 0;
  Gemms post_attention;  // out projection
  Gemms mlp;             // up (+gate), down; MoE: router + experts
  // MoE: forward GEMM FLOPs of the simulated (most-loaded) rank's experts beyond the mean rank's,
  // which the mlp GEMMs include and model FLOPs do not (dropless routing's imbalance).
  double mlp_excess_flops = 0;
  double pre_attention_bytes = 0, post_attention_bytes = 0, mlp_bytes = 0;
  int pre_kernels = 0, attn_kernels = 0, mlp_kernels = 0;
  // Backward of the same element-wise work (fused kernels: twice the forward's bytes).
  double pre_attention_bytes_bwd = 0, post_attention_bytes_bwd = 0, mlp_bytes_bwd = 0;
  int pre_kernels_bwd = 0, attn_kernels_bwd = 0, mlp_kernels_bwd = 0;
  // Of an MoE block's MLP launches, its router's (forward, backward) and its dispatcher's
  // bookkeeping (forward), where the runtime launches them apart (workload/moe_launches.hpp).
  int router_kernels = 0, router_kernels_bwd = 0, preprocess_kernels = 0;
  // One of the block's two norms (before attention, before the MLP) where it runs as PyTorch's
  // layer_norm kernels (eager runtimes, LayerNorm models): its share of the bytes above, priced at
  // the kernel's own rate for the model width. 0 elsewhere.
  double layernorm_bytes_fwd = 0, layernorm_bytes_bwd = 0;
};

// `moe_layer`: an MoE block's MLP (router, grouped expert GEMMs, shared experts); false: a dense
// MLP of ffn_hidden (dense models, and the leading dense layers of an MoE model).
LayerKernels layer_kernels(const ModelSpec& m, const Plan& p, const LayerDims& d, bool moe_layer = true);

// A grouped GEMM's ragged rows stay the data gradient's rows and become the weight gradient's
// reduction depth (dW_g = X_g^T dY_g over each group's own tokens).
inline GemmShape dgrad(const GemmShape& g) { return {g.m, g.k, g.n, g.batch, g.group, g.group_cv}; }
inline GemmShape wgrad(const GemmShape& g) {
  return {g.k, g.n, g.m, g.batch, g.group == GemmGroup::rows ? GemmGroup::depth : g.group, g.group_cv};
}
// The backward GEMMs of forward linears: data and weight gradient of each.
Gemms grads_of(const Gemms& forward);
double gemm_flops(const Gemms& gs);

// Model FLOPs of attention's backward: twice the forward's, the convention of the MFU numerator
// (6N per token: 2 forward, 4 backward), not the kernel's recompute.
constexpr double kAttentionModelBackwardOverForward = 2.0;

// How a low-precision recipe quantizes the operands of the block linears' GEMMs: each cast is a
// memory-bound kernel that reads the 16-bit tensor and writes its low-precision copies with their
// scale factors (docs/compute.md "FP8 / FP4 linears", sources there).
struct QuantRecipe {
  double data_bytes = 1;          // per element of one quantized copy (fp8 1, NVFP4 1/2)
  double act_scale_bytes = 0;     // scale bytes per activation / gradient element
  double weight_scale_bytes = 0;  // scale bytes per weight element (2D blocks where the recipe uses them)
  // Copies written per operand: the row-wise one the forward / data-gradient GEMM reads and the
  // column-wise (transposed, or scaled along the other dimension) one for the other GEMM.
  int forward_copies = 2;         // of the activation (m x k) and the weight (k x n)
  int grad_copies = 2;            // of the output gradient (m x n)
  bool amax_pass = false;         // a separate amax reduction reads each tensor before its cast
  bool caches_weights = false;    // the quantized weights are reused after a step's first micro-batch
  bool recasts_inputs = false;    // backward casts the saved 16-bit input and the weight again
  // Scales along the other dimension for the backward GEMMs (row-wise recipes): a row-major
  // tensor's column amax is an outer reduction that cannot fuse into its cast, so each such cast
  // reads its 16-bit tensor twice, while the row-wise cast beside it reads it once.
  bool column_casts_reduce_separately = false;
  double scale_update_bytes_per_linear = 0;  // delayed scaling's amax-history roll and scale update
  // torchao's casts without torch.compile: each is the eager chain of aten ops its Python code is
  // (eager_cast_bytes), not one or two fused kernels.
  bool eager_casts = false;
};
// `compiled`: the run uses torch.compile, which fuses torchao's casts (Transformer Engine's are
// fused kernels either way).
QuantRecipe quant_recipe(Fp8Recipe r, bool compiled = true);

// One torchao cast as eager PyTorch runs it (torchao/float8 float8_scaling_utils.py and
// float8_tensor.py: tensor_to_amax, amax_to_scale, _ToFloat8ConstrFunc), HBM bytes per element of
// the 16-bit tensor (`e` bytes) for a copy of `data` bytes per element: abs (read e, write e), the
// amax reduction over it (read e), the upcast to fp32 (read e, write 4), the multiply by the scale
// (4 + 4), the clamp to the format's range (4 + 4) and the cast (read 4, write `data`):
// 4e + 24 + data, against 2e + data for the fused amax pass and cast. Kernels: those six and the
// scale's four on the amax (to float64, clamp, divide, to float32).
constexpr double eager_cast_bytes(double e, double data) { return 4 * e + 24 + data; }
constexpr int kEagerCastKernels = 10;

// Bytes and launches of the casts around `linears` (m x k activation, k x n weight, m x n output
// gradient each), e the bytes per element of the 16-bit tensors. Forward quantizes the activations
// and, when `weights`, the weights; backward the output gradients (and the inputs again where the
// recipe recasts them).
double quantize_forward_bytes(const Gemms& linears, double e, const QuantRecipe& q, bool weights);
double quantize_backward_bytes(const Gemms& linears, double e, const QuantRecipe& q, bool weights = true);
int quantize_forward_kernels(const Gemms& linears, const QuantRecipe& q, bool weights);
int quantize_backward_kernels(const Gemms& linears, const QuantRecipe& q, bool weights = true);
// FSDP float8 all-gather (torchao): each rank casts its own shard of the weights (1 / `shards` of
// them) before the all-gather, which then carries FP8; the casts read the 16-bit shard twice (its
// amax, then the cast) and write FP8.
double quantize_weight_shard_bytes(const Gemms& linears, double e, const QuantRecipe& q, int shards);

// Transformer Engine's FP8 DotProductAttention (without FP8 multi-head attention) casts the
// kernel's 16-bit inputs to FP8 and its FP8 outputs back: forward Q, K, V in and O out, backward
// dO in and dQ, dK, dV out, each over the rank's own seq_q tokens (its shard under context
// parallelism). `e` = bytes per 16-bit element.
double attention_cast_bytes(const AttentionShape& a, Pass pass, double e, const QuantRecipe& q);
constexpr int kAttentionCastKernelsPerPass = 4;  // one cast per tensor crossing the kernel boundary

}  // namespace meshplan

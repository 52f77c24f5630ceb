#include "workload/step_program.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <stdexcept>
#include <tuple>

#include "spec/pipeline_split.hpp"
#include "workload/activation_memory.hpp"
#include "workload/eager_ops.hpp"

namespace meshplan {

std::string_view to_string(StreamKind s) {
  switch (s) {
    case StreamKind::compute: return "compute";
    case StreamKind::fsdp_all_gather: return "fsdp_all_gather";
    case StreamKind::fsdp_reduce_scatter: return "fsdp_reduce_scatter";
    case StreamKind::tp: return "tp";
    case StreamKind::cp: return "cp";
    case StreamKind::ep: return "ep";
    case StreamKind::pp: return "pp";
    case StreamKind::dp: return "dp";
    case StreamKind::host_copy: return "host_copy";
  }
  return "?";
}

std::string_view to_string(OpCategory c) {
  switch (c) {
    case OpCategory::compute: return "compute";
    case OpCategory::recompute: return "recompute";
    case OpCategory::optimizer: return "optimizer";
    case OpCategory::fsdp_all_gather: return "fsdp_all_gather";
    case OpCategory::fsdp_reduce_scatter: return "fsdp_reduce_scatter";
    case OpCategory::dp_all_reduce: return "dp_all_reduce";
    case OpCategory::dp_reduce_scatter: return "dp_reduce_scatter";
    case OpCategory::param_all_gather: return "param_all_gather";
    case OpCategory::tp: return "tp";
    case OpCategory::cp: return "cp";
    case OpCategory::ep: return "ep";
    case OpCategory::pp: return "pp";
    case OpCategory::offload: return "offload";
  }
  return "?";
}

bool is_communication(OpCategory c) {
  return c != OpCategory::compute && c != OpCategory::recompute && c != OpCategory::optimizer &&
         c != OpCategory::offload;
}

std::string_view to_string(GroupKind g) {
  switch (g) {
    case GroupKind::tp: return "tp";
    case GroupKind::cp: return "cp";
    case GroupKind::fsdp: return "fsdp";
    case GroupKind::dp_replicate: return "dp_replicate";
    case GroupKind::dp: return "dp";
    case GroupKind::ep: return "ep";
    case GroupKind::pp: return "pp";
  }
  return "?";
}

double model_flops_per_token(const ModelSpec& m, std::int64_t seq_len) {
  const ParamCounts c = param_counts(m);
  const double non_embedding = static_cast<double>(n_active_params(m) - c.embedding - c.position);
  const double attention = 12.0 * m.n_layers * static_cast<double>(m.n_heads) * m.head_dim * seq_len;
  return 6.0 * non_embedding + attention;
}

namespace {

// Rank-local sizes of one micro-batch on one layer.
struct LayerDims {
  double e = 2;            // activation bytes per element
  std::int64_t tokens = 0; // s/cp * b
  std::int64_t s_local = 0, s_full = 0, b = 1;
  std::int64_t h = 0, q_width = 0, kv_width = 0, f = 0;
  std::int64_t attn_split = 1, mlp_tokens = 0, f_local = 0, vocab_local = 0;
  double sp_split = 1;     // sequence-parallel split of norm / residual tensors
};

LayerDims layer_dims(const ModelSpec& m, const Plan& p, const Job& j) {
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
  d.vocab_local = full_tp ? m.vocab / tp : m.vocab;
  d.sp_split = (full_tp && tp > 1 && p.sequence_parallel) ? tp : 1;
  return d;
}

GemmShape dgrad(const GemmShape& g) { return {g.m, g.k, g.n, g.batch}; }
GemmShape wgrad(const GemmShape& g) { return {g.k, g.n, g.m, g.batch}; }

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
  double pre_attention_bytes = 0, post_attention_bytes = 0, mlp_bytes = 0;
  int pre_kernels = 0, attn_kernels = 0, mlp_kernels = 0;
  // Backward of the same element-wise work (fused kernels: twice the forward's bytes).
  double pre_attention_bytes_bwd = 0, post_attention_bytes_bwd = 0, mlp_bytes_bwd = 0;
  int pre_kernels_bwd = 0, attn_kernels_bwd = 0, mlp_kernels_bwd = 0;
};

// Eager PyTorch runs the norms, RoPE and the SwiGLU gate op by op (workload/eager_ops.hpp).
void add_eager_composites(const ModelSpec& m, const LayerDims& d, LayerKernels& k) {
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
    const double inner = m.moe.enabled() ? t * m.moe.top_k : static_cast<double>(d.mlp_tokens);
    add(eager_swiglu_extra(d.e), inner * static_cast<double>(d.f_local), k.mlp_bytes, k.mlp_bytes_bwd, k.mlp_kernels,
        k.mlp_kernels_bwd);
  }
}

LayerKernels layer_kernels(const ModelSpec& m, const Plan& p, const LayerDims& d) {
  LayerKernels k;
  const double t = static_cast<double>(d.tokens);
  k.pre_attention.push_back({d.tokens, (d.q_width + 2 * d.kv_width) / d.attn_split, d.h, 1});
  // norm (read + write); RoPE models rotate q and k (read + write)
  const bool rope = m.pos_emb == PosEmb::rope;
  k.pre_attention_bytes = 2 * d.e * t * static_cast<double>(d.h) / d.sp_split +
                          (rope ? 2 * d.e * t * static_cast<double>(d.q_width + d.kv_width) / d.attn_split : 0.0);
  k.pre_kernels = rope ? 4 : 2;
  k.attention = {d.b, m.n_heads / d.attn_split, std::max<std::int64_t>(1, m.n_kv_heads / d.attn_split),
                 d.s_local, d.s_full, m.head_dim, true, p.flash_attention_version};
  if (!p.flash_attention) {
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
    k.score_kernels_fwd = 3 + (p.dropout ? 1 : 0);
    k.score_kernels_bwd = 5 + (p.dropout ? 1 : 0);
  }
  k.post_attention.push_back({d.tokens, d.h, d.q_width / d.attn_split, 1});
  // residual add (2 reads + 1 write), second norm
  k.post_attention_bytes = 3 * d.e * t * static_cast<double>(d.h) / d.sp_split +
                           2 * d.e * t * static_cast<double>(d.h) / d.sp_split;
  k.attn_kernels = 4;
  const int n_up = m.mlp == MlpKind::swiglu ? 2 : 1;
  const double act_io = m.mlp == MlpKind::swiglu ? 3 : 2;  // silu*mul reads 2, writes 1
  if (m.moe.enabled()) {
    const int local_experts = std::max(1, m.moe.n_experts / std::max(1, p.mesh.ep));
    // Balanced routing: the ep group's top_k * tokens spread evenly over all experts.
    const std::int64_t per_expert = std::max<std::int64_t>(
        1, d.tokens * m.moe.top_k * p.mesh.ep / std::max(1, m.moe.n_experts));
    k.mlp.push_back({d.tokens, m.moe.n_experts, d.h, 1});  // router
    for (int i = 0; i < n_up; ++i) k.mlp.push_back({per_expert, d.f_local, d.h, local_experts});
    k.mlp.push_back({per_expert, d.h, d.f_local, local_experts});
    for (int sh = 0; sh < m.moe.n_shared_experts; ++sh) {
      for (int i = 0; i < n_up; ++i) k.mlp.push_back({d.tokens, d.f_local, d.h, 1});
      k.mlp.push_back({d.tokens, d.h, d.f_local, 1});
    }
    k.mlp_bytes = act_io * d.e * static_cast<double>(d.tokens) * m.moe.top_k * static_cast<double>(d.f_local) +
                  3 * d.e * t * static_cast<double>(d.h);
  } else {
    for (int i = 0; i < n_up; ++i) k.mlp.push_back({d.mlp_tokens, d.f_local, d.h, 1});
    k.mlp.push_back({d.mlp_tokens, d.h, d.f_local, 1});
    k.mlp_bytes = act_io * d.e * static_cast<double>(d.mlp_tokens) * static_cast<double>(d.f_local) +
                  3 * d.e * t * static_cast<double>(d.h) / d.sp_split;  // activation + residual add
  }
  k.mlp_kernels = n_up + 3;
  k.pre_attention_bytes_bwd = 2 * k.pre_attention_bytes;
  k.post_attention_bytes_bwd = 2 * k.post_attention_bytes;
  k.mlp_bytes_bwd = 2 * k.mlp_bytes;
  k.pre_kernels_bwd = 2 * k.pre_kernels;
  k.attn_kernels_bwd = 2 * k.attn_kernels;
  k.mlp_kernels_bwd = 2 * k.mlp_kernels;
  if (eager_composites(p)) add_eager_composites(m, d, k);
  return k;
}

double gemm_flops(const Gemms& gs) {
  double f = 0;
  for (const auto& g : gs) f += g.flops();
  return f;
}

double attention_fwd_flops(const AttentionShape& a) {
  // 2 matmuls (QK^T, PV) of 2*s_q*s_kv*d each per head; causal keeps half the pairs.
  const double pairs = static_cast<double>(a.seq_q) * static_cast<double>(a.seq_kv) * (a.causal ? 0.5 : 1.0);
  return 4.0 * static_cast<double>(a.batch) * a.heads * pairs * a.head_dim;
}

// Adds the core attention of one layer (the fused kernel, or the unfused batched GEMMs and softmax)
// to `op`; returns the FLOPs the GPU executes for it.
double add_core_attention(Op& op, const LayerKernels& k, Pass pass) {
  if (k.fused_attention) {
    op.attention = {k.attention};
    op.attention_pass = pass;
    // FlashAttention-2 backward: 2.5x the forward matmul FLOPs (it recomputes the scores).
    return (pass == Pass::forward ? 1.0 : 2.5) * attention_fwd_flops(k.attention);
  }
  double flops = 0;
  for (const GemmShape& g : k.score_gemms) {
    if (pass == Pass::forward) {
      op.gemms.push_back(g);
      flops += g.flops();
    } else {
      op.gemms.push_back(dgrad(g));
      op.gemms.push_back(wgrad(g));
      flops += 2 * g.flops();
    }
  }
  op.memory_bound_bytes += pass == Pass::forward ? k.score_bytes_fwd : k.score_bytes_bwd;
  op.kernels += pass == Pass::forward ? k.score_kernels_fwd : k.score_kernels_bwd;
  return flops;
}

// FP8/FP4 linears (Transformer Engine, torchao float8) quantize what enters each GEMM. Forward:
// read the activation, write its low-precision copy (e + q bytes per element of A = m x k), and the
// weight likewise (B = k x n) unless the quantized weights are cached across micro-batches.
// Backward: the output gradient (m x n) is quantized with its transpose for the weight gradient.
double quantize_forward_bytes(const Gemms& linears, double e, double q, bool weights) {
  double bytes = 0;
  for (const GemmShape& g : linears) {
    bytes += (e + q) * static_cast<double>(g.batch) * static_cast<double>(g.m) * static_cast<double>(g.k);
    if (weights) bytes += (e + q) * static_cast<double>(g.batch) * static_cast<double>(g.k) * static_cast<double>(g.n);
  }
  return bytes;
}
double quantize_backward_bytes(const Gemms& linears, double e, double q) {
  double bytes = 0;
  for (const GemmShape& g : linears)
    bytes += (e + 2 * q) * static_cast<double>(g.batch) * static_cast<double>(g.m) * static_cast<double>(g.n);
  return bytes;
}

// Builds the op list. Keeps the indices needed to wire pipeline stages together.
class Builder {
public:
  Builder(const ModelSpec& m, const Plan& p, const Job& j, LowerOptions options)
      : m_(m), p_(p), j_(j), options_(options), d_(layer_dims(m, p, j)), k_(layer_kernels(m, p, d_)) {}

  StepProgram build();

private:
  // Names are formatted only when someone will read them (LowerOptions::op_names).
  template <typename... Args>
  std::string op_name(fmt::format_string<Args...> format, Args&&... args) const {
    return options_.op_names ? fmt::format(format, std::forward<Args>(args)...) : std::string();
  }
  std::string sub_name(const std::string& tag, std::string_view suffix) const {
    return options_.op_names ? tag + std::string(suffix) : std::string();
  }

  // Ops travel by reference until they land in the program: moving one copies its inline lists.
  int add(Op&& op) {
    prog_.ops.push_back(std::move(op));
    return static_cast<int>(prog_.ops.size() - 1);
  }
  Op compute_op(int stage, std::string name, OpCategory cat) const {
    Op o;
    o.name = std::move(name);
    o.stage = stage;
    o.stream = StreamKind::compute;
    o.category = cat;
    o.kind = OpKind::compute;
    return o;
  }
  // Activations (forward) or their gradients (backward) to the neighbouring pipeline stage.
  Op p2p_send(int stage, std::string name, double bytes, int after) const {
    Op o;
    o.name = std::move(name);
    o.stage = stage;
    o.stream = StreamKind::pp;
    o.category = OpCategory::pp;
    o.kind = OpKind::p2p;
    o.group = GroupKind::pp;
    o.bytes = bytes;
    o.deps = {after};
    return o;
  }
  Op collective_op(int stage, std::string name, StreamKind stream, OpCategory cat, CollectiveOp c,
                   GroupKind g, double bytes) const {
    Op o;
    o.name = std::move(name);
    o.stage = stage;
    o.stream = stream;
    o.category = cat;
    o.kind = OpKind::collective;
    o.collective = c;
    o.group = g;
    o.bytes = bytes;
    return o;
  }

  // A layer's forward (or its recompute) as compute segments with TP/CP/EP collectives between.
  // Returns {first, last} op indices; `first_deps` gate the first op.
  std::pair<int, int> layer_forward(int stage, int layer, std::int64_t mb, bool recompute,
                                    std::vector<int> first_deps);
  std::pair<int, int> layer_backward(int stage, int layer, std::int64_t mb, std::vector<int> first_deps);

  // Chains an op after `prev` (if any) and records the first op of the chain.
  int chain(Op&& op, int& prev, int& first, std::vector<int>& pending_deps) {
    op.deps.reserve(op.deps.size() + (prev >= 0 ? 1 : 0) + pending_deps.size());
    if (prev >= 0) op.deps.push_back(prev);
    op.deps.insert(op.deps.end(), pending_deps.begin(), pending_deps.end());
    pending_deps.clear();
    const int id = add(std::move(op));
    if (first < 0) first = id;
    prev = id;
    return id;
  }

  // One layer's ops in issue order. With `overlap` (async TP: Megatron --tp-comm-overlap,
  // torchtitan's micro-pipelined TP) a TP all-gather is cut into chunks that pipeline with the GEMM
  // op consuming it, and a reduce-scatter with the GEMM op producing it: the collective runs beside
  // that op and the op after the pair waits for both. Otherwise every op waits for the one before.
  struct LayerChain {
    Builder& b;
    bool overlap = false;
    int prev = -1, first = -1;
    std::vector<int> pending;     // deps of the next op chained
    std::vector<int> after_next;  // all-gathers running beside the next op: the op after it waits
    void compute(Op&& op) {
      b.chain(std::move(op), prev, first, pending);
      pending.insert(pending.end(), after_next.begin(), after_next.end());
      after_next.clear();
    }
    void comm(Op&& op) {
      if (!overlap || op.category != OpCategory::tp) {
        compute(std::move(op));
        return;
      }
      if (first < 0) {
        // A zero-work entry op carries the layer's incoming dependencies (pipeline wiring
        // attaches to the first op), so the collective and its consumer can both follow it.
        compute(b.compute_op(op.stage, op.name.empty() ? std::string() : op.name + ".entry", OpCategory::compute));
      }
      if (op.collective == CollectiveOp::all_gather) {
        op.deps.assign(pending.begin(), pending.end());
        op.deps.push_back(prev);
        after_next.push_back(b.add(std::move(op)));
      } else {
        const auto producer_deps = b.prog_.ops[static_cast<std::size_t>(prev)].deps;
        op.deps.assign(producer_deps.begin(), producer_deps.end());
        pending.push_back(b.add(std::move(op)));
      }
    }
    // The layer ends when its overlapped collectives do.
    std::pair<int, int> finish(int stage, const std::string& name, OpCategory cat) {
      pending.insert(pending.end(), after_next.begin(), after_next.end());
      after_next.clear();
      if (!pending.empty() && first >= 0) {
        Op join = b.compute_op(stage, name, cat);
        compute(std::move(join));
      }
      return {first, prev};
    }
  };

  // The block linears run in the plan's FP8/FP4 recipe (attention and the LM head stay in the
  // compute dtype, as Transformer Engine and torchao's float8 conversion leave them).
  bool low_precision() const { return p_.fp8 != Fp8Recipe::none && k_.fused_attention; }
  void quantize_forward(Op& op, const Gemms& linears, std::int64_t mb) const {
    if (!low_precision()) return;
    // Transformer Engine caches the quantized weights after the first micro-batch of a step;
    // torchao's float8 linears cast them on every forward.
    const bool te = p_.fp8 == Fp8Recipe::te_delayed || p_.fp8 == Fp8Recipe::te_current || p_.fp8 == Fp8Recipe::mxfp8 ||
                    p_.fp8 == Fp8Recipe::nvfp4;
    op.low_precision_gemms = true;
    op.memory_bound_bytes += quantize_forward_bytes(linears, d_.e, quantized_bytes(), !te || mb == 0);
    op.kernels += static_cast<int>(linears.size());
  }
  void quantize_backward(Op& op, const Gemms& linears) const {
    if (!low_precision()) return;
    op.low_precision_gemms = true;
    op.memory_bound_bytes += quantize_backward_bytes(linears, d_.e, quantized_bytes());
    op.kernels += static_cast<int>(linears.size());
  }
  double quantized_bytes() const { return bytes_per_element(low_precision_gemm_dtype(p_.fp8)); }

  // Overlapped TP runs each GEMM beside a collective as tp chunks of m / tp rows, one per ring
  // step (Transformer Engine userbuffers, torchtitan's micro-pipelined TP), so they are priced as
  // tp separate GEMMs of that size.
  void chunk_for_overlap(Op& op) const {
    const int tp = p_.mesh.tp;
    Gemms chunked;
    for (const GemmShape& g : op.gemms) {
      if (g.m < tp) {
        chunked.push_back(g);
        continue;
      }
      for (int i = 0; i < tp; ++i) chunked.push_back({g.m / tp, g.n, g.k, g.batch});
    }
    op.kernels += static_cast<int>(chunked.size() - op.gemms.size());
    op.gemms = std::move(chunked);
  }

  bool fsdp() const {
    return p_.runtime != Runtime::megatron && (p_.sharding == Sharding::zero2 || p_.sharding == Sharding::zero3);
  }
  double unit_params() const;
  double stage_params(int stage) const;
  double local_state_params(int stage) const;

  const ModelSpec& m_;
  const Plan& p_;
  const Job& j_;
  LowerOptions options_;
  LayerDims d_;
  LayerKernels k_;
  StepProgram prog_;
  int n_vstages_ = 1;
};

double Builder::unit_params() const {
  const ParamCounts c = param_counts(m_);
  const double tp = p_.mesh.tp;
  const bool full_tp = p_.tp_style == TpStyle::full;
  return static_cast<double>(c.attention_per_layer) / (full_tp ? tp : 1.0) +
         static_cast<double>(c.mlp_per_layer) / (tp * (m_.moe.enabled() ? p_.mesh.ep : 1)) +
         static_cast<double>(c.norm_per_layer);
}

double Builder::stage_params(int stage) const {
  const ParamCounts c = param_counts(m_);
  const bool full_tp = p_.tp_style == TpStyle::full;
  const double vs = full_tp ? p_.mesh.tp : 1.0;
  // Layers on this stage (all its chunks); the split is exact (checked in build()).
  const int pp = std::max(1, p_.mesh.pp);
  const int v = p_.schedule == PipelineSchedule::interleaved_1f1b ? std::max(1, p_.mesh.vpp) : 1;
  const auto split = split_layers(m_.n_layers, pp * v);
  int layers = 0;
  for (int c = 0; c < v && split; ++c) layers += (*split)[static_cast<std::size_t>(c * pp + stage)];
  double params = unit_params() * layers;
  if (stage == 0) params += static_cast<double>(c.embedding) / vs + static_cast<double>(c.position);
  if (stage == p_.mesh.pp - 1)
    params += static_cast<double>(m_.tied_embeddings && p_.mesh.pp == 1 ? 0 : c.embedding) / vs +
              static_cast<double>(c.final_norm);
  return params;
}

// Parameters whose optimizer update this rank performs.
double Builder::local_state_params(int stage) const { return stage_params(stage) / state_shard_group(p_); }

std::pair<int, int> Builder::layer_forward(int stage, int layer, std::int64_t mb, bool recompute,
                                           std::vector<int> first_deps) {
  const OpCategory cat = recompute ? OpCategory::recompute : OpCategory::compute;
  const std::string tag = op_name("{}L{}.mb{}", recompute ? "recompute." : "fwd.", layer, mb);
  const bool tp = p_.mesh.tp > 1;
  const bool full_tp = p_.tp_style == TpStyle::full;
  const double act = d_.e * static_cast<double>(d_.tokens) * static_cast<double>(d_.h);
  const bool overlap = p_.async_tp && tp && full_tp;
  LayerChain chain_of{*this, overlap};
  chain_of.pending = std::move(first_deps);
  auto comm = [&](Op&& op) { chain_of.comm(std::move(op)); };
  auto compute = [&](Op&& op) { chain_of.compute(std::move(op)); };
  const double flops_scale = recompute ? 0.0 : 1.0;

  if (tp && full_tp && p_.sequence_parallel)
    comm(collective_op(stage, sub_name(tag, ".tp_ag_attn"), StreamKind::tp, OpCategory::tp, CollectiveOp::all_gather,
                       GroupKind::tp, act));
  Op pre = compute_op(stage, sub_name(tag, ".qkv"), cat);
  pre.gemms = k_.pre_attention;
  pre.memory_bound_bytes = k_.pre_attention_bytes;
  pre.kernels = k_.pre_kernels;
  pre.hardware_flops = gemm_flops(pre.gemms);
  pre.model_flops = flops_scale * pre.hardware_flops;
  quantize_forward(pre, k_.pre_attention, mb);
  if (overlap) chunk_for_overlap(pre);
  // The output projection (with the core attention before it, unless that is an op of its own).
  auto projection = [&](const char* suffix, bool with_attention) {
    Op op = compute_op(stage, sub_name(tag, suffix), cat);
    op.gemms = k_.post_attention;
    op.memory_bound_bytes = k_.post_attention_bytes;
    op.kernels = k_.attn_kernels;
    quantize_forward(op, k_.post_attention, mb);
    const double flops = gemm_flops(op.gemms);
    op.hardware_flops = flops + (with_attention ? add_core_attention(op, k_, Pass::forward) : 0.0);
    op.model_flops = flops_scale * (flops + (with_attention ? attention_fwd_flops(k_.attention) : 0.0));
    if (overlap) chunk_for_overlap(op);
    return op;
  };
  if (p_.mesh.cp > 1) {
    compute(std::move(pre));
    // torchtitan's default rotate method all-gathers K and V across the CP group.
    const double kv = 2 * d_.e * static_cast<double>(d_.tokens) * static_cast<double>(d_.kv_width) /
                      static_cast<double>(d_.attn_split) * p_.mesh.cp;
    comm(collective_op(stage, sub_name(tag, ".cp_ag_kv"), StreamKind::cp, OpCategory::cp, CollectiveOp::all_gather,
                       GroupKind::cp, kv));
    compute(projection(".attn", true));
  } else if (overlap) {
    // Overlapped TP pairs the all-gather with the QKV GEMM and the reduce-scatter with the output
    // projection, so the attention kernel between them is an op of its own.
    compute(std::move(pre));
    Op core = compute_op(stage, sub_name(tag, ".attn"), cat);
    core.hardware_flops = add_core_attention(core, k_, Pass::forward);
    core.model_flops = flops_scale * attention_fwd_flops(k_.attention);
    compute(std::move(core));
    compute(projection(".proj", false));
  } else {
    pre.gemms.insert(pre.gemms.end(), k_.post_attention.begin(), k_.post_attention.end());
    pre.memory_bound_bytes += k_.post_attention_bytes;
    pre.kernels += k_.attn_kernels;
    quantize_forward(pre, k_.post_attention, mb);
    const double flops = gemm_flops(pre.gemms);
    pre.hardware_flops = flops + add_core_attention(pre, k_, Pass::forward);
    pre.model_flops = flops_scale * (flops + attention_fwd_flops(k_.attention));
    compute(std::move(pre));
  }
  if (tp && full_tp) {
    comm(collective_op(stage, sub_name(tag, ".tp_attn_out"), StreamKind::tp, OpCategory::tp,
                       p_.sequence_parallel ? CollectiveOp::reduce_scatter : CollectiveOp::all_reduce,
                       GroupKind::tp, act));
    if (p_.sequence_parallel)
      comm(collective_op(stage, sub_name(tag, ".tp_ag_mlp"), StreamKind::tp, OpCategory::tp, CollectiveOp::all_gather,
                         GroupKind::tp, act));
  } else if (tp) {
    // llm-foundry ffn TP: the MLP input is gathered along the batch from every TP rank.
    comm(collective_op(stage, sub_name(tag, ".tp_ag_batch"), StreamKind::tp, OpCategory::tp, CollectiveOp::all_gather,
                       GroupKind::tp, act * p_.mesh.tp));
  }
  const bool moe_a2a = m_.moe.enabled() && p_.mesh.ep > 1;
  const double routed = d_.e * static_cast<double>(d_.tokens) * m_.moe.top_k * static_cast<double>(d_.h);
  if (moe_a2a)
    comm(collective_op(stage, sub_name(tag, ".ep_dispatch"), StreamKind::ep, OpCategory::ep, CollectiveOp::all_to_all,
                       GroupKind::ep, routed));
  Op mlp = compute_op(stage, sub_name(tag, ".mlp"), cat);
  mlp.gemms = k_.mlp;
  mlp.memory_bound_bytes = k_.mlp_bytes;
  mlp.kernels = k_.mlp_kernels;
  mlp.hardware_flops = gemm_flops(mlp.gemms);
  mlp.model_flops = flops_scale * mlp.hardware_flops;
  quantize_forward(mlp, k_.mlp, mb);
  if (overlap) chunk_for_overlap(mlp);
  compute(std::move(mlp));
  if (moe_a2a)
    comm(collective_op(stage, sub_name(tag, ".ep_combine"), StreamKind::ep, OpCategory::ep, CollectiveOp::all_to_all,
                       GroupKind::ep, routed));
  if (tp) {
    const bool rs = !full_tp || p_.sequence_parallel;
    comm(collective_op(stage, sub_name(tag, ".tp_mlp_out"), StreamKind::tp, OpCategory::tp,
                       rs ? CollectiveOp::reduce_scatter : CollectiveOp::all_reduce, GroupKind::tp,
                       full_tp ? act : act * p_.mesh.tp));
  }
  return chain_of.finish(stage, sub_name(tag, ".tp_join"), cat);
}

std::pair<int, int> Builder::layer_backward(int stage, int layer, std::int64_t mb, std::vector<int> first_deps) {
  const std::string tag = op_name("bwd.L{}.mb{}", layer, mb);
  const bool tp = p_.mesh.tp > 1;
  const bool full_tp = p_.tp_style == TpStyle::full;
  const double act = d_.e * static_cast<double>(d_.tokens) * static_cast<double>(d_.h);
  LayerChain chain_of{*this, p_.async_tp && tp && full_tp};
  chain_of.pending = std::move(first_deps);
  auto comm = [&](Op&& op) { chain_of.comm(std::move(op)); };
  auto grads_of = [](const Gemms& fwd) {
    Gemms out;
    for (const auto& g : fwd) {
      out.push_back(dgrad(g));
      out.push_back(wgrad(g));
    }
    return out;
  };
  if (tp)
    comm(collective_op(stage, sub_name(tag, ".tp_mlp_out"), StreamKind::tp, OpCategory::tp,
                       (full_tp && !p_.sequence_parallel) ? CollectiveOp::all_reduce : CollectiveOp::all_gather,
                       GroupKind::tp, full_tp ? act : act * p_.mesh.tp));
  Op mlp = compute_op(stage, sub_name(tag, ".mlp"), OpCategory::compute);
  mlp.gemms = grads_of(k_.mlp);
  mlp.memory_bound_bytes = k_.mlp_bytes_bwd;
  mlp.kernels = k_.mlp_kernels_bwd;
  mlp.hardware_flops = gemm_flops(mlp.gemms);
  mlp.model_flops = mlp.hardware_flops;
  quantize_backward(mlp, k_.mlp);
  if (chain_of.overlap) chunk_for_overlap(mlp);
  comm(std::move(mlp));
  if (tp && full_tp && p_.sequence_parallel)
    comm(collective_op(stage, sub_name(tag, ".tp_mlp_in"), StreamKind::tp, OpCategory::tp, CollectiveOp::reduce_scatter,
                       GroupKind::tp, act));
  else if (tp && !full_tp)
    comm(collective_op(stage, sub_name(tag, ".tp_batch"), StreamKind::tp, OpCategory::tp, CollectiveOp::reduce_scatter,
                       GroupKind::tp, act * p_.mesh.tp));
  if (tp && full_tp && p_.sequence_parallel)
    comm(collective_op(stage, sub_name(tag, ".tp_attn_out"), StreamKind::tp, OpCategory::tp, CollectiveOp::all_gather,
                       GroupKind::tp, act));
  Op attn = compute_op(stage, sub_name(tag, ".attn"), OpCategory::compute);
  attn.gemms = grads_of(k_.post_attention);
  attn.memory_bound_bytes = k_.post_attention_bytes_bwd;
  attn.kernels = k_.attn_kernels_bwd;
  const double projection = gemm_flops(attn.gemms);
  attn.hardware_flops = projection + add_core_attention(attn, k_, Pass::backward);
  attn.model_flops = projection + 2.0 * attention_fwd_flops(k_.attention);
  quantize_backward(attn, k_.post_attention);
  if (chain_of.overlap) chunk_for_overlap(attn);
  comm(std::move(attn));
  if (p_.mesh.cp > 1) {
    const double kv = 2 * d_.e * static_cast<double>(d_.tokens) * static_cast<double>(d_.kv_width) /
                      static_cast<double>(d_.attn_split) * p_.mesh.cp;
    comm(collective_op(stage, sub_name(tag, ".cp_rs_dkv"), StreamKind::cp, OpCategory::cp, CollectiveOp::reduce_scatter,
                       GroupKind::cp, kv));
  }
  Op qkv = compute_op(stage, sub_name(tag, ".qkv"), OpCategory::compute);
  qkv.gemms = grads_of(k_.pre_attention);
  qkv.memory_bound_bytes = k_.pre_attention_bytes_bwd;
  qkv.kernels = k_.pre_kernels_bwd;
  qkv.hardware_flops = gemm_flops(qkv.gemms);
  qkv.model_flops = qkv.hardware_flops;
  quantize_backward(qkv, k_.pre_attention);
  if (chain_of.overlap) chunk_for_overlap(qkv);
  comm(std::move(qkv));
  if (tp && full_tp)
    comm(collective_op(stage, sub_name(tag, ".tp_qkv_in"), StreamKind::tp, OpCategory::tp,
                       p_.sequence_parallel ? CollectiveOp::reduce_scatter : CollectiveOp::all_reduce,
                       GroupKind::tp, act));
  return chain_of.finish(stage, sub_name(tag, ".tp_join"), OpCategory::compute);
}

// One entry of a stage's compute order: forward or backward of a micro-batch on a model chunk.
struct Step {
  bool forward;
  std::int64_t mb;
  int chunk;
};

// The order a pipeline stage runs its forward and backward passes (Megatron's schedules).
std::vector<Step> stage_order(const Plan& p, int stage, std::int64_t m) {
  const int pp = p.mesh.pp;
  const int v = p.schedule == PipelineSchedule::interleaved_1f1b ? std::max(1, p.mesh.vpp) : 1;
  std::vector<Step> order;
  if (pp == 1 || p.schedule == PipelineSchedule::gpipe) {
    // pp == 1: each micro-batch runs forward then backward (gradient accumulation).
    if (pp == 1) {
      for (std::int64_t mb = 0; mb < m; ++mb) {
        for (int c = 0; c < v; ++c) order.push_back({true, mb, c});
        for (int c = v - 1; c >= 0; --c) order.push_back({false, mb, c});
      }
      return order;
    }
    for (std::int64_t mb = 0; mb < m; ++mb) order.push_back({true, mb, 0});
    for (std::int64_t mb = 0; mb < m; ++mb) order.push_back({false, mb, 0});
    return order;
  }
  const std::int64_t total = m * v;
  auto fwd_at = [&](std::int64_t k) {
    const std::int64_t group = k / (static_cast<std::int64_t>(pp) * v);
    return Step{true, group * pp + k % pp, static_cast<int>((k / pp) % v)};
  };
  auto bwd_at = [&](std::int64_t k) {
    const std::int64_t group = k / (static_cast<std::int64_t>(pp) * v);
    return Step{false, group * pp + k % pp, v - 1 - static_cast<int>((k / pp) % v)};
  };
  std::int64_t warmup = v == 1 ? pp - stage - 1 : 2LL * (pp - stage - 1) + static_cast<std::int64_t>(v - 1) * pp;
  warmup = std::min(warmup, total);
  std::int64_t f = 0, b = 0;
  for (; f < warmup; ++f) order.push_back(fwd_at(f));
  while (f < total) {
    order.push_back(fwd_at(f++));
    order.push_back(bwd_at(b++));
  }
  while (b < total) order.push_back(bwd_at(b++));
  return order;
}

StepProgram Builder::build() {
  const int pp = std::max(1, p_.mesh.pp);
  const int v = p_.schedule == PipelineSchedule::interleaved_1f1b ? std::max(1, p_.mesh.vpp) : 1;
  n_vstages_ = pp * v;
  const auto split = split_layers(m_.n_layers, n_vstages_);
  if (!split)
    throw std::invalid_argument(fmt::format("{} layers do not split into {} pipeline chunks", m_.n_layers, n_vstages_));
  std::vector<int> chunk_first(static_cast<std::size_t>(n_vstages_), 0);
  for (int c = 1; c < n_vstages_; ++c)
    chunk_first[static_cast<std::size_t>(c)] = chunk_first[static_cast<std::size_t>(c - 1)] + (*split)[static_cast<std::size_t>(c - 1)];
  auto chunk_layers = [&](int vstage) { return (*split)[static_cast<std::size_t>(vstage)]; };
  const std::int64_t m = std::max<std::int64_t>(1, j_.grad_accum);
  const std::int64_t per_schedule = j_.pp_microbatches > 0 && pp > 1 ? std::min(j_.pp_microbatches, m) : m;
  if (v > 1 && (per_schedule % pp != 0 || m % per_schedule != 0))
    throw std::invalid_argument(fmt::format(
        "the interleaved schedule needs micro-batches per schedule ({}) divisible by pp ({})", per_schedule, pp));
  prog_.n_stages = pp;
  prog_.n_microbatches = m;
  // Roughly 20-30 ops per layer and micro-batch: reserve once instead of growing.
  prog_.ops.reserve(static_cast<std::size_t>(m) * static_cast<std::size_t>(m_.n_layers) * 28 + 64);
  prog_.tokens_per_step = static_cast<double>(j_.global_batch) * static_cast<double>(j_.seq_len);

  const double gather_b = p_.fp8_all_gather ? 1.0 : bytes_per_element(p_.param_dtype);
  const double reduce_b = bytes_per_element(p_.reduce_dtype);
  const double unit = unit_params();
  const bool reshard = p_.reshard_after_forward;
  const bool prefetch_two = p_.backward_prefetch == BackwardPrefetch::backward_pre ||
                            p_.runtime == Runtime::torchtitan_fsdp2 || p_.runtime == Runtime::composer_fsdp2;
  const bool hsdp = p_.mesh.dp_replicate > 1 && p_.mesh.dp_shard * p_.mesh.cp > 1;
  const bool is_fsdp2 = fsdp() && (p_.runtime == Runtime::torchtitan_fsdp2 || p_.runtime == Runtime::composer_fsdp2);
  const int dp_all = p_.mesh.dp_replicate * p_.mesh.dp_shard * p_.mesh.cp;
  const MicroBatchShape mbs{d_.s_local, d_.b};
  // Transient memory terms of one micro-batch (the same for every layer and micro-batch).
  const double block_grads = block_backward_working_bytes(m_, p_, mbs);
  const double stage_output = pipeline_boundary_bytes(m_, p_, mbs, 1.0);
  const double logits_upcast = loss_forward_peak_bytes(m_, p_, mbs) - loss_saved_bytes(m_, p_, mbs);
  // fp32 weights under autocast: each layer's linears leave a low-precision copy of their weights
  // in autocast's cache until the forward ends (memory_estimate's end-of-forward phase).
  const double autocast_cache_per_layer = autocast_fp32_weights(p_) ? d_.e * unit : 0.0;
  const double act_p2p = d_.e * static_cast<double>(d_.tokens) * static_cast<double>(d_.h) / d_.sp_split;

  // Pipeline wiring: (vstage, mb) -> first/last op of its forward and backward, and sends.
  std::map<std::pair<int, std::int64_t>, int> fwd_first, fwd_last, bwd_first, bwd_last, fwd_send, bwd_send;

  for (int stage = 0; stage < pp; ++stage) {
    const std::size_t stage_begin = prog_.ops.size();
    const bool first_stage = stage == 0;
    const bool last_stage = stage == pp - 1;
    // Per layer (global index) on this stage: ops whose end frees the gathered unit, etc.
    std::map<std::pair<int, std::int64_t>, int> fwd_end_of_layer, bwd_end_of_layer, rs_of_layer;
    int prev_ag = -1;
    // torchtitan runs one pipeline schedule per local batch (pp_microbatches each), paying the
    // bubble every time; Megatron runs all micro-batches of the step in one schedule.
    std::vector<Step> order;
    const std::int64_t per_run = j_.pp_microbatches > 0 && pp > 1 ? std::min(j_.pp_microbatches, m) : m;
    for (std::int64_t base = 0; base < m; base += per_run)
      for (Step st : stage_order(p_, stage, std::min(per_run, m - base))) {
        st.mb += base;
        order.push_back(st);
      }

    // Megatron's distributed optimizer gathers updated params before the forward of the step
    // (--overlap-param-gather overlaps them with the first micro-batch).
    std::map<int, int> param_gather_of_layer;
    if (p_.sharding == Sharding::zero1 && dp_all > 1) {
      for (int c = 0; c < v; ++c)
        for (int l = 0; l < chunk_layers(c * pp + stage); ++l) {
          const int layer = chunk_first[static_cast<std::size_t>(c * pp + stage)] + l;
          param_gather_of_layer[layer] = add(collective_op(
              stage, op_name("param_ag.L{}", layer), StreamKind::dp, OpCategory::param_all_gather,
              CollectiveOp::all_gather, GroupKind::dp, bytes_per_element(p_.param_dtype) * unit));
        }
    }

    // FSDP2 all-gathers into one flat buffer; the compute stream copies it out into the
    // per-parameter tensors before the unit runs (foreach_all_gather_copy_out: read and write the
    // unit once). FSDP1's flat parameter is used in place.
    auto copy_out = [&](int all_gather, std::string name) {
      if (!is_fsdp2) return all_gather;
      Op co = compute_op(stage, std::move(name), OpCategory::compute);
      co.memory_bound_bytes = 2 * gather_b * unit;
      co.kernels = 1;
      co.deps = {all_gather};
      return add(std::move(co));
    };

    // DeepSpeed's pipeline engine sends and receives on the compute stream: the stage's next
    // instruction waits for its last send.
    int blocking_send = -1;
    auto after_blocking_send = [&](auto& deps) {
      if (blocking_send >= 0) deps.push_back(blocking_send);
      blocking_send = -1;
    };
    auto send = [&](Op&& op) {
      const int id = add(std::move(op));
      if (p_.deepspeed_engine) blocking_send = id;
      return id;
    };
    // DeepSpeed's BF16_Optimizer adds each micro-batch's bf16 gradients into its fp32 copies once
    // the backward is done: read the bf16 grad, write and read its fp32 cast, read and write the
    // fp32 accumulator (18 bytes per parameter).
    constexpr double kHpGradAccumulateBytesPerParam = 2 + 4 + 4 + 4 + 4;

    for (const Step& st : order) {
      const int vstage = st.chunk * pp + stage;
      const int l0 = chunk_first[static_cast<std::size_t>(vstage)];
      const int n_chunk_layers = chunk_layers(vstage);
      const bool last_mb = st.mb == m - 1;
      // torchtitan under PP keeps units gathered and skips gradient sync until the last backward
      // of a schedule run (the pipelining stage sets reshard_after_backward / requires_gradient_sync
      // only for the last micro-batch), so a unit is gathered once per run, not per micro-batch.
      const bool run_first = st.mb % per_run == 0;
      const bool run_last = st.mb % per_run == per_run - 1 || last_mb;
      const bool defer = p_.runtime == Runtime::torchtitan_fsdp2 && pp > 1 && !reshard;
      if (st.forward) {
        double autocast_cached = 0;
        std::vector<int> entry_deps;
        if (first_stage && st.chunk == 0) {
          Op emb = compute_op(stage, op_name("fwd.embed.mb{}", st.mb), OpCategory::compute);
          emb.memory_bound_bytes = 2 * d_.e * static_cast<double>(d_.tokens) * static_cast<double>(d_.h);
          emb.kernels = 1;
          after_blocking_send(emb.deps);
          const int id = add(std::move(emb));
          entry_deps.push_back(id);
          fwd_first[{vstage, st.mb}] = id;
        }
        int last = -1;
        for (int li = 0; li < n_chunk_layers; ++li) {
          const int layer = l0 + li;
          std::vector<int> deps = entry_deps;
          entry_deps.clear();
          if (last >= 0) deps.push_back(last);
          if (li == 0) after_blocking_send(deps);
          int ag = -1;
          // FULL_SHARD gathers before every forward; SHARD_GRAD_OP too, since it frees the
          // gathered unit after each backward.
          if (fsdp() && (!defer || run_first)) {
            Op g = collective_op(stage, op_name("fsdp_ag.fwd.L{}.mb{}", layer, st.mb), StreamKind::fsdp_all_gather,
                                 OpCategory::fsdp_all_gather, CollectiveOp::all_gather, GroupKind::fsdp,
                                 gather_b * unit);
            // At most two units gathered: this one waits until the unit two back is done.
            auto two_back = fwd_end_of_layer.find({layer - 2, st.mb});
            if (two_back != fwd_end_of_layer.end()) g.deps.push_back(two_back->second);
            if (prev_ag >= 0) g.deps.push_back(prev_ag);
            g.at_start.push_back({MemoryTerm::unsharded_params, gather_b * unit});
            ag = add(std::move(g));
            prev_ag = ag;
            deps.push_back(copy_out(ag, op_name("fsdp_copy_out.fwd.L{}.mb{}", layer, st.mb)));
          }
          if (auto it = param_gather_of_layer.find(layer); it != param_gather_of_layer.end() && st.mb == 0)
            deps.push_back(it->second);
          auto [f, e] = layer_forward(stage, layer, st.mb, false, deps);
          if (!fwd_first.count({vstage, st.mb})) fwd_first[{vstage, st.mb}] = f;
          if (autocast_cache_per_layer > 0) {
            prog_.ops[static_cast<std::size_t>(f)].at_start.push_back({MemoryTerm::unsharded_params, autocast_cache_per_layer});
            autocast_cached += autocast_cache_per_layer;
          }
          // Saved activations are allocated as the layer's forward completes.
          Op& end = prog_.ops[static_cast<std::size_t>(e)];
          end.at_end.push_back({MemoryTerm::activations, saved_block_bytes(m_, p_, mbs, layer)});
          if (fsdp() && reshard && ag >= 0) end.at_end.push_back({MemoryTerm::unsharded_params, -gather_b * unit});
          fwd_end_of_layer[{layer, st.mb}] = e;
          last = e;
          if (p_.act_offload) {
            Op d2h;
            d2h.name = op_name("offload.d2h.L{}.mb{}", layer, st.mb);
            d2h.stage = stage;
            d2h.stream = StreamKind::host_copy;
            d2h.category = OpCategory::offload;
            d2h.kind = OpKind::host_copy;
            d2h.bytes = saved_block_bytes(m_, p_, mbs, layer);
            d2h.deps = {e};
            // save_on_cpu's pack is a blocking copy: the next layer waits for it.
            last = add(std::move(d2h));
          }
        }
        if (last_stage && st.chunk == v - 1) {
          Op head = compute_op(stage, op_name("fwd.head_loss.mb{}", st.mb), OpCategory::compute);
          head.gemms = {{d_.tokens, d_.vocab_local, d_.h, 1}};
          // torch: cast to fp32, log_softmax, nll_loss; fused: one pass over the logits.
          head.memory_bound_bytes = static_cast<double>(d_.tokens) * static_cast<double>(d_.vocab_local) *
                                    (p_.fused_cross_entropy ? 2 * d_.e : d_.e + 8.0);
          head.kernels = p_.fused_cross_entropy ? 2 : 4;
          head.hardware_flops = gemm_flops(head.gemms);
          head.model_flops = head.hardware_flops;
          head.deps = {last};
          head.at_end.push_back({MemoryTerm::activations, loss_saved_bytes(m_, p_, mbs)});
          // log_softmax reads fp32 logits while it writes the log-probs (loss_forward_peak_bytes).
          head.at_start.push_back({MemoryTerm::activations, logits_upcast});
          head.at_end.push_back({MemoryTerm::activations, -logits_upcast});
          if (autocast_cache_per_layer > 0) {
            const double head_cast = d_.e * static_cast<double>(d_.vocab_local) * static_cast<double>(d_.h);
            head.at_start.push_back({MemoryTerm::unsharded_params, head_cast});
            autocast_cached += head_cast;
          }
          last = add(std::move(head));
        }
        // autocast's weight cache is cleared when the forward's autocast region exits.
        if (autocast_cached > 0) {
          prog_.ops[static_cast<std::size_t>(last)].at_end.push_back({MemoryTerm::unsharded_params, -autocast_cached});
          autocast_cached = 0;
        }
        fwd_last[{vstage, st.mb}] = last;
        if (vstage < n_vstages_ - 1) {
          // The chunk's output is kept until its backward (0 under Megatron).
          prog_.ops[static_cast<std::size_t>(last)].at_end.push_back({MemoryTerm::activations, stage_output});
          fwd_send[{vstage, st.mb}] = send(p2p_send(stage, op_name("pp.send_act.v{}.mb{}", vstage, st.mb), act_p2p, last));
        }
      } else {
        int last = -1;
        std::vector<int> entry_deps;
        if (last_stage && st.chunk == v - 1) {
          Op head = compute_op(stage, op_name("bwd.head_loss.mb{}", st.mb), OpCategory::compute);
          const GemmShape g{d_.tokens, d_.vocab_local, d_.h, 1};
          head.gemms = {dgrad(g), wgrad(g)};
          // fused: read the logits, write their gradient.
          head.memory_bound_bytes = static_cast<double>(d_.tokens) * static_cast<double>(d_.vocab_local) *
                                    (p_.fused_cross_entropy ? 2 * d_.e : d_.e + 12.0);
          head.kernels = p_.fused_cross_entropy ? 2 : 5;
          head.hardware_flops = gemm_flops(head.gemms);
          head.model_flops = head.hardware_flops;
          head.deps = {fwd_last.at({vstage, st.mb})};
          after_blocking_send(head.deps);
          // Cross-entropy backward materialises fp32 gradients over the vocab while it runs.
          head.at_start.push_back({MemoryTerm::activations, loss_backward_working_bytes(m_, p_, mbs)});
          head.at_end.push_back({MemoryTerm::activations, -loss_saved_bytes(m_, p_, mbs) - loss_backward_working_bytes(m_, p_, mbs)});
          last = add(std::move(head));
          bwd_first[{vstage, st.mb}] = last;
        }
        for (int li = n_chunk_layers - 1; li >= 0; --li) {
          const int layer = l0 + li;
          std::vector<int> deps;
          if (last >= 0) deps.push_back(last);
          if (li == n_chunk_layers - 1) after_blocking_send(deps);
          if (fsdp() && reshard) {
            Op g = collective_op(stage, op_name("fsdp_ag.bwd.L{}.mb{}", layer, st.mb), StreamKind::fsdp_all_gather,
                                 OpCategory::fsdp_all_gather, CollectiveOp::all_gather, GroupKind::fsdp,
                                 gather_b * unit);
            // BACKWARD_PRE / FSDP2 prefetch one unit ahead (two gathered); POST/none gather on use.
            const int window = prefetch_two ? 2 : 1;
            auto it = bwd_end_of_layer.find({layer + window, st.mb});
            if (it != bwd_end_of_layer.end()) g.deps.push_back(it->second);
            else if (last >= 0 && !prefetch_two) g.deps.push_back(last);
            if (prev_ag >= 0) g.deps.push_back(prev_ag);
            g.at_start.push_back({MemoryTerm::unsharded_params, gather_b * unit});
            prev_ag = add(std::move(g));
            deps.push_back(copy_out(prev_ag, op_name("fsdp_copy_out.bwd.L{}.mb{}", layer, st.mb)));
          }
          if (p_.act_offload) {
            Op h2d;
            h2d.name = op_name("offload.h2d.L{}.mb{}", layer, st.mb);
            h2d.stage = stage;
            h2d.stream = StreamKind::host_copy;
            h2d.category = OpCategory::offload;
            h2d.kind = OpKind::host_copy;
            h2d.host_to_device = true;
            h2d.bytes = saved_block_bytes(m_, p_, mbs, layer);
            if (last >= 0) h2d.deps = {last};
            deps.push_back(add(std::move(h2d)));
          }
          // FSDP2's post-backward waits for the previous group's reduce-scatter before copying in
          // its own (one reduce-scatter in flight bounds the buffers), so the compute stream stalls
          // when reduce-scatters are slower than backward.
          if (is_fsdp2) {
            auto it = rs_of_layer.find({layer + 2, st.mb});
            if (it != rs_of_layer.end()) deps.push_back(it->second);
          }
          const bool checkpointed =
              p_.ac == AcMode::full || (p_.ac == AcMode::selective_layer && layer % std::max(1, p_.ac_every_n) == 0);
          if (checkpointed) {
            auto [rf, re] = layer_forward(stage, layer, st.mb, true, deps);
            prog_.ops[static_cast<std::size_t>(rf)].at_start.push_back({MemoryTerm::recompute, recompute_working_bytes(m_, p_, mbs)});
            if (bwd_first.find({vstage, st.mb}) == bwd_first.end()) bwd_first[{vstage, st.mb}] = rf;
            deps = {re};
          } else if (p_.ac == AcMode::selective_op || (p_.ac == AcMode::selective_attn && !p_.flash_attention)) {
            Op rc = compute_op(stage, op_name("recompute.L{}.mb{}", layer, st.mb), OpCategory::recompute);
            if (p_.ac == AcMode::selective_op) {
              // Every second matmul (wk, wo, w3 / down) and the element-wise ops are recomputed.
              Gemms all = k_.pre_attention;
              all.insert(all.end(), k_.post_attention.begin(), k_.post_attention.end());
              all.insert(all.end(), k_.mlp.begin(), k_.mlp.end());
              for (std::size_t i = 1; i < all.size(); i += 2) rc.gemms.push_back(all[i]);
              rc.memory_bound_bytes = k_.pre_attention_bytes + k_.post_attention_bytes + k_.mlp_bytes;
              rc.kernels = k_.pre_kernels + k_.mlp_kernels;
              rc.hardware_flops = gemm_flops(rc.gemms);
              quantize_forward(rc, rc.gemms, st.mb);
            } else {
              rc.hardware_flops = add_core_attention(rc, k_, Pass::forward);
            }
            rc.deps.assign(deps.begin(), deps.end());
            rc.at_start.push_back({MemoryTerm::recompute, recompute_working_bytes(m_, p_, mbs)});
            const int id = add(std::move(rc));
            if (bwd_first.find({vstage, st.mb}) == bwd_first.end()) bwd_first[{vstage, st.mb}] = id;
            deps = {id};
          }
          auto [bf, be] = layer_backward(stage, layer, st.mb, deps);
          if (bwd_first.find({vstage, st.mb}) == bwd_first.end()) bwd_first[{vstage, st.mb}] = bf;
          // The block's own gradient tensors live while its backward runs.
          prog_.ops[static_cast<std::size_t>(bf)].at_start.push_back({MemoryTerm::activations, block_grads});
          Op& end = prog_.ops[static_cast<std::size_t>(be)];
          end.at_end.push_back({MemoryTerm::activations, -saved_block_bytes(m_, p_, mbs, layer) - block_grads});
          const bool recomputed = checkpointed || p_.ac == AcMode::selective_op ||
                                  (p_.ac == AcMode::selective_attn && !p_.flash_attention);
          if (recomputed) end.at_end.push_back({MemoryTerm::recompute, -recompute_working_bytes(m_, p_, mbs)});
          if (fsdp() && (!defer || run_last))
            end.at_end.push_back({MemoryTerm::unsharded_params, -gather_b * unit});  // resharded after backward
          bwd_end_of_layer[{layer, st.mb}] = be;
          last = be;
          // Gradient reduction of this unit.
          const bool sync = defer ? run_last : p_.grad_sync_every_microbatch ? true : last_mb;
          if (fsdp() && sync && dp_all > 1) {
            const bool needs_copy = p_.runtime == Runtime::torchtitan_fsdp2 || p_.runtime == Runtime::composer_fsdp2 ||
                                    p_.reduce_dtype != p_.param_dtype;
            Op rs = collective_op(stage, op_name("fsdp_rs.L{}.mb{}", layer, st.mb), StreamKind::fsdp_reduce_scatter,
                                  OpCategory::fsdp_reduce_scatter, CollectiveOp::reduce_scatter, GroupKind::fsdp,
                                  reduce_b * unit);
            rs.deps = {be};
            const double buffer = bytes_per_element(p_.param_dtype) * unit + (needs_copy ? reduce_b * unit : 0);
            // The unit's unsharded grad and the reduce input live from its backward to the end of the RS.
            prog_.ops[static_cast<std::size_t>(bf)].at_start.push_back({MemoryTerm::reduce_buffers, buffer});
            rs.at_end.push_back({MemoryTerm::reduce_buffers, -buffer});
            int rs_id = add(std::move(rs));
            rs_of_layer[{layer, st.mb}] = rs_id;
            if (hsdp) {
              Op ar = collective_op(stage, op_name("hsdp_ar.L{}.mb{}", layer, st.mb), StreamKind::fsdp_reduce_scatter,
                                    OpCategory::dp_all_reduce, CollectiveOp::all_reduce, GroupKind::dp_replicate,
                                    reduce_b * unit / (p_.mesh.dp_shard * p_.mesh.cp));
              ar.deps = {rs_id};
              add(std::move(ar));
            }
          } else if (!fsdp() && last_mb && dp_all > 1 && !p_.deepspeed_engine) {
            // DDP / Megatron: bucketed reduction overlapped with the rest of backward, on the
            // last micro-batch only (no_sync / local accumulation before it).
            const bool zero1 = p_.sharding == Sharding::zero1;
            const double grad_b = p_.runtime == Runtime::megatron && p_.reduce_dtype == Dtype::fp32 ? 4.0 : reduce_b;
            Op red = collective_op(stage, op_name("dp_{}.L{}", zero1 ? "rs" : "ar", layer), StreamKind::dp,
                                   zero1 ? OpCategory::dp_reduce_scatter : OpCategory::dp_all_reduce,
                                   zero1 ? CollectiveOp::reduce_scatter : CollectiveOp::all_reduce, GroupKind::dp,
                                   grad_b * unit);
            red.deps = {be};
            add(std::move(red));
          }
        }
        if (first_stage && st.chunk == 0) {
          Op emb = compute_op(stage, op_name("bwd.embed.mb{}", st.mb), OpCategory::compute);
          emb.memory_bound_bytes = 2 * d_.e * static_cast<double>(d_.tokens) * static_cast<double>(d_.h);
          emb.kernels = 2;
          emb.deps = {last};
          last = add(std::move(emb));
        }
        if (p_.deepspeed_engine) {
          Op acc = compute_op(stage, op_name("bf16_optimizer.accumulate.v{}.mb{}", vstage, st.mb), OpCategory::compute);
          acc.memory_bound_bytes = kHpGradAccumulateBytesPerParam * stage_params(stage) / v;
          acc.kernels = 2 * std::max(1, n_chunk_layers);
          acc.deps = {last};
          last = add(std::move(acc));
        }
        bwd_last[{vstage, st.mb}] = last;
        if (vstage < n_vstages_ - 1)
          prog_.ops[static_cast<std::size_t>(last)].at_end.push_back({MemoryTerm::activations, -stage_output});
        if (vstage > 0) {
          bwd_send[{vstage, st.mb}] = send(p2p_send(stage, op_name("pp.send_grad.v{}.mb{}", vstage, st.mb), act_p2p, last));
        }
      }
    }

    // DeepSpeed reduces after the pipeline has flushed: an all-reduce of the fp32 gradients over the
    // data-parallel group (BF16_Optimizer's, ZeRO-1 included), one bucket per block, while the
    // compute stream waits.
    if (p_.deepspeed_engine && dp_all > 1) {
      int flushed = -1;
      for (std::size_t i = stage_begin; i < prog_.ops.size(); ++i)
        if (prog_.ops[i].stage == stage && prog_.ops[i].stream == StreamKind::compute) flushed = static_cast<int>(i);
      for (int c = 0; c < v; ++c)
        for (int l = 0; l < chunk_layers(c * pp + stage); ++l) {
          const int layer = chunk_first[static_cast<std::size_t>(c * pp + stage)] + l;
          Op ar = collective_op(stage, op_name("dp_ar.L{}", layer), StreamKind::dp, OpCategory::dp_all_reduce,
                                CollectiveOp::all_reduce, GroupKind::dp, 4.0 * unit);
          if (flushed >= 0) ar.deps = {flushed};
          add(std::move(ar));
        }
    }

    // Optimizer step: after every gradient of this stage is reduced. Memory-bound AdamW over the
    // local shard: reads param, grad, exp_avg, exp_avg_sq and writes param and both moments.
    Op opt = compute_op(stage, "optimizer.step", OpCategory::optimizer);
    const double state_b = bytes_per_element(p_.state_dtype);
    const double per_param = p_.optimizer == Optimizer::sgd ? 5 * state_b
                             : p_.optimizer == Optimizer::adamw8bit ? 2 * state_b + 4.0
                                                                    : 7 * state_b;
    opt.memory_bound_bytes = per_param * local_state_params(stage);
    if (p_.runtime == Runtime::megatron) opt.memory_bound_bytes += 2.0 * stage_params(stage);  // bf16 copy-back
    opt.kernels = 8;
    // Only the last op of each of those streams: stream order implies the rest. This stage's ops
    // are the ones added since stage_begin.
    {
      std::map<StreamKind, int> last_of;
      for (std::size_t i = stage_begin; i < prog_.ops.size(); ++i) {
        const Op& o = prog_.ops[i];
        if (o.stage == stage && (o.stream == StreamKind::fsdp_reduce_scatter || o.stream == StreamKind::dp ||
                                 o.stream == StreamKind::compute))
          last_of[o.stream] = static_cast<int>(i);
      }
      for (const auto& [k, dep] : last_of) opt.deps.push_back(dep);
    }
    add(std::move(opt));
  }

  // Wire the pipeline: a chunk's forward waits for the previous chunk's activations, its
  // backward for the next chunk's gradients.
  for (const auto& [key, first] : fwd_first) {
    const auto [vstage, mb] = key;
    if (vstage > 0) prog_.ops[static_cast<std::size_t>(first)].deps.push_back(fwd_send.at({vstage - 1, mb}));
  }
  for (const auto& [key, first] : bwd_first) {
    const auto [vstage, mb] = key;
    if (vstage < n_vstages_ - 1) prog_.ops[static_cast<std::size_t>(first)].deps.push_back(bwd_send.at({vstage + 1, mb}));
  }
  for (const auto* firsts : {&fwd_first, &bwd_first})
    for (const auto& [key, first] : *firsts) prog_.pass_first_ops.push_back(first);
  std::sort(prog_.pass_first_ops.begin(), prog_.pass_first_ops.end());
  for (const auto& o : prog_.ops) prog_.model_flops_per_step += o.model_flops;
  return std::move(prog_);
}

}  // namespace

StepProgram lower_step(const ModelSpec& m, const Plan& p, const Job& j, LowerOptions options) {
  return Builder(m, p, j, options).build();
}

}  // namespace meshplan

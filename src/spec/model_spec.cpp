#include "spec/model_spec.hpp"

#include <fmt/format.h>

#include "spec/error.hpp"
#include "spec/limits.hpp"

#include <utility>

namespace meshplan {

std::string_view to_string(MlpKind k) {
  switch (k) {
    case MlpKind::gelu: return "gelu";
    case MlpKind::swiglu: return "swiglu";
    case MlpKind::relu2: return "relu2";
  }
  return "gelu";
}
std::string_view to_string(PosEmb p) {
  switch (p) {
    case PosEmb::rope: return "rope";
    case PosEmb::learned: return "learned";
    case PosEmb::alibi: return "alibi";
    case PosEmb::none: return "none";
  }
  return "none";
}
std::string_view to_string(NormKind n) { return n == NormKind::rmsnorm ? "rmsnorm" : "layernorm"; }

std::string_view to_string(AttentionKind a) { return a == AttentionKind::mla ? "mla" : "gqa"; }
std::optional<AttentionKind> parse_attention_kind(std::string_view s) {
  if (s == "gqa" || s == "mha" || s == "mqa") return AttentionKind::gqa;
  if (s == "mla") return AttentionKind::mla;
  return std::nullopt;
}

std::optional<MlpKind> parse_mlp_kind(std::string_view s) {
  if (s == "gelu" || s == "relu" || s == "gelu_new" || s == "gelu_pytorch_tanh") return MlpKind::gelu;
  if (s == "swiglu" || s == "silu" || s == "geglu") return MlpKind::swiglu;
  if (s == "relu2" || s == "squared_relu" || s == "squared-relu") return MlpKind::relu2;
  return std::nullopt;
}
std::optional<PosEmb> parse_pos_emb(std::string_view s) {
  if (s == "rope") return PosEmb::rope;
  if (s == "learned") return PosEmb::learned;
  if (s == "alibi") return PosEmb::alibi;
  if (s == "none") return PosEmb::none;
  return std::nullopt;
}
std::optional<NormKind> parse_norm_kind(std::string_view s) {
  if (s == "rmsnorm") return NormKind::rmsnorm;
  if (s == "layernorm") return NormKind::layernorm;
  return std::nullopt;
}

namespace {
// One MLP of inner width f: 2 or 3 d x f matrices, plus biases (f per up/gate, d for down).
std::int64_t mlp_params(const ModelSpec& m, std::int64_t f) {
  const std::int64_t d = m.d_model;
  const int n_in = m.mlp == MlpKind::swiglu ? 2 : 1;
  std::int64_t p = (n_in + 1) * d * f;
  if (m.linear_bias) p += n_in * f + d;
  return p;
}
std::int64_t norm_params(const ModelSpec& m) {
  return m.d_model * ((m.norm == NormKind::layernorm && m.norm_bias) ? 2 : 1);
}
}  // namespace

namespace {
// Multi-head latent attention (DeepSeek-V3 modeling_deepseek.py): q_a (d x q_lora) + its RMSNorm +
// q_b (q_lora x H(d_nope + d_rope)), or one full-rank d x H(d_nope + d_rope) query projection;
// kv_a (d x (kv_lora + d_rope), the latent and the shared rotary key) + its RMSNorm + kv_b
// (kv_lora x H(d_nope + d_v)); the output projection H d_v x d.
std::int64_t mla_params(const ModelSpec& m) {
  const std::int64_t d = m.d_model, h = m.n_heads;
  const MlaSpec& a = m.mla;
  const std::int64_t qk = m.head_dim + a.rope_head_dim;
  const std::int64_t q = a.q_lora_rank > 0 ? d * a.q_lora_rank + a.q_lora_rank + a.q_lora_rank * h * qk : d * h * qk;
  const std::int64_t kv = d * (a.kv_lora_rank + a.rope_head_dim) + a.kv_lora_rank +
                          a.kv_lora_rank * h * (m.head_dim + a.v_head_dim);
  return q + kv + h * a.v_head_dim * d;
}
}  // namespace

const char* sliding_window_conflict(const ModelSpec& m) {
  return m.full_attention_every > 0 && m.sliding_window == 0
             ? "given without a sliding_window: every layer already attends in full"
             : nullptr;
}

ParamCounts param_counts(const ModelSpec& m) {
  const std::int64_t d = m.d_model;
  const std::int64_t q = static_cast<std::int64_t>(m.n_heads) * m.head_dim;
  const std::int64_t kv = static_cast<std::int64_t>(m.n_kv_heads) * m.head_dim;
  ParamCounts c;
  if (m.attention == AttentionKind::mla) {
    c.attention_per_layer = mla_params(m);
  } else {
    c.attention_per_layer = d * q + 2 * d * kv + q * d;
    if (m.linear_bias) c.attention_per_layer += q + 2 * kv + d;
  }
  if (m.qk_norm) c.attention_per_layer += 2 * m.head_dim;  // one weight vector per head width, q and k
  if (m.moe.enabled()) {
    c.mlp_per_layer = static_cast<std::int64_t>(m.moe.n_experts + m.moe.n_shared_experts) *
                          mlp_params(m, m.moe.expert_ffn) +
                      d * m.moe.n_experts + (m.linear_bias ? m.moe.n_experts : 0);  // router
    c.shared_experts_per_layer = static_cast<std::int64_t>(m.moe.n_shared_experts) * mlp_params(m, m.moe.expert_ffn);
    c.router_per_layer = d * m.moe.n_experts + (m.linear_bias ? m.moe.n_experts : 0);
    c.n_dense_layers = m.moe.n_dense_layers;
    c.dense_mlp_per_layer = m.moe.n_dense_layers > 0 ? mlp_params(m, m.ffn_hidden) : 0;
  } else {
    c.mlp_per_layer = mlp_params(m, m.ffn_hidden);
  }
  c.norm_per_layer = 2 * norm_params(m);
  c.embedding = m.vocab * d;
  c.position = m.pos_emb == PosEmb::learned ? m.max_seq_len * d : 0;
  c.lm_head = m.tied_embeddings ? 0 : m.vocab * d;
  c.final_norm = norm_params(m);
  // Each MTP module: two input norms, the 2d -> d projection, one (MoE) block, its output norm.
  c.mtp = static_cast<std::int64_t>(m.n_mtp_layers) * (3 * norm_params(m) + 2 * d * d + c.per_layer());
  return c;
}

std::int64_t n_params(const ModelSpec& m) { return param_counts(m).total(m.n_layers); }

std::int64_t n_active_params(const ModelSpec& m) {
  if (!m.moe.enabled()) return n_params(m);
  ParamCounts c = param_counts(m);
  const std::int64_t routed_all = c.mlp_per_layer;
  c.mlp_per_layer = static_cast<std::int64_t>(m.moe.top_k + m.moe.n_shared_experts) *
                        mlp_params(m, m.moe.expert_ffn) +
                    m.d_model * m.moe.n_experts + (m.linear_bias ? m.moe.n_experts : 0);
  c.mtp -= static_cast<std::int64_t>(m.n_mtp_layers) * (routed_all - c.mlp_per_layer);
  return c.total(m.n_layers);
}

void validate(const ModelSpec& m, const std::string& file) {
  auto positive = [&](std::int64_t v, const char* key) {
    if (v <= 0) throw InputError(file, key, fmt::format("must be a positive integer, got {}", v));
  };
  positive(m.n_layers, "n_layers");
  positive(m.d_model, "d_model");
  positive(m.n_heads, "n_heads");
  positive(m.n_kv_heads, "n_kv_heads");
  positive(m.head_dim, "head_dim");
  positive(m.vocab, "vocab");
  if (m.moe.enabled()) {
    positive(m.moe.expert_ffn, "moe.expert_ffn");
    positive(m.moe.top_k, "moe.top_k");
    if (m.moe.top_k > m.moe.n_experts)
      throw InputError(file, "moe.top_k", fmt::format("top_k {} exceeds n_experts {}", m.moe.top_k, m.moe.n_experts));
  } else {
    positive(m.ffn_hidden, "ffn_hidden");
  }
  if (m.attention == AttentionKind::mla) {
    positive(m.mla.kv_lora_rank, "mla.kv_lora_rank");
    positive(m.mla.rope_head_dim, "mla.rope_head_dim");
    positive(m.mla.v_head_dim, "mla.v_head_dim");
    if (m.mla.q_lora_rank < 0) throw InputError(file, "mla.q_lora_rank", fmt::format("must not be negative, got {}", m.mla.q_lora_rank));
    for (auto [v, key] : {std::pair{m.mla.q_lora_rank, "mla.q_lora_rank"}, std::pair{m.mla.kv_lora_rank, "mla.kv_lora_rank"},
                          std::pair{m.mla.rope_head_dim, "mla.rope_head_dim"}, std::pair{m.mla.v_head_dim, "mla.v_head_dim"}})
      limits::check_count(file, key, v, 0, limits::kMaxWidth, "the model width");
  }
  if (m.moe.n_dense_layers < 0 || m.moe.n_dense_layers > m.n_layers)
    throw InputError(file, "moe.n_dense_layers",
                     fmt::format("must be between 0 and n_layers {}, got {}", m.n_layers, m.moe.n_dense_layers));
  if (m.moe.n_dense_layers > 0) positive(m.ffn_hidden, "ffn_hidden");
  if (!(m.moe.capacity_factor >= 0) || m.moe.capacity_factor > 1e3)
    throw InputError(file, "moe.capacity_factor",
                     fmt::format("must be 0 (dropless) or a positive factor up to 1000, got {}", m.moe.capacity_factor));
  if (m.n_mtp_layers < 0 || m.n_mtp_layers > limits::kMaxLayers)
    throw InputError(file, "n_mtp_layers", fmt::format("must be between 0 and {}, got {}", limits::kMaxLayers, m.n_mtp_layers));
  if (m.n_heads % m.n_kv_heads != 0)
    throw InputError(file, "n_kv_heads",
                     fmt::format("n_heads {} is not divisible by n_kv_heads {}", m.n_heads, m.n_kv_heads));
  if (m.pos_emb == PosEmb::learned) positive(m.max_seq_len, "max_seq_len");
  // Negative counts would silently read as "dense" / "no context" above; reject them here.
  auto non_negative = [&](std::int64_t v, const char* key) {
    if (v < 0) throw InputError(file, key, fmt::format("must not be negative, got {}", v));
  };
  non_negative(m.max_seq_len, "max_seq_len");
  non_negative(m.moe.n_experts, "moe.n_experts");
  non_negative(m.moe.n_shared_experts, "moe.n_shared_experts");
  // Upper bounds (docs/limits.md): below them every parameter count below fits 64 bits.
  auto at_most = [&](std::int64_t v, const char* key, std::int64_t max, const char* what) {
    limits::check_count(file, key, v, 0, max, what);
  };
  at_most(m.n_layers, "n_layers", limits::kMaxLayers, "layers");
  at_most(m.d_model, "d_model", limits::kMaxWidth, "the model width");
  at_most(m.n_heads, "n_heads", limits::kMaxHeads, "attention heads");
  at_most(m.n_kv_heads, "n_kv_heads", limits::kMaxHeads, "kv heads");
  at_most(m.head_dim, "head_dim", limits::kMaxHeadDim, "the head dimension");
  at_most(m.ffn_hidden, "ffn_hidden", limits::kMaxWidth, "the MLP width");
  at_most(m.vocab, "vocab", limits::kMaxVocab, "the vocabulary");
  at_most(m.max_seq_len, "max_seq_len", limits::kMaxSeqLen, "the sequence length");
  at_most(m.moe.n_experts, "moe.n_experts", limits::kMaxExperts, "experts");
  at_most(m.moe.n_shared_experts, "moe.n_shared_experts", limits::kMaxExperts, "experts");
  at_most(m.moe.expert_ffn, "moe.expert_ffn", limits::kMaxWidth, "the MLP width");
  // Widths, heads and experts each in range can still multiply past 64 bits; count in double first.
  const double d = static_cast<double>(m.d_model);
  const double q = static_cast<double>(m.n_heads) * static_cast<double>(m.head_dim);
  const double kv = static_cast<double>(m.n_kv_heads) * static_cast<double>(m.head_dim);
  const double f = m.moe.enabled() ? static_cast<double>(m.moe.expert_ffn) *
                                         static_cast<double>(m.moe.n_experts + m.moe.n_shared_experts)
                                   : static_cast<double>(m.ffn_hidden);
  const double total = static_cast<double>(m.n_layers) * (2 * d * q + 2 * d * kv + 3 * d * f + 4 * d) +
                       2 * static_cast<double>(m.vocab) * d + static_cast<double>(m.max_seq_len) * d;
  if (total > limits::kMaxParams)
    throw InputError(file, "n_layers",
                     fmt::format("the shape gives {:.3g} parameters, above the maximum {:.3g} (docs/limits.md)", total,
                                 limits::kMaxParams));
}

}  // namespace meshplan

#include "spec/model_spec.hpp"

#include <fmt/format.h>

#include "spec/error.hpp"

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

ParamCounts param_counts(const ModelSpec& m) {
  const std::int64_t d = m.d_model;
  const std::int64_t q = static_cast<std::int64_t>(m.n_heads) * m.head_dim;
  const std::int64_t kv = static_cast<std::int64_t>(m.n_kv_heads) * m.head_dim;
  ParamCounts c;
  c.attention_per_layer = d * q + 2 * d * kv + q * d;
  if (m.linear_bias) c.attention_per_layer += q + 2 * kv + d;
  if (m.moe.enabled()) {
    c.mlp_per_layer = static_cast<std::int64_t>(m.moe.n_experts + m.moe.n_shared_experts) *
                          mlp_params(m, m.moe.expert_ffn) +
                      d * m.moe.n_experts;  // router
  } else {
    c.mlp_per_layer = mlp_params(m, m.ffn_hidden);
  }
  c.norm_per_layer = 2 * norm_params(m);
  c.embedding = m.vocab * d;
  c.position = m.pos_emb == PosEmb::learned ? m.max_seq_len * d : 0;
  c.lm_head = m.tied_embeddings ? 0 : m.vocab * d;
  c.final_norm = norm_params(m);
  return c;
}

std::int64_t n_params(const ModelSpec& m) { return param_counts(m).total(m.n_layers); }

std::int64_t n_active_params(const ModelSpec& m) {
  if (!m.moe.enabled()) return n_params(m);
  ParamCounts c = param_counts(m);
  c.mlp_per_layer = static_cast<std::int64_t>(m.moe.top_k + m.moe.n_shared_experts) *
                        mlp_params(m, m.moe.expert_ffn) +
                    m.d_model * m.moe.n_experts;
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
}

}  // namespace meshplan

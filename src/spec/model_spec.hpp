#pragma once
// ModelSpec: the architecture of a decoder-only transformer (the "application" input).
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace meshplan {

enum class MlpKind { gelu, swiglu, relu2 };      // gelu/relu2: 2 matrices; swiglu: 3 matrices
enum class PosEmb { rope, learned, alibi, none }; // learned: a max_seq_len x d_model table
enum class NormKind { rmsnorm, layernorm };       // rmsnorm: weight only; layernorm: weight (+bias)
// gqa covers multi-head (n_kv_heads == n_heads) and multi-query attention; mla is DeepSeek's
// multi-head latent attention (low-rank query and key/value projections, docs/models.md).
enum class AttentionKind { gqa, mla };

struct MoeSpec {
  int n_experts = 0;             // 0 = dense model
  int top_k = 0;                 // experts each token is routed to
  std::int64_t expert_ffn = 0;   // inner width of one expert's MLP
  int n_shared_experts = 0;      // always-active experts (DeepSeek style), each expert_ffn wide
  int n_dense_layers = 0;        // leading layers with a dense MLP of ffn_hidden (DeepSeek-V3: 3)
  // Router capacity factor: each expert takes at most capacity_factor * tokens * top_k / n_experts
  // tokens, and its buffer is padded to that (GShard / Switch; Megatron
  // --moe-expert-capacity-factor with --moe-pad-expert-input-to-capacity). 0: dropless.
  double capacity_factor = 0;
  // Dropless routing with the router's choices replaced by random ones for benchmarking (Megatron
  // --moe-router-force-load-balancing, torchtitan debug.moe_force_load_balance): every expert
  // gets the same share on average, with only the sampling noise of the draws left.
  bool force_balance = false;
  bool enabled() const { return n_experts > 0; }
  bool is_moe_layer(int layer) const { return enabled() && layer >= n_dense_layers; }
};

// Multi-head latent attention (DeepSeek-V2/V3): the query through a rank-q_lora_rank bottleneck
// (0: a full-rank query projection), keys and values through one shared kv_lora_rank latent (the
// KV cache) plus a rope_head_dim rotary key shared by every head. ModelSpec::head_dim is the
// non-rotary query/key width per head; v_head_dim the value width per head.
struct MlaSpec {
  std::int64_t q_lora_rank = 0;
  std::int64_t kv_lora_rank = 0;
  std::int64_t rope_head_dim = 0;
  std::int64_t v_head_dim = 0;
};

// RoPE's base and its context-extension scaling: they change no shape or FLOP, but a runtime that
// trains the model must be told them (Megatron's --rotary-base, --use-rope-scaling), or it trains
// a different model.
struct RopeSpec {
  double theta = 10000;                  // rope_theta (the transformers / Megatron default)
  std::string scaling;                   // "" none, "llama3" (Llama 3.1's frequency-band scaling)
  double factor = 1;                     // llama3: 8
  double low_freq_factor = 1, high_freq_factor = 4;
  std::int64_t original_max_position = 0;  // llama3: 8192
};

struct ModelSpec {
  std::string name;
  int n_layers = 0;
  std::int64_t d_model = 0;
  int n_heads = 0;
  int n_kv_heads = 0;            // == n_heads for multi-head attention
  std::int64_t head_dim = 0;     // usually d_model / n_heads
  std::int64_t ffn_hidden = 0;   // dense MLP inner width
  MlpKind mlp = MlpKind::swiglu;
  std::int64_t vocab = 0;
  bool tied_embeddings = false;
  PosEmb pos_emb = PosEmb::rope;
  NormKind norm = NormKind::rmsnorm;
  bool linear_bias = false;      // biases on every linear layer (GPT-2/MPT-preset style)
  bool norm_bias = false;        // LayerNorm with a bias vector
  std::int64_t max_seq_len = 0;  // context; sizes the learned position table
  RopeSpec rope;                 // with pos_emb == rope
  double norm_eps = 1e-5;        // the norms' epsilon (rms_norm_eps / layer_norm_eps)
  MoeSpec moe;
  AttentionKind attention = AttentionKind::gqa;
  MlaSpec mla;                   // with attention == mla
  bool qk_norm = false;          // RMSNorm over each query and key head (Qwen3, OLMo-2)
  // Multi-token prediction modules after the last layer (DeepSeek-V3: 1), each a projection of
  // [norm(h), norm(emb)] (2d -> d) and one more block sharing the embedding and head; 0: none.
  int n_mtp_layers = 0;
  // Sliding-window attention (Mistral 7B v0.1, Gemma, gpt-oss): a windowed layer's queries attend
  // to the last `sliding_window` tokens, not the whole causal prefix; 0: no layer is windowed.
  // With full_attention_every = N > 0 every N-th layer (N - 1, 2N - 1, ...) attends in full and
  // the others are windowed (gpt-oss: 2, from a windowed layer 0); 0: every layer is windowed.
  std::int64_t sliding_window = 0;
  int full_attention_every = 0;
  bool is_windowed_layer(int layer) const {
    return sliding_window > 0 && (full_attention_every <= 0 || (layer + 1) % full_attention_every != 0);
  }
  std::optional<std::int64_t> n_params_published;
  std::string n_params_source;   // where the published count comes from
};

std::string_view to_string(MlpKind k);
std::string_view to_string(PosEmb p);
std::string_view to_string(NormKind n);
std::string_view to_string(AttentionKind a);
std::optional<AttentionKind> parse_attention_kind(std::string_view s);
std::optional<MlpKind> parse_mlp_kind(std::string_view s);
std::optional<PosEmb> parse_pos_emb(std::string_view s);
std::optional<NormKind> parse_norm_kind(std::string_view s);

// Parameter counts, from the shapes above (every weight matrix, bias and norm vector).
struct ParamCounts {
  std::int64_t attention_per_layer = 0;  // q, k, v, o (+ biases, QK norms); MLA's down/up projections
  std::int64_t mlp_per_layer = 0;        // dense MLP, or all experts + router for MoE
  std::int64_t norm_per_layer = 0;       // the two per-block norms
  std::int64_t embedding = 0;            // token embedding table
  std::int64_t position = 0;             // learned position table (0 unless learned)
  std::int64_t lm_head = 0;              // 0 when tied
  std::int64_t final_norm = 0;
  // MoE models with leading dense layers: those layers' MLP (ffn_hidden wide) and their count.
  std::int64_t dense_mlp_per_layer = 0;
  // Parts of an MoE layer's mlp_per_layer: the shared experts and the router (the rest is the
  // routed experts, which expert parallelism splits).
  std::int64_t shared_experts_per_layer = 0, router_per_layer = 0;
  int n_dense_layers = 0;
  std::int64_t mtp = 0;                  // the multi-token-prediction modules (0 unless enabled)
  // One MoE (or, for a dense model, any) block: the largest block, what per-block sizes use.
  std::int64_t per_layer() const { return attention_per_layer + mlp_per_layer + norm_per_layer; }
  std::int64_t total(int n_layers) const {
    return per_layer() * n_layers - (mlp_per_layer - dense_mlp_per_layer) * n_dense_layers + embedding + position +
           lm_head + final_norm + mtp;
  }
};

// Why a model's sliding-window settings contradict each other, or nullptr: full layers every N
// mean something only beside a window (each loader reports it against its own key).
const char* sliding_window_conflict(const ModelSpec& m);

ParamCounts param_counts(const ModelSpec& m);
std::int64_t n_params(const ModelSpec& m);
// Parameters touched per token (MoE: only top_k experts), for FLOP counts.
std::int64_t n_active_params(const ModelSpec& m);

// Throws InputError(file, key, reason) when a field is missing or inconsistent.
void validate(const ModelSpec& m, const std::string& file);

}  // namespace meshplan

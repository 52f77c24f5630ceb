#include "calibrate/layer_shapes.hpp"

#include <set>
#include <tuple>

namespace meshplan::calibrate {
namespace {

// Y[t, out] = X[t, in] W[in, out] and its two backward GEMMs.
void linear(std::vector<LabelledGemm>& out, const std::string& prefix, std::int64_t tokens, std::int64_t in,
            std::int64_t outf) {
  if (tokens <= 0 || in <= 0 || outf <= 0) return;
  out.push_back({{tokens, outf, in, 1}, prefix + " fwd"});
  out.push_back({{tokens, in, outf, 1}, prefix + " dgrad"});
  out.push_back({{in, outf, tokens, 1}, prefix + " wgrad"});
}

}  // namespace

std::vector<LabelledGemm> layer_gemms(const ModelSpec& m, int tp, std::int64_t tokens) {
  std::vector<LabelledGemm> out;
  if (tp < 1 || m.n_heads % tp != 0) return out;
  const std::string p = m.name + " tp" + std::to_string(tp) + " ";
  // KV heads are replicated when TP exceeds them (Megatron), so each rank holds max(kv/tp, 1).
  const std::int64_t kv_local = std::max<std::int64_t>(m.n_kv_heads / tp, 1);
  const std::int64_t q_local = m.n_heads / tp;
  linear(out, p + "qkv", tokens, m.d_model, (q_local + 2 * kv_local) * m.head_dim);
  linear(out, p + "attn_out", tokens, q_local * m.head_dim, m.d_model);
  const bool gated = m.mlp == MlpKind::swiglu;
  std::int64_t ffn = m.ffn_hidden, mlp_tokens = tokens;
  if (m.moe.enabled()) {
    ffn = m.moe.expert_ffn;
    mlp_tokens = tokens * m.moe.top_k / m.moe.n_experts;
  }
  if (ffn % tp == 0) {
    linear(out, p + "mlp_up", mlp_tokens, m.d_model, (gated ? 2 : 1) * ffn / tp);
    linear(out, p + "mlp_down", mlp_tokens, ffn / tp, m.d_model);
  }
  if (m.vocab % tp == 0) linear(out, p + "lm_head", tokens, m.d_model, m.vocab / tp);
  return out;
}

std::vector<LabelledGemm> unique_layer_gemms(const std::vector<ModelSpec>& models, const std::vector<int>& tps,
                                             std::int64_t tokens) {
  std::vector<LabelledGemm> out;
  std::set<std::tuple<std::int64_t, std::int64_t, std::int64_t>> seen;
  for (const ModelSpec& m : models)
    for (int tp : tps)
      for (LabelledGemm& g : layer_gemms(m, tp, tokens))
        if (seen.insert({g.shape.m, g.shape.n, g.shape.k}).second) out.push_back(std::move(g));
  return out;
}

}  // namespace meshplan::calibrate

#include "workload/stage_params.hpp"

#include <algorithm>

namespace meshplan {

double block_params_per_rank(const ModelSpec& m, const Plan& p) {
  const ParamCounts c = param_counts(m);
  const double tp = p.mesh.tp;
  const double attn_split = p.tp_style == TpStyle::full ? tp : 1.0;
  if (m.moe.enabled()) {
    // Routed experts split over EP x expert-TP; shared experts over TP like a dense MLP; the
    // router is replicated.
    const double etp = std::max(1, std::min(p.mesh.tp, p.mesh.expert_tp()));
    const double routed = static_cast<double>(c.mlp_per_layer - c.shared_experts_per_layer - c.router_per_layer);
    return static_cast<double>(c.attention_per_layer) / attn_split + routed / (etp * std::max(1, p.mesh.ep)) +
           static_cast<double>(c.shared_experts_per_layer) / tp + static_cast<double>(c.router_per_layer) +
           static_cast<double>(c.norm_per_layer);
  }
  return static_cast<double>(c.attention_per_layer) / attn_split + static_cast<double>(c.mlp_per_layer) / tp +
         static_cast<double>(c.norm_per_layer);
}

double dense_block_params_per_rank(const ModelSpec& m, const Plan& p) {
  const ParamCounts c = param_counts(m);
  const double attn_split = p.tp_style == TpStyle::full ? static_cast<double>(p.mesh.tp) : 1.0;
  return static_cast<double>(c.attention_per_layer) / attn_split +
         static_cast<double>(c.dense_mlp_per_layer) / std::max(1, p.mesh.tp) + static_cast<double>(c.norm_per_layer);
}

double mtp_module_params_per_rank(const ModelSpec& m, const Plan& p) {
  const double d = static_cast<double>(m.d_model);
  const double column_split = p.tp_style == TpStyle::full ? static_cast<double>(std::max(1, p.mesh.tp)) : 1.0;
  const double norms = static_cast<double>(param_counts(m).final_norm);  // one norm's weights (and bias)
  return block_params_per_rank(m, p) + 2 * d * d / column_split + 3 * norms;
}

int dense_layers_in(const ModelSpec& m, int first_layer, int n_layers) {
  if (!m.moe.enabled() || m.moe.n_dense_layers <= 0 || n_layers <= 0) return 0;
  return std::clamp(m.moe.n_dense_layers - first_layer, 0, n_layers);
}

StageParams stage_params(const ModelSpec& m, const Plan& p, int stage, int n_layers, int n_dense, int n_mtp) {
  const ParamCounts c = param_counts(m);
  // Loss-parallel TP splits the embedding and the head over the vocabulary.
  const double vocab_split = p.tp_style == TpStyle::full ? static_cast<double>(p.mesh.tp) : 1.0;
  StageParams s;
  s.per_block = block_params_per_rank(m, p);
  s.per_block_norms = static_cast<double>(c.norm_per_layer);
  n_dense = std::clamp(n_dense, 0, n_layers);
  s.blocks = s.per_block * (n_layers - n_dense) + (n_dense > 0 ? dense_block_params_per_rank(m, p) * n_dense : 0.0);
  if (stage == 0) s.root += static_cast<double>(c.embedding) / vocab_split + static_cast<double>(c.position);
  if (stage == p.mesh.pp - 1) {
    // With pipeline stages the last stage keeps its own copy of a tied embedding as the head.
    const double head = m.tied_embeddings ? (p.mesh.pp > 1 ? static_cast<double>(c.embedding) : 0.0)
                                          : static_cast<double>(c.lm_head);
    s.head_group = head / vocab_split + static_cast<double>(c.final_norm);
    s.root += s.head_group;
  }
  if (n_mtp > 0) {
    s.mtp = n_mtp * mtp_module_params_per_rank(m, p);
    if (stage != 0) s.mtp += static_cast<double>(c.embedding) / vocab_split;
  }
  return s;
}

}  // namespace meshplan

// Multi-token prediction (DeepSeek-V3, arXiv 2412.19437 §2.2; Megatron-Core
// transformer/multi_token_prediction.py MultiTokenPredictionLayer). Module k predicts the token
// k + 1 ahead: it embeds the tokens shifted by k with the model's embedding, RMS-normalises that
// (enorm) and the previous hidden state (hnorm), concatenates the two (2h) and projects them back to
// h (eh_proj, a column-parallel linear), then runs one transformer block of the model's kind, its
// own final norm, the model's output head and a cross-entropy loss. The block is lowered as any
// block (layer_lowering.cpp, as block n_layers + k - 1); the head and loss with the model's
// (stage_lowering.cpp forward_head / backward_head). This file lowers what comes before the block:
// the embedding lookup, the norms, the concatenation and the projection with its TP collectives.
#include "workload/step_builder.hpp"

namespace meshplan::lowering {

namespace {
// Forward: the embedding lookup, enorm, hnorm and the concatenation, one kernel each.
constexpr int kMtpInputForwardKernels = 4;
// Backward: the two norms' backward, the add of hnorm's input gradient into the hidden state's,
// and the embedding's backward (zero-fill and scatter-add, as the model's embedding).
constexpr int kMtpInputBackwardKernels = 5;
}  // namespace

GemmShape Builder::mtp_projection_gemm() const {
  const bool full_tp = p_.tp_style == TpStyle::full;
  const std::int64_t split = full_tp ? std::max(1, p_.mesh.tp) : 1;
  return {d_.tokens, d_.h / split, 2 * d_.h, 1};
}

double Builder::p2p_bytes(int vstage, bool forward) const {
  // Megatron-Core concatenates each module's hidden states to the model's along the sequence
  // (MultiTokenPredictionBlock.forward): a chunk holding the modules, or after them, sends 1 + n
  // times the tokens; the gradient a chunk sends back is its input's, concatenated only after them.
  const bool concatenated = s_.mtp_chunk >= 0 && (forward ? vstage >= s_.mtp_chunk : vstage > s_.mtp_chunk);
  return concatenated ? s_.act_p2p * (1 + s_.n_mtp) : s_.act_p2p;
}

std::pair<int, int> Builder::mtp_input_forward(int stage, int layer, std::int64_t mb, std::vector<int> deps) {
  const int depth = layer - m_.n_layers + 1;
  const std::string tag = op_name("fwd.mtp{}.mb{}", depth, mb);
  const bool tp = p_.mesh.tp > 1 && p_.tp_style == TpStyle::full;
  const bool sp = tp && p_.sequence_parallel;
  const double act = d_.activation_bytes();
  const double t = static_cast<double>(d_.tokens), h = static_cast<double>(d_.h);
  int prev = -1, first = -1;
  // The lookup reads and writes one row of h per token (as the model's embedding); each norm
  // reads and writes its input, the concatenation reads both and writes 2h: on the sequence shard.
  Op norms = compute_op(stage, sub_name(tag, ".embed_norm_cat"), OpCategory::compute);
  norms.memory_bound_bytes = 2 * d_.e * t * h + (2 * 2 + 4) * d_.e * t * h / d_.sp_split;
  norms.kernels = kMtpInputForwardKernels;
  chain(std::move(norms), prev, first, deps);
  // Sequence parallelism: the column-parallel projection all-gathers its 2h-wide input first.
  if (sp) chain(tp_collective(stage, sub_name(tag, ".tp_ag_in"), CollectiveOp::all_gather, 2 * act), prev, first, deps);
  Op proj = compute_op(stage, sub_name(tag, ".eh_proj"), OpCategory::compute);
  proj.gemms = {mtp_projection_gemm()};
  proj.kernels = 1;
  proj.hardware_flops = proj.model_flops = gemm_flops(proj.gemms);
  proj.at_end.push_back({MemoryTerm::activations, s_.mtp_input_saved});
  chain(std::move(proj), prev, first, deps);
  // Its h / tp outputs are gathered along the hidden dim (all_gather_last_dim_from_tensor_parallel_
  // region); under SP the block then takes its sequence shard, a split with no communication.
  if (tp) chain(tp_collective(stage, sub_name(tag, ".tp_ag_out"), CollectiveOp::all_gather, act), prev, first, deps);
  return {first, prev};
}

int Builder::mtp_input_backward(StageState& st, int layer, std::int64_t mb, int last) {
  const int stage = st.stage;
  const int depth = layer - m_.n_layers + 1;
  const std::string tag = op_name("bwd.mtp{}.mb{}", depth, mb);
  const bool tp = p_.mesh.tp > 1 && p_.tp_style == TpStyle::full;
  const bool sp = tp && p_.sequence_parallel;
  const double act = d_.activation_bytes();
  const double t = static_cast<double>(d_.tokens), h = static_cast<double>(d_.h);
  int prev = -1, first = -1;
  std::vector<int> deps;
  if (last >= 0) deps.push_back(last);
  // The backward of the sequence split gathers the block input's gradient; the hidden-dim gather's
  // backward is a split.
  if (sp) chain(tp_collective(stage, sub_name(tag, ".tp_ag_grad"), CollectiveOp::all_gather, act), prev, first, deps);
  Op proj = compute_op(stage, sub_name(tag, ".eh_proj"), OpCategory::compute);
  proj.gemms = grads_of({mtp_projection_gemm()});
  proj.kernels = 2;
  proj.hardware_flops = proj.model_flops = gemm_flops(proj.gemms);
  chain(std::move(proj), prev, first, deps);
  // The input gradient of a column-parallel linear is a partial sum over TP: reduce-scattered to
  // the sequence shard under SP, else all-reduced.
  if (tp)
    chain(tp_collective(stage, sub_name(tag, sp ? ".tp_rs_in" : ".tp_ar_in"),
                        sp ? CollectiveOp::reduce_scatter : CollectiveOp::all_reduce, 2 * act),
          prev, first, deps);
  Op norms = compute_op(stage, sub_name(tag, ".embed_norm_cat"), OpCategory::compute);
  // Each norm's backward reads its input and the output gradient and writes the input gradient;
  // hnorm's is added into the hidden state's gradient (read two, write one); the embedding's
  // backward scatters one row of h per token.
  norms.memory_bound_bytes = (2 * 3 + 3) * d_.e * t * h / d_.sp_split + 2 * d_.e * t * h;
  norms.kernels = kMtpInputBackwardKernels;
  norms.at_end.push_back({MemoryTerm::activations, -s_.mtp_input_saved});
  const int id = chain(std::move(norms), prev, first, deps);
  // The gradients of what the module holds beyond its block (the projection, the norms, a stage's
  // embedding copy), spread over the modules on the stage, where they are not kept through forward.
  const StageParams sp_params = stage_params_of(stage);
  if (s_.n_mtp > 0) add_grads(id, sp_params.mtp / s_.n_mtp - s_.unit);
  return id;
}

}  // namespace meshplan::lowering

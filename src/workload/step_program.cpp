#include "workload/step_program.hpp"

#include <algorithm>
#include <bit>
#include <cstdint>

#include "spec/name_table.hpp"
#include "workload/step_builder.hpp"

namespace meshplan {

namespace {
constexpr NameTable<StreamKind, kStreamKinds> kStreamNames{{{StreamKind::compute, "compute"},
                                                            {StreamKind::fsdp_all_gather, "fsdp_all_gather"},
                                                            {StreamKind::fsdp_reduce_scatter, "fsdp_reduce_scatter"},
                                                            {StreamKind::tp, "tp"},
                                                            {StreamKind::cp, "cp"},
                                                            {StreamKind::ep, "ep"},
                                                            {StreamKind::pp, "pp"},
                                                            {StreamKind::dp, "dp"},
                                                            {StreamKind::host_copy, "host_copy"},
                                                            {StreamKind::amax, "amax"}}};
constexpr NameTable<OpCategory, kOpCategories> kCategoryNames{{{OpCategory::compute, "compute"},
                                                               {OpCategory::recompute, "recompute"},
                                                               {OpCategory::optimizer, "optimizer"},
                                                               {OpCategory::fsdp_all_gather, "fsdp_all_gather"},
                                                               {OpCategory::fsdp_reduce_scatter, "fsdp_reduce_scatter"},
                                                               {OpCategory::dp_all_reduce, "dp_all_reduce"},
                                                               {OpCategory::dp_reduce_scatter, "dp_reduce_scatter"},
                                                               {OpCategory::param_all_gather, "param_all_gather"},
                                                               {OpCategory::tp, "tp"},
                                                               {OpCategory::cp, "cp"},
                                                               {OpCategory::ep, "ep"},
                                                               {OpCategory::pp, "pp"},
                                                               {OpCategory::offload, "offload"},
                                                               {OpCategory::amax, "amax"}}};
constexpr NameTable<GroupKind, kGroupKinds> kGroupNames{{{GroupKind::tp, "tp"},
                                                         {GroupKind::cp, "cp"},
                                                         {GroupKind::fsdp, "fsdp"},
                                                         {GroupKind::dp_replicate, "dp_replicate"},
                                                         {GroupKind::dp, "dp"},
                                                         {GroupKind::ep, "ep"},
                                                         {GroupKind::pp, "pp"},
                                                         {GroupKind::stage, "stage"}}};
}  // namespace

std::string_view to_string(StreamKind s) { return name_of(kStreamNames, s); }
std::string_view to_string(OpCategory c) { return name_of(kCategoryNames, c); }
std::string_view to_string(GroupKind g) { return name_of(kGroupNames, g); }

MeshGroup mesh_group(GroupKind g) {
  switch (g) {
    case GroupKind::tp: return MeshGroup::tp;
    case GroupKind::cp: return MeshGroup::cp;
    case GroupKind::fsdp: return MeshGroup::fsdp;
    case GroupKind::dp_replicate: return MeshGroup::dp_replicate;
    case GroupKind::dp: return MeshGroup::dp;
    case GroupKind::ep: return MeshGroup::ep;
    case GroupKind::pp: return MeshGroup::pp;
    case GroupKind::stage: return MeshGroup::stage;
  }
  return MeshGroup::dp;
}

bool is_communication(OpCategory c) {
  return c != OpCategory::compute && c != OpCategory::recompute && c != OpCategory::optimizer &&
         c != OpCategory::offload;
}

double model_flops_per_token(const ModelSpec& m, std::int64_t seq_len) {
  const ParamCounts c = param_counts(m);
  const double non_embedding = static_cast<double>(n_active_params(m) - c.embedding - c.position);
  // MLA: QK^T over the rotary-extended head, PV over the value head (their mean per matmul).
  const double head = m.attention == AttentionKind::mla
                          ? static_cast<double>(m.head_dim + m.mla.rope_head_dim + m.mla.v_head_dim) / 2
                          : static_cast<double>(m.head_dim);
  // Multi-token prediction: N counts each module's block and projection (ParamCounts::mtp), the
  // attention counts its block as a layer, and the shared head runs once more per module (6 d V).
  // A windowed layer's token attends to `sliding_window` keys, not `seq_len`.
  double keys = 0;
  for (int layer = 0; layer < m.n_layers + m.n_mtp_layers; ++layer)
    keys += static_cast<double>(layer < m.n_layers && m.is_windowed_layer(layer) ? std::min(m.sliding_window, seq_len) : seq_len);
  const double attention = 12.0 * static_cast<double>(m.n_heads) * head * keys;
  const double mtp_logits = 6.0 * m.n_mtp_layers * static_cast<double>(m.d_model) * static_cast<double>(m.vocab);
  return 6.0 * non_embedding + attention + mtp_logits;
}

StepProgram lower_step(const ModelSpec& m, const Plan& p, const Job& j, LowerOptions options) {
  return lowering::Builder(m, p, j, options).build();
}

const std::string& StepProgram::name(std::size_t i) const {
  static const std::string unnamed;
  return i < names.size() ? names[i] : unnamed;
}

Op StepProgram::op(std::size_t i) const {
  Op o;
  static_cast<OpWork&>(o) = works[ops[i].work];
  static_cast<OpSchedule&>(o) = ops[i];
  o.name = name(i);
  return o;
}

std::vector<Op> StepProgram::expanded() const {
  std::vector<Op> out;
  out.reserve(ops.size());
  for (std::size_t i = 0; i < ops.size(); ++i) out.push_back(op(i));
  return out;
}

std::uint64_t work_hash(const OpWork& w) {
  std::uint64_t h = 1469598103934665603ull;  // FNV-1a over the fields that tell works apart fastest
  auto mix = [&h](std::uint64_t v) { h = (h ^ v) * 1099511628211ull; };
  auto bits = [](double x) { return std::bit_cast<std::uint64_t>(x); };
  for (const GemmShape& g : w.gemms) {
    mix(static_cast<std::uint64_t>(g.m));
    mix(static_cast<std::uint64_t>(g.n));
    mix(static_cast<std::uint64_t>(g.k));
    mix(static_cast<std::uint64_t>(g.batch));
  }
  for (const AttentionShape& a : w.attention) mix(static_cast<std::uint64_t>(a.seq_q) * 31 + static_cast<std::uint64_t>(a.heads));
  mix(bits(w.memory_bound_bytes));
  mix(bits(w.cast_bytes));
  mix(bits(w.model_flops));
  mix(bits(w.bytes));
  mix(static_cast<std::uint64_t>(w.kernels));
  mix(static_cast<std::uint64_t>(w.graphed_kernels) * 64 + static_cast<std::uint64_t>(w.graph_replays));
  mix(static_cast<std::uint64_t>(w.collective) * 16 + static_cast<std::uint64_t>(w.group));
  return h;
}

}  // namespace meshplan

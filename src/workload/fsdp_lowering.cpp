// FSDP / ZeRO-3 (and ZeRO-2 as SHARD_GRAD_OP): each block is one unit, all-gathered before its
// forward and (when resharded) again before its backward, at most two units gathered at once;
// FSDP2 copies the gathered flat buffer out into per-parameter tensors; each unit's gradients are
// reduce-scattered after its backward, and under HSDP all-reduced across replicas.
#include "workload/step_builder.hpp"

namespace meshplan::lowering {

namespace {
// FSDP2's copy-out is one foreach copy kernel per unit.
constexpr int kCopyOutKernels = 1;
}  // namespace

// FSDP2 all-gathers into one flat buffer; the compute stream copies it out into the
// per-parameter tensors before the unit runs (foreach_all_gather_copy_out: read and write the
// unit once). FSDP1's flat parameter is used in place.
int Builder::copy_out(int stage, int all_gather, std::string name) {
  if (!traits_.fsdp_copy_out) return all_gather;
  Op co = compute_op(stage, std::move(name), OpCategory::compute);
  co.memory_bound_bytes = 2 * s_.gather_b * s_.unit;
  co.kernels = kCopyOutKernels;
  co.deps = {all_gather};
  return add(std::move(co));
}

int Builder::fsdp_gather_forward(StageState& st, int layer, std::int64_t mb, std::vector<int>& deps) {
  Op g = collective_op(st.stage, op_name("fsdp_ag.fwd.L{}.mb{}", layer, mb), StreamKind::fsdp_all_gather,
                       OpCategory::fsdp_all_gather, CollectiveOp::all_gather, GroupKind::fsdp, s_.gather_b * s_.unit);
  // At most two units gathered: this one waits until the unit two back is done.
  auto two_back = st.fwd_end_of_layer.find({layer - 2, mb});
  if (two_back != st.fwd_end_of_layer.end()) g.deps.push_back(two_back->second);
  if (st.prev_ag >= 0) g.deps.push_back(st.prev_ag);
  g.at_start.push_back({MemoryTerm::unsharded_params, s_.gather_b * s_.unit});
  const int ag = add(std::move(g));
  st.prev_ag = ag;
  deps.push_back(copy_out(st.stage, ag, op_name("fsdp_copy_out.fwd.L{}.mb{}", layer, mb)));
  return ag;
}

void Builder::fsdp_gather_backward(StageState& st, int layer, std::int64_t mb, int last, std::vector<int>& deps) {
  Op g = collective_op(st.stage, op_name("fsdp_ag.bwd.L{}.mb{}", layer, mb), StreamKind::fsdp_all_gather,
                       OpCategory::fsdp_all_gather, CollectiveOp::all_gather, GroupKind::fsdp, s_.gather_b * s_.unit);
  // BACKWARD_PRE / FSDP2 prefetch one unit ahead (two gathered); POST/none gather on use.
  const int window = s_.prefetch_two ? 2 : 1;
  auto it = st.bwd_end_of_layer.find({layer + window, mb});
  if (it != st.bwd_end_of_layer.end()) g.deps.push_back(it->second);
  else if (last >= 0 && !s_.prefetch_two) g.deps.push_back(last);
  if (st.prev_ag >= 0) g.deps.push_back(st.prev_ag);
  g.at_start.push_back({MemoryTerm::unsharded_params, s_.gather_b * s_.unit});
  st.prev_ag = add(std::move(g));
  deps.push_back(copy_out(st.stage, st.prev_ag, op_name("fsdp_copy_out.bwd.L{}.mb{}", layer, mb)));
}

// FSDP2's post-backward waits for the previous group's reduce-scatter before copying in its own
// (one reduce-scatter in flight bounds the buffers), so the compute stream stalls when
// reduce-scatters are slower than backward.
void Builder::fsdp_wait_previous_reduce(const StageState& st, int layer, std::int64_t mb, std::vector<int>& deps) const {
  if (!traits_.fsdp_one_reduce_scatter_in_flight) return;
  auto it = st.rs_of_layer.find({layer + 2, mb});
  if (it != st.rs_of_layer.end()) deps.push_back(it->second);
}

void Builder::fsdp_reduce(StageState& st, int layer, std::int64_t mb, int backward_first, int backward_end) {
  const bool needs_copy = traits_.fsdp_reduce_copies_grads || p_.reduce_dtype != p_.param_dtype;
  Op rs = collective_op(st.stage, op_name("fsdp_rs.L{}.mb{}", layer, mb), StreamKind::fsdp_reduce_scatter,
                        OpCategory::fsdp_reduce_scatter, CollectiveOp::reduce_scatter, GroupKind::fsdp,
                        s_.reduce_b * s_.unit);
  rs.deps = {backward_end};
  const double buffer = bytes_per_element(p_.param_dtype) * s_.unit + (needs_copy ? s_.reduce_b * s_.unit : 0);
  // The unit's unsharded grad and the reduce input live from its backward to the end of the RS.
  op_at(backward_first).at_start.push_back({MemoryTerm::reduce_buffers, buffer});
  rs.at_end.push_back({MemoryTerm::reduce_buffers, -buffer});
  const int rs_id = add(std::move(rs));
  st.rs_of_layer[{layer, mb}] = rs_id;
  if (s_.hsdp) {
    Op ar = collective_op(st.stage, op_name("hsdp_ar.L{}.mb{}", layer, mb), StreamKind::fsdp_reduce_scatter,
                          OpCategory::dp_all_reduce, CollectiveOp::all_reduce, GroupKind::dp_replicate,
                          s_.reduce_b * s_.unit / (p_.mesh.dp_shard * p_.mesh.cp));
    ar.deps = {rs_id};
    add(std::move(ar));
  }
}

}  // namespace meshplan::lowering

// FSDP / ZeRO-3 (and ZeRO-2 as SHARD_GRAD_OP): each block is one unit, all-gathered before its
// forward and (when resharded) again before its backward, at most two units gathered at once;
// FSDP2 copies the gathered flat buffer out into per-parameter tensors; each unit's gradients are
// reduce-scattered after its backward, and under HSDP all-reduced across replicas. What is not in
// a block is gathered and reduced too (memory_estimate.hpp RootGathering): FSDP1's root unit and
// Composer's FSDP2 root (embeddings, final norm, head) from the micro-batch's first forward use to
// its last backward use (FSDP1 _post_forward_reshard never frees the root; FSDP2's lazy init
// turns off the root's reshard after forward); torchtitan's embedding and [norm, output] as their
// own groups, [norm, output] kept gathered from its forward to its backward.
#include "workload/step_builder.hpp"

namespace meshplan::lowering {

namespace {
// FSDP2's copy-out is one foreach copy kernel per unit.
constexpr int kCopyOutKernels = 1;
}  // namespace

// FSDP2 all-gathers into one flat buffer; the compute stream copies it out into the
// per-parameter tensors before the unit runs (foreach_all_gather_copy_out: read and write the
// unit once). FSDP1's flat parameter is used in place.
int Builder::copy_out(int stage, int all_gather, std::string name, double bytes) {
  if (!traits_.fsdp_copy_out) return all_gather;
  Op co = compute_op(stage, std::move(name), OpCategory::compute);
  co.memory_bound_bytes = 2 * bytes;
  // The per-parameter tensors are allocated while the flat all-gather output still exists.
  co.at_start.push_back({MemoryTerm::unsharded_params, bytes});
  co.at_end.push_back({MemoryTerm::unsharded_params, -bytes});
  co.kernels = kCopyOutKernels;
  co.deps = {all_gather};
  return add(std::move(co));
}

int Builder::fsdp_gather_forward(StageState& st, int layer, int issuing_layer, std::int64_t mb,
                                  std::vector<int>& deps) {
  Op g = collective_op(st.stage, op_name("fsdp_ag.fwd.L{}.mb{}", layer, mb), StreamKind::fsdp_all_gather,
                       OpCategory::fsdp_all_gather, CollectiveOp::all_gather, GroupKind::fsdp, s_.unit_gathered);
  // FSDP1's rate limiter: each unit's reshard queues a free event, and an all-gather issued while
  // two are queued first waits for the older one. In steady state the pre-forward hook of unit i
  // finds units i-2 and i-1 queued, so whatever it issues (unit i, or under forward_prefetch unit
  // i + k) waits until unit i-2's forward is done: 2 + k units gathered at most. FSDP2 and
  // Megatron-FSDP keep two by their own design; without the limiter the gathers run as far ahead
  // as the host issues them.
  const int two_back = st.fwd_end_of_layer.find(st.row(issuing_layer - 2), mb);
  if (s_.limit_gathers && two_back >= 0) g.deps.push_back(two_back);
  if (st.prev_ag >= 0) g.deps.push_back(st.prev_ag);
  g.at_start.push_back({MemoryTerm::unsharded_params, s_.unit_gathered});
  const int ag = add(std::move(g));
  st.prev_ag = ag;
  deps.push_back(copy_out(st.stage, ag, op_name("fsdp_copy_out.fwd.L{}.mb{}", layer, mb), s_.unit_gathered));
  return ag;
}

void Builder::fsdp_gather_backward(StageState& st, int layer, std::int64_t mb, int last, std::vector<int>& deps) {
  Op g = collective_op(st.stage, op_name("fsdp_ag.bwd.L{}.mb{}", layer, mb), StreamKind::fsdp_all_gather,
                       OpCategory::fsdp_all_gather, CollectiveOp::all_gather, GroupKind::fsdp, s_.unit_gathered);
  // BACKWARD_PRE / FSDP2 prefetch one unit ahead (two gathered; FSDP1 without its rate limiter
  // backward_prefetch_limit ahead); POST/none gather on use.
  const int window = s_.bwd_window;
  if (const int end = st.bwd_end_of_layer.find(st.row(layer + window), mb); end >= 0) g.deps.push_back(end);
  else if (last >= 0 && !s_.prefetch_two) g.deps.push_back(last);
  // The first gathers of backward are issued by the pre-backward hook, once the loss's backward
  // has produced the gradient of the stage's output.
  else if (st.bwd_gate >= 0) g.deps.push_back(st.bwd_gate);
  if (st.prev_ag >= 0) g.deps.push_back(st.prev_ag);
  g.at_start.push_back({MemoryTerm::unsharded_params, s_.unit_gathered});
  st.prev_ag = add(std::move(g));
  deps.push_back(copy_out(st.stage, st.prev_ag, op_name("fsdp_copy_out.bwd.L{}.mb{}", layer, mb), s_.unit_gathered));
}

// FSDP2's post-backward waits for the previous group's reduce-scatter before copying in its own
// (one reduce-scatter in flight bounds the buffers), so the compute stream stalls when
// reduce-scatters are slower than backward.
void Builder::fsdp_wait_previous_reduce(const StageState& st, int layer, std::int64_t mb, std::vector<int>& deps) const {
  if (!traits_.fsdp_one_reduce_scatter_in_flight) return;
  if (const int rs = st.rs_of_layer.find(st.row(layer + 2), mb); rs >= 0) deps.push_back(rs);
}

void Builder::fsdp_reduce(StageState& st, int layer, std::int64_t mb, int backward_first, int backward_end) {
  Op rs = collective_op(st.stage, op_name("fsdp_rs.L{}.mb{}", layer, mb), StreamKind::fsdp_reduce_scatter,
                        OpCategory::fsdp_reduce_scatter, CollectiveOp::reduce_scatter, GroupKind::fsdp,
                        s_.reduce_b * s_.unit);
  rs.deps = {backward_end};
  const double buffer = fsdp_reduce_buffer_bytes(p_, s_.unit);
  // The unit's unsharded grad and the reduce input live from its backward to the end of the RS.
  op_at(backward_first).at_start.push_back({MemoryTerm::reduce_buffers, buffer});
  const int rs_id = add(std::move(rs));
  hold_reduce_buffer(st, backward_end, rs_id, buffer);
  add_grads(rs_id, s_.unit);
  st.rs_of_layer.set(st.row(layer), mb, rs_id);
  if (s_.hsdp) {
    Op ar = collective_op(st.stage, op_name("hsdp_ar.L{}.mb{}", layer, mb), StreamKind::fsdp_reduce_scatter,
                          OpCategory::dp_all_reduce, CollectiveOp::all_reduce, GroupKind::dp_replicate,
                          s_.reduce_b * s_.unit / (p_.mesh.dp_shard * p_.mesh.cp));
    ar.deps = {rs_id};
    add(std::move(ar));
  }
}

double Builder::group_params(const StageState& st, int group) const {
  switch (group) {
    case kRoot: return st.root_params;
    case kEmbed: return st.embed_params;
    default: return st.head_params;
  }
}

void Builder::fsdp_gather_group(StageState& st, int group, std::int64_t mb, bool backward, std::vector<int>& deps) {
  const double params = group_params(st, group);
  if (!s_.fsdp || params <= 0 || st.group_gathered[group]) return;
  static constexpr const char* kNames[] = {"root", "embed", "head"};
  // Embeddings, norms and the head are gathered in the param dtype (never float8).
  const double bytes = bytes_per_element(p_.param_dtype) * params;
  Op g = collective_op(st.stage, op_name("fsdp_ag.{}.{}.mb{}", backward ? "bwd" : "fwd", kNames[group], mb),
                       StreamKind::fsdp_all_gather, OpCategory::fsdp_all_gather, CollectiveOp::all_gather,
                       GroupKind::fsdp, bytes);
  if (st.prev_ag >= 0) g.deps.push_back(st.prev_ag);
  // A group's gather is issued by its pre-forward (pre-backward) hook, once the compute before
  // it has been issued: not ahead of the previous micro-batch's backward (of the forward).
  for (std::size_t i = prog_.ops.size(); i-- > st.begin;)
      if (prog_.ops[i].stage == st.stage && prog_.ops[i].stream == StreamKind::compute) {
        g.deps.push_back(static_cast<int>(i));
        break;
      }
  g.at_start.push_back({MemoryTerm::unsharded_params, bytes});
  st.prev_ag = add(std::move(g));
  st.group_gathered[group] = true;
  deps.push_back(copy_out(st.stage, st.prev_ag,
                          op_name("fsdp_copy_out.{}.{}.mb{}", backward ? "bwd" : "fwd", kNames[group], mb), bytes));
}

void Builder::fsdp_release_group(StageState& st, int group, int op) {
  if (!st.group_gathered[group]) return;
  op_at(op).at_end.push_back({MemoryTerm::unsharded_params, -bytes_per_element(p_.param_dtype) * group_params(st, group)});
  st.group_gathered[group] = false;
}

void Builder::fsdp_reduce_group(StageState& st, int group, std::int64_t mb, int backward_first, int backward_end) {
  const double params = group_params(st, group);
  if (params <= 0) return;
  if (!s_.fsdp || s_.dp_all <= 1) {
    add_grads(backward_end, params);
    return;
  }
  static constexpr const char* kNames[] = {"root", "embed", "head"};
  Op rs = collective_op(st.stage, op_name("fsdp_rs.{}.mb{}", kNames[group], mb), StreamKind::fsdp_reduce_scatter,
                        OpCategory::fsdp_reduce_scatter, CollectiveOp::reduce_scatter, GroupKind::fsdp,
                        s_.reduce_b * params);
  rs.deps = {backward_end};
  const double buffer = fsdp_reduce_buffer_bytes(p_, params);
  op_at(backward_first).at_start.push_back({MemoryTerm::reduce_buffers, buffer});
  const int rs_id = add(std::move(rs));
  hold_reduce_buffer(st, backward_end, rs_id, buffer);
  add_grads(rs_id, params);
  if (s_.hsdp) {
    Op ar = collective_op(st.stage, op_name("hsdp_ar.{}.mb{}", kNames[group], mb), StreamKind::fsdp_reduce_scatter,
                          OpCategory::dp_all_reduce, CollectiveOp::all_reduce, GroupKind::dp_replicate,
                          s_.reduce_b * params / (p_.mesh.dp_shard * p_.mesh.cp));
    ar.deps = {rs_id};
    add(std::move(ar));
  }
}

void Builder::hold_reduce_buffer(StageState& st, int op, int rs, double buffer) {
  if (!traits_.fsdp_one_reduce_scatter_in_flight) {
    op_at(rs).at_end.push_back({MemoryTerm::reduce_buffers, -buffer});
    return;
  }
  if (st.pending_reduce_free > 0) op_at(op).at_end.push_back({MemoryTerm::reduce_buffers, -st.pending_reduce_free});
  st.pending_reduce_free = buffer;
  st.pending_reduce_scatter = rs;
}

void Builder::release_pending_reduce(StageState& st) {
  if (st.pending_reduce_free > 0 && st.pending_reduce_scatter >= 0)
    op_at(st.pending_reduce_scatter).at_end.push_back({MemoryTerm::reduce_buffers, -st.pending_reduce_free});
  st.pending_reduce_free = 0;
  st.pending_reduce_scatter = -1;
}

void Builder::add_grads(int op, double params) {
  if (s_.state.grads_through_forward || s_.state.device.grads <= 0) return;
  op_at(op).at_end.push_back({MemoryTerm::grads, s_.state.device.grads * params});
}

}  // namespace meshplan::lowering

// Pipeline p2p: each chunk's output activations go to the next stage and its input gradients to the
// previous one; once every stage is lowered, a chunk's forward waits for the previous chunk's send
// and its backward for the next chunk's. DeepSpeed's engine sends on the compute stream (blocking).
#include "workload/step_builder.hpp"

namespace meshplan::lowering {

Op Builder::p2p_send(int stage, std::string name, double bytes, int after) const {
  Op o = make_op(stage, std::move(name), StreamKind::pp, OpCategory::pp, OpKind::p2p);
  o.group = GroupKind::pp;
  o.bytes = bytes;
  o.deps = {after};
  return o;
}

// DeepSpeed's pipeline engine sends and receives on the compute stream: the stage's next
// instruction waits for its last send.
int Builder::send(StageState& st, Op&& op) {
  const int id = add(std::move(op));
  if (traits_.blocking_pp_sends) st.blocking_send = id;
  return id;
}

// A chunk's forward waits for the previous chunk's activations, its backward for the next
// chunk's gradients.
void Builder::wire_pipeline() {
  links_.fwd_first.for_each([&](int vstage, std::int64_t mb, int first) {
    if (vstage > 0) op_at(first).deps.push_back(links_.fwd_send.at(vstage - 1, mb));
  });
  links_.bwd_first.for_each([&](int vstage, std::int64_t mb, int first) {
    if (vstage < n_vstages_ - 1) op_at(first).deps.push_back(links_.bwd_send.at(vstage + 1, mb));
  });
}

}  // namespace meshplan::lowering

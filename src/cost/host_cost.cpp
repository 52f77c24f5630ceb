#include "cost/host_cost.hpp"

#include <algorithm>

#include "spec/runtime_traits.hpp"

namespace meshplan {

HostModel host_model(const ClusterSpec& c, const Plan& p) {
  HostModel h;
  // Megatron-DeepSpeed: the profile's fitted multiple (host.megatron_deepspeed_op_factor, docs/host.md).
  const double factor = p.deepspeed_engine ? c.host.megatron_deepspeed_op_factor : 1.0;
  h.op_seconds = c.host.op_seconds * factor;
  h.launch_seconds = c.gpu.kernel_launch_seconds;
  h.collective_seconds = c10d_collective_seconds(c) * factor;
  // Graphs of the whole step; scoped graphs mark the ops they replay (OpWork::graphed_kernels).
  h.cuda_graphs = p.cuda_graphs && p.cuda_graph_scope.full;
  h.scoped_graphs = p.cuda_graphs && !p.cuda_graph_scope.full;
  h.compiled = p.compile;
  const RuntimeTraits t = runtime_traits(p);
  h.sync_every_pass = t.host_syncs_every_pass;
  h.sync_before_optimizer = t.host_syncs_before_optimizer;
  return h;
}

double host_seconds(const OpSchedule& op, const OpWork& work, const HostModel& h) {
  switch (op.kind) {
    case OpKind::compute: {
      const int kernels = std::max<int>(work.kernels, static_cast<int>(work.gemms.size() + work.attention.size()));
      if (kernels == 0) return 0;
      if (h.cuda_graphs && op.category != OpCategory::optimizer) return h.launch_seconds;
      const int graphed = h.scoped_graphs ? work.graphed_kernels : 0;
      const int replays = h.scoped_graphs ? work.graph_replays : 0;
      return std::max(0, kernels - graphed) * (h.compiled ? h.launch_seconds : h.op_seconds) + replays * h.launch_seconds;
    }
    case OpKind::collective:
    case OpKind::p2p: return h.collective_seconds;
    case OpKind::host_copy: return h.op_seconds;
  }
  return 0;
}

}  // namespace meshplan

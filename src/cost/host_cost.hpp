#pragma once
// Host (CPU) time the training process spends to issue each op of the lowered step: Python and
// eager-PyTorch dispatch, autograd bookkeeping and the CUDA launch itself (docs/host.md). The
// simulator runs these on one host thread per rank, in program order, ahead of the GPU.
#include "spec/cluster_spec.hpp"
#include "spec/plan.hpp"
#include "workload/step_program.hpp"

namespace meshplan {

// How one framework issues its kernels on this host.
struct HostModel {
  double op_seconds = 0;          // per dispatched framework op (eager: one aten op, one kernel)
  double launch_seconds = 0;      // per raw kernel or CUDA-graph launch (compiled code, graphs)
  double collective_seconds = 0;  // per NCCL call through c10d (work object, stream events)
  bool cuda_graphs = false;       // captured regions: each compute op is one graph launch
  bool scoped_graphs = false;     // graphs of some modules only (OpWork::graphed_kernels)
  bool compiled = false;          // torch.compile: Inductor's wrapper launches kernels directly
  bool sync_every_pass = false;        // RuntimeTraits::host_syncs_every_pass
  bool sync_before_optimizer = false;  // RuntimeTraits::host_syncs_before_optimizer
};

HostModel host_model(const ClusterSpec& c, const Plan& p);

// A c10d collective is two dispatched ops on the host: the collective itself (work object, stream
// event, NCCL enqueue) and the wait that makes the caller's stream depend on it (docs/host.md).
inline constexpr double kC10dOpsPerCollective = 2.0;

// Host time of one NCCL call through c10d on this host, as a plain torch.distributed caller pays
// it (header-only: the collective cost model uses it without the rest of the host model).
inline double c10d_collective_seconds(const ClusterSpec& c) { return kC10dOpsPerCollective * c.host.op_seconds; }

// Seconds of host time to issue `op`.
double host_seconds(const OpSchedule& op, const OpWork& work, const HostModel& h);
inline double host_seconds(const Op& op, const HostModel& h) { return host_seconds(op, op, h); }

}  // namespace meshplan

#pragma once
// The layout and batch fields a --json row names a plan by (plan rows, dropped plans, capacity).
#include <nlohmann/json.hpp>

#include "plan/planner.hpp"

namespace meshplan {

inline nlohmann::json layout_json(const PlanCandidate& c) {
  const Mesh& m = c.plan.mesh;
  return {{"pp", m.pp}, {"vpp", m.vpp}, {"dp_replicate", m.dp_replicate}, {"dp_shard", m.dp_shard}, {"cp", m.cp},
          {"tp", m.tp}, {"ep", m.ep}, {"micro_batch", c.job.micro_batch}, {"grad_accum", c.job.grad_accum}};
}

}  // namespace meshplan

#pragma once
// Numerical-safety rules shared by `lint` (which warns) and the planner (which breaks ties with
// them), so the planner never emits a plan its own lint would warn about without saying so.
#include <cstdint>

#include "spec/dtype.hpp"
#include "spec/plan.hpp"

namespace meshplan {

// A bf16 sum over this many ranks loses enough low bits (8-bit mantissa, error growing with the
// ring length) to be worth a second look; fp32 reduction costs 2x the reduce-scatter bytes.
constexpr std::int64_t kLargeBf16ReduceGroup = 64;

// The ranks one gradient is summed over by the sharded data-parallel reduction.
inline std::int64_t gradient_reduce_ranks(const Mesh& m) {
  return static_cast<std::int64_t>(m.dp_shard) * m.cp * m.dp_replicate;
}

// Gradients summed below fp32 over a group large enough for the lost bits to matter.
inline bool low_precision_reduce_is_risky(const Plan& p) {
  return p.sharding != Sharding::none && bytes_per_element(p.reduce_dtype) < 4 &&
         gradient_reduce_ranks(p.mesh) >= kLargeBf16ReduceGroup;
}

}  // namespace meshplan

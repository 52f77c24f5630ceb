#pragma once
// A digest of what simulate_step reads for one (plan, job) of a search: the lowered program
// (lower_step), the closed-form memory estimate its timeline starts from (estimate_memory), and
// the plan fields the simulator reads directly (mesh, compute dtype, FP8 recipe). Two plans with
// equal digests simulate to the same StepResult, whatever settings tell them apart (e.g. Megatron's
// selective attention recompute with FlashAttention, which recomputes nothing), so the planner
// simulates one and lists the other as equivalent. The model and cluster are the search's own
// and not part of the digest.
#include <array>
#include <compare>
#include <cstdint>

#include "spec/cluster_spec.hpp"
#include "spec/model_spec.hpp"
#include "spec/plan.hpp"

namespace meshplan {

// 128 bits from two independent 64-bit hashes of the same fields: a false match between two of
// the few hundred plans a search lowers is out of reach (~2^-100).
struct StepFingerprint {
  std::array<std::uint64_t, 2> h{};
  auto operator<=>(const StepFingerprint&) const = default;
};

// Folds b into a (order matters: a search combines the digests of several jobs).
StepFingerprint combine(const StepFingerprint& a, const StepFingerprint& b);

// Lowers the step (without op names) and digests every field of every op, the program's totals,
// the mesh, compute dtype, FP8 recipe and the job; lowered as simulate_step lowers it on `c`.
StepFingerprint program_fingerprint(const ModelSpec& m, const Plan& p, const Job& j, const ClusterSpec& c);

// Digests the closed-form memory estimate: every stage's breakdown and peaks.
StepFingerprint memory_fingerprint(const ModelSpec& m, const Plan& p, const Job& j, const ClusterSpec& c);

}  // namespace meshplan

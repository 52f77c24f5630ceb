#pragma once
// Parameters one rank of a pipeline stage owns before data-parallel sharding: the one count the
// memory model and the lowering (FSDP unit sizes, gradient buckets, optimizer bytes) share.
#include "spec/model_spec.hpp"
#include "spec/plan.hpp"

namespace meshplan {

struct StageParams {
  double blocks = 0;           // all transformer blocks on this stage
  double per_block = 0;        // one block = one FSDP unit
  double per_block_norms = 0;  // of which norm weights (never float8)
  double root = 0;             // embeddings, position table, final norm, head on this stage
  double head_group = 0;       // final norm + head (torchtitan's [norm, output] FSDP group)
  double total() const { return blocks + root; }
};

// One block's parameters on one rank: attention split over TP (full TP only), the MLP over TP and,
// for MoE experts, over EP.
double block_params_per_rank(const ModelSpec& m, const Plan& p);

// `n_layers` blocks on `stage`; the first stage holds the embeddings, the last the final norm and
// the head (a tied embedding is its own head copy on the last stage once there are pipeline stages).
StageParams stage_params(const ModelSpec& m, const Plan& p, int stage, int n_layers);

}  // namespace meshplan

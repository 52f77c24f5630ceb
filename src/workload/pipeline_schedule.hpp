#pragma once
// The order in which a pipeline stage runs the forward and backward passes of its micro-batches
// (Megatron's schedules: GPipe, 1F1B, interleaved 1F1B over virtual stages).
#include <cstdint>
#include <vector>

#include "spec/plan.hpp"

namespace meshplan {

// One entry of a stage's compute order: forward or backward of a micro-batch on a model chunk.
struct Step {
  bool forward;
  std::int64_t mb;
  int chunk;
};

// Model chunks per pipeline stage: vpp under the interleaved schedule, else 1.
int chunks_per_stage(const Plan& p);

// One schedule run over `m` micro-batches on `stage`.
std::vector<Step> stage_order(const Plan& p, int stage, std::int64_t m);

// The whole step on `stage`: `m` micro-batches in runs of `per_run` (torchtitan runs one pipeline
// schedule per local batch, paying the bubble every time; Megatron runs all in one schedule).
std::vector<Step> stage_steps(const Plan& p, int stage, std::int64_t m, std::int64_t per_run);

}  // namespace meshplan

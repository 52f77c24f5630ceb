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
  // Part of the schedule's steady state, where a forward and a backward alternate (1F1B's middle;
  // without a pipeline, every step): where Megatron-Core's expert all-to-all overlap merges them.
  bool steady = false;
};

// Model chunks per pipeline stage: vpp under the interleaved schedule, else 1.
int chunks_per_stage(const Plan& p);

// One schedule run over `m` micro-batches on `stage`.
std::vector<Step> stage_order(const Plan& p, int stage, std::int64_t m);

// The whole step on `stage`: `m` micro-batches in runs of `per_run` (torchtitan runs one pipeline
// schedule per local batch, paying the bubble every time; Megatron runs all in one schedule).
std::vector<Step> stage_steps(const Plan& p, int stage, std::int64_t m, std::int64_t per_run);

// Micro-batches per schedule run: torchtitan runs one schedule per local batch of `pp_microbatches`
// (when set and pp > 1), Megatron all `microbatches` of the step in one.
std::int64_t microbatches_per_run(std::int64_t microbatches, std::int64_t pp_microbatches, int pp);

// The forward passes a stage holds (run, their backward not yet), per chunk, at the backward steps
// of its schedule (stage_order over one run) where sum over chunks of held x weight[chunk] is
// largest: what a pipeline stage keeps for backward, from the same order the lowering runs. A
// backward holds its own forward. Runs are alike and do not overlap, so one run is walked; a run
// of more than 4 pp micro-batches holds what one of 4 pp holds (its steady state repeats every pp
// micro-batches per chunk), so at most 4 pp are walked.
struct HeldForwards {
  std::vector<std::int64_t> any;        // over every backward
  std::vector<std::int64_t> last_chunk; // over the backwards of the stage's last chunk (the loss's, on the last stage)
  std::vector<std::int64_t> run_last;   // over the backwards of the run's last micro-batch
  std::vector<std::int64_t> run_last_last_chunk;  // both
};
HeldForwards held_forwards(const Plan& p, int stage, std::int64_t per_run, const std::vector<double>& weight_per_chunk);

}  // namespace meshplan

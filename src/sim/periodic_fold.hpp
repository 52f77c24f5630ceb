#pragma once
// A step of many micro-batches is a fill, a steady state that repeats every period, and a drain
// (docs/design-notes.md, "Periodic steady state"). Simulating the same step with three micro-batch
// counts a period apart shows whether the period repeats: every reported figure then moves by
// the same amount from the first to the second as from the second to the third, and the whole
// step is the third plus that move once per remaining period. The move is checked, figure by
// figure, never assumed; where it does not hold, the step is simulated whole.
#include <cstdint>
#include <optional>
#include <vector>

#include "sim/step_result.hpp"
#include "spec/plan.hpp"

namespace meshplan {

// The three shorter steps to simulate: micro-batch counts first, first + period, first + 2 period,
// and how many periods the full step has beyond the third.
struct FoldPlan {
  std::int64_t period_microbatches = 0;
  std::int64_t first_microbatches = 0;
  std::int64_t periods_beyond = 0;
  Job at(int k) const;  // the step with first + k periods (k = 0, 1, 2)
  Job full;
};

// Whether `j` is long enough for folding to pay: the three shorter steps together hold at most 5/4
// of its micro-batches (they cost less than the whole step, and the largest needs half its memory or
// less). The period is one pipeline schedule run where the step runs
// several (torchtitan: each local batch its own run), else pp micro-batches (1 without a pipeline);
// the first count holds two periods, so that the fill is over and the steady state has begun (with
// one, interleaved schedules' peaks and pp = 1's first micro-batch are not yet periodic: the check
// refuses them; with two, every dev-set row that folds passes it).
std::optional<FoldPlan> fold_plan(const Plan& p, const Job& j);

// A non-interleaved pipeline of one schedule run (1F1B, GPipe) repeats every micro-batch once every
// stage holds its warm-up forwards: the first step holds pp + 2 micro-batches, the period is one.
// Three steps of pp + 2, pp + 3 and pp + 4 micro-batches then stand for any longer step (GPT-3
// 175B on pp 8 x 128 micro-batches: 10, 11, 12). nullopt for other schedules and short steps.
std::optional<FoldPlan> fine_fold_plan(const Plan& p, const Job& j);

// The folds to try, cheapest first: the fine one, then the one of whole pipeline periods (the
// check of the first may refuse what the second accepts; the step is simulated whole after both).
std::vector<FoldPlan> fold_plans(const Plan& p, const Job& j);

// The full step from the three shorter ones, or nullopt where some figure does not move by the
// same amount each period (to within what extrapolating over the remaining periods keeps below
// 1e-4 of the figure). Throughput and FLOP utilisation follow from the full step's tokens and its
// extrapolated time.
std::optional<StepResult> fold_steps(const FoldPlan& f, const StepResult& a, const StepResult& b, const StepResult& c);

}  // namespace meshplan

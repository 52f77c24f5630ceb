#pragma once
// A step of many micro-batches is a fill, a steady state that repeats every period, and a drain
// (docs/design-notes.md, "Periodic steady state"). Simulating the same step with three micro-batch
// counts a period apart shows whether the period repeats: every reported figure then moves by
// the same amount from the first to the second as from the second to the third, and the whole
// step is the third plus that move once per remaining period. The move is checked, figure by
// figure, never assumed; where it does not hold, the step is simulated whole. A 1F1B step shows
// its period in its own timeline (period_probe, repeats), and then the first step need not run.
#include <cstdint>
#include <optional>
#include <vector>

#include "sim/engine.hpp"
#include "sim/step_result.hpp"
#include "spec/plan.hpp"
#include "workload/step_program.hpp"

namespace meshplan {

// The three shorter steps to simulate: micro-batch counts first, first + period, first + 2 period,
// and how many periods the full step has beyond the third.
struct FoldPlan {
  std::int64_t period_microbatches = 0;
  std::int64_t first_microbatches = 0;
  std::int64_t periods_beyond = 0;
  Job at(int k) const;  // the step with first + k periods (k = 0, 1, 2)
  Job full;
  // The period is one forward and one backward pass per stage (1F1B's steady state), so the third
  // step's own timeline can show that it repeats (period_probe): then the first step need not run.
  bool pass_pair_period = false;
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

// Three consecutive steady units of every stage, offset by offset: a unit is a forward pass
// directly followed by a backward pass (not the stage's last, which also holds the step's tail),
// as 1F1B runs its steady state. Unit j of every stage runs backward j, so units of one index run
// at about the same time: row k holds units w - 2 + k of every stage, w the latest index at which
// every stage's three units hold the same work in the same order (on the stage with the fewest
// units, the last differs: it receives no next forward).
struct PeriodProbe {
  std::vector<int> unit_ops[3];
  std::vector<std::size_t> stage_begin;  // stage s's ops are rows [stage_begin[s], stage_begin[s + 1])
};

// nullopt where no such three units exist (GPipe has none).
std::optional<PeriodProbe> period_probe(const StepProgram& prog);

// Whether the probed units repeat in a run: every op's start and end move by one and the same
// shift from unit to unit on every stage, and its host issue's by its stage's host shift, no
// larger, from the second unit to the third, to within `tolerance_seconds`. Then the
// run's state repeats each unit (the simulation is deterministic), so one more micro-batch adds
// what the last one did, and the step's figures move by the same amount per period without a
// third step to show it.
bool repeats(const PeriodProbe& probe, const std::vector<sim::TaskTiming>& timings,
             const std::vector<sim::TaskTiming>& host_timings, double tolerance_seconds);

// The drift one unit's shift may have: over the periods extrapolated it stays below what
// fold_steps allows a figure (1e-4 of the step time).
double period_tolerance_seconds(const FoldPlan& f, double step_seconds);

// The full step from the second and third steps alone, once `repeats` showed the period in the
// third one (the same extrapolation as fold_steps, whose check the proof replaces); nullopt where
// the two differ in shape (critical stage, stages, the keys of a figure).
std::optional<StepResult> fold_proven_steps(const FoldPlan& f, const StepResult& b, const StepResult& c);

}  // namespace meshplan

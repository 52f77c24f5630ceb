#pragma once
// Simulates one optimizer step: prices the lowered ops with the cost models, runs them on the
// event engine (one representative rank per pipeline stage, or every rank with `full`), and
// turns the timeline into a StepResult.
#include <string>
#include <vector>

#include "sim/engine.hpp"
#include "sim/step_result.hpp"
#include "spec/cluster_spec.hpp"
#include "spec/model_spec.hpp"
#include "spec/plan.hpp"
#include "workload/step_program.hpp"

namespace meshplan {

struct SimOptions {
  bool keep_timeline = false;  // keep the program and the engine's timings (for --trace)
  bool full = false;           // every rank with its own links and streams (small clusters)
  // With `full`: a speed factor per global rank that divides its compute time (gpu_speeds.hpp);
  // empty = every rank at 1.
  std::vector<double> rank_speed{};
  // Every micro-batch simulated, never folded at the periodic steady state (sim/periodic_fold.hpp);
  // keep_timeline implies it, since a trace holds every event.
  bool exact = false;
  // The fold's three shorter steps on two threads (the largest on the caller's): for a caller that
  // simulates one step, not for those that already run one step per core (plan, validate).
  bool parallel_fold = false;
};

struct SimulatedStep {
  StepResult result;
  // Filled when keep_timeline: the ops, their engine tasks and timings.
  StepProgram program;
  std::vector<sim::TaskTiming> timings;  // indexed like program.ops
  std::vector<sim::TaskTiming> host_timings;  // the host thread's issue of each op, likewise
};

SimulatedStep simulate_step(const ModelSpec& m, const Plan& p, const Job& j, const ClusterSpec& c,
                            SimOptions options = {});

// Ranks of a process group and how many of them share a node (TP innermost, then CP, dp_shard,
// dp_replicate, PP outermost).
GroupPlacement group_placement(const Mesh& mesh, GroupKind g, int gpus_per_node);

}  // namespace meshplan

#pragma once
// meshplan capacity: how many GPUs (or how many days) a training run of T tokens needs, with the
// best plan the planner finds at each GPU count, wall-clock days, GPU-hours and cost.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "plan/goodput.hpp"
#include "plan/planner.hpp"
#include "spec/cluster_spec.hpp"
#include "spec/model_spec.hpp"
#include "spec/runtimes.hpp"

namespace meshplan {

struct CapacityRequest {
  ModelSpec model;
  std::vector<ClusterSpec> clusters;       // one table block per cluster
  double tokens = 0;                       // training tokens
  std::optional<double> deadline_days;     // find the fewest GPUs that finish in time ...
  std::int64_t gpus = 0;                   // ... or evaluate this count (and its neighbours)
  std::optional<double> price_per_gpu_hour;
  std::int64_t seq_len = 8192;
  std::int64_t global_batch_tokens = 4'000'000;
  Runtime runtime = kDefaultSearchedRuntime;
  int simulate_budget = 6;                 // plans simulated per GPU count (search_plans)
  int max_doublings = 12;                  // how far the deadline search grows the GPU count
  bool price_failures = true;              // false (--no-failures): the ideal, every step perfect
  CheckpointMode checkpoint_mode = CheckpointMode::sync;
  double checkpoint_interval_s = 0;        // 0: Young/Daly's
};

// A row's failures, checkpoints and restarts (goodput.hpp), when the profile prices them.
struct CapacityGoodput {
  bool priced = false;
  JobInterruptions interruptions;
  CheckpointCost checkpoint;
  double restart_s = 0;
  Goodput goodput;
  double days_ideal = 0;
  double days_with_failures = 0;
  double gpu_hours_ideal = 0;
  std::optional<double> cost_ideal;
  // What would gain a day: the days with async checkpointing (when the run saves synchronously),
  // and the storage speed-up (x the profile's bandwidth) that saves one day, if any does.
  std::optional<double> days_with_async;
  std::optional<double> storage_speedup_for_a_day;
  double days_with_instant_storage = 0;    // the limit of faster storage
};

struct CapacityRow {
  std::string cluster;
  std::int64_t gpus = 0;
  bool feasible = false;                   // some plan fits at this count
  double tokens_per_s_per_gpu = 0;
  double days = 0;
  double gpu_hours = 0;
  std::optional<double> cost;
  bool meets_deadline = false;             // true when no deadline was given
  bool answer = false;                     // the row the question asks for
  PlanCandidate best;                      // when feasible
  CapacityGoodput failures;                // days/gpu_hours/cost above include them when priced
  std::string note;                        // why not feasible
};

struct CapacityReport {
  std::vector<CapacityRow> rows;           // by cluster, then GPU count
  std::vector<std::string> notes;
};

// days = tokens / (tokens/s/GPU x GPUs) / 86400.
double training_days(double tokens, double tokens_per_s_per_gpu, std::int64_t gpus);

// What one rank writes to a checkpoint, on the stage that writes the most: its model-parallel
// shard's unique state (params as stored + the optimizer's master and moments) over the data- and
// context-parallel ranks that hold a copy (torch_dist's fully parallel save, DCP's deduplication).
double checkpoint_state_bytes_per_rank(const ModelSpec& m, const Plan& p, const Job& j, const ClusterSpec& c);

// Failures, checkpoint and restart of one plan on `gpus` GPUs; priced = false (and nothing else
// set) when the profile has no [reliability] table.
CapacityGoodput price_failures(const ClusterSpec& c, std::int64_t gpus, double state_bytes_per_rank,
                               double step_time_s, double ideal_days, CheckpointMode mode,
                               double interval_override_s);

CapacityReport plan_capacity(const CapacityRequest& rq);

}  // namespace meshplan

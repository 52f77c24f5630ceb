#pragma once
// meshplan capacity: how many GPUs (or how many days) a training run of T tokens needs, with the
// best plan the planner finds at each GPU count, wall-clock days, GPU-hours and cost.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "plan/planner.hpp"
#include "spec/cluster_spec.hpp"
#include "spec/model_spec.hpp"

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
  Runtime runtime = Runtime::torchtitan_fsdp2;
  int simulate_budget = 6;                 // plans simulated per GPU count (search_plans)
  int max_doublings = 12;                  // how far the deadline search grows the GPU count
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
  std::string note;                        // why not feasible
};

struct CapacityReport {
  std::vector<CapacityRow> rows;           // by cluster, then GPU count
  std::vector<std::string> notes;
};

// days = tokens / (tokens/s/GPU x GPUs) / 86400.
double training_days(double tokens, double tokens_per_s_per_gpu, std::int64_t gpus);

CapacityReport plan_capacity(const CapacityRequest& rq);

}  // namespace meshplan

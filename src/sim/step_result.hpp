#pragma once
// What one simulated optimizer step reports.
#include <map>
#include <string>
#include <vector>

#include "workload/memory_estimate.hpp"

namespace meshplan {

struct StageTimeline {
  int stage = 0;
  double peak_bytes = 0;              // device peak: allocated + NCCL buffers + context + reserve
  double allocated_peak_bytes = 0;
  double peak_time_seconds = 0;       // when the peak happens
  MemoryBreakdown breakdown;          // at the moment of the peak
  double compute_busy_seconds = 0;
};

struct StepResult {
  double step_time_s = 0;
  double tokens_per_s = 0;
  double tokens_per_s_per_gpu = 0;
  double mfu = 0;                     // model FLOPs / (peak x time), formula in flops_formula
  double hfu = 0;                     // + recompute and FlashAttention's backward recompute
  double model_flops_per_token = 0;
  std::string flops_formula;
  // Adds up to step_time_s: compute, recompute, exposed_comm, bubble, optimizer, offload_stall, other.
  std::map<std::string, double> breakdown_s;
  std::map<std::string, double> exposed_comm_s;   // by kind (fsdp_all_gather, tp, ...)
  std::map<std::string, double> comm_bytes;       // per rank per step, by kind
  std::vector<StageTimeline> stages;
  int critical_stage = 0;
  std::int64_t n_tasks = 0;
  std::int64_t n_events = 0;
};

}  // namespace meshplan

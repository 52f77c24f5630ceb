#pragma once
// What one simulated optimizer step reports.
#include <array>
#include <map>
#include <string>
#include <vector>

#include "workload/memory_estimate.hpp"

namespace meshplan {

struct StageTimeline {
  int stage = 0;
  double peak_bytes = 0;              // device peak: allocated + NCCL buffers + context + reserve
  double host_bytes = 0;              // pinned host memory at its peak (param and activation offload)
  double allocated_peak_bytes = 0;
  double peak_time_seconds = 0;       // when the peak happens
  MemoryBreakdown breakdown;          // at the moment of the peak
  // Each term's own largest value over the step (its size, whenever it happens): what a setting
  // changes, as opposed to what is live at the one moment of the peak.
  MemoryBreakdown term_peaks;
  double compute_busy_seconds = 0;
};

// The terms of StepResult::breakdown_s, in report order. host_wait: the GPU idle because the
// host thread had not issued the next kernel yet.
inline constexpr std::array<const char*, 8> kBreakdownKeys = {"compute", "recompute", "exposed_comm", "bubble",
                                                               "optimizer", "offload_stall", "host_wait", "other"};

// A step whose GPU waits on its host for a tenth of its time or more is called host-bound: past
// that, issuing faster (CUDA graphs, compile, larger micro-batches) buys more than faster kernels.
inline constexpr double kHostBoundFraction = 0.10;

struct StepResult {
  double step_time_s = 0;
  double tokens_per_s = 0;
  double tokens_per_s_per_gpu = 0;
  double mfu = 0;                     // model FLOPs / (peak x time), formula in flops_formula
  double hfu = 0;                     // + recompute and FlashAttention's backward recompute
  double model_flops_per_token = 0;
  std::string flops_formula;
  // Adds up to step_time_s: the kBreakdownKeys.
  std::map<std::string, double> breakdown_s;
  double host_busy_s = 0;             // host thread busy issuing ops (critical stage, one rank)
  bool host_bound = false;            // the GPU waited on the host for >= kHostBoundFraction of the step
  std::map<std::string, double> exposed_comm_s;   // by kind (fsdp_all_gather, tp, ...)
  std::map<std::string, double> comm_bytes;       // per rank per step, by kind
  std::vector<StageTimeline> stages;
  int critical_stage = 0;
  std::int64_t n_tasks = 0;
  std::int64_t n_events = 0;
  // A step folded at its periodic steady state (sim/periodic_fold.hpp): the period in micro-batches
  // and how many periods were extrapolated rather than simulated; 0 when simulated whole. n_tasks
  // and n_events are then the whole step's, extrapolated alike (n_events, a diagnostic, unchecked).
  std::int64_t folded_period_microbatches = 0;
  std::int64_t folded_periods = 0;
  // The longest folded step's own timeline showed the period repeating, so only it and the one a
  // period shorter were simulated (periodic_fold's period_probe); else three steps were.
  bool folded_period_in_timeline = false;
};

}  // namespace meshplan

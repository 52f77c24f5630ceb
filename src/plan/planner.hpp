#pragma once
// The planner: enumerate every valid layout for (model, cluster, GPU count, batch) that the chosen
// runtime can express, drop what does not fit, prune with a closed-form estimate, simulate the
// survivors and rank them by tokens/s.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "sim/step_result.hpp"
#include "spec/cluster_spec.hpp"
#include "spec/model_spec.hpp"
#include "spec/plan.hpp"
#include "spec/runtimes.hpp"

namespace meshplan {

struct PlanRequest {
  ModelSpec model;
  ClusterSpec cluster;
  std::int64_t n_gpus = 0;
  std::int64_t seq_len = 8192;
  std::int64_t global_batch = 0;         // sequences per step (0: from global_batch_tokens)
  std::int64_t global_batch_tokens = 0;  // tokens per step, rounded to whole sequences per DP rank
  Runtime runtime = kDefaultSearchedRuntime;
  double headroom_fraction = 0.05;       // keep this much of the GPU free
  int top_k = 10;
  int simulate_budget = 20;              // plans simulated after the closed-form prune (>= top_k)
  // Ranks the closed-form prune may not cut: every plan whose estimate, scaled by the largest
  // simulated / estimated ratio seen, could reach the verified_rows-th simulated plan is simulated
  // too (1: the winner).
  int verified_rows = 1;
  int threads = 2;
};

struct PlanCandidate {
  Plan plan;
  Job job;
  double estimate_tokens_per_s_per_gpu = 0;  // closed form (prune only)
  double peak_bytes = 0;                     // closed-form memory estimate (max over stages)
  StepResult result;                         // simulated
  bool simulated = false;
  // Every plan this row stands for, itself first: plans whose simulation inputs (lowered steps,
  // memory estimate; step_fingerprint.hpp) are identical, so they predict the same tokens/s and
  // memory. Settings that change nothing at this layout (e.g. a recompute policy that recomputes
  // nothing) are listed here instead of filling rows and the simulation budget.
  std::vector<Plan> equivalent_plans;
  // The numerical trade-off of this row, when it has one (spec/numerics.hpp): why a safer plan was
  // ranked above a marginally faster one, or that this row's speed comes with a lint warning.
  std::string numerics_note;
};

// A candidate the search could not evaluate, and why (the lowering or the simulator refused it).
struct DroppedPlan {
  PlanCandidate candidate;
  std::string reason;
};

struct PlanSearch {
  std::int64_t global_batch = 0;  // sequences per step searched (from the tokens: the nearest a layout admits)
  std::int64_t evaluated = 0;   // layouts enumerated
  std::int64_t feasible = 0;    // fit in memory with headroom
  double search_seconds = 0;
  std::vector<PlanCandidate> ranked;       // simulated, best first (all of them), distinct predictions
  std::int64_t merged = 0;                 // plans listed as equivalent to a row instead of simulated
  std::vector<DroppedPlan> dropped;
  std::vector<std::size_t> pareto;         // indices into ranked: tokens/s vs peak memory front
  std::string why_winner;                  // one or two sentences: winner vs the best different plan
  // Uneven pipelines: simulated plans tried again under Megatron-Bridge's ceil(L / stages) layout
  // (their layers do not divide over pp x vpp and the layout differs from their split), and how
  // many of those layouts replaced the split because they simulated faster.
  std::int64_t uneven_tried = 0, uneven_kept = 0;
  std::vector<std::string> notes;
};

// progress(done, total) is called from the searching thread while plans are simulated.
PlanSearch search_plans(const PlanRequest& request,
                        const std::function<void(std::size_t, std::size_t)>& progress = {});

// simulate_step's result for a step with many micro-batches, from two shorter simulated steps
// (fill + m x period); falls back to a direct simulation when m is small.
StepResult simulate_steady_state(const ModelSpec& m, const Plan& p, const Job& j, const ClusterSpec& c);
// The jobs simulate_steady_state simulates for (p, j): j itself, or the two shortened steps.
std::vector<Job> steady_state_jobs(const Plan& p, const Job& j);

// x's searched settings where they differ from other's, as ", AC full, reduce bf16" (empty when
// they differ in none).
std::string describe_setting_differences(const Plan& x, const Plan& other);

// What a runtime can express (llm-foundry: FSDP1 only, MLP-only TP, no PP/CP; ...).
bool runtime_supports(Runtime r, const Plan& p);

std::string describe_layout(const Plan& p);

}  // namespace meshplan

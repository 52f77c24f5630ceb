#pragma once
// Rendering a simulated step: a table for people, JSON for scripts (names are a contract).
#include <nlohmann/json.hpp>
#include <string>

#include "sim/step_result.hpp"
#include "spec/cluster_spec.hpp"
#include "spec/run_config.hpp"

namespace meshplan {

// Whether the simulated step fits: the timeline's worst stage against the device, by the rule
// `memory` applies to its closed form (workload/device_fit.hpp, docs/memory.md "Fits").
struct SimulatedFit {
  bool fits = true;
  bool tight = false;       // fits only without the allocator's usual reserve
  int stage = 0;            // the stage that needs the most
  double needed_bytes = 0;  // its allocated peak + CUDA context + NCCL buffers
  double peak_bytes = 0;    // the largest stage peak with the allocator's usual reserve
  double gpu_memory_bytes = 0;
};
SimulatedFit simulated_fit(const ClusterSpec& c, const StepResult& r);

std::string simulate_text(const RunConfig& rc, const ClusterSpec& c, const StepResult& r);
nlohmann::json simulate_json(const RunConfig& rc, const ClusterSpec& c, const StepResult& r);

}  // namespace meshplan

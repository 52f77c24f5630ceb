#pragma once
// Rendering a simulated step: a table for people, JSON for scripts (names are a contract).
#include <nlohmann/json.hpp>
#include <string>

#include "sim/step_result.hpp"
#include "spec/cluster_spec.hpp"
#include "spec/run_config.hpp"

namespace meshplan {

// Whether the simulated step fits: the timeline's peak of the worst stage against the device, the
// rule `memory` uses with its closed form (docs/memory.md).
struct SimulatedFit {
  bool fits = true;
  int stage = 0;            // the stage with the highest peak
  double peak_bytes = 0;
  double gpu_memory_bytes = 0;
};
SimulatedFit simulated_fit(const ClusterSpec& c, const StepResult& r);

std::string simulate_text(const RunConfig& rc, const ClusterSpec& c, const StepResult& r);
nlohmann::json simulate_json(const RunConfig& rc, const ClusterSpec& c, const StepResult& r);

}  // namespace meshplan

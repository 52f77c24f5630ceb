#pragma once
// Rendering a simulated step: a table for people, JSON for scripts (names are a contract).
#include <nlohmann/json.hpp>
#include <string>

#include "sim/step_result.hpp"
#include "spec/cluster_spec.hpp"
#include "spec/run_config.hpp"

namespace meshplan {

std::string simulate_text(const RunConfig& rc, const ClusterSpec& c, const StepResult& r);
nlohmann::json simulate_json(const RunConfig& rc, const ClusterSpec& c, const StepResult& r);

}  // namespace meshplan

#pragma once
// Rendering a MemoryEstimate: a table for people, JSON for scripts (the JSON is an interface:
// fields may be added, never renamed).
#include <nlohmann/json.hpp>
#include <string>

#include "spec/cluster_spec.hpp"
#include "spec/run_config.hpp"
#include "workload/memory_estimate.hpp"

namespace meshplan {

std::string memory_text(const RunConfig& rc, const ClusterSpec& c, const MemoryEstimate& e);
nlohmann::json memory_json(const RunConfig& rc, const ClusterSpec& c, const MemoryEstimate& e);

// "12.34 GiB" (binary units, as torch and nvidia-smi report memory).
std::string format_gib(double bytes);
// The verdict line of a step that fits only without the caching allocator's usual reserve
// (workload/device_fit.hpp): both figures and what running that close to the device costs.
std::string fit_tight_line(double needed_bytes, double reserve_peak_bytes, double device_bytes);
// " -- 8 GPUs ASSUMED: ..." when the run's GPU count was assumed (RunConfig::n_gpus_assumed), else "":
// for the first line of a report.
std::string assumed_gpus_note(const RunConfig& rc);

}  // namespace meshplan

#pragma once
// A launchable bundle for one plan: the runtime config, launch.sh, sbatch.slurm (multi-node)
// and plan.md with the prediction and its assumptions. The simulator's results come in as a
// PlanSummary so that src/emit does not depend on src/sim.
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "emit/emit_common.hpp"
#include "spec/cluster_spec.hpp"
#include "spec/run_config.hpp"

namespace meshplan {

struct PlanSummary {
  double tokens_per_s_per_gpu = 0;
  double step_time_s = 0;
  std::int64_t peak_bytes = 0;             // predicted peak per GPU
  std::vector<std::string> breakdown;      // one line each, e.g. "compute 61.2 %"
  std::vector<std::string> assumptions;    // one line each
};

struct BundleFile {
  std::string name;     // relative to the bundle folder
  std::string content;
  bool executable = false;
};

// The files of a bundle, in a fixed order, byte-identical for the same input. `version` is used
// only for torchtitan. Throws InputError for plans the runtime cannot express.
std::vector<BundleFile> render_bundle(const RunConfig& rc, const ClusterSpec& cluster, EmitRuntime runtime,
                                      TorchtitanVersion version, const PlanSummary& summary);

// render_bundle, written whole into a new folder beside `dir` and swapped in by one rename, so a
// failure leaves `dir` as it was. An existing `dir` must be empty or a bundle meshplan wrote
// (every file listed by its plan.md): it is replaced whole, so no stale file of an earlier bundle
// (an sbatch.slurm of a multi-node plan) stays beside the new files. Anything else is refused.
// Returns the written paths. Nothing is written when the plan cannot be expressed.
std::vector<std::filesystem::path> write_bundle(const std::filesystem::path& dir, const RunConfig& rc,
                                                const ClusterSpec& cluster, EmitRuntime runtime,
                                                TorchtitanVersion version, const PlanSummary& summary);

}  // namespace meshplan

#pragma once
// Measured runs as users have them: a training log beside the config it ran (calibrate --runs),
// turned into a validation case: the config imported and resolved as `simulate` does, the
// measurement the log's steady steps give (import/training_log.hpp).
#include <cstdint>
#include <string>
#include <vector>

#include "validate/validation_row.hpp"

namespace meshplan {

struct LoggedRunSpec {
  std::string id;        // default: the log's file stem
  std::string log;       // path of the training log
  std::string config;    // the run's config (any format --config reads)
  std::string cluster;   // hardware profile; default: the config's, else h100-sxm-80gb
  std::int64_t gpus = 0; // 0: the config's, else the log's world size
  std::string listed_in; // the runs.toml that named it ("" from the command line)
};

// The run as a validation case (source "log", framework the config's runtime). InputError naming
// the log and its line when the log's world size or global batch contradicts the config.
ValidationCase logged_run_case(const LoggedRunSpec& spec);

// A runs.toml listing: [[run]] tables with log, config and optionally id, cluster, gpus; paths
// relative to the listing's folder. InputError naming the file and key for anything else.
std::vector<LoggedRunSpec> read_runs_listing(const std::string& path);

}  // namespace meshplan

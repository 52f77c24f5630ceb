#pragma once
// The CLI's run-input options as the report library's RunSource (whatif, lint, diagnose).
#include "cli/run_inputs.hpp"
#include "report/whatif.hpp"

namespace meshplan::cli {

inline RunSource run_source(const RunInputOptions& o) {
  RunSource s;
  s.config = o.config;
  s.model = o.model;
  s.cluster = o.cluster;
  s.default_cluster = kDefaultCluster;
  s.gpus = o.gpus;
  s.nccl_version = o.nccl_version;
  return s;
}

}  // namespace meshplan::cli

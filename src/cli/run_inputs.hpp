#pragma once
// The inputs every per-run command (memory, simulate, whatif) shares: --config, --model,
// --cluster, --gpus, resolved into a RunConfig and a ClusterSpec.
#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>

#include "spec/cluster_spec.hpp"
#include "spec/run_config.hpp"

namespace meshplan::cli {

struct RunInputOptions {
  std::string config;
  std::string model;    // overrides the config's model (name or config.json)
  std::string cluster;  // overrides the config's cluster
  std::int64_t gpus = 0;
  std::string nccl_version;  // --nccl-version (simulating commands only); empty: the profile's
};

void add_run_input_options(CLI::App& app, RunInputOptions& o);

// --nccl-version VERSION|PATH for the commands that price collectives (simulate, whatif, plan,
// capacity, validate, collective). Checked by check_nccl_version before anything runs.
CLI::Option* add_nccl_version_option(CLI::App& app, std::string& value, const std::string& flags = "--nccl-version");
// Loads the named table once so an unknown version is the one-line --nccl-version error (exit 2)
// before any work starts; no-op when empty.
void check_nccl_version(const std::string& value);

// --runtime of plan and capacity: torchtitan | llm-foundry | megatron, also under the names a plan
// TOML writes (torchtitan-fsdp2, composer-fsdp1); the value is rewritten to the first spelling.
CLI::Validator runtime_name();
// The runtime `--runtime NAME` (already through runtime_name()) searches; InputError on --runtime otherwise.
Runtime searched_runtime(const std::string& name);

struct RunInputs {
  RunConfig run;
  ClusterSpec cluster;
};

// Loads and resolves; without a GPU count anywhere, assumes one node of the cluster (and says so).
RunInputs load_run_inputs(const RunInputOptions& o);

constexpr const char* kDefaultCluster = "h100-sxm-80gb";

}  // namespace meshplan::cli

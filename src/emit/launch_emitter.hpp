#pragma once
// Launch scripts for a bundle: launch.sh (torchrun, or Composer's launcher for llm-foundry) and,
// for multi-node plans, a Slurm sbatch script modeled on torchtitan's multinode_trainer.slurm
// (Composer launcher flags from llm-foundry scripts/train/README.md; the torchrun line from
// torchtitan's run_train.sh).
#include <string>
#include <vector>

#include "emit/emit_common.hpp"
#include "spec/cluster_spec.hpp"
#include "spec/run_config.hpp"

namespace meshplan {

struct LaunchSpec {
  EmitRuntime runtime = EmitRuntime::torchtitan;
  TorchtitanVersion torchtitan_version = TorchtitanVersion::early_2026;
  std::string config_file;              // bundle-relative TOML/YAML; empty for registry and Megatron
  std::vector<std::string> train_args;  // registry overrides or Megatron arguments
  bool fsdp2_env = false;               // Composer FSDP2: FSDP_VERSION=2
};

struct NodeLayout {
  int nodes = 1;
  int gpus_per_node = 1;  // processes per node
};

// nodes = gpus / gpus_per_node (one partial node when the plan needs fewer GPUs than a node).
// InputError when the GPU count does not fill whole nodes.
NodeLayout node_layout(const RunConfig& rc, const ClusterSpec& cluster);

struct LaunchScripts {
  std::string launch_sh;  // runs on one node, or on every node with NNODES/NODE_RANK/MASTER_ADDR
  std::string sbatch;     // empty for single-node plans
};

LaunchScripts emit_launch(const RunConfig& rc, const ClusterSpec& cluster, const LaunchSpec& spec);

// Shell-quotes one word (single quotes) when it holds anything but [A-Za-z0-9_./:=,+-].
std::string shell_word(const std::string& s);

}  // namespace meshplan

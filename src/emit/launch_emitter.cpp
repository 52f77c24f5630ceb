// Launch scripts. torchtitan: run_train.sh's torchrun line (c10d rendezvous, rank-0 logs);
// llm-foundry: Composer's launcher with --world_size/--node_rank/--master_addr/--master_port;
// Megatron-LM: torchrun pretrain_gpt.py with CUDA_DEVICE_MAX_CONNECTIONS=1 as its examples set.
#include "emit/launch_emitter.hpp"

#include <algorithm>
#include <array>
#include <cctype>
#include <fmt/format.h>

namespace meshplan {

namespace {

std::string joined_args(const std::vector<std::string>& args, std::string_view indent) {
  // One flag (with its value) per line, so a diff of two bundles reads flag by flag.
  std::string out;
  for (const auto& a : args) {
    if (a.rfind("--", 0) == 0) {
      out += fmt::format(" \\\n{}{}", indent, shell_word(a));
    } else {
      out += ' ';  // separate appends: GCC 12 warns (-Wrestrict, a false positive) on " " + string
      out += shell_word(a);
    }
  }
  return out;
}

// What the launch scripts need from each framework: its checkout (the variable naming it, what it
// is, a file only a checkout has, the lines after `cd` into it), the exports its own examples set,
// and its launcher. A framework the emitters gain is a row here and a case in program().
struct FrameworkLaunch {
  EmitRuntime framework;
  std::string_view dir_var;
  std::string_view checkout;       // with pinned_commit, "{}" is the commit
  std::string_view marker;
  std::string_view after_cd;
  std::string_view env;
  bool pinned_commit = false;      // the bundle targets one commit (LaunchSpec::torchtitan_version)
  bool composer_launcher = false;  // Composer's launcher; else torchrun
};

constexpr std::array<FrameworkLaunch, 3> kFrameworkLaunch{{
    {EmitRuntime::torchtitan, "TORCHTITAN_DIR", "a torchtitan checkout at {}", "torchtitan/train.py", "",
     "export PYTORCH_ALLOC_CONF=\"expandable_segments:True\"\n", true, false},
    {EmitRuntime::llm_foundry, "LLM_FOUNDRY_DIR", "an llm-foundry checkout", "scripts/train/train.py",
     "cd scripts  # train/train.py and its relative paths\n", "", false, true},
    {EmitRuntime::megatron, "MEGATRON_DIR", "a Megatron-LM checkout at core_v0.15.0", "pretrain_gpt.py", "",
     "export CUDA_DEVICE_MAX_CONNECTIONS=1\n", false, false},
}};

const FrameworkLaunch& launch_of(const LaunchSpec& s) {
  for (const FrameworkLaunch& f : kFrameworkLaunch)
    if (f.framework == s.runtime) return f;
  return kFrameworkLaunch.front();  // unreachable: every EmitRuntime has a row
}

std::string header(const RunConfig& rc, const ClusterSpec& c, const NodeLayout& n, const LaunchSpec& s,
                   std::string_view what) {
  std::string rt(to_string(s.runtime));
  if (launch_of(s).pinned_commit) rt += fmt::format(" @ {}", to_string(s.torchtitan_version));
  return fmt::format("# meshplan {}: {} on {} GPUs ({} node{} x {} of {}), {}.\n", what, rc.model.name, rc.n_gpus,
                     n.nodes, n.nodes == 1 ? "" : "s", n.gpus_per_node, c.name, rt);
}

// Where the runtime's code is. The scripts run inside a checkout of the pinned version: its
// entry point and the paths the config names (torchtitan's hf_assets_path / tokenizer_path,
// downloaded into the checkout by its scripts) are relative to it. The bundle folder is found
// from the script itself, so the scripts can be started from the bundle folder with the checkout
// named by an environment variable, or from the checkout; anything else stops with the fix.
std::string workdir(const LaunchSpec& s) {
  const FrameworkLaunch& f = launch_of(s);
  const std::string what =
      !f.pinned_commit ? std::string(f.checkout)
                       : fmt::format(fmt::runtime(f.checkout), s.torchtitan_version == TorchtitanVersion::registry
                                                                   ? "a post-9810191bb commit"
                                                                   : std::string(to_string(s.torchtitan_version)));
  std::string out = fmt::format(
      "# Runs inside {0}: set {1} to it (default: the current folder).\n"
      "{1}=\"${{{1}:-$PWD}}\"\n"
      "if [ ! -f \"${1}/{2}\" ]; then\n"
      "  echo \"meshplan bundle: ${1} is not {0} (no {2}); set {1}\" >&2\n"
      "  exit 2\n"
      "fi\n"
      "cd \"${1}\"\n",
      what, f.dir_var, f.marker);
  out += f.after_cd;
  return out;
}

std::string env_lines(const ClusterSpec& c, const LaunchSpec& s) {
  std::string out(launch_of(s).env);
  if (s.fsdp2_env) out += "export FSDP_VERSION=2  # Composer reads fsdp_config as FSDP2Config\n";
  if (c.fabric.transport == "efa") out += "export FI_PROVIDER=efa  # as torchtitan's multinode_trainer.slurm\n";
  return out;
}

// The plan's checkpoints go to $CHECKPOINT_DIR, which the scripts require (after the checkout, so
// a missing checkout is still the first thing named): a bundle that promises a checkpoint interval
// and has nowhere to write would lose every step since the start on the first failure.
std::string checkpoint_lines(const RunConfig& rc) {
  if (rc.checkpoint_interval_steps <= 0) return "";
  return fmt::format(
      "# The plan checkpoints every {0} steps (plan.md) into CHECKPOINT_DIR: a folder every node can write.\n"
      "CHECKPOINT_DIR=\"${{CHECKPOINT_DIR:?set CHECKPOINT_DIR to a folder on shared storage (checkpoints every {0} "
      "steps)}}\"\n"
      "mkdir -p \"$CHECKPOINT_DIR\"\nexport CHECKPOINT_DIR\n",
      rc.checkpoint_interval_steps);
}

// The training entry point and its arguments, after the launcher. With checkpoints, torchtitan's
// folder and Megatron's --save point at $CHECKPOINT_DIR (llm-foundry's YAML reads it itself).
std::string program(const LaunchSpec& s, std::string_view indent, bool checkpoints) {
  switch (s.runtime) {
    case EmitRuntime::torchtitan: {
      const std::string folder =
          checkpoints ? fmt::format(" \\\n{}--checkpoint.folder \"$CHECKPOINT_DIR\"", indent) : std::string();
      if (s.torchtitan_version == TorchtitanVersion::registry)
        return "-m torchtitan.train" + joined_args(s.train_args, indent) + folder;
      return fmt::format("-m torchtitan.train \\\n{}--job.config_file \"$BUNDLE_DIR/{}\"{}", indent, s.config_file,
                         folder);
    }
    case EmitRuntime::llm_foundry: return fmt::format("train/train.py \"$BUNDLE_DIR/{}\"", s.config_file);
    case EmitRuntime::megatron:
      return "pretrain_gpt.py" + joined_args(s.train_args, indent) +
             (checkpoints ? fmt::format(" \\\n{}--save \"$CHECKPOINT_DIR\"", indent) : std::string());
  }
  return "";
}

}  // namespace

std::string shell_word(const std::string& s) {
  const bool plain = !s.empty() && std::all_of(s.begin(), s.end(), [](unsigned char c) {
    return std::isalnum(c) || std::string_view("_./:=,+-").find(static_cast<char>(c)) != std::string_view::npos;
  });
  if (plain) return s;
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

NodeLayout node_layout(const RunConfig& rc, const ClusterSpec& cluster) {
  const int per_node = cluster.node.gpus_per_node;
  if (per_node <= 0) throw InputError(cluster.name, "node.gpus_per_node", "must be positive");
  if (rc.n_gpus <= per_node) return {1, static_cast<int>(rc.n_gpus)};
  if (rc.n_gpus % per_node != 0)
    throw InputError(cluster.name, "n_gpus", fmt::format("{} GPUs do not fill whole {}-GPU nodes", rc.n_gpus, per_node));
  return {static_cast<int>(rc.n_gpus / per_node), per_node};
}

LaunchScripts emit_launch(const RunConfig& rc, const ClusterSpec& cluster, const LaunchSpec& s) {
  const NodeLayout n = node_layout(rc, cluster);
  const bool multi = n.nodes > 1;
  const std::string indent = "    ";
  LaunchScripts out;

  // ---- launch.sh
  std::string sh = "#!/usr/bin/env bash\n";
  sh += header(rc, cluster, n, s, "launch script");
  if (multi)
    sh += fmt::format("# Without Slurm: run on each of the {} nodes with NODE_RANK (0..{}) and MASTER_ADDR (node 0) set;\n"
                      "# with Slurm use sbatch.slurm.\n", n.nodes, n.nodes - 1);
  sh += "set -euo pipefail\nBUNDLE_DIR=\"$(cd \"$(dirname \"${BASH_SOURCE[0]}\")\" && pwd)\"\n";
  sh += workdir(s);
  sh += env_lines(cluster, s);
  sh += checkpoint_lines(rc);
  if (multi) {
    sh += fmt::format("NODE_RANK=\"${{NODE_RANK:?set NODE_RANK (0..{})}}\"\n"
                      "MASTER_ADDR=\"${{MASTER_ADDR:?set MASTER_ADDR to node 0}}\"\nMASTER_PORT=\"${{MASTER_PORT:-29500}}\"\n",
                      n.nodes - 1);
  } else if (n.gpus_per_node < cluster.node.gpus_per_node) {
    std::string devs;
    for (int i = 0; i < n.gpus_per_node; ++i) devs += fmt::format("{}{}", i ? "," : "", i);
    sh += fmt::format("export CUDA_VISIBLE_DEVICES=\"${{CUDA_VISIBLE_DEVICES:-{}}}\"\n", devs);
  }
  const std::string prog = program(s, indent, rc.checkpoint_interval_steps > 0);
  if (!launch_of(s).composer_launcher) {
    if (multi)
      sh += fmt::format("torchrun --nnodes={} --nproc_per_node={} --node_rank=\"$NODE_RANK\" \\\n{}--rdzv_backend c10d "
                        "--rdzv_endpoint=\"$MASTER_ADDR:$MASTER_PORT\" \\\n{}--local-ranks-filter 0 --role rank --tee 3 \\\n{}{} \"$@\"\n",
                        n.nodes, n.gpus_per_node, indent, indent, indent, prog);
    else
      sh += fmt::format("torchrun --nproc_per_node={} --rdzv_backend c10d --rdzv_endpoint=\"localhost:0\" \\\n"
                        "{}--local-ranks-filter 0 --role rank --tee 3 \\\n{}{} \"$@\"\n",
                        n.gpus_per_node, indent, indent, prog);
  } else if (multi) {
    sh += fmt::format("composer --world_size {} --node_rank \"$NODE_RANK\" --master_addr \"$MASTER_ADDR\" "
                      "--master_port \"$MASTER_PORT\" \\\n{}{} \"$@\"\n", rc.n_gpus, indent, prog);
  } else {
    sh += fmt::format("composer {} \"$@\"\n", prog);
  }
  out.launch_sh = sh;
  if (!multi) return out;

  // ---- sbatch.slurm: one task per node; each runs the node-local launcher.
  std::string sb = "#!/bin/bash\n";
  sb += fmt::format("#SBATCH --job-name=meshplan-{}\n#SBATCH --nodes={}\n#SBATCH --ntasks-per-node=1\n"
                    "#SBATCH --gpus-per-node={}\n#SBATCH --exclusive\n",
                    rc.model.name, n.nodes, n.gpus_per_node);
  sb += header(rc, cluster, n, s, "Slurm script");
  sb += fmt::format("# Submit from the bundle folder: {}=/path/to/checkout sbatch sbatch.slurm\n", launch_of(s).dir_var);
  sb += "set -euo pipefail\nBUNDLE_DIR=\"${BUNDLE_DIR:-$SLURM_SUBMIT_DIR}\"\n";
  sb += workdir(s);
  sb += env_lines(cluster, s);
  sb += checkpoint_lines(rc);
  sb += "nodes=( $(scontrol show hostnames \"$SLURM_JOB_NODELIST\") )\nhead_node=${nodes[0]}\n"
        "head_node_ip=$(srun --nodes=1 --ntasks=1 -w \"$head_node\" hostname --ip-address | awk '{print $1}')\n";
  if (!launch_of(s).composer_launcher)
    sb += fmt::format("srun torchrun --nnodes {} --nproc_per_node {} --rdzv_id \"$SLURM_JOB_ID\" --rdzv_backend c10d "
                      "\\\n{}--rdzv_endpoint \"$head_node_ip:29500\" \\\n{}{}\n",
                      n.nodes, n.gpus_per_node, indent, indent, prog);
  else  // Composer's launcher takes the node rank explicitly; Slurm gives it per task.
    sb += fmt::format("export BUNDLE_DIR head_node_ip\nsrun bash -c 'composer --world_size {} --node_rank \"$SLURM_NODEID\" "
                      "--master_addr \"$head_node_ip\" --master_port 29500 \\\n{}{}'\n",
                      rc.n_gpus, indent, prog);
  out.sbatch = sb;
  return out;
}

}  // namespace meshplan

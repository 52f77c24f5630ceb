#pragma once
// Launch scripts that start a runtime on a config file: torchtitan's
// `torchrun ... -m torchtitan.train --job.config_file FILE` (meshplan's launch.sh, torchtitan's
// run_train.sh) and llm-foundry's `composer ... train/train.py FILE.yaml`. The config is the run;
// the launcher words say how many GPUs start it. (Megatron-LM scripts carry the run in their own
// flags: import_megatron reads them.)
#include <cstdint>
#include <optional>
#include <string>

namespace meshplan {

struct LaunchedConfig {
  std::string config;       // the config file the script starts, as a path meshplan can open
  std::int64_t n_gpus = 0;  // 0: the launcher does not say
  std::string gpus_from;    // the words that said it, e.g. "--nnodes 8 x --nproc_per_node 8"
};

// nullopt when `text` starts no such config; InputError(path, ...) when it does but the config's
// path or the GPU count cannot be read from it.
std::optional<LaunchedConfig> launched_config(const std::string& path, const std::string& text);

}  // namespace meshplan

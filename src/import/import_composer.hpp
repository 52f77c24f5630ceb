#pragma once
// llm-foundry / MosaicML Composer training YAML -> RunConfig (runtime composer_fsdp1, or
// composer_fsdp2 when fsdp_config uses FSDP2Config-only keys). See docs/importers.md.
#include <string>

#include "spec/import_common.hpp"
#include "spec/run_config.hpp"

namespace meshplan {

// `text` is the YAML content of `path` (path is used in messages and for the model name).
// The result is unresolved: n_gpus is 0, data_parallel_shard_degree may be -1, micro_batch is 0
// for 'auto' and grad_accum is 0; resolve_layout fills them in with Composer's batch arithmetic.
// Throws InputError(path, key, reason).
RunConfig import_llm_foundry(const std::string& path, const std::string& text,
                             const ImportOptions& opts = {});

// True when parsed YAML `text` looks like an llm-foundry training config (a map with
// fsdp_config, global_train_batch_size or model.name). False for anything else, including
// text that is not YAML.
bool looks_like_llm_foundry(const std::string& text);

}  // namespace meshplan

#pragma once
// llm-foundry / MosaicML Composer training YAML -> RunConfig (runtime composer_fsdp1, or
// composer_fsdp2 when fsdp_config uses FSDP2Config-only keys). See docs/importers.md.
#include <string>
#include <vector>

#include "import/accepted_settings.hpp"
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

// Every key the importer accepts ("fsdp_config.limit_all_gathers" for fsdp_config's; the save_,
// load_ and icl_ families by the names llm-foundry's TrainConfig lists), and of those the ones
// that change neither the step's time nor its memory (never reported) and the ones whose effect the
// model lacks (named at import when given a value other than the one the model assumes). Every
// other key is read into the plan.
std::vector<std::string> llm_foundry_accepted_keys();
std::vector<std::string> llm_foundry_no_effect_settings();
const std::vector<UnmodelledSetting>& llm_foundry_unmodelled_settings();

}  // namespace meshplan

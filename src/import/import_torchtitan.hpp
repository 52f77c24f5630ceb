#pragma once
// torchtitan job TOML -> RunConfig (runtime torchtitan_fsdp2), for both TOML layouts:
// early 2026 (commit 238fa9953e4a: [compile], [quantize.linear.float8], hf_assets_path) and
// mid 2025 (commit 8570415c3: [training] compile, [float8], tokenizer_path). Unknown keys are
// fatal in torchtitan, so they are InputErrors here. See docs/importers.md.
#include <string>
#include <vector>

#include "import/accepted_settings.hpp"
#include "spec/import_common.hpp"
#include "spec/run_config.hpp"

namespace meshplan {

enum class TorchtitanLayout { early_2026, mid_2025 };

// Which layout a parsed file uses (by its layout-specific keys); early_2026 when it has none.
TorchtitanLayout detect_torchtitan_layout(const toml::table& t);

// Every key (sorted "section.key") the layout's job_config accepts: the importer's one table, which
// the emitter checks the keys it writes against.
std::vector<std::string> torchtitan_layout_keys(TorchtitanLayout l);

// Of those keys, the ones that change neither the step's time nor its memory (logging, data,
// checkpoints, optimizer values: never reported), and the ones whose effect the model lacks (named
// at import when the file gives them a value other than torchtitan's default). Every other key is
// read into the plan.
std::vector<std::string> torchtitan_no_effect_settings();
const std::vector<UnmodelledSetting>& torchtitan_unmodelled_settings();

// The result is unresolved: n_gpus is 0 (torchtitan files do not fix it), the shard degree may
// be -1, and global_batch is 0 for global_batch_size = -1 (resolve_layout derives it).
// Throws InputError(path, "section.key", reason).
RunConfig import_torchtitan(const std::string& path, const toml::table& t, const ImportOptions& opts = {});

}  // namespace meshplan

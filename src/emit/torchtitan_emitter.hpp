#pragma once
// torchtitan job configs for a pinned torchtitan version (torchtitan/config/job_config.py): the
// TOML job file of the TOML era (mid-2025 8570415c3 and early-2026 238fa9953e4a key layouts), or,
// for the Python-registry era, the `--module llama3 --config llama3_8b` arguments with CLI overrides.
// torchtitan raises on unknown keys, so every key written is checked against torchtitan_keys.
#include <string>
#include <vector>

#include "emit/emit_common.hpp"
#include "spec/run_config.hpp"

namespace meshplan {

// torchtitan llama3 flavor ("8B", "70B", "405B") for a shipped Llama 3.1 shape; InputError for
// any other model (torchtitan has no flavor for it).
std::string torchtitan_flavor(const ModelSpec& m);

// The TOML job config for `v` (mid_2025 or early_2026). `rc` must be resolved. Throws InputError
// ("torchtitan: <plan key>: <why>") for plans torchtitan cannot run as simulated, and for
// TorchtitanVersion::registry (which has no TOML).
std::string emit_torchtitan_toml(const RunConfig& rc, TorchtitanVersion v);

// Registry era: the arguments that follow `torchrun ... -m torchtitan.train`, i.e.
// {"--module", "llama3", "--config", "llama3_8b", "--parallelism.tensor_parallel_degree", "8", ...}.
// Only overrides whose registry-era names are known (torchtitan PR #2386) are written; a plan that needs
// any other setting changed from the preset is refused with the reason.
std::vector<std::string> emit_torchtitan_registry_args(const RunConfig& rc);

}  // namespace meshplan

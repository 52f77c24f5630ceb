#pragma once
// Reading a user's run config: llm-foundry/Composer YAML, torchtitan TOML (mid-2025 and early-2026
// layouts) or meshplan's own plan TOML, detected from content.
#include <cstdint>
#include <optional>
#include <string>

#include "spec/run_config.hpp"

namespace meshplan {

// Throws InputError naming the file, the key and the reason.
RunConfig load_run_config(const std::string& path);

// Fixes the GPU count (from the file or `n_gpus`), resolves a -1 degree, derives grad_accum /
// global_batch, and checks every divisibility rule (world = product of degrees; heads and kv-heads
// by tp; layers by pp*vpp; batch by dp*micro_batch; seq by 2*cp*tp for torchtitan).
// Throws InputError on infeasible layouts.
void resolve_layout(RunConfig& rc, std::optional<std::int64_t> n_gpus);

}  // namespace meshplan

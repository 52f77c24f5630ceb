#pragma once
// Shared vocabulary of the emitters (src/emit): which runtime and which torchtitan version a
// bundle is for, and the checks every emitter runs before it writes a key.
// Emitters are pure functions of a *resolved* RunConfig (resolve_layout has run: n_gpus fixed,
// every degree positive, global batch, micro-batch and accumulation known).
#include <optional>
#include <string>
#include <string_view>

#include "spec/error.hpp"
#include "spec/run_config.hpp"
#include "spec/runtimes.hpp"

namespace meshplan {

enum class EmitRuntime { torchtitan, llm_foundry, megatron };

// torchtitan's config surface changed twice; unknown keys are fatal there, so a bundle is pinned.
enum class TorchtitanVersion {
  mid_2025,    // commit 8570415c3: [training] compile, [float8], tokenizer_path, converter "float8"
  early_2026,  // commit 238fa9953e4a: [compile], [quantize.linear.float8], hf_assets_path
  registry,    // after 9810191bb: no TOML; --module/--config presets plus CLI overrides
};

std::string_view to_string(EmitRuntime r);
std::optional<EmitRuntime> parse_emit_runtime(std::string_view s);
// The emitter of a framework (spec/runtimes.hpp); none for meshplan's generic runtime.
std::optional<EmitRuntime> emit_runtime_of(Framework f);  // torchtitan, llm-foundry, megatron

// The pinned commit ("8570415c3", "238fa9953e4a") or "registry".
std::string_view to_string(TorchtitanVersion v);
// Accepts the commits above (any prefix of at least 7 hex digits), "registry" (also the
// refactor commit 9810191bb and HEAD b5bcd76c), and "mid-2025" / "early-2026".
std::optional<TorchtitanVersion> parse_torchtitan_version(std::string_view s);

namespace emit {

// InputError(<runtime>, key, reason): the plan setting `key` cannot be written for `runtime`.
[[noreturn]] void refuse(std::string_view runtime, std::string_view key, const std::string& reason);

// Throws unless `rc` is resolved (n_gpus > 0, all degrees positive, world == n_gpus, global
// batch = dp x micro x accum for non-Composer runtimes, seq > 0).
void require_resolved(const RunConfig& rc, std::string_view runtime);

// Deterministic number text: integers as integers, others with the shortest round-trip form.
std::string number(double v);

}  // namespace emit
}  // namespace meshplan

#pragma once
// The runtime registry: one row per training runtime meshplan models, holding everything that
// differs between them — its names, the framework whose config format, emitter and launcher it
// uses, its traits (how it implements each knob), its activation-recompute options, what layouts
// it can run and its defaults for a fresh plan. Every other file reads the row; adding a runtime
// is a row here (docs/design-notes.md, "How to extend").
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "spec/plan.hpp"
#include "spec/runtime_traits.hpp"

namespace meshplan {

// The framework a runtime belongs to: its config format (import), its emitter and launcher (emit).
enum class Framework { torchtitan, llm_foundry, megatron, none };

// One activation-recompute option, least first. `ac == selective_layer` stands for full recompute
// of 1 layer in n for the n the ladder tries; `name` then says how the framework spells it.
struct RecomputeRung {
  AcMode ac = AcMode::none;
  bool offload = false;
  std::string_view name;
};

struct RuntimeInfo {
  Runtime runtime = Runtime::generic;
  std::string_view name;                      // plan TOML `runtime.name`, JSON, to_string
  std::span<const std::string_view> aliases;  // other spellings a plan TOML and the CLI accept
  Framework framework = Framework::none;
  // The `plan --runtime` / `capacity --runtime` name of the framework this runtime is searched
  // for ("" when the planner does not target it).
  std::string_view planner_name;
  RuntimeTraits traits;                       // before the plan's sharding and DeepSpeed adjust them
  std::span<const RecomputeRung> recompute;   // after "none", least first
  bool (*supports)(const Plan&) = nullptr;    // whether the runtime can run the plan's layout and knobs
  void (*planner_defaults)(Plan&) = nullptr;  // a fresh plan's defaults and quirks (planner)
};

// The runtime `plan` and `capacity` search when no --runtime is given.
inline constexpr Runtime kDefaultSearchedRuntime = Runtime::torchtitan_fsdp2;

std::span<const RuntimeInfo> runtime_registry();
const RuntimeInfo& runtime_info(Runtime r);
inline const RuntimeInfo& runtime_info(const Plan& p) { return runtime_info(p.runtime); }
// The runtime `plan --runtime NAME` searches: NAME is its planner name or any name of it.
std::optional<Runtime> planner_runtime(std::string_view name);
// The planner names, in registry order ("torchtitan|llm-foundry|megatron").
std::vector<std::string_view> planner_runtime_names();

}  // namespace meshplan

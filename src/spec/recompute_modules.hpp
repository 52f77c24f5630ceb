#pragma once
// Megatron-Core's --recompute-modules names (selective granularity), mapped onto the plan: core
// attention is AcMode::selective_attn; layernorm, moe_act and moe are Plan::RecomputeModules.
#include <string_view>

#include "spec/plan.hpp"

namespace meshplan {

enum class RecomputeModuleName { modeled, core_attn, known_unmodeled, unknown };

// Sets the flag of `name` in `out` (layernorm, moe_act, moe); core_attn is the caller's AcMode;
// mlp, shared_experts and mla_up_proj are Megatron modules meshplan does not recompute separately.
inline RecomputeModuleName apply_recompute_module(std::string_view name, Plan::RecomputeModules& out) {
  if (name == "layernorm") return out.norms = true, RecomputeModuleName::modeled;
  if (name == "moe_act") return out.moe_act = true, RecomputeModuleName::modeled;
  if (name == "moe") return out.moe = true, RecomputeModuleName::modeled;
  if (name == "core_attn") return RecomputeModuleName::core_attn;
  if (name == "mlp" || name == "shared_experts" || name == "mla_up_proj") return RecomputeModuleName::known_unmodeled;
  return RecomputeModuleName::unknown;
}

}  // namespace meshplan

#pragma once
// Megatron-Core's --offload-modules names (--fine-grained-activation-offloading), mapped onto
// Plan::OffloadModules; the plan TOML's [offload] activation_modules uses the same names.
#include <array>
#include <string>
#include <string_view>
#include <utility>

#include "spec/plan.hpp"

namespace meshplan {

// Every module name with its flag, in Megatron's order within a layer.
inline std::array<std::pair<std::string_view, bool Plan::OffloadModules::*>, 7> offload_module_names() {
  using M = Plan::OffloadModules;
  return {{{"attn_norm", &M::attn_norm},
           {"qkv_linear", &M::qkv_linear},
           {"core_attn", &M::core_attn},
           {"attn_proj", &M::attn_proj},
           {"mlp_norm", &M::mlp_norm},
           {"expert_fc1", &M::expert_fc1},
           {"moe_act", &M::moe_act}}};
}

// Sets the flag of `name`; false for a name Megatron does not offload.
inline bool apply_offload_module(std::string_view name, Plan::OffloadModules& out) {
  for (const auto& [n, flag] : offload_module_names())
    if (n == name) return out.*flag = true, true;
  return false;
}

// "expert_fc1, moe_act": the set modules, comma-separated, each between `quote`s (empty: none set).
inline std::string offload_modules_text(const Plan::OffloadModules& m, std::string_view quote = "") {
  std::string out;
  for (const auto& [name, flag] : offload_module_names())
    if (m.*flag) out += (out.empty() ? "" : ", ") + std::string(quote) + std::string(name) + std::string(quote);
  return out;
}

// Every module name, for error messages: "attn_norm, qkv_linear, ..., moe_act".
inline std::string offload_module_list() {
  Plan::OffloadModules all;
  for (const auto& [name, flag] : offload_module_names()) all.*flag = true;
  return offload_modules_text(all);
}

}  // namespace meshplan

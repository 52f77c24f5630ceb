#include "validate/fitted_parameters.hpp"

#include <algorithm>

#include "spec/error.hpp"

namespace meshplan {
namespace {

// A parameter that is its profile key's value, where the profile declares the key fitted; `field`
// maps a profile (const or not) to the value.
template <class Field>
FittedParameter direct(std::string_view name, std::string_view key, std::string_view meaning, Field field) {
  FittedParameter p{name, key, meaning, {}, {}, {}, {}};
  p.key_value = [field](const ClusterSpec& c) { return field(c); };
  p.read = [key, get = p.key_value](const ClusterSpec& c) -> std::optional<double> {
    if (!c.declared_fitted_bounds(key)) return std::nullopt;
    return get(c);
  };
  p.write = [field](ClusterSpec& c, double v) { field(c) = v; };
  p.bounds = [key](const ClusterSpec& c) { return *c.declared_fitted_bounds(key); };
  return p;
}

// Element-wise kernels run at a fraction of the GPU's STREAM copy rate (docs/compute.md): the
// fraction is what eager PyTorch's casts, norms and activations lose to their access patterns, a
// property of the kernels rather than of the GPU, so one fraction serves every profile.
FittedParameter elementwise_fraction() {
  constexpr std::string_view key = "gpu.elementwise_efficiency";
  FittedParameter p{"elementwise_fraction", key,
                    "element-wise kernels' rate as a fraction of the profile's STREAM copy rate", {}, {}, {}, {}};
  p.read = [key](const ClusterSpec& c) -> std::optional<double> {
    if (!c.declared_fitted_bounds(key) || !(c.gpu.hbm_efficiency > 0)) return std::nullopt;
    return c.gpu.elementwise_efficiency / c.gpu.hbm_efficiency;
  };
  p.write = [](ClusterSpec& c, double fraction) { c.gpu.elementwise_efficiency = fraction * c.gpu.hbm_efficiency; };
  p.key_value = [](const ClusterSpec& c) { return c.gpu.elementwise_efficiency; };
  // No element-wise kernel beats a plain copy: the fraction stays at or below 1.
  p.bounds = [key](const ClusterSpec& c) {
    const auto b = *c.declared_fitted_bounds(key);
    return std::pair{b.first / c.gpu.hbm_efficiency, std::min(1.0, b.second / c.gpu.hbm_efficiency)};
  };
  return p;
}

}  // namespace

const std::vector<FittedParameter>& fitted_parameters() {
  static const std::vector<FittedParameter> all = {
      elementwise_fraction(),
      direct("sustained_clock_fraction", "gpu.sustained_clock_fraction",
             "tensor-core rate over a whole step as a fraction of the short-microbenchmark (burst) rate",
             [](auto& c) -> auto& { return c.gpu.sustained_clock_fraction; }),
      // Megatron-DeepSpeed's host work per counted kernel: a property of the framework's Python,
      // so one number for every host.
      direct("deepspeed_op_factor", "host.megatron_deepspeed_op_factor",
             "Megatron-DeepSpeed's host work per kernel as a multiple of the eager per-op cost",
             [](auto& c) -> auto& { return c.host.megatron_deepspeed_op_factor; }),
      // A trained MoE router's load spread over its experts under dropless routing with an
      // auxiliary loss: a property of the training recipe, so one number for every profile.
      direct("moe_router_load_cv", "framework.moe_router_load_cv",
             "coefficient of variation of a trained MoE router's per-expert load (dropless routing)",
             [](auto& c) -> auto& { return c.framework.moe_router_load_cv; }),
  };
  return all;
}

const FittedParameter& fitted_parameter(std::string_view name, std::string_view flag) {
  std::string known;
  for (const FittedParameter& p : fitted_parameters()) {
    if (p.name == name) return p;
    known += (known.empty() ? "" : ", ") + std::string(p.name);
  }
  throw InputError("", std::string(flag), "unknown fitted parameter '" + std::string(name) + "' (known: " + known + ")");
}

bool applies_to(const FittedParameter& p, const ClusterSpec& profile) { return p.read(profile).has_value(); }

void apply_parameters(ClusterSpec& profile, const ParameterValues& values) {
  for (const ParameterValue& v : values)
    if (applies_to(*v.parameter, profile)) v.parameter->write(profile, v.value);
}

}  // namespace meshplan

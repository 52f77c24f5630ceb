#include "validate/fitted_parameters.hpp"

#include <algorithm>

#include "spec/error.hpp"

namespace meshplan {
namespace {

// The declared bounds of `key` in `profile`, or nullopt when the key is not fitted there.
std::optional<std::pair<double, double>> declared_bounds(const ClusterSpec& profile, std::string_view key) {
  const auto tag = profile.sources.find(std::string(key));
  if (tag == profile.sources.end()) return std::nullopt;
  const auto b = profile.fitted_bounds.find(tag->second);
  if (b == profile.fitted_bounds.end()) return std::nullopt;
  return b->second;
}

// Element-wise kernels run at a fraction of the GPU's STREAM copy rate (docs/compute.md): the
// fraction is what eager PyTorch's casts, norms and activations lose to their access patterns, a
// property of the kernels rather than of the GPU, so one fraction serves every profile.
constexpr std::string_view kElementwiseKey = "gpu.elementwise_efficiency";

std::optional<double> read_elementwise(const ClusterSpec& c) {
  if (!declared_bounds(c, kElementwiseKey) || !(c.gpu.hbm_efficiency > 0)) return std::nullopt;
  return c.gpu.elementwise_efficiency / c.gpu.hbm_efficiency;
}
void write_elementwise(ClusterSpec& c, double fraction) {
  c.gpu.elementwise_efficiency = fraction * c.gpu.hbm_efficiency;
}
double elementwise_key(const ClusterSpec& c) { return c.gpu.elementwise_efficiency; }
std::pair<double, double> elementwise_bounds(const ClusterSpec& c) {
  const auto b = *declared_bounds(c, kElementwiseKey);
  // No element-wise kernel beats a plain copy: the fraction stays at or below 1.
  return {b.first / c.gpu.hbm_efficiency, std::min(1.0, b.second / c.gpu.hbm_efficiency)};
}

constexpr std::string_view kSustainedKey = "gpu.sustained_clock_fraction";

std::optional<double> read_sustained(const ClusterSpec& c) {
  if (!declared_bounds(c, kSustainedKey)) return std::nullopt;
  return c.gpu.sustained_clock_fraction;
}
void write_sustained(ClusterSpec& c, double v) { c.gpu.sustained_clock_fraction = v; }
double sustained_key(const ClusterSpec& c) { return c.gpu.sustained_clock_fraction; }
std::pair<double, double> sustained_bounds(const ClusterSpec& c) { return *declared_bounds(c, kSustainedKey); }

// Megatron-DeepSpeed's host work per counted kernel, a multiple of the eager per-op cost: a
// property of the framework's Python, so one number for every host.
constexpr std::string_view kDeepSpeedKey = "host.megatron_deepspeed_op_factor";

std::optional<double> read_deepspeed(const ClusterSpec& c) {
  if (!declared_bounds(c, kDeepSpeedKey)) return std::nullopt;
  return c.host.megatron_deepspeed_op_factor;
}
void write_deepspeed(ClusterSpec& c, double v) { c.host.megatron_deepspeed_op_factor = v; }
double deepspeed_key(const ClusterSpec& c) { return c.host.megatron_deepspeed_op_factor; }
std::pair<double, double> deepspeed_bounds(const ClusterSpec& c) { return *declared_bounds(c, kDeepSpeedKey); }

}  // namespace

const std::vector<FittedParameter>& fitted_parameters() {
  static const std::vector<FittedParameter> all = {
      {"elementwise_fraction", kElementwiseKey,
       "element-wise kernels' rate as a fraction of the profile's STREAM copy rate", read_elementwise,
       write_elementwise, elementwise_key, elementwise_bounds},
      {"sustained_clock_fraction", kSustainedKey,
       "tensor-core rate over a whole step as a fraction of the short-microbenchmark (burst) rate", read_sustained,
       write_sustained, sustained_key, sustained_bounds},
      {"deepspeed_op_factor", kDeepSpeedKey,
       "Megatron-DeepSpeed's host work per kernel as a multiple of the eager per-op cost", read_deepspeed,
       write_deepspeed, deepspeed_key, deepspeed_bounds},
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

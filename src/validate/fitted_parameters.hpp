#pragma once
// The parameters a fit to whole measured runs may move (docs/validation.md "Fitted parameters").
// Each is one physical number shared by every profile that declares its key `fitted`: the fit asks
// what value explains the runs, not what value each GPU would like, so that a parameter fitted on
// one GPU's or one framework's runs is the same number the others are predicted with.
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "spec/cluster_spec.hpp"

namespace meshplan {

struct FittedParameter {
  std::string_view name;         // what `calibrate --params` and the reports call it
  std::string_view profile_key;  // the profile key it sets ("gpu.sustained_clock_fraction")
  std::string_view meaning;      // one line, for reports
  // The parameter's value as `profile` holds it; nullopt where the profile does not declare the
  // key fitted (the parameter does not apply to runs on that profile).
  std::function<std::optional<double>(const ClusterSpec& profile)> read;
  // Sets the value on a loaded profile (one the parameter applies to).
  std::function<void(ClusterSpec& profile, double value)> write;
  // The profile key's own value (what a profile file holds for `profile_key`).
  std::function<double(const ClusterSpec& profile)> key_value;
  // Bounds of the parameter itself, from the profile's declared bounds of its key.
  std::function<std::pair<double, double>(const ClusterSpec& profile)> bounds;
};

// Every declared fitted parameter, in report order.
const std::vector<FittedParameter>& fitted_parameters();

// By name; throws InputError naming `flag` and the known names otherwise.
const FittedParameter& fitted_parameter(std::string_view name, std::string_view flag);

// A value for each of some parameters, applied to every profile they apply to.
struct ParameterValue {
  const FittedParameter* parameter = nullptr;
  double value = 0;
};
using ParameterValues = std::vector<ParameterValue>;

// `profile` with `values` applied where they apply.
void apply_parameters(ClusterSpec& profile, const ParameterValues& values);

// True when `profile` declares `p`'s key fitted.
bool applies_to(const FittedParameter& p, const ClusterSpec& profile);

}  // namespace meshplan

#pragma once
// A hardware profile with the values a fit to measured runs gave (calibrate --runs --out): the
// base profile's text with each identified parameter's key set and tagged with a `fitted` source
// that names the runs, the fit's residuals and the command that made it.
#include <string>

#include "validate/fit_runs.hpp"

namespace meshplan {

// TOML text of `base_path` renamed `profile_name` with `fit`'s identified parameters written in.
// `base` is the loaded base profile; `runs_files` and `command_line` go into the provenance.
std::string fitted_profile_toml(const RunsFit& fit, const ClusterSpec& base, const std::string& base_path,
                                const std::string& profile_name, const std::string& provenance);

}  // namespace meshplan

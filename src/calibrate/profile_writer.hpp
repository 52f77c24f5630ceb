#pragma once
// Writes a fitted ProfileFit into a copy of a base hardware profile: fitted values replace the
// base's and are tagged with a `calibrated` source naming the measurements file; everything not
// measured stays as the base had it, with its own source. The result loads with load_cluster().
#include <string>

#include "calibrate/fit_profile.hpp"

namespace meshplan::calibrate {

// TOML text of the calibrated profile named `profile_name` (the loader wants name == file stem).
// Throws InputError when the base cannot be read or nothing outside [collectives] was fitted
// (the `calibrated` tag must be used by a value the loader reads).
std::string calibrated_profile_toml(const ProfileFit& fit, const std::string& base_path,
                                    const std::string& profile_name);

}  // namespace meshplan::calibrate

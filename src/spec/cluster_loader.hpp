#pragma once
// Reading hardware profiles: hardware_profiles/NAME.toml, or a path to a profile TOML.
#include <string>
#include <vector>

#include "spec/cluster_spec.hpp"

namespace meshplan {

// Aliases (e.g. "a100-unknown") resolve to a profile and add a line to ClusterSpec::warnings.
// Throws InputError naming the file, the key and the reason.
ClusterSpec load_cluster(const std::string& name_or_path);

// --nccl-version VERSION|PATH of the commands that price collectives: replaces the profile's
// `nccl_version` (no-op when empty). An unknown version is InputError("", "--nccl-version", ...)
// listing the versions available.
void override_nccl_version(ClusterSpec& c, const std::string& version_or_path);

// Names of the shipped profiles, sorted.
std::vector<std::string> list_clusters();

}  // namespace meshplan

#pragma once
// Hardware profiles looked up by name in extra folders before the shipped ones
// (`meshplan validate --cluster-dir DIR`).
#include <filesystem>
#include <string>
#include <vector>

#include "spec/cluster_spec.hpp"

namespace meshplan {

// DIR/NAME.toml from the first of `dirs` that has it, else load_cluster(NAME) (shipped profiles
// and aliases). A profile found in a folder is named NAME even if its own `name` key differs,
// because the caller asked for it by that name. Throws InputError like load_cluster.
ClusterSpec load_cluster_search(const std::string& name, const std::vector<std::filesystem::path>& dirs);

}  // namespace meshplan

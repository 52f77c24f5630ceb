#include "validate/cluster_search.hpp"

#include <system_error>

#include "spec/cluster_loader.hpp"

namespace meshplan {

ClusterSpec load_cluster_search(const std::string& name, const std::vector<std::filesystem::path>& dirs) {
  // Only plain names are searched: a path already says where the profile is.
  const bool plain = !name.empty() && name.find('/') == std::string::npos && name.find('\\') == std::string::npos &&
                     name.front() != '.';
  if (plain) {
    for (const auto& dir : dirs) {
      const std::filesystem::path file = dir / (name + ".toml");
      std::error_code ec;
      if (std::filesystem::is_regular_file(file, ec)) {
        ClusterSpec spec = load_cluster(file.string());
        if (spec.name != name) spec.warnings.push_back(spec.name + " loaded from " + file.string() + " as " + name);
        spec.name = name;
        return spec;
      }
    }
  }
  return load_cluster(name);
}

}  // namespace meshplan

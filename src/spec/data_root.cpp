#include "spec/data_root.hpp"

#include <cstdlib>

#ifndef MESHPLAN_SOURCE_ROOT
#define MESHPLAN_SOURCE_ROOT "."
#endif

namespace meshplan {
std::filesystem::path data_root() {
  if (const char* env = std::getenv("MESHPLAN_DATA_DIR"); env != nullptr && *env != '\0')
    return std::filesystem::path(env);
  return std::filesystem::path(MESHPLAN_SOURCE_ROOT);
}
}  // namespace meshplan

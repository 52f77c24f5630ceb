#pragma once
// Paths the tests need, from the environment meson test sets.
#include <cstdlib>
#include <filesystem>
#include <string>

namespace meshplan::test {
inline std::filesystem::path env_path(const char* name, const char* fallback) {
  const char* v = std::getenv(name);
  return std::filesystem::path(v != nullptr && *v != '\0' ? v : fallback);
}
inline std::filesystem::path data_root() { return env_path("MESHPLAN_DATA_DIR", "."); }
// ../shared (examples, validation); tests that need it skip when it is absent.
inline std::filesystem::path shared_root() { return env_path("MESHPLAN_SHARED_DIR", "../shared"); }
inline bool have_shared() { return std::filesystem::exists(shared_root() / "examples"); }
inline std::filesystem::path meshplan_bin() { return env_path("MESHPLAN_BIN", "build/meshplan"); }
}  // namespace meshplan::test

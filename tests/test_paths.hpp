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
// ../shared (examples, validation), not part of the repository. MESHPLAN_SHARED_DIR names another
// copy, or an empty folder to see what a checkout without it runs.
inline std::filesystem::path shared_root() { return env_path("MESHPLAN_SHARED_DIR", "../shared"); }
// Whether ../shared holds `rel` (a folder or a file of it).
inline bool have_shared(const char* rel = "examples") { return std::filesystem::exists(shared_root() / rel); }
inline std::filesystem::path meshplan_bin() { return env_path("MESHPLAN_BIN", "build/meshplan"); }
}  // namespace meshplan::test

// A case that reads ../shared is skipped, not passed, without it: doctest's skip decorator,
// decided as the case registers, so the run reports it skipped and tests/doctest_main.cpp exits 77
// when nothing else ran.   TEST_CASE("..." * SKIP_UNLESS_SHARED("validation/dev.csv"))
#define SKIP_UNLESS_SHARED(...) doctest::skip(!::meshplan::test::have_shared(__VA_ARGS__))

#pragma once
// An output path checked before the work that fills it: a fit, a measurement or a long simulation
// should not run to its end only to find that its file cannot be written. The write itself
// (spec/atomic_file.hpp) still checks again and replaces the file atomically.
#include <filesystem>
#include <string>
#include <system_error>

#include <fmt/format.h>

#include "spec/error.hpp"

namespace meshplan::cli {

inline void check_output_path(const std::string& path, const std::string& key) {
  namespace fs = std::filesystem;
  if (path.empty()) return;
  // The rules and wording of spec/atomic_file's own refusals, which this only moves earlier.
  std::error_code ec;
  const fs::file_status st = fs::symlink_status(path, ec);
  if (fs::exists(st) && !fs::is_regular_file(st))
    throw InputError(path, key,
                     fs::is_directory(st) ? "is a folder; give a file name"
                                          : "exists and is not a regular file (a device, socket, pipe or link); "
                                            "refusing to replace it");
  const fs::path dir = fs::path(path).has_parent_path() ? fs::path(path).parent_path() : fs::path(".");
  if (!fs::is_directory(dir, ec)) throw InputError(path, key, fmt::format("the folder '{}' does not exist", dir.string()));
}

}  // namespace meshplan::cli

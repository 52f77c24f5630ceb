#pragma once
// Every file meshplan writes goes through here: the content is written to a temporary file in the
// target's folder and renamed over the target, so a reader never sees a partial file and a
// failure leaves nothing behind. A target that exists and is not a regular file (a device, a
// folder, a socket) is refused, never replaced.
#include <functional>
#include <string>
#include <string_view>

namespace meshplan {

struct AtomicWriteOptions {
  bool executable = false;  // add u+x, g+x, o+x (launch scripts)
  // Called with the temporary file's path before the rename; an exception from it removes the
  // temporary file and propagates (e.g. the calibrated profile must load before it replaces one).
  std::function<void(const std::string& tmp_path)> check;
};

// Throws InputError(path, key, reason) on any failure, with nothing left on disk.
void write_file_atomic(const std::string& path, std::string_view content, const std::string& key = "",
                       const AtomicWriteOptions& options = {});

}  // namespace meshplan

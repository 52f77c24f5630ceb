#include "spec/atomic_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fmt/format.h>

#include "spec/error.hpp"

namespace meshplan {

namespace fs = std::filesystem;

void write_file_atomic(const std::string& path, std::string_view content, const std::string& key,
                       const AtomicWriteOptions& options) {
  if (path.empty()) throw InputError(path, key, "empty output path");
  const fs::path target(path);
  // A bare file name is in the current folder.
  const fs::path dir = target.has_parent_path() ? target.parent_path() : fs::path(".");
  struct stat st {};
  if (::lstat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode))
    throw InputError(path, key,
                     S_ISDIR(st.st_mode) ? "is a folder; give a file name"
                                         : "exists and is not a regular file (a device, socket, pipe or link); refusing "
                                           "to replace it");
  struct stat dst {};
  if (::stat(dir.c_str(), &dst) != 0 || !S_ISDIR(dst.st_mode))
    throw InputError(path, key, fmt::format("the folder '{}' does not exist", dir.string()));
  // Same folder (rename stays on one filesystem), hidden, and with the target's extension so
  // loaders that look at extensions (hardware profiles: .toml) read it as the final file.
  std::string tmpl = (dir / ("." + target.stem().string() + ".tmp-XXXXXX" + target.extension().string())).string();
  const int suffix = static_cast<int>(target.extension().string().size());
  const int fd = ::mkstemps(tmpl.data(), suffix);
  if (fd < 0) throw InputError(path, key, fmt::format("cannot create a file in '{}': {}", dir.string(), std::strerror(errno)));
  const std::string tmp = tmpl;
  auto fail = [&](const std::string& reason) {
    ::unlink(tmp.c_str());
    throw InputError(path, key, reason);
  };
  std::size_t done = 0;
  while (done < content.size()) {
    const ssize_t n = ::write(fd, content.data() + done, content.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = errno;
      ::close(fd);
      fail(fmt::format("write failed: {}", std::strerror(err)));
    }
    done += static_cast<std::size_t>(n);
  }
  // mkstemp makes 0600; a written output is as readable as any file the user creates.
  const mode_t umask_now = ::umask(0);
  ::umask(umask_now);
  mode_t mode = 0666 & ~umask_now;
  if (options.executable) mode |= 0111 & ~umask_now;
  if (::fchmod(fd, mode) != 0 || ::fsync(fd) != 0) {
    const int err = errno;
    ::close(fd);
    fail(fmt::format("write failed: {}", std::strerror(err)));
  }
  if (::close(fd) != 0) fail(fmt::format("write failed: {}", std::strerror(errno)));
  if (options.check) {
    try {
      options.check(tmp);
    } catch (...) {
      ::unlink(tmp.c_str());
      throw;
    }
  }
  // Checked again just before the rename: the target may have appeared meanwhile.
  if (::lstat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode))
    fail("exists and is not a regular file; refusing to replace it");
  if (::rename(tmp.c_str(), path.c_str()) != 0) fail(fmt::format("cannot move the file into place: {}", std::strerror(errno)));
}

}  // namespace meshplan

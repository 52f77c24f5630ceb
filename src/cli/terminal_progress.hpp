#pragma once
// A progress bar on stderr for the commands that can run for minutes (`plan`, `validate`): drawn
// only when stderr is a terminal, since \r frames in a log file or a pipe are noise, and only once
// the work has run for a second, so quick runs print nothing extra.
#include <fmt/format.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <string>

namespace meshplan::cli {

class TerminalProgress {
public:
  explicit TerminalProgress(std::string label)
      : label_(std::move(label)), on_terminal_(::isatty(STDERR_FILENO) != 0), t0_(std::chrono::steady_clock::now()) {}
  TerminalProgress(const TerminalProgress&) = delete;
  TerminalProgress& operator=(const TerminalProgress&) = delete;
  // Ends the bar's line, so that what follows starts on a line of its own.
  ~TerminalProgress() { finish(); }

  void update(std::size_t done, std::size_t total) {
    if (!on_terminal_) return;
    if (std::chrono::steady_clock::now() - t0_ < std::chrono::seconds(1)) return;
    const int width = 30;
    const int filled = total ? static_cast<int>(width * done / total) : width;
    fmt::print(stderr, "\r{} [{:<{}}] {}/{}", label_, std::string(static_cast<std::size_t>(filled), '#'), width, done,
               total);
    std::fflush(stderr);
    drew_ = true;
  }
  void finish() {
    if (drew_) fmt::print(stderr, "\n");
    drew_ = false;
  }

private:
  std::string label_;
  bool on_terminal_;
  std::chrono::steady_clock::time_point t0_;
  bool drew_ = false;
};

}  // namespace meshplan::cli

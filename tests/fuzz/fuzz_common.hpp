#pragma once
// Shared by the fuzz targets (one per loader, docs/fuzzing.md). Each target feeds its bytes to one
// loader the way the CLI would. The oracle: the loader returns or throws meshplan::InputError,
// whose message is one line naming the file; anything else (another exception, a crash, a
// sanitizer report, a hang) is a finding.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <fstream>
#include <string>

#include "spec/error.hpp"

namespace meshplan::fuzz {

// The loaders under test read paths; each process writes its input to one file of its own.
inline std::string write_input(const std::uint8_t* data, std::size_t size, const std::string& name) {
  static const std::filesystem::path dir = [] {
    const char* t = std::getenv("TMPDIR");
    auto d = std::filesystem::path(t != nullptr && *t != '\0' ? t : "/tmp") /
             ("meshplan-fuzz-" + std::to_string(::getpid()));
    std::filesystem::create_directories(d);
    return d;
  }();
  const std::string path = (dir / name).string();
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  return path;
}

// Runs `f`; InputError is the expected outcome of bad input and must be one line naming its file.
template <class F>
void expect_input_errors_only(F&& f) {
  try {
    f();
  } catch (const InputError& e) {
    const std::string what = e.what();
    if (what.find('\n') != std::string::npos) {
      std::fprintf(stderr, "fuzz: InputError message spans lines: %s\n", what.c_str());
      std::abort();
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fuzz: escaped exception (not an InputError): %s\n", e.what());
    std::abort();
  }
}

}  // namespace meshplan::fuzz

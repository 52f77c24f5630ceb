#pragma once
// Runs the meshplan binary as a user would and captures what they see: exit status, stdout and
// stderr (separately; stderr through a per-process file, since other checkouts may run the same
// tests at the same time on the same /tmp).
#include <doctest/doctest.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <sys/wait.h>
#include <unistd.h>

#include "../test_paths.hpp"

namespace meshplan::test {

struct BinaryRun {
  int exit_code = -1;
  std::string out;
  std::string err;
};

inline BinaryRun run_meshplan(const std::string& args) {
  const auto err_file =
      std::filesystem::temp_directory_path() / ("meshplan_test_stderr." + std::to_string(::getpid()) + ".txt");
  const std::string cmd = meshplan_bin().string() + " " + args + " 2>" + err_file.string();
  BinaryRun r;
  FILE* p = ::popen(cmd.c_str(), "r");
  REQUIRE(p != nullptr);
  std::array<char, 4096> buf{};
  while (std::fgets(buf.data(), static_cast<int>(buf.size()), p) != nullptr) r.out += buf.data();
  const int status = ::pclose(p);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  std::ifstream f(err_file);
  r.err.assign(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
  std::filesystem::remove(err_file);
  return r;
}

}  // namespace meshplan::test

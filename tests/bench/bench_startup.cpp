// Whole-process start-up (issue 18 target: `meshplan --version` and `meshplan model --list`
// <= 20 ms wall and <= 30 MiB peak RSS on 2 cores): spawn the binary, wait for it, read its peak
// RSS from the kernel (wait4's rusage). The binary is $MESHPLAN_BIN, else the one built beside
// this benchmark. A separate executable (meshplan_startup_bench): the child's ru_maxrss includes
// the spawner's resident set at exec, which stays a few MiB here.
#include <benchmark/benchmark.h>
#include <fcntl.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <vector>

extern char** environ;

namespace {

std::string binary() {
  const char* env = std::getenv("MESHPLAN_BIN");
  return env != nullptr && *env != '\0' ? env : MESHPLAN_BUILT_BIN;
}

// Runs the binary with stdout and stderr to /dev/null; returns its peak RSS in KiB.
long run_once(const std::vector<std::string>& args) {
  std::vector<char*> argv;
  std::string bin = binary();
  argv.push_back(bin.data());
  std::vector<std::string> copy = args;
  for (std::string& a : copy) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
  pid_t pid = 0;
  const int rc = posix_spawn(&pid, bin.c_str(), &fa, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) throw std::runtime_error("cannot spawn " + bin);
  int status = 0;
  rusage usage{};
  if (wait4(pid, &status, 0, &usage) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
    throw std::runtime_error(bin + " failed");
  return usage.ru_maxrss;
}

void startup(benchmark::State& state, const std::vector<std::string>& args) {
  long peak_kib = 0;
  for (auto _ : state) peak_kib = std::max(peak_kib, run_once(args));
  state.counters["peak_rss_MiB"] = static_cast<double>(peak_kib) / 1024.0;
}

}  // namespace

static void BM_Startup_Version(benchmark::State& state) { startup(state, {"--version"}); }
BENCHMARK(BM_Startup_Version)->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(1.0);

static void BM_Startup_ModelList(benchmark::State& state) { startup(state, {"model", "--list"}); }
BENCHMARK(BM_Startup_ModelList)->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(1.0);
BENCHMARK_MAIN();

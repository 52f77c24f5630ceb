#include "import/training_log.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cmath>

#include "spec/error.hpp"
#include "spec/input_file.hpp"

namespace meshplan {
namespace {

// Console colour: ESC [ ... m (torchtitan colours its metrics line).
std::string strip_ansi(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\x1b' && i + 1 < s.size() && s[i + 1] == '[') {
      std::size_t j = i + 2;
      while (j < s.size() && (std::isdigit(static_cast<unsigned char>(s[j])) || s[j] == ';')) ++j;
      if (j < s.size() && s[j] == 'm') {
        i = j;
        continue;
      }
    }
    out += s[i];
  }
  return out;
}

// The number after `key` (spaces skipped; thousands separators and a trailing '%' allowed), or
// nullopt when the key is absent or no number follows it.
std::optional<double> number_after(std::string_view line, std::string_view key) {
  const auto at = line.find(key);
  if (at == std::string_view::npos) return std::nullopt;
  std::size_t i = at + key.size();
  while (i < line.size() && line[i] == ' ') ++i;
  std::string digits;
  for (; i < line.size(); ++i) {
    const char c = line[i];
    if (std::isdigit(static_cast<unsigned char>(c)) || c == '.' || c == 'e' || c == 'E' || c == '+' || c == '-')
      digits += c;
    else if (c != ',' || digits.empty())
      break;
  }
  if (digits.empty()) return std::nullopt;
  try {
    std::size_t used = 0;
    const double v = std::stod(digits, &used);
    if (used == 0 || !std::isfinite(v)) return std::nullopt;
    return v;
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

[[noreturn]] void fail_at(const std::string& file, int line, const std::string& reason) {
  throw InputError(file, fmt::format("line {}", line), reason);
}

// Megatron-LM training.py: "iteration   10/ 1000 | ... | elapsed time per iteration (ms): 1147.6 | ...
// | global batch size:    16 | ..."; arguments.py: "using world size: 64, data-parallel size: ...";
// the memory report "[Rank 0] (after 10 iterations) memory (MB) | ... | max allocated: ... | max reserved: ...".
bool read_megatron_line(TrainingLog& log, std::string_view line, int no) {
  if (auto w = number_after(line, "using world size:"); w) {
    log.world_size = static_cast<long long>(*w);
    log.world_size_line = no;
    return true;
  }
  if (line.find("memory (MB)") != std::string_view::npos) {
    if (auto r = number_after(line, "max reserved:"); r) {
      log.peak_memory_gib = std::max(log.peak_memory_gib.value_or(0), *r / 1024.0), log.memory_metric = "reserved";
    } else if (auto a = number_after(line, "max allocated:"); a) {
      log.peak_memory_gib = std::max(log.peak_memory_gib.value_or(0), *a / 1024.0), log.memory_metric = "allocated";
    }
    return true;
  }
  const auto it = line.find("iteration ");
  if (it == std::string_view::npos || line.find('|') == std::string_view::npos) return false;
  const auto step = number_after(line.substr(it), "iteration");
  if (!step) return false;
  LoggedStep s;
  s.step = static_cast<long long>(*step);
  s.line = no;
  const auto ms = number_after(line, "elapsed time per iteration (ms):");
  const auto gbs = number_after(line, "global batch size:");
  if (!ms || !gbs || !(*ms > 0) || !(*gbs > 0))
    fail_at(log.file, no,
            "Megatron iteration line without its 'elapsed time per iteration (ms)' and 'global batch size' "
            "(cut off?)");
  s.iteration_seconds = *ms / 1000.0;
  s.global_batch = static_cast<long long>(*gbs);
  log.steps.push_back(s);
  return true;
}

// torchtitan components/metrics.py: "step: 20  loss:  8.4931  ...  memory: 47.65GiB(50.16%)  tps: 5,760 ...";
// parallel_dims.py: "Building 1-D device mesh with ['dp_shard'], [8]".
bool read_torchtitan_line(TrainingLog& log, std::string_view line, int no) {
  if (const auto m = line.find("device mesh with"); m != std::string_view::npos) {
    const auto open = line.rfind('[');
    const auto close = line.rfind(']');
    if (open != std::string_view::npos && close != std::string_view::npos && open > m && close > open) {
      long long world = 1;
      std::string_view dims = line.substr(open + 1, close - open - 1);
      while (!dims.empty()) {
        const auto comma = dims.find(',');
        const auto d = number_after(dims.substr(0, comma), "");
        if (d && *d > 0) world *= static_cast<long long>(*d);
        dims = comma == std::string_view::npos ? std::string_view{} : dims.substr(comma + 1);
      }
      log.world_size = world;
      log.world_size_line = no;
    }
    return true;
  }
  const auto at = line.find("step:");
  if (at == std::string_view::npos || line.find("loss:") == std::string_view::npos) return false;
  LoggedStep s;
  s.step = static_cast<long long>(number_after(line.substr(at), "step:").value_or(0));
  s.line = no;
  const auto tps = number_after(line, "tps:");
  if (!tps || !(*tps > 0)) fail_at(log.file, no, "torchtitan step line without its 'tps:' (cut off?)");
  s.tokens_per_s_per_gpu = *tps;
  if (auto mem = number_after(line, "memory:"); mem)
    log.peak_memory_gib = std::max(log.peak_memory_gib.value_or(0), *mem), log.memory_metric = "reserved";
  log.steps.push_back(s);
  return true;
}

// Composer's console logger: "[batch=20/100]:" then one "\t Train KEY: VALUE" line per metric;
// throughput/device/tokens_per_sec once SpeedMonitor's window is full, memory/* in GB (1e9 B).
struct ComposerBlock {
  long long batch = 0;
  int line = 0;
  int metrics = 0;
};

bool read_composer_line(TrainingLog& log, std::string_view line, int no, std::optional<ComposerBlock>& block) {
  if (const auto b = line.find("[batch="); b != std::string_view::npos) {
    block = ComposerBlock{static_cast<long long>(number_after(line.substr(b), "[batch=").value_or(0)), no, 0};
    return true;
  }
  if (!block || line.find("Train ") == std::string_view::npos) return false;
  ++block->metrics;
  if (auto t = number_after(line, "throughput/device/tokens_per_sec:"); t && *t > 0)
    log.steps.push_back({block->batch, no, *t, std::nullopt, std::nullopt});
  constexpr double kGibPerGb = 1e9 / 1073741824.0;
  // Reserved when the log has it (what the device had to hold), else allocated.
  const auto reserved = number_after(line, "memory/peak_reserved_mem:");
  const auto allocated = number_after(line, "memory/peak_allocated_mem:");
  if (reserved) {
    if (log.memory_metric != "reserved") log.peak_memory_gib.reset();
    log.peak_memory_gib = std::max(log.peak_memory_gib.value_or(0), *reserved * kGibPerGb);
    log.memory_metric = "reserved";
  } else if (allocated && log.memory_metric != "reserved") {
    log.peak_memory_gib = std::max(log.peak_memory_gib.value_or(0), *allocated * kGibPerGb);
    log.memory_metric = "allocated";
  }
  return true;
}

std::optional<LogFormat> detect(std::string_view line) {
  if (line.find("elapsed time per iteration (ms)") != std::string_view::npos ||
      line.find("using world size:") != std::string_view::npos)
    return LogFormat::megatron;
  if (line.find("step:") != std::string_view::npos && line.find("loss:") != std::string_view::npos)
    return LogFormat::torchtitan;
  if (line.find("device mesh with") != std::string_view::npos) return LogFormat::torchtitan;
  if (line.find("[batch=") != std::string_view::npos) return LogFormat::composer;
  return std::nullopt;
}

}  // namespace

std::string_view to_string(LogFormat f) {
  switch (f) {
    case LogFormat::megatron: return "megatron";
    case LogFormat::torchtitan: return "torchtitan";
    case LogFormat::composer: return "composer";
  }
  return "megatron";
}

TrainingLog parse_training_log(std::string_view text, const std::string& file) {
  TrainingLog log;
  log.file = file;
  std::optional<LogFormat> format;
  std::optional<ComposerBlock> block;
  int no = 0;
  while (!text.empty()) {
    const auto nl = text.find('\n');
    std::string line = strip_ansi(text.substr(0, nl));
    if (!line.empty() && line.back() == '\r') line.pop_back();
    text = nl == std::string_view::npos ? std::string_view{} : text.substr(nl + 1);
    ++no;
    if (!format) format = detect(line);
    if (!format) continue;
    log.format = *format;
    switch (*format) {
      case LogFormat::megatron: read_megatron_line(log, line, no); break;
      case LogFormat::torchtitan: read_torchtitan_line(log, line, no); break;
      case LogFormat::composer: read_composer_line(log, line, no, block); break;
    }
  }
  if (!format)
    throw InputError(file, "log", "no step line of Megatron-LM, torchtitan or Composer found (docs/importers.md)");
  if (block && block->metrics == 0)
    fail_at(file, block->line, "Composer batch block without any metric at the end of the log (cut off?)");
  if (log.steps.empty())
    throw InputError(file, "log", fmt::format("a {} log without any throughput record ({} lines)", to_string(*format), no));
  return log;
}

TrainingLog read_training_log(const std::string& path) {
  return parse_training_log(read_input_file(path, InputKind::training_log, "--runs"), path);
}

SteadyThroughput steady_throughput(const TrainingLog& log, long long seq_len, long long world_size) {
  const int n = static_cast<int>(log.steps.size());
  SteadyThroughput out;
  out.warmup_records = std::max(1, n / 4);
  if (n <= out.warmup_records)
    fail_at(log.file, log.steps.back().line,
            fmt::format("no steady iterations: {} logged step record(s), all warm-up (the first quarter, at least "
                        "one, is skipped)",
                        n));
  std::vector<double> v;
  for (int i = out.warmup_records; i < n; ++i) {
    const LoggedStep& s = log.steps[static_cast<std::size_t>(i)];
    v.push_back(s.tokens_per_s_per_gpu
                    ? *s.tokens_per_s_per_gpu
                    : static_cast<double>(*s.global_batch) * static_cast<double>(seq_len) /
                          (*s.iteration_seconds * static_cast<double>(world_size)));
  }
  std::sort(v.begin(), v.end());
  const std::size_t m = v.size() / 2;
  out.tokens_per_s_per_gpu = v.size() % 2 == 1 ? v[m] : 0.5 * (v[m - 1] + v[m]);
  out.records = static_cast<int>(v.size());
  return out;
}

}  // namespace meshplan

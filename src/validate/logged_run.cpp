#include "validate/logged_run.hpp"

#include <fmt/format.h>

#include <filesystem>
#include <set>
#include <toml++/toml.h>

#include "import/config_loader.hpp"
#include "import/training_log.hpp"
#include "spec/error.hpp"
#include "spec/input_file.hpp"

namespace meshplan {
namespace {

constexpr const char* kDefaultCluster = "h100-sxm-80gb";

// The GPU count: the spec's, else the config's (every degree given or a stated count), else the
// log's. A log that states another world size than the config ran with is not this run's log.
std::int64_t gpu_count(const LoggedRunSpec& spec, const RunConfig& rc, const TrainingLog& log) {
  std::int64_t gpus = spec.gpus > 0 ? spec.gpus : rc.n_gpus;
  if (gpus <= 0 && log.world_size) gpus = *log.world_size;
  if (gpus <= 0)
    throw InputError(spec.config, "gpus",
                     "neither the config, the log nor the listing states the GPU count (give gpus = N)");
  if (log.world_size && *log.world_size != gpus)
    throw InputError(log.file, fmt::format("line {}", log.world_size_line),
                     fmt::format("the log ran on {} GPUs, but {} describes {} (not this run's log?)", *log.world_size,
                                 spec.config, gpus));
  return gpus;
}

}  // namespace

ValidationCase logged_run_case(const LoggedRunSpec& spec) {
  const TrainingLog log = read_training_log(spec.log);
  ValidationCase vc;
  vc.run = load_run_config(spec.config);
  resolve_layout(vc.run, gpu_count(spec, vc.run, log));
  const RunConfig& rc = vc.run;
  // Megatron prints the global batch on every line: a different one is another run's log.
  for (const LoggedStep& s : log.steps)
    if (s.global_batch && *s.global_batch != rc.job.global_batch)
      throw InputError(log.file, fmt::format("line {}", s.line),
                       fmt::format("global batch size {} in the log, {} in {}", *s.global_batch, rc.job.global_batch,
                                   spec.config));
  const SteadyThroughput steady = steady_throughput(log, rc.job.seq_len, rc.n_gpus);
  vc.id = spec.id.empty() ? std::filesystem::path(spec.log).stem().string() : spec.id;
  vc.source = "log";
  vc.model_label = rc.model.name;
  vc.framework = std::string(to_string(rc.plan.runtime));
  vc.cluster = !spec.cluster.empty() ? spec.cluster : !rc.cluster.empty() ? rc.cluster : kDefaultCluster;
  vc.gpu = vc.cluster;
  vc.measured.tokens_per_s_per_gpu = steady.tokens_per_s_per_gpu;
  vc.measured.tokens_derived_from = fmt::format("{} log, median of {} steady records", to_string(log.format), steady.records);
  if (log.peak_memory_gib) {
    vc.measured.peak_mem_gib = *log.peak_memory_gib;
    vc.measured.memory_metric = log.memory_metric == "reserved" ? MemoryMetric::reserved : MemoryMetric::allocated;
    vc.measured.memory_metric_given = true;
  }
  vc.assumptions.push_back(fmt::format("throughput from {}: median of {} steady records after {} warm-up", spec.log,
                                       steady.records, steady.warmup_records));
  return vc;
}

std::vector<LoggedRunSpec> read_runs_listing(const std::string& path) {
  const std::string text = read_input_file(path, InputKind::runs_listing, "--runs");
  toml::table root;
  try {
    root = toml::parse(text, path);
  } catch (const toml::parse_error& e) {
    throw InputError(path, "runs", fmt::format("not TOML: {} (line {})", e.description(), e.source().begin.line));
  }
  const toml::array* runs = root["run"].as_array();
  if (runs == nullptr || runs->empty()) throw InputError(path, "run", "needs [[run]] tables (log, config)");
  for (auto&& [k, v] : root)
    if (k.str() != "run") throw InputError(path, std::string(k.str()), "unknown key (a listing has [[run]] tables)");
  const std::filesystem::path dir = std::filesystem::path(path).parent_path();
  auto rel = [&](const std::string& p) { return std::filesystem::path(p).is_absolute() ? p : (dir / p).string(); };
  std::vector<LoggedRunSpec> out;
  std::set<std::string> ids;
  for (std::size_t i = 0; i < runs->size(); ++i) {
    const toml::table* t = (*runs)[i].as_table();
    const std::string key = fmt::format("run[{}]", i);
    if (t == nullptr) throw InputError(path, key, "must be a table");
    LoggedRunSpec s;
    s.listed_in = path;
    for (auto&& [k, v] : *t) {
      const std::string f(k.str());
      if (f == "gpus") {
        const auto g = v.value<std::int64_t>();
        if (!g || *g <= 0) throw InputError(path, key + ".gpus", "must be a positive integer");
        s.gpus = *g;
        continue;
      }
      if (f != "log" && f != "config" && f != "cluster" && f != "id")
        throw InputError(path, key + "." + f, "unknown key (log, config, cluster, gpus, id)");
      const auto str = v.value<std::string>();
      if (!str || str->empty()) throw InputError(path, key + "." + f, "must be a non-empty string");
      (f == "log" ? s.log : f == "config" ? s.config : f == "cluster" ? s.cluster : s.id) = *str;
    }
    if (s.log.empty()) throw InputError(path, key + ".log", "missing (the run's training log)");
    if (s.config.empty()) throw InputError(path, key + ".config", "missing (the config the run was launched with)");
    s.log = rel(s.log);
    s.config = rel(s.config);
    const std::string id = s.id.empty() ? std::filesystem::path(s.log).stem().string() : s.id;
    if (!ids.insert(id).second) throw InputError(path, key + ".id", "run id '" + id + "' repeats (give id = ...)");
    out.push_back(s);
  }
  return out;
}

}  // namespace meshplan

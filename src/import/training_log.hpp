#pragma once
// A run's own log, as the runtimes print it per logged step (Megatron-LM's training.py interval
// line, torchtitan's metrics line, Composer's console block: docs/importers.md "Training logs"),
// reduced to the throughput of its steady steps.
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace meshplan {

enum class LogFormat { megatron, torchtitan, composer };
std::string_view to_string(LogFormat f);

struct LoggedStep {
  long long step = 0;
  int line = 0;  // 1-based line of the record in the file
  // What the line reports: torchtitan and Composer tokens/s per GPU; Megatron the iteration time
  // averaged over the logging interval and the global batch (in sequences).
  std::optional<double> tokens_per_s_per_gpu;
  std::optional<double> iteration_seconds;
  std::optional<long long> global_batch;
};

struct TrainingLog {
  std::string file;
  LogFormat format = LogFormat::torchtitan;
  std::vector<LoggedStep> steps;           // every record with a throughput figure, in file order
  std::optional<long long> world_size;     // where the log states it (Megatron, torchtitan's mesh)
  int world_size_line = 0;
  std::optional<double> peak_memory_gib;   // the largest reported, in GiB
  std::string memory_metric;               // "allocated" or "reserved"
};

// Reads and parses `path`, detecting the format from its lines (ANSI colour escapes ignored).
// InputError naming the file and line for: no recognisable step record, and a record cut off (a
// step line without its throughput, a Composer batch block with no metric at the end).
TrainingLog read_training_log(const std::string& path);
TrainingLog parse_training_log(std::string_view text, const std::string& file);

// The run's steady throughput: the first quarter of the records (at least one) is warm-up
// (compilation, allocator growth, NCCL set-up), the median of the rest is used. Megatron's lines
// give iteration times: tokens/s per GPU = global batch x seq_len / (seconds x world size).
// InputError naming the file and the last record's line when no steady record is left.
struct SteadyThroughput {
  double tokens_per_s_per_gpu = 0;
  int records = 0;       // steady records the median is over
  int warmup_records = 0;
};
SteadyThroughput steady_throughput(const TrainingLog& log, long long seq_len, long long world_size);

}  // namespace meshplan

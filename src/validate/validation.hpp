#pragma once
// `meshplan validate`: predictions against published measurements (docs/validation.md).
// Each row of a validation CSV (../shared/validation/README.md) is mapped onto a plan, simulated
// for throughput and estimated for peak memory, and compared with what the source measured, on
// the source's own definition. Summaries: MAPE, median / p90 / max absolute error, per group.
#include <filesystem>
#include <functional>
#include <utility>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "spec/cluster_spec.hpp"
#include "validate/fitted_parameters.hpp"
#include "validate/validation_row.hpp"

namespace meshplan {

enum class GroupBy { source, framework, gpu, model };
std::string_view to_string(GroupBy g);
std::optional<GroupBy> parse_group_by(std::string_view s);
struct ValidationRowResult;
// The group a row belongs to under `by` ("(empty)" for a row without a gpu).
std::string group_key(const ValidationRowResult& r, GroupBy by);

// How a throughput figure without tokens/s is compared (README "Sources").
struct FlopConvention {
  std::string metric;       // "tflops_per_gpu" or "mfu_pct"
  std::string definition;   // the formula as the source defines it
  double flops_per_token = 0;
  double peak_flops_per_s = 0;  // for mfu_pct: the source's stated peak
};

// The source's own FLOP convention for this row's model and job; nullopt when the source
// documents none. `prefer_mfu` picks MFU over TFLOP/s when both conventions exist.
std::optional<FlopConvention> source_flop_convention(const ValidationCase& vc, bool prefer_mfu);

struct ValidationRowResult {
  std::string id, source, framework, gpu, cluster;
  std::string model;  // the row's `model` label
  std::string run;  // run_key(id): -alloc / -resv rows of one run share it
  // Throughput.
  std::optional<double> predicted_tokens_per_s_per_gpu;
  std::optional<double> measured_tokens_per_s_per_gpu;
  // Model FLOP utilisation in meshplan's own convention (PaLM/torchtitan FLOPs per token over the
  // profile's dense peak): the simulated step's, and the run's at its measured throughput, so that
  // runs published in tokens/s, TFLOP/s or their own MFU compare on one scale.
  std::optional<double> predicted_mfu, measured_mfu;
  std::string runtime;   // the runtime the row was simulated as (spec/runtimes.cpp names)
  std::string gpu_arch;  // its cluster's GPU architecture ("sm90")
  std::string fp8;       // the low-precision recipe its GEMMs ran ("none": the compute dtype)
  std::int64_t seq_len = 0;  // tokens per sequence simulated (0: not simulated)
  bool moe = false;          // the model has routed experts
  std::string metric;             // "tokens_per_s_per_gpu", "tflops_per_gpu", "mfu_pct", or "" (none compared)
  std::string metric_definition;  // for tflops/mfu: the source's formula
  std::optional<double> predicted_metric, measured_metric;
  std::optional<double> error_pct;  // signed: (predicted - measured) / measured x 100
  std::string dominant_term;        // largest entry of the step-time breakdown
  double dominant_share = 0;        // its fraction of the step time
  std::optional<double> step_time_s;
  // Memory.
  std::optional<double> predicted_peak_gib, measured_peak_gib;
  std::optional<double> memory_error_pct;
  std::string memory_metric;        // the metric compared: allocated / reserved / device (nvidia-smi)
  std::string memory_stage;         // which pipeline stage's peak: "max" or "0 (rank 0)"
  std::string dominant_memory_term;
  std::optional<double> timeline_peak_gib;  // the simulated timeline's peak of the same stage (allocated or device)
  // A published run ran, so it fit: the largest stage's allocated peak plus the CUDA context and the
  // NCCL buffers, over the device (above 1: the model says the run could not have run).
  std::optional<double> predicted_device_fraction;
  // Why nothing, or not everything, was compared.
  std::string skipped;              // the row as a whole (mapping failed, or nothing comparable)
  std::string throughput_skipped;   // a throughput figure exists but is not compared
  std::vector<std::string> assumptions;
  double sim_ms = 0;                // wall time spent on this row
};

struct ValidationSummary {
  std::string group;                // "" for the overall summary
  int rows = 0;
  int n = 0;                        // rows compared on throughput
  int skipped = 0;                  // rows with `skipped`
  int throughput_skipped = 0;       // rows not skipped whose throughput figure was not compared
  std::optional<double> mape_pct, median_ape_pct, p90_ape_pct, max_ape_pct, mean_error_pct;
  int memory_rows = 0;              // rows compared on memory
  int memory_runs = 0;              // distinct runs among them (-alloc/-resv pairs count once)
  std::optional<double> memory_mape_pct;       // mean over runs of the run's mean row APE
  std::optional<double> memory_row_mape_pct;   // mean over rows
  std::optional<double> memory_max_ape_pct;
  std::optional<double> memory_min_error_pct;  // most negative signed error (worst under-prediction)
  int predicted_out_of_memory = 0;  // simulated rows whose predicted_device_fraction exceeds 1
};

struct ValidationOptions {
  std::vector<std::filesystem::path> cluster_dirs;  // searched before the shipped profiles
  GroupBy by = GroupBy::source;
  int threads = 0;  // rows simulated in parallel; 0 = one per hardware thread
  std::vector<std::string> only_ids;  // compare just these rows (every id must exist)
  // Fitted parameters set to these values on every profile they apply to (calibrate --runs,
  // validate --cross-validate); empty: the profiles' own values.
  ParameterValues parameters;
  std::string nccl_version;  // --nccl-version: replaces every profile's nccl_version; empty: theirs
};

// One row as the simulator sees it, to look inside (`validate --row ID --trace/--export-plan`):
// the mapped case and the profile it runs on (node size applied). Throws InputError when the id
// is not in the table or the row is skipped.
struct ValidationRowRun {
  ValidationCase vc;
  ClusterSpec cluster;
};
ValidationRowRun validation_row_run(const CsvTable& table, const std::string& id, const ValidationOptions& options);

struct ValidationReport {
  std::string file;
  GroupBy by = GroupBy::source;
  std::vector<ValidationRowResult> rows;          // empty when streamed (run_validation_stream)
  std::size_t row_count = 0;                      // rows compared (rows.size() unless streamed)
  ValidationSummary summary;
  std::vector<ValidationSummary> groups;          // sorted by group name
  std::map<std::string, std::string> definitions; // source -> FLOP convention used for it
  std::vector<std::pair<std::string, double>> slowest;  // the three slowest rows: id, sim_ms
  double wall_s = 0;
};

// What the summaries need of each row, and nothing else: a streamed run keeps these few numbers
// per row (the errors, for the percentiles), never the rows themselves.
class ValidationTotals {
public:
  explicit ValidationTotals(GroupBy by) : by_(by) {}
  void add(const ValidationRowResult& r);
  // Summary, per-group summaries, definitions, row count and slowest rows into `rep`.
  void finish(ValidationReport& rep) const;

  // One group's running sums; summary() gives what summarize() gives for the same rows.
  struct Group {
    int rows = 0, skipped = 0, throughput_skipped = 0, predicted_out_of_memory = 0;
    std::vector<double> errors;                            // signed throughput errors, row order
    std::map<std::string, std::pair<double, int>> run_apes;  // run -> (sum of row APEs, rows)
    double memory_ape_sum = 0, memory_ape_max = 0;
    int memory_rows = 0;
    std::optional<double> memory_min_error_pct;
    void add(const ValidationRowResult& r);
    ValidationSummary summary(const std::string& group) const;
  };

private:
  GroupBy by_;
  Group all_;
  std::map<std::string, Group> groups_;
  std::map<std::string, std::string> definitions_;
  std::vector<std::pair<std::string, double>> slowest_;
  std::size_t rows_ = 0;
};

// Reads `path` a row at a time, maps and simulates rows in batches over `options.threads`, and
// hands each finished row to `on_row` in the file's order (the same for any thread count). Memory
// is the batch in flight plus ValidationTotals' numbers per row. `progress(done, total)` is called
// after each batch. Rows whose cells other than the id equal an earlier row's reuse its result
// (a bounded cache; see docs/validation.md). Errors as run_validation's, before any row is handed
// out (a first pass over the file checks the header, the row widths and the --row ids).
ValidationReport run_validation_stream(const std::string& path, const ValidationOptions& options,
                                       const std::function<void(const ValidationRowResult&)>& on_row,
                                       const std::function<void(std::size_t done, std::size_t total)>& progress = {});

// Throws InputError when a required column is missing; never for a bad row.
ValidationReport run_validation(const CsvTable& table, const ValidationOptions& options);
ValidationReport run_validation_file(const std::string& path, const ValidationOptions& options);
// Rows already mapped (runs read from logs and configs: validate/logged_run.hpp); `only_ids` is
// not applied here. `file` names them in the report.
ValidationReport run_validation_cases(std::vector<ValidationCase> cases, const std::string& file,
                                      const ValidationOptions& options);

// Summary statistics over `rows` (exposed for tests).
ValidationSummary summarize(const std::vector<const ValidationRowResult*>& rows, const std::string& group);
// Linear interpolation between closest ranks (numpy's default); `q` in [0, 1]; needs values.
double percentile(std::vector<double> values, double q);

nlohmann::json validation_json(const ValidationReport& r);
std::string validation_text(const ValidationReport& r);
// The pieces validation_json and validation_text are made of, for a streamed report: one row's
// object and line, and the text before and after the rows.
nlohmann::json validation_row_json(const ValidationRowResult& x);
std::string validation_row_text(const ValidationRowResult& x);
std::string validation_text_head(const ValidationReport& r);
std::string validation_text_tail(const ValidationReport& r);
// The per-group table alone (docs, tests).
std::string validation_group_table(const ValidationReport& r);

// ---- collectives (nccl-tests-style measurements) ------------------------------------------

struct CollectiveRowResult {
  int line = 0;
  std::string op;
  int gpus = 0;
  int gpus_per_node = 0;
  double size_bytes = 0;
  std::optional<double> measured_time_us, measured_busbw_gbps;
  double predicted_time_us = 0, predicted_busbw_gbps = 0;
  std::string compared;             // "time_us" or "busbw_gbps"
  std::optional<double> error_pct;  // signed, on the compared quantity
  std::string algorithm, protocol;
  std::string skipped;
};

struct CollectiveValidation {
  std::string file, cluster;
  std::vector<CollectiveRowResult> rows;
  ValidationSummary summary;                // n, mape, median, p90, max over compared rows
  std::vector<ValidationSummary> groups;    // per "op x gpus"
};

CollectiveValidation run_collective_validation(const CsvTable& table, const ClusterSpec& cluster);
nlohmann::json collective_validation_json(const CollectiveValidation& v);
std::string collective_validation_text(const CollectiveValidation& v);

}  // namespace meshplan

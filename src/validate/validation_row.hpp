#pragma once
// Published training measurements (../shared/validation/dev.csv and memory.csv, columns and
// vocabularies in that folder's README.md): an RFC-4180 CSV reader and the mapping of one row
// onto a RunConfig plus the name of the hardware profile it ran on.
//
// Every column and every value of every vocabulary is accepted. An empty cell means "unknown";
// the mapping fills it with the framework's documented default and records the choice in
// ValidationCase::assumptions, or, when no default exists, gives the row a skip reason.
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "spec/run_config.hpp"

namespace meshplan {

// ---- CSV (RFC 4180) ----------------------------------------------------------------------

// Fields may be quoted ("a,b", "say ""hi""", "line\nbreak"); CRLF and LF line ends are both
// accepted; a trailing newline does not make an empty record. Throws InputError(file, "line N",
// reason) on an unterminated quote or a quote inside an unquoted field.
std::vector<std::vector<std::string>> parse_csv(std::string_view text, const std::string& file = "");

// A CSV file with a header row: fields by column name.
struct CsvTable {
  std::string file;
  std::vector<std::string> header;
  std::vector<std::vector<std::string>> rows;  // each as long as the header
  std::vector<int> row_lines;                  // first line of each row in the file (1-based)
};

// Throws InputError when the file cannot be read, a header name repeats, or a row has a
// different number of fields than the header. Reads the whole file (validation_csv_whole's limit:
// cross-validation, --collectives and calibrate --runs hold every row).
CsvTable read_csv_table(const std::string& path);
CsvTable parse_csv_table(std::string_view text, const std::string& file = "");

// A CSV file with a header row read one record at a time: memory holds the current row, not the
// file (`validate`, docs/limits.md). The same parser and errors as read_csv_table; a record over
// 1 MiB is refused. current() is a one-row table whose row is the record read last.
class CsvRowStream {
public:
  explicit CsvRowStream(const std::string& path);
  ~CsvRowStream();
  CsvRowStream(const CsvRowStream&) = delete;
  CsvRowStream& operator=(const CsvRowStream&) = delete;

  // Reads the next row into current(); false at the end of the file.
  bool next();
  const CsvTable& current() const { return table_; }
  const std::vector<std::string>& header() const { return table_.header; }
  std::size_t rows_read() const { return rows_read_; }
  std::uint64_t bytes_read() const;
  std::uint64_t file_bytes() const;

private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  CsvTable table_;
  std::size_t rows_read_ = 0;
};

// One row addressed by column name; a column the file does not have reads as empty.
class CsvRow {
public:
  CsvRow(const CsvTable& t, std::size_t index);
  const std::string& get(std::string_view column) const;
  bool has_column(std::string_view column) const;

private:
  const CsvTable* table_;
  std::size_t index_;
  std::map<std::string, std::size_t, std::less<>> columns_;
};

// ---- one measurement ---------------------------------------------------------------------

// What a memory figure measures (memory.csv `memory_metric`; dev.csv has no such column).
enum class MemoryMetric { allocated, reserved, nvidia_smi, unknown };
std::string_view to_string(MemoryMetric m);

// What was published for one run, exactly as in the row (empty cells are nullopt).
struct Measured {
  std::optional<double> tokens_per_s_per_gpu;
  std::string tokens_derived_from;
  std::optional<double> tflops_per_gpu;
  std::optional<double> mfu_pct;
  std::optional<double> peak_mem_gib;
  MemoryMetric memory_metric = MemoryMetric::unknown;
  bool memory_metric_given = false;  // false for dev.csv rows (no memory_metric column)
};

// One row mapped onto what the simulator takes.
// The inter-node network a source documents where it is not the GPU profile's (a DGX-class fabric
// of one 200-400 Gb/s NIC per GPU): NICs per node and their line rate.
struct StatedNetwork {
  int nics_per_node = 0;
  double nic_gbit_per_s = 0;
  friend bool operator==(const StatedNetwork&, const StatedNetwork&) = default;
};

struct ValidationCase {
  std::string id;
  std::string source;
  std::string model_label;   // `model`, a label only
  std::string framework;     // the `framework` column as written
  std::string gpu;           // the `gpu` column as written ("" in some memory.csv rows)
  std::string cluster;       // hardware profile name looked up for `gpu`
  std::optional<int> gpus_per_node;  // override of the profile's node size
  std::optional<StatedNetwork> network;  // override of the profile's NICs
  RunConfig run;             // model, plan and job; n_gpus set; resolve_layout already applied
  Measured measured;
  std::vector<std::string> assumptions;  // every empty cell filled from a default, and why
  std::string skipped;       // non-empty: the row cannot be modeled (the reason)
  // Non-empty: throughput cannot be predicted meaningfully (memory still can).
  std::string throughput_not_modeled;
};

// Maps row `index` of `table`. Never throws for a bad value in a row: the row comes back with
// `skipped` set. `cluster` is the profile name for `gpu` (empty gpu: h100-sxm-80gb).
// `extra_gpus`: profile names the user supplies (validate --cluster-dir), valid `gpu` values
// beside the shipped ones.
ValidationCase map_validation_row(const CsvTable& table, std::size_t index,
                                  const std::vector<std::string>& extra_gpus = {});

// Ids of the form RUN-alloc / RUN-resv are two metrics of one run (memory.csv README): RUN.
// Other ids are their own run.
std::string run_key(const std::string& id);

// Vocab used when the `vocab` cell is empty, by source and model family; nullopt: no documented
// default (the row is skipped). `why` receives the justification.
std::optional<std::int64_t> default_vocab(const std::string& source, const ModelSpec& m, int tp, std::string& why);

}  // namespace meshplan

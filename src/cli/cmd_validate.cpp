// `meshplan validate FILE.csv [--json] [--by source|framework|gpu] [--cluster-dir DIR]` and
// `meshplan validate --collectives FILE.csv --cluster NAME [--json]`: predictions against
// published measurements. Method and current results: docs/validation.md.
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <fstream>
#include <memory>
#include <string>
#include <vector>
#include <unistd.h>

#include "cli/command.hpp"
#include "cli/output_path.hpp"
#include "cli/run_inputs.hpp"
#include "cli/terminal_progress.hpp"
#include "spec/atomic_file.hpp"
#include "report/chrome_trace.hpp"
#include "validate/cross_validation.hpp"
#include "validate/validation.hpp"
#include "sim/step_simulator.hpp"
#include "validate/cluster_search.hpp"
#include "spec/cluster_loader.hpp"
#include "spec/error.hpp"
#include "spec/plan_toml.hpp"
#include "validate/validation_row.hpp"

namespace meshplan::cli {

namespace {

struct ValidateOptions {
  std::string file;
  std::vector<std::string> more_files;  // with --cross-validate: further CSVs fitted together
  std::string cross_validate;
  std::vector<std::string> params;
  std::string collectives;
  std::string cluster;
  std::string by = "source";
  std::vector<std::string> cluster_dirs;
  std::vector<std::string> rows;
  std::string trace;
  std::string export_plan;
  std::string nccl_version;
  bool json = false;
};

void add_validate_options(CLI::App& app, ValidateOptions& o) {
  app.add_option("file", o.file, "validation CSV (columns: ../shared/validation/README.md)");
  app.add_option("more", o.more_files, "with --cross-validate: further validation CSVs, fitted together with the first");
  app.add_option("--cross-validate", o.cross_validate,
                 "leave one group out: refit the fitted parameters (docs/validation.md) on the other groups and "
                 "predict the one left out; prints per-group held-out vs in-sample MAPE and every parameter per fold")
      ->check(CLI::IsMember({"source", "framework", "gpu", "model"}));
  app.add_option("--params", o.params,
                 "with --cross-validate: the fitted parameters to refit (default: every declared one), comma-separated")
      ->delimiter(',');
  app.add_option("--collectives", o.collectives,
                 "nccl-tests-style CSV (op, gpus, gpus_per_node, size_bytes, time_us or busbw_gbps); needs --cluster");
  app.add_option("--cluster", o.cluster, "hardware profile for --collectives (name or TOML path)");
  add_nccl_version_option(app, o.nccl_version);
  app.add_option("--by", o.by, "group the summary by source, framework or gpu")
      ->check(CLI::IsMember({"source", "framework", "gpu"}))
      ->capture_default_str();
  app.add_option("--cluster-dir", o.cluster_dirs,
                 "folder of extra hardware profiles (NAME.toml), looked up by the gpu column before the shipped ones");
  app.add_option("--row", o.rows, "compare only the row(s) with this id (repeatable)");
  app.add_option("--trace", o.trace,
                 "with one --row: write that row's simulated step as a Chrome trace (open in ui.perfetto.dev)");
  app.add_option("--export-plan", o.export_plan,
                 "with one --row: write that row as a meshplan plan TOML, to rerun with simulate/whatif/memory");
  app.add_flag("--json", o.json, "machine-readable output (docs/validation.md)");
}

// --collectives FILE --cluster NAME: an nccl-tests-style CSV against the collective cost model.
int validate_collectives(const ValidateOptions& o) {
  if (!o.file.empty())
    throw InputError("", "file", "give either a validation CSV or --collectives FILE, not both");
  if (o.cluster.empty()) throw InputError("", "--cluster", "required with --collectives");
  std::vector<std::filesystem::path> dirs(o.cluster_dirs.begin(), o.cluster_dirs.end());
  ClusterSpec cluster = load_cluster_search(o.cluster, dirs);
  override_nccl_version(cluster, o.nccl_version);
  const CollectiveValidation v = run_collective_validation(read_csv_table(o.collectives), cluster);
  if (o.json)
    fmt::print("{}\n", collective_validation_json(v).dump(2, ' ', false, nlohmann::json::error_handler_t::replace));
  else fmt::print("{}", collective_validation_text(v));
  return 0;
}

// The row with this id alone, read from the file row by row (a one-row table).
CsvTable csv_row_with_id(const std::string& path, const std::string& id) {
  CsvRowStream in(path);
  const auto& h = in.header();
  const auto col = static_cast<std::size_t>(std::find(h.begin(), h.end(), "id") - h.begin());
  while (in.next())
    if (col < h.size() && in.current().rows.front()[col] == id) return in.current();
  throw InputError(path, "--row " + id, "no row with this id");
}

// With one --row: that row's plan TOML and/or its simulated step as a trace.
void write_row_files(const ValidateOptions& o, const ValidationOptions& opts) {
  const CsvTable table = csv_row_with_id(o.file, o.rows.front());
  const ValidationRowRun row = validation_row_run(table, o.rows.front(), opts);
  if (!o.export_plan.empty()) {
    write_file_atomic(o.export_plan, to_plan_toml(row.vc.run), "--export-plan");
    // A plan names a profile; the network a source documents (validation_row.hpp) is not in it.
    if (row.vc.network)
      fmt::print(stderr,
                 "validate: warning: {} ran on {} NICs of {:g} Gb/s per node, which {} names only through its profile "
                 "'{}'; simulate it with --cluster a profile that has them to reproduce the row\n",
                 row.vc.id, row.vc.network->nics_per_node, row.vc.network->nic_gbit_per_s, o.export_plan, row.vc.cluster);
  }
  if (!o.trace.empty()) {
    // A large row (3,072 GPUs: ~20 s, a 222 MB trace) says what it is doing, on a terminal
    // only: a log or a pipe gets the result, not the chatter.
    const bool terminal = ::isatty(STDERR_FILENO) != 0;
    const auto t0 = std::chrono::steady_clock::now();
    auto since = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(); };
    if (terminal)
      fmt::print(stderr, "validate: simulating {} with its timeline ({} GPUs) for --trace...\n", o.rows.front(),
                 row.vc.run.n_gpus);
    const SimulatedStep step =
        simulate_step(row.vc.run.model, row.vc.run.plan, row.vc.run.job, row.cluster, SimOptions{.keep_timeline = true});
    if (terminal)
      fmt::print(stderr, "validate: simulated in {:.1f} s; writing {} ops to {}...\n", since(), step.program.ops.size(),
                 o.trace);
    const std::string text = chrome_trace_text(step.program, step.timings, step.host_timings);
    write_file_atomic(o.trace, text, "--trace");
    if (terminal) fmt::print(stderr, "validate: wrote {:.0f} MB in {:.1f} s\n", text.size() / 1e6, since());
  }
}

// --cross-validate GROUP: leave-one-group-out refits over one or more CSVs.
int run_cross_validation(const ValidateOptions& o, const ValidationOptions& opts) {
  if (!o.rows.empty() || !o.trace.empty() || !o.export_plan.empty())
    throw InputError("", "--cross-validate", "takes whole files: not with --row, --trace or --export-plan");
  MeasuredRuns runs;
  runs.cluster_dirs = opts.cluster_dirs;
  runs.tables.push_back(read_csv_table(o.file));
  for (const auto& f : o.more_files) runs.tables.push_back(read_csv_table(f));
  FitOptions fit;
  for (const auto& name : o.params) fit.parameters.push_back(&fitted_parameter(name, "--params"));
  const CrossValidation cv = cross_validate(runs, *parse_group_by(o.cross_validate), fit);
  if (o.json)
    fmt::print("{}\n", nlohmann::json{{"cross_validation", cross_validation_json(cv)}}.dump(
                           2, ' ', false, nlohmann::json::error_handler_t::replace));
  else fmt::print("{}", cross_validation_text(cv));
  return 0;
}

// One row's JSON object as it appears inside the report's "rows" array (nlohmann's dump(2) of the
// whole document puts it four spaces in; strings hold no raw newline, so every line moves alike).
std::string row_json_text(const ValidationRowResult& r) {
  const std::string one = validation_row_json(r).dump(2, ' ', false, nlohmann::json::error_handler_t::replace);
  std::string out;
  out.reserve(one.size() + one.size() / 8);
  for (const char c : one) {
    out += c;
    if (c == '\n') out += "    ";
  }
  return out;
}

void copy_to_stdout(std::FILE* f) {
  std::array<char, 64 * 1024> buf{};
  for (std::size_t n; (n = std::fread(buf.data(), 1, buf.size(), f)) > 0;) std::fwrite(buf.data(), 1, n, stdout);
}

int run_validate(const ValidateOptions& o) {
  check_nccl_version(o.nccl_version);
  if (!o.collectives.empty()) return validate_collectives(o);
  if (o.file.empty()) throw InputError("", "file", "required: a validation CSV (or --collectives FILE --cluster NAME)");
  if (!o.cluster.empty())
    throw InputError("", "--cluster", "applies only to --collectives; rows name their GPU in the gpu column");
  ValidationOptions opts;
  opts.by = *parse_group_by(o.by);
  for (const auto& d : o.cluster_dirs) {
    if (!std::filesystem::is_directory(d)) throw InputError(d, "--cluster-dir", "not a directory");
    opts.cluster_dirs.emplace_back(d);
  }
  if (!o.cross_validate.empty()) {
    // The refits load their profiles themselves (fit_runs.cpp), with each profile's own table.
    if (!o.nccl_version.empty())
      throw InputError("", "--nccl-version", "applies to validate FILE and --collectives, not to --cross-validate");
    return run_cross_validation(o, opts);
  }
  opts.nccl_version = o.nccl_version;
  if (!o.more_files.empty())
    throw InputError(o.more_files.front(), "file", "one validation CSV at a time (several only with --cross-validate)");
  if (!o.params.empty()) throw InputError("", "--params", "applies only to --cross-validate");
  opts.only_ids = o.rows;
  const bool inspect = !o.trace.empty() || !o.export_plan.empty();
  if (inspect && o.rows.size() != 1)
    throw InputError("", o.trace.empty() ? "--export-plan" : "--trace", "needs exactly one --row ID");
  check_output_path(o.trace, "--trace");
  check_output_path(o.export_plan, "--export-plan");
  // Rows are read, simulated and formatted as they come; what precedes them in the output (the
  // row count and time in the text, the groups and definitions that sort before "rows" in the
  // JSON) is known only at the end, so the formatted rows wait in an unnamed temporary file, not
  // in memory, and the report is written in one piece when the last row is done.
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> spill(std::tmpfile(), &std::fclose);
  if (!spill) throw InputError("", "validate", fmt::format("cannot create a temporary file: {}", std::strerror(errno)));
  std::size_t n_rows = 0;
  auto emit = [&](const std::string& piece) {
    if (std::fwrite(piece.data(), 1, piece.size(), spill.get()) != piece.size())
      throw InputError("", "validate", fmt::format("cannot write the temporary file: {}", std::strerror(errno)));
  };
  TerminalProgress progress("validate: simulating rows");
  const ValidationReport rep = run_validation_stream(
      o.file, opts,
      [&](const ValidationRowResult& r) {
        if (!o.json) return emit(validation_row_text(r));
        // Each row as the whole document's dump(2) prints it: at depth 2, four spaces in.
        std::string js = (n_rows ? ",\n    " : "    ") + row_json_text(r);
        ++n_rows;
        emit(js);
      },
      [&](std::size_t done, std::size_t total) { progress.update(done, total); });
  progress.finish();
  if (inspect) write_row_files(o, opts);
  std::fflush(spill.get());
  std::rewind(spill.get());
  if (o.json) {
    // replace: a byte of the CSV that is not UTF-8 and escaped cleaning is printed as U+FFFD, not thrown.
    const std::string doc = validation_json(rep).dump(2, ' ', false, nlohmann::json::error_handler_t::replace);
    const std::string empty_rows = "\n  \"rows\": []";
    const std::size_t at = doc.find(empty_rows);
    if (at == std::string::npos) throw std::logic_error("validate: no rows field in the JSON report");
    std::fwrite(doc.data(), 1, at + empty_rows.size() - 1, stdout);
    if (n_rows > 0) std::fputs("\n", stdout);
    copy_to_stdout(spill.get());
    if (n_rows > 0) std::fputs("\n  ", stdout);
    const std::string rest = doc.substr(at + empty_rows.size() - 1) + "\n";
    std::fwrite(rest.data(), 1, rest.size(), stdout);
  } else {
    fmt::print("{}", validation_text_head(rep));
    copy_to_stdout(spill.get());
    fmt::print("{}", validation_text_tail(rep));
  }
  return 0;
}

}  // namespace

Command add_validate_command(CLI::App& root) {
  auto o = std::make_shared<ValidateOptions>();
  Command c;
  c.app = root.add_subcommand(
      "validate",
      "Simulates every row of a validation CSV (../shared/validation/dev.csv, memory.csv) and compares "
      "tokens/s per GPU (or the source's own TFLOP/s / MFU) and peak memory with what was measured: per-row "
      "error, dominant term, and MAPE / median / p90 / max error per group. With --collectives, compares an "
      "nccl-tests-style CSV with the collective cost model. See docs/validation.md.");
  add_validate_options(*c.app, *o);
  c.run = [o] { return run_validate(*o); };
  return c;
}

}  // namespace meshplan::cli

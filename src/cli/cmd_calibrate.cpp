// `meshplan calibrate [--quick] [--out measurements.json]`: run the CUDA microbenchmarks and write
// the raw measurements; `meshplan calibrate --fit measurements.json --base PROFILE --out mine.toml`:
// fit them into a hardware profile. Fitting needs no GPU. docs/calibration.md.
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <set>
#include <system_error>

#include "calibrate/backend.hpp"
#include "calibrate/fit_profile.hpp"
#include "calibrate/measurements.hpp"
#include "calibrate/pipeline_ramp_fit.hpp"
#include "calibrate/transport_latency_fit.hpp"
#include "calibrate/stream_k_fit.hpp"
#include "calibrate/profile_writer.hpp"
#include "cli/command.hpp"
#include "cli/output_path.hpp"
#include "cli/run_inputs.hpp"
#include "spec/atomic_file.hpp"
#include "spec/cluster_loader.hpp"
#include "spec/data_root.hpp"
#include "spec/error.hpp"
#include "validate/cluster_search.hpp"
#include "validate/fit_runs.hpp"
#include "validate/fitted_profile.hpp"
#include "validate/logged_run.hpp"

namespace meshplan::cli {
namespace {

namespace fs = std::filesystem;

struct CalibrateArgs {
  bool quick = false;
  std::string out;
  std::string fit;
  std::string base;
  std::string name;
  std::vector<std::string> runs;
  std::vector<std::string> params;
  std::vector<std::string> cluster_dirs;
  std::string config;   // with --runs LOG: the config the logged run ran
  std::string cluster;  // with --runs LOG --config: its hardware profile
  std::int64_t gpus = 0;
  std::string nccl_tests;    // --nccl-tests SERIES.csv
  std::string nccl_version;  // with --nccl-tests: the table whose ramp is fitted
  bool transport_latency = false;  // with --nccl-tests: fit the fabric's transport latency instead
  std::string gemm_shapes;   // --gemm-shapes SERIES.csv
  std::vector<std::string> gemm_series{"gemm_wave", "gemm_square"};
  bool json = false;
};

// A path to a profile TOML, or the name of a shipped profile.
std::string resolve_profile_file(const std::string& base) {
  std::error_code ec;
  // Anything at the path is the user's file: the loader says why a FIFO or a folder cannot be read.
  if (fs::exists(fs::symlink_status(base, ec))) return base;
  const fs::path shipped = data_root() / "hardware_profiles" / (base + ".toml");
  if (base.find('/') == std::string::npos && fs::is_regular_file(shipped, ec)) return shipped.string();
  throw InputError(base, "--base", "no such profile file or shipped profile name");
}

// Written next to the target and checked with the strict loader before it replaces anything (the
// temporary file keeps the .toml extension and a folder, so load_cluster reads it as a path even
// for a bare --out mine.toml).
void write_checked_profile(const std::string& out, const std::string& text) {
  AtomicWriteOptions check;
  check.check = [&](const std::string& tmp) {
    try {
      (void)load_cluster(tmp.find('/') == std::string::npos ? "./" + tmp : tmp);
    } catch (const InputError& e) {
      throw InputError(out, "--out", std::string("the calibrated profile does not load: ") + e.reason());
    }
  };
  write_file_atomic(out, text, "--out", check);
}

// The one profile the compared runs ran on, with the fit written in; atomically, checked by the loader.
std::string write_runs_profile(const CalibrateArgs& a, const MeasuredRuns& runs, const RunsFit& fit,
                               const std::string& command_line) {
  std::set<std::string> clusters;
  for (std::size_t i = 0; i < fit.fitted.rows.size(); ++i)
    if (log_ratio(fit.fitted.rows[i])) clusters.insert(fit.fitted.rows[i].cluster);
  if (clusters.size() != 1) {
    std::string names;
    for (const auto& c : clusters) names += (names.empty() ? "" : ", ") + c;
    throw InputError("", "--out", "the runs span " + std::to_string(clusters.size()) + " profiles (" + names +
                                      "): write one profile from the runs of one cluster");
  }
  // Aliases (a100-unknown) resolve to the profile file they name.
  const ClusterSpec base = load_cluster_search(*clusters.begin(), runs.cluster_dirs);
  const std::string name = a.name.empty() ? fs::path(a.out).stem().string() : a.name;
  const std::string text = fitted_profile_toml(fit, base, base.source_file, name, command_line);
  write_checked_profile(a.out, text);
  return name;
}

int run_fit(const CalibrateArgs& a) {
  if (a.base.empty()) throw InputError("", "--base", "--fit needs --base PROFILE (the profile to start from)");
  if (a.out.empty()) throw InputError("", "--out", "--fit needs --out FILE.toml (the calibrated profile)");
  check_output_path(a.out, "--out");
  const std::string base_file = resolve_profile_file(a.base);
  const calibrate::Measurements m = calibrate::read_measurements(a.fit);
  const ClusterSpec base = load_cluster(base_file);
  const calibrate::ProfileFit fit = calibrate::fit_profile(m, base, a.fit);

  const std::vector<std::string> report = calibrate::residual_report(fit);
  if (!a.json) {
    fmt::print("calibrate --fit {} on {} (base {}):\n", a.fit, m.device.name.empty() ? "?" : m.device.name, base.name);
    for (const std::string& line : report) fmt::print("  {}\n", line);
  }
  for (const std::string& w : fit.warnings) fmt::print(stderr, "meshplan: calibrate: warning: {}\n", w);

  const std::string name = a.name.empty() ? fs::path(a.out).stem().string() : a.name;
  write_checked_profile(a.out, calibrate::calibrated_profile_toml(fit, base_file, name));
  if (a.json)
    fmt::print("{}\n", nlohmann::json{{"out", a.out},
                                      {"profile", name},
                                      {"base", base.name},
                                      {"device", m.device.name},
                                      {"residuals", report},
                                      {"warnings", fit.warnings}}
                           .dump(2));
  else
    fmt::print("wrote {} (profile \"{}\")\n", a.out, name);
  return 0;
}

// Each --runs FILE by what it is: a validation CSV (.csv), a listing of logged runs (.toml), or one
// training log whose config --config names.
void read_runs_files(const CalibrateArgs& a, MeasuredRuns& runs) {
  int logs = 0;
  for (const auto& f : a.runs) {
    const std::string ext = fs::path(f).extension().string();
    if (ext == ".csv") {
      runs.tables.push_back(read_csv_table(f));
    } else if (ext == ".toml") {
      for (const LoggedRunSpec& s : read_runs_listing(f)) runs.logged.push_back(logged_run_case(s));
    } else {
      if (a.config.empty())
        throw InputError(f, "--config", "a training log needs the config it ran (--config FILE), or list it in a runs.toml");
      if (++logs > 1) throw InputError(f, "--runs", "one log with --config; list several in a runs.toml");
      runs.logged.push_back(logged_run_case({"", f, a.config, a.cluster, a.gpus, ""}));
    }
  }
  if (logs == 0 && (!a.config.empty() || !a.cluster.empty() || a.gpus > 0))
    throw InputError("", "--config", "--config, --cluster and --gpus go with one training log in --runs");
}

// --runs FILE...: the declared fitted parameters fitted to measured runs (validation CSV schema);
// with --out, the runs' profile written with the fitted values.
int run_runs_fit(const CalibrateArgs& a, const std::string& command_line) {
  if (!a.fit.empty()) throw InputError("", "--runs", "give either --fit MEASUREMENTS.json or --runs FILE, not both");
  if (!a.out.empty()) check_output_path(a.out, "--out");
  MeasuredRuns runs;
  for (const auto& d : a.cluster_dirs) {
    if (!fs::is_directory(d)) throw InputError(d, "--cluster-dir", "not a directory");
    runs.cluster_dirs.emplace_back(d);
  }
  read_runs_files(a, runs);
  FitOptions options;
  for (const auto& name : a.params) options.parameters.push_back(&fitted_parameter(name, "--params"));
  const RunsFit fit = fit_runs(runs, options);
  std::string written_profile;
  if (!a.out.empty()) written_profile = write_runs_profile(a, runs, fit, command_line);
  if (a.json) {
    nlohmann::json j = runs_fit_json(fit);
    j["runs_files"] = a.runs;
    j["out"] = a.out.empty() ? nlohmann::json(nullptr) : nlohmann::json(a.out);
    fmt::print("{}\n", j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace));
    return 0;
  }
  fmt::print("{}", runs_fit_text(fit));
  if (!a.out.empty()) fmt::print("wrote {} (profile \"{}\")\n", a.out, written_profile);
  return 0;
}

// The residual rows of an nccl-tests fit, for --json.
nlohmann::json residual_rows(const std::vector<calibrate::RampResidual>& residuals) {
  nlohmann::json rows = nlohmann::json::array();
  for (const calibrate::RampResidual& r : residuals)
    rows.push_back({{"cluster", r.point.cluster},
                    {"op", std::string(to_string(r.point.op))},
                    {"ranks", r.point.nodes * r.point.gpus_per_node},
                    {"bytes", r.point.bytes},
                    {"measured_busbw_bytes_per_s", r.point.busbw_bytes_per_s},
                    {"predicted_busbw_bytes_per_s", r.predicted_busbw_bytes_per_s},
                    {"used", r.used}});
  return rows;
}

// The residual table of an nccl-tests fit, for people.
void print_residuals(const std::vector<calibrate::RampResidual>& residuals, const char* unused_why) {
  fmt::print("  {:>12}  {:>10}  {:>10}  {:>7}\n", "bytes", "measured", "predicted", "error");
  for (const calibrate::RampResidual& r : residuals)
    fmt::print("  {:>12.0f}  {:>10.2f}  {:>10.2f}  {:>+6.1f}%{}\n", r.point.bytes, r.point.busbw_bytes_per_s / 1e9,
               r.predicted_busbw_bytes_per_s / 1e9, 100 * (r.predicted_busbw_bytes_per_s / r.point.busbw_bytes_per_s - 1),
               r.used ? "" : unused_why);
}

// --nccl-tests SERIES.csv --transport-latency: the value for the profile's fabric.transport_latency_us.
int print_transport_latency_fit(const CalibrateArgs& a, const calibrate::TransportLatencyFit& fit) {
  if (a.json) {
    fmt::print("{}\n", nlohmann::json{{"series", a.nccl_tests},
                                      {"cluster", fit.cluster},
                                      {"transport_latency_us", fit.transport_latency_seconds * 1e6},
                                      {"max_abs_relative_error", fit.max_abs_relative_error},
                                      {"points_used", fit.points_used},
                                      {"at_bound", fit.at_bound},
                                      {"points", residual_rows(fit.residuals)}}
                           .dump(2));
    return 0;
  }
  fmt::print("calibrate --nccl-tests {} --transport-latency: {} ({} of {} points, across nodes from 1 MiB)\n",
             a.nccl_tests, fit.cluster, fit.points_used, fit.residuals.size());
  fmt::print("  fabric.transport_latency_us = {:.1f}\n", fit.transport_latency_seconds * 1e6);
  fmt::print("  largest busbw error {:.2f} %{}\n", 100 * fit.max_abs_relative_error,
             fit.at_bound ? " (the value sits on its bound: the series does not pin it)" : "");
  print_residuals(fit.residuals, "  (not fitted: one node, or below 1 MiB)");
  return 0;
}

// --nccl-tests SERIES.csv: the NCCL table's pipeline ramp fitted to measured nccl-tests points
// (calibrate/pipeline_ramp_fit.hpp). Prints the two values for the table; tests/regen_fits.sh
// writes them into the shipped one.
int run_nccl_tests_fit(const CalibrateArgs& a) {
  if (!a.fit.empty() || !a.runs.empty() || !a.out.empty())
    throw InputError("", "--nccl-tests", "--nccl-tests fits the NCCL table's ramp on its own (no --fit, --runs or --out)");
  const std::vector<calibrate::NcclTestsPoint> points = calibrate::read_nccl_tests_series(a.nccl_tests);
  std::map<std::string, ClusterSpec> clusters;
  for (const calibrate::NcclTestsPoint& p : points)
    if (!clusters.contains(p.cluster)) {
      try {
        clusters.emplace(p.cluster, load_cluster(p.cluster));
      } catch (const InputError& e) {
        throw InputError(a.nccl_tests, fmt::format("line {}: cluster", p.line), fmt::format("'{}': {}", p.cluster, e.reason()));
      }
    }
  const std::shared_ptr<const NcclTable> owned =
      a.nccl_version.empty() ? nullptr : shared_nccl_table(a.nccl_version, "", "--nccl-version");
  const NcclTable* table = owned ? owned.get() : &default_nccl_table();
  if (a.transport_latency) {
    try {
      return print_transport_latency_fit(a, calibrate::fit_transport_latency(points, clusters, *table));
    } catch (const InputError& e) {
      // What the series lacks is the series' fault: name it.
      if (!e.file().empty()) throw;
      throw InputError(a.nccl_tests, e.key(), e.reason());
    }
  }
  const calibrate::RampFit fit = calibrate::fit_pipeline_ramp(points, clusters, *table);
  if (a.json) {
    const nlohmann::json rows = residual_rows(fit.residuals);
    fmt::print("{}\n", nlohmann::json{{"series", a.nccl_tests},
                                      {"nccl_table", table->source_file},
                                      {"small_message_efficiency", fit.small_message_efficiency},
                                      {"half_ramp_bytes", fit.half_ramp_bytes},
                                      {"max_abs_relative_error", fit.max_abs_relative_error},
                                      {"points_used", fit.points_used},
                                      {"at_bound", fit.at_bound},
                                      {"points", rows}}
                           .dump(2));
    return 0;
  }
  fmt::print("calibrate --nccl-tests {}: pipeline ramp of {} ({} of {} points, from 1 MiB)\n", a.nccl_tests,
             table->source_file, fit.points_used, fit.residuals.size());
  fmt::print("  small_message_efficiency = {:.4f}\n  half_ramp_bytes = {:.0f}   # {:.2f} MiB\n",
             fit.small_message_efficiency, fit.half_ramp_bytes, fit.half_ramp_bytes / 1048576.0);
  fmt::print("  largest busbw error {:.2f} %{}\n", 100 * fit.max_abs_relative_error,
             fit.at_bound ? " (a value sits on its bound: the series does not pin it)" : "");
  print_residuals(fit.residuals, "  (not fitted: below 1 MiB)");
  return 0;
}

// --gemm-shapes SERIES.csv --cluster GPU: cuBLAS's stream-K threshold fitted to GEMMs that GPU
// timed by shape (calibrate/stream_k_fit.hpp). Prints the value; tests/regen_fits.sh writes it
// into every profile that declares it fitted.
int run_gemm_shapes_fit(const CalibrateArgs& a) {
  if (!a.fit.empty() || !a.runs.empty() || !a.out.empty() || !a.nccl_tests.empty())
    throw InputError("", "--gemm-shapes",
                     "--gemm-shapes fits the stream-K threshold on its own (no --fit, --runs, --nccl-tests or --out)");
  if (a.cluster.empty())
    throw InputError("", "--gemm-shapes", "needs --cluster, the hardware profile of the GPU that timed the GEMMs");
  const ClusterSpec gpu = load_cluster(a.cluster);
  const auto bounds = gpu.declared_fitted_bounds("gpu.gemm_stream_k_min_saving");
  if (!bounds)
    throw InputError(gpu.source_file, "gpu.gemm_stream_k_min_saving",
                     "is not declared fitted (a [sources] tag of kind \"fitted\" with bounds and fit)");
  const calibrate::StreamKFit fit =
      calibrate::fit_stream_k_min_saving(calibrate::read_gemm_shapes(a.gemm_shapes, a.gemm_series), gpu, *bounds);
  if (a.json) {
    nlohmann::json rows = nlohmann::json::array();
    for (const calibrate::StreamKPoint& p : fit.points)
      rows.push_back({{"series", p.point.series},
                      {"label", p.point.label},
                      {"m", p.point.shape.m},
                      {"n", p.point.shape.n},
                      {"k", p.point.shape.k},
                      {"measured_seconds", p.point.seconds},
                      {"whole_tiles_seconds", p.whole_tiles_seconds},
                      {"stream_k_seconds", p.stream_k_seconds},
                      {"stream_k_saving", p.saving},
                      {"measured_stream_k", p.measured_stream_k},
                      {"reproduced", (fit.min_saving < p.saving) == p.measured_stream_k}});
    fmt::print("{}\n", nlohmann::json{{"series", a.gemm_shapes},
                                      {"cluster", a.cluster},
                                      {"gemm_stream_k_min_saving", fit.min_saving},
                                      {"interval", {fit.lo, fit.hi}},
                                      {"points_read", fit.points_read},
                                      {"points_used", fit.points.size()},
                                      {"squared_log_error", fit.squared_log_error},
                                      {"misclassified", fit.misclassified},
                                      {"points", rows}}
                           .dump(2));
    return 0;
  }
  fmt::print("calibrate --gemm-shapes {}: stream-K threshold on {} ({} of {} GEMMs take their schedule from it)\n",
             a.gemm_shapes,
             a.cluster, fit.points.size(), fit.points_read);
  fmt::print("  gemm_stream_k_min_saving = {:.4f}   # least squared log error {:.4f} for every value in ({:.4f}, {:.4f})\n",
             fit.min_saving, fit.squared_log_error, fit.lo, fit.hi);
  fmt::print("  {} of {} priced with the schedule their time is nearer to\n",
             static_cast<int>(fit.points.size()) - fit.misclassified, fit.points.size());
  fmt::print("  {:<14} {:>6} {:>6} {:>6}  {:>9} {:>9} {:>9}  {:>7}  {}\n", "series", "m", "n", "k", "measured", "tiles",
             "stream-K", "saving", "ran");
  for (const calibrate::StreamKPoint& p : fit.points)
    fmt::print("  {:<14} {:>6} {:>6} {:>6}  {:>7.1f}us {:>7.1f}us {:>7.1f}us  {:>6.1f}%  {}{}\n", p.point.series,
               p.point.shape.m, p.point.shape.n, p.point.shape.k, p.point.seconds * 1e6, p.whole_tiles_seconds * 1e6,
               p.stream_k_seconds * 1e6, 100 * p.saving, p.measured_stream_k ? "stream-K" : "whole tiles",
               (fit.min_saving < p.saving) == p.measured_stream_k ? "" : "  (priced with the other)");
  return 0;
}

int run_measure(const CalibrateArgs& a) {
  // Exit 2 like any input the command cannot act on: measuring needs a machine it is not on.
  if (const auto reason = calibrate::backend_unavailable_reason()) {
    fmt::print(stderr,
               "meshplan: calibrate: {}; run `meshplan calibrate` on a machine with an NVIDIA GPU and driver, or fit "
               "measurements taken there with `meshplan calibrate --fit measurements.json --base PROFILE --out "
               "mine.toml`\n",
               *reason);
    return 2;
  }
  check_output_path(a.out.empty() ? "measurements.json" : a.out, "--out");
  calibrate::BenchOptions options;
  options.quick = a.quick;
  options.progress = [](const std::string& line) { fmt::print(stderr, "calibrate: {}\n", line); };
  bool writer = false;
  const calibrate::Measurements m = calibrate::run_microbenchmarks(options, writer);
  if (!writer) return 0;
  const std::string out = a.out.empty() ? "measurements.json" : a.out;
  calibrate::write_measurements(m, out);
  if (a.json) {
    fmt::print("{}\n", nlohmann::json{{"out", out},
                                      {"device", m.device.name},
                                      {"gemm", m.gemm.size()},
                                      {"attention", m.attention.size()},
                                      {"hbm", m.hbm.size()},
                                      {"launch", m.launch.size()},
                                      {"host_copy", m.host_copy.size()},
                                      {"collectives", m.collectives.size()},
                                      {"interference", m.interference.size()}}
                           .dump(2));
    return 0;
  }
  fmt::print("wrote {}: {} GEMM, {} attention, {} HBM, {} launch, {} host-copy, {} collective, {} interference samples\n",
             out, m.gemm.size(), m.attention.size(), m.hbm.size(), m.launch.size(), m.host_copy.size(),
             m.collectives.size(), m.interference.size());
  return 0;
}

}  // namespace

Command add_calibrate_command(CLI::App& root) {
  auto args = std::make_shared<CalibrateArgs>();
  CLI::App* app = root.add_subcommand(
      "calibrate",
      "Measure this machine's GPUs and links (needs a CUDA build and a GPU), or fit measurements into a profile (--fit)");
  app->add_flag("--quick", args->quick, "shorter sweep (< 3 minutes on one GPU)");
  app->add_option("--out", args->out,
                  "measuring: the measurements JSON (default measurements.json); --fit: the calibrated profile TOML");
  app->add_option("--fit", args->fit, "fit this measurements JSON instead of measuring");
  app->add_option("--base", args->base, "with --fit: the profile to start from (file or shipped name)");
  app->add_option("--name", args->name, "with --fit: profile name (default: the --out file stem)");
  app->add_option("--runs", args->runs,
                  "fit the declared fitted parameters (docs/validation.md) to measured runs instead: validation CSVs "
                  "(../shared/validation/README.md columns), runs.toml listings ([[run]] log, config, cluster, gpus) or "
                  "one training log with --config; repeatable; with --out, the runs' profile is written with the fit");
  app->add_option("--params", args->params,
                  "with --runs: the parameters to fit, comma-separated (default: every declared one the runs move)")
      ->delimiter(',');
  app->add_option("--cluster-dir", args->cluster_dirs, "with --runs: folder of extra hardware profiles (NAME.toml)");
  app->add_option("--config", args->config,
                  "with --runs LOG: the config the logged run ran (torchtitan TOML, llm-foundry YAML, Megatron args)");
  app->add_option("--cluster", args->cluster,
                  "with --runs LOG --config: the run's hardware profile; with --gemm-shapes: the GPU that timed them");
  app->add_option("--gpus", args->gpus, "with --runs LOG --config: the run's GPU count (default: the config's or the log's)")
      ->check(CLI::Range(std::int64_t{1}, std::int64_t{1} << 20));
  app->add_option("--nccl-tests", args->nccl_tests,
                  "fit the NCCL table's pipeline ramp (small_message_efficiency, half_ramp_bytes) to measured nccl-tests "
                  "points instead: a CSV with the header cluster,op,nodes,gpus_per_node,launch,host_cpu,bytes,busbw_gbps "
                  "(hardware_profiles/nccl/series/; docs/collectives.md, Pipeline ramp)");
  app->add_flag("--transport-latency", args->transport_latency,
                "with --nccl-tests: fit the fabric's transport latency (fabric.transport_latency_us) of the profile the "
                "series' multi-node points name, instead of the NCCL table's ramp (docs/collectives.md, Transport latency)");
  add_nccl_version_option(*app, args->nccl_version)->description(
      "with --nccl-tests: the NCCL table whose ramp is fitted, a version in hardware_profiles/nccl/ or a TOML path");
  app->add_option("--gemm-shapes", args->gemm_shapes,
                  "fit cuBLAS's stream-K threshold (gpu.gemm_stream_k_min_saving) to GEMMs timed by shape on the GPU "
                  "of --cluster instead: a CSV with the header series,label,dtype,m,n,k,groups,flops,seconds "
                  "(tests/cost/measured_h200_shapes.csv; docs/compute.md, GEMM time from the shape)");
  app->add_option("--gemm-series", args->gemm_series,
                  "with --gemm-shapes: the series whose bf16 GEMMs are fitted, comma-separated")
      ->delimiter(',')
      ->capture_default_str();
  app->add_flag("--json", args->json, "print what was written (and the fit's residuals) as JSON on stdout");
  return {app, [args]() {
            if (!args->gemm_shapes.empty()) return run_gemm_shapes_fit(*args);
            if (!args->nccl_tests.empty()) return run_nccl_tests_fit(*args);
            if (args->transport_latency)
              throw InputError("", "--transport-latency", "goes with --nccl-tests (the series it is fitted to)");
            if (!args->nccl_version.empty())
              throw InputError("", "--nccl-version", "goes with --nccl-tests (the table whose pipeline ramp is fitted)");
            if (!args->runs.empty()) {
              std::string command_line = "meshplan calibrate";
              for (const auto& f : args->runs) command_line += " --runs " + f;
              for (const auto& p : args->params) command_line += " --params " + p;
              return run_runs_fit(*args, command_line);
            }
            return args->fit.empty() ? run_measure(*args) : run_fit(*args);
          }};
}

}  // namespace meshplan::cli

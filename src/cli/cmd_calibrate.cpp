// `meshplan calibrate [--quick] [--out measurements.json]`: run the CUDA microbenchmarks and write
// the raw measurements; `meshplan calibrate --fit measurements.json --base PROFILE --out mine.toml`:
// fit them into a hardware profile. Fitting needs no GPU. docs/calibration.md.
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <set>
#include <system_error>

#include "calibrate/backend.hpp"
#include "calibrate/fit_profile.hpp"
#include "calibrate/measurements.hpp"
#include "calibrate/profile_writer.hpp"
#include "cli/command.hpp"
#include "cli/output_path.hpp"
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
  app->add_option("--cluster", args->cluster, "with --runs LOG --config: the run's hardware profile");
  app->add_option("--gpus", args->gpus, "with --runs LOG --config: the run's GPU count (default: the config's or the log's)")
      ->check(CLI::Range(std::int64_t{1}, std::int64_t{1} << 20));
  app->add_flag("--json", args->json, "print what was written (and the fit's residuals) as JSON on stdout");
  return {app, [args]() {
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

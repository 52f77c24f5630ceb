// meshplan simulate: how fast will this run, and where does the time go?
#include <fmt/format.h>

#include <fstream>
#include <memory>
#include <optional>

#include "cli/command.hpp"
#include "cli/output_path.hpp"
#include "spec/atomic_file.hpp"
#include "cli/run_inputs.hpp"
#include "cli/run_source.hpp"
#include "report/diagnose.hpp"
#include "report/chrome_trace.hpp"
#include "report/simulate_report.hpp"
#include "sim/gpu_speeds.hpp"
#include "sim/step_simulator.hpp"
#include "spec/error.hpp"

namespace meshplan::cli {

Command add_simulate_command(CLI::App& root) {
  struct Options {
    RunInputOptions in;
    bool json = false;
    bool full = false;
    std::string trace;
    double observed_tokens_per_s = 0;  // per GPU; > 0: explain the gap (report/diagnose.hpp)
    std::string straggler, gpu_speeds;
    std::uint64_t seed = 1;
  };
  auto o = std::make_shared<Options>();
  Command c;
  c.app = root.add_subcommand(
      "simulate",
      "Discrete-event simulation of one optimizer step: step time, tokens/s (global and per GPU), "
      "MFU/HFU, a breakdown that adds up to the step time (compute, recompute, exposed communication "
      "by kind, pipeline bubble, optimizer, offload stalls) and peak memory per stage. Exit 3 when the simulated peak "
      "exceeds the GPU's memory (`fits` in --json), as `memory`.");
  add_run_input_options(*c.app, o->in);
  c.app->add_flag("--json", o->json, "machine-readable output");
  c.app->add_option("--trace", o->trace, "write a Chrome trace-event JSON (open in ui.perfetto.dev)");
  c.app->add_flag("--full", o->full,
                  "simulate every rank with its own links and streams (up to 512 GPUs) instead of one "
                  "representative rank per pipeline stage");
  c.app->add_option("--observed-tokens-per-s", o->observed_tokens_per_s,
                    "tokens/s per GPU the real run achieved: rank causes of the gap, simulate fixes")
      ->check(CLI::PositiveNumber);
  auto* st = c.app->add_option("--straggler", o->straggler,
                               "with --full: FRACTION:SPEED, e.g. 0.01:0.9 = 1 % of the GPUs (drawn with --seed) run "
                               "compute at 0.9x; reports the step time with and without them");
  auto* gs = c.app->add_option("--gpu-speeds", o->gpu_speeds,
                               "with --full: a file of 'RANK FACTOR' lines (unlisted ranks at 1), e.g. measured per-GPU "
                               "GEMM rates over the fleet median");
  st->excludes(gs);
  c.app->add_option("--seed", o->seed, "seed of the --straggler draw (same seed, same ranks)")->capture_default_str();
  c.run = [o] {
    const RunInputs in = load_run_inputs(o->in);
    check_output_path(o->trace, "--trace");
    SimOptions so;
    so.keep_timeline = !o->trace.empty();
    so.full = o->full;
    if (o->full && in.run.n_gpus > 512)
      throw InputError("", "--full", fmt::format("instantiates every rank and is limited to 512 GPUs; this run has {}",
                                                  in.run.n_gpus));
    const bool speeds = !o->straggler.empty() || !o->gpu_speeds.empty();
    if (speeds && !o->full)
      throw InputError("", o->straggler.empty() ? "--gpu-speeds" : "--straggler",
                       "per-GPU speeds need --full (every rank simulated at its own speed)");
    std::optional<StepResult> ideal;
    if (speeds) {
      so.rank_speed = o->straggler.empty() ? load_gpu_speeds(o->gpu_speeds, in.run.n_gpus)
                                           : sample_straggler_speeds(in.run.n_gpus, parse_straggler(o->straggler), o->seed);
      SimOptions plain = so;
      plain.rank_speed.clear();
      plain.keep_timeline = false;
      ideal = simulate_step(in.run.model, in.run.plan, in.run.job, in.cluster, plain).result;
    }
    const SimulatedStep step = simulate_step(in.run.model, in.run.plan, in.run.job, in.cluster, so);
    const std::int64_t pace = speeds ? slowest_rank(so.rank_speed) : 0;
    std::int64_t n_slow = 0;
    for (double v : so.rank_speed) n_slow += v < 1 ? 1 : 0;
    if (!o->trace.empty()) {
      write_file_atomic(o->trace, chrome_trace_text(step.program, step.timings, step.host_timings), "--trace");
    }
    std::optional<Diagnosis> gap;
    if (o->observed_tokens_per_s > 0)
      gap = diagnose_gap(run_source(o->in), in.run, in.cluster, step.result, o->observed_tokens_per_s);
    if (o->json) {
      nlohmann::json j = simulate_json(in.run, in.cluster, step.result);
      if (gap) j["diagnosis"] = diagnosis_json(*gap);
      if (ideal) {
        j["step_time_ideal_s"] = ideal->step_time_s;
        j["straggler_slowdown_fraction"] = step.result.step_time_s / ideal->step_time_s - 1;
        j["pace_rank"] = pace;
        j["pace_rank_speed"] = so.rank_speed[static_cast<std::size_t>(pace)];
        j["slow_ranks"] = n_slow;
      }
      fmt::print("{}\n", j.dump(2));
    } else {
      fmt::print("{}", simulate_text(in.run, in.cluster, step.result));
      if (gap) fmt::print("{}", diagnosis_text(*gap));
      if (ideal)
        fmt::print("\nper-GPU speeds: {} of {} ranks below 1; rank {} (speed {:g}) sets the pace of the synchronous step\n"
                   "  step time {:.4f} s with them, {:.4f} s without ({:+.2f} %)\n",
                   n_slow, in.run.n_gpus, pace, so.rank_speed[static_cast<std::size_t>(pace)], step.result.step_time_s,
                   ideal->step_time_s, 100 * (step.result.step_time_s / ideal->step_time_s - 1));
    }
    return simulated_fit(in.cluster, step.result).fits ? 0 : 3;  // 3: does not fit, as `memory`
  };
  return c;
}

}  // namespace meshplan::cli

// meshplan simulate: how fast will this run, and where does the time go?
#include <fmt/format.h>

#include <fstream>
#include <memory>
#include <optional>

#include "cli/command.hpp"
#include "spec/atomic_file.hpp"
#include "cli/run_inputs.hpp"
#include "cli/run_source.hpp"
#include "report/diagnose.hpp"
#include "report/chrome_trace.hpp"
#include "report/simulate_report.hpp"
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
  };
  auto o = std::make_shared<Options>();
  Command c;
  c.app = root.add_subcommand(
      "simulate",
      "Discrete-event simulation of one optimizer step: step time, tokens/s (global and per GPU), "
      "MFU/HFU, a breakdown that adds up to the step time (compute, recompute, exposed communication "
      "by kind, pipeline bubble, optimizer, offload stalls) and peak memory per stage.");
  add_run_input_options(*c.app, o->in);
  c.app->add_flag("--json", o->json, "machine-readable output");
  c.app->add_option("--trace", o->trace, "write a Chrome trace-event JSON (open in ui.perfetto.dev)");
  c.app->add_flag("--full", o->full,
                  "simulate every rank with its own links and streams (up to 512 GPUs) instead of one "
                  "representative rank per pipeline stage");
  c.app->add_option("--observed-tokens-per-s", o->observed_tokens_per_s,
                    "tokens/s per GPU the real run achieved: rank causes of the gap, simulate fixes")
      ->check(CLI::PositiveNumber);
  c.run = [o] {
    const RunInputs in = load_run_inputs(o->in);
    SimOptions so;
    so.keep_timeline = !o->trace.empty();
    so.full = o->full;
    if (o->full && in.run.n_gpus > 512)
      throw InputError("", "--full", fmt::format("instantiates every rank and is limited to 512 GPUs; this run has {}",
                                                  in.run.n_gpus));
    const SimulatedStep step = simulate_step(in.run.model, in.run.plan, in.run.job, in.cluster, so);
    if (!o->trace.empty()) {
      write_file_atomic(o->trace, chrome_trace(step.program, step.timings).dump() + "\n", "--trace");
    }
    std::optional<Diagnosis> gap;
    if (o->observed_tokens_per_s > 0)
      gap = diagnose_gap(run_source(o->in), in.run, in.cluster, step.result, o->observed_tokens_per_s);
    if (o->json) {
      nlohmann::json j = simulate_json(in.run, in.cluster, step.result);
      if (gap) j["diagnosis"] = diagnosis_json(*gap);
      fmt::print("{}\n", j.dump(2));
    } else {
      fmt::print("{}", simulate_text(in.run, in.cluster, step.result));
      if (gap) fmt::print("{}", diagnosis_text(*gap));
    }
    return 0;
  };
  return c;
}

}  // namespace meshplan::cli

// meshplan simulate: how fast will this run, and where does the time go?
#include <fmt/format.h>

#include <fstream>
#include <memory>

#include "cli/command.hpp"
#include "cli/run_inputs.hpp"
#include "report/chrome_trace.hpp"
#include "report/simulate_report.hpp"
#include "sim/step_simulator.hpp"
#include "spec/error.hpp"

namespace meshplan::cli {

Command add_simulate_command(CLI::App& root) {
  struct Options {
    RunInputOptions in;
    bool json = false;
    std::string trace;
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
  c.run = [o] {
    const RunInputs in = load_run_inputs(o->in);
    SimOptions so;
    so.keep_timeline = !o->trace.empty();
    const SimulatedStep step = simulate_step(in.run.model, in.run.plan, in.run.job, in.cluster, so);
    if (!o->trace.empty()) {
      std::ofstream f(o->trace);
      if (!f) throw InputError(o->trace, "--trace", "cannot open for writing");
      f << chrome_trace(step.program, step.timings).dump() << '\n';
      if (!f) throw InputError(o->trace, "--trace", "write failed");
    }
    if (o->json) {
      fmt::print("{}\n", simulate_json(in.run, in.cluster, step.result).dump(2));
    } else {
      fmt::print("{}", simulate_text(in.run, in.cluster, step.result));
    }
    return 0;
  };
  return c;
}

}  // namespace meshplan::cli

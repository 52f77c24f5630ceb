// meshplan memory: will this layout fit, and what takes the memory?
#include <fmt/format.h>

#include <memory>

#include "cli/command.hpp"
#include "cli/run_inputs.hpp"
#include "report/memory_report.hpp"
#include "workload/memory_estimate.hpp"

namespace meshplan::cli {

Command add_memory_command(CLI::App& root) {
  struct Options {
    RunInputOptions in;
    bool json = false;
  };
  auto o = std::make_shared<Options>();
  Command c;
  c.app = root.add_subcommand(
      "memory",
      "Peak GPU memory per pipeline stage and what makes it up: sharded params, grads, optimizer "
      "state, gathered FSDP units, reduce buffers, activations, recompute, NCCL buffers, CUDA "
      "context and allocator slack; then whether it fits. Formulas: docs/memory.md.");
  add_run_input_options(*c.app, o->in);
  c.app->add_flag("--json", o->json, "machine-readable output (fields documented in docs/memory.md)");
  c.run = [o] {
    const RunInputs in = load_run_inputs(o->in);
    const MemoryEstimate e = estimate_memory(in.run.model, in.run.plan, in.run.job, in.cluster);
    if (o->json) {
      fmt::print("{}\n", memory_json(in.run, in.cluster, e).dump(2));
    } else {
      fmt::print("{}", memory_text(in.run, in.cluster, e));
    }
    return e.fits ? 0 : 3;
  };
  return c;
}

}  // namespace meshplan::cli

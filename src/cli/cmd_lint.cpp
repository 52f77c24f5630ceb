// meshplan lint: settings that have no effect, are rewritten by the runtime, or are risky.
#include <fmt/format.h>

#include <memory>

#include "cli/command.hpp"
#include "cli/run_inputs.hpp"
#include "cli/run_source.hpp"
#include "report/lint.hpp"

namespace meshplan::cli {

Command add_lint_command(CLI::App& root) {
  struct Options {
    RunInputOptions in;
    bool json = false;
  };
  auto o = std::make_shared<Options>();
  Command c;
  c.app = root.add_subcommand(
      "lint",
      "List settings in a run config that have no effect, are rewritten by the runtime, or are risky, one line of "
      "why each (e.g. reentrant without AC, HYBRID_SHARD on a 1-D mesh, bf16 gradient reduction over a large group, "
      "a micro-batch that does not divide the per-rank batch, misspelled fsdp_config keys). Risky settings are "
      "quantified by simulating the alternative. Exit code 1 when there is an error finding.");
  add_run_input_options(*c.app, o->in);
  c.app->add_flag("--json", o->json, "machine-readable output");
  c.run = [o] {
    const RunSource src = run_source(o->in);
    const LintReport r = lint_config(src);
    if (o->json) fmt::print("{}\n", lint_json(r).dump(2));
    else fmt::print("{}", lint_text(r));
    for (const auto& f : r.findings)
      if (f.severity == "error") return 1;
    return 0;
  };
  return c;
}

}  // namespace meshplan::cli

// meshplan demo: the main job on built-in defaults (what `./dev run` shows).
#include <fmt/format.h>

#include <memory>
#include <nlohmann/json.hpp>

#include "cli/command.hpp"
#include "cli/run_inputs.hpp"
#include "report/memory_report.hpp"
#include "report/simulate_report.hpp"
#include "sim/step_simulator.hpp"
#include "spec/data_root.hpp"
#include "workload/memory_estimate.hpp"

namespace meshplan::cli {

namespace {
constexpr const char* kDemoPlan = "plans/examples/llama3.1-8b-fsdp-h100.toml";
}

Command add_demo_command(CLI::App& root) {
  Command c;
  c.app = root.add_subcommand(
      "demo", fmt::format("Simulate a shipped plan ({}) and print its step time and memory report, as a first "
                          "look at the tool", kDemoPlan));
  auto json = std::make_shared<bool>(false);
  c.app->add_flag("--json", *json, "print {\"simulate\": simulate --json, \"memory\": memory --json} of the plan");
  c.run = [json] {
    RunInputOptions o;
    o.config = (data_root() / kDemoPlan).string();
    const RunInputs in = load_run_inputs(o);
    const MemoryEstimate e = estimate_memory(in.run.model, in.run.plan, in.run.job, in.cluster);
    const SimulatedStep step = simulate_step(in.run.model, in.run.plan, in.run.job, in.cluster);
    if (*json) {
      fmt::print("{}\n", nlohmann::json{{"config", kDemoPlan},
                                        {"simulate", simulate_json(in.run, in.cluster, step.result)},
                                        {"memory", memory_json(in.run, in.cluster, e)}}
                             .dump(2));
      return 0;
    }
    fmt::print("{}\n", simulate_text(in.run, in.cluster, step.result));
    fmt::print("{}", memory_text(in.run, in.cluster, e));
    fmt::print("\nNext: `meshplan simulate --config FILE` / `meshplan memory --config FILE` for your own\n"
               "      llm-foundry YAML or torchtitan TOML; `meshplan plan --model llama3.1-70b --gpus 256\n"
               "      --global-batch-tokens 4M`; `meshplan model --list`; `meshplan --help` for every command.\n");
    return 0;
  };
  return c;
}

}  // namespace meshplan::cli

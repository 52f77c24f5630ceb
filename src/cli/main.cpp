// meshplan: simulator and planner for distributed LLM training.
#include <fmt/format.h>

#include <exception>
#include <string>
#include <vector>

#include "cli/command.hpp"
#include "sim/allocator_policy.hpp"
#include "spec/error.hpp"

int main(int argc, char** argv) {
  meshplan::sim::keep_large_blocks_mapped();
  CLI::App app{
      "meshplan: will this training layout fit, how fast will it run, and what is the best one?\n"
      "Reads llm-foundry YAML, torchtitan TOML, Megatron-LM arguments (an args file or a pretrain_gpt.py launch script) and meshplan plan TOML; see `meshplan COMMAND --help`."};
  app.require_subcommand(1);
  app.footer(
      "Exit status: 0 success; 1 a finding (lint errors); 2 bad input (the one-line error names the file, key and "
      "reason); 3 does not fit (memory, simulate: allocations with the CUDA context and NCCL buffers above the device; "
      "plan: no layout fits; capacity: no GPU count answers).");
  app.set_version_flag("--version", "meshplan 0.1.0");

  std::vector<meshplan::cli::Command> commands = {
      meshplan::cli::add_demo_command(app),
      meshplan::cli::add_collective_command(app),
      meshplan::cli::add_model_command(app),
      meshplan::cli::add_topology_command(app),
      meshplan::cli::add_memory_command(app),
      meshplan::cli::add_simulate_command(app),
      meshplan::cli::add_plan_command(app),
      meshplan::cli::add_kernel_command(app),
      meshplan::cli::add_validate_command(app),
      meshplan::cli::add_calibrate_command(app),
      meshplan::cli::add_whatif_command(app),
      meshplan::cli::add_lint_command(app),
      meshplan::cli::add_capacity_command(app),
      meshplan::cli::add_layout_command(app),
  };

  std::string names;
  bool known = false;
  for (const auto& c : commands) {
    names += (names.empty() ? "" : ", ") + c.app->get_name();
    known = known || (argc > 1 && c.app->get_name() == argv[1]);
  }
  if (argc > 1 && argv[1][0] != '-' && !known) {
    fmt::print(stderr, "meshplan: error: unknown command '{}' (commands: {})\n", argv[1], names);
    return 2;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    // One line, like every other input error; --help has the details.
    fmt::print(stderr, "meshplan: error: {} (see --help)\n", e.what());
    return 2;
  }
  try {
    for (const auto& c : commands)
      if (c.app->parsed()) return c.run();
  } catch (const meshplan::InputError& e) {
    fmt::print(stderr, "meshplan: error: {}\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    fmt::print(stderr, "meshplan: error: {}\n", e.what());
    return 2;
  }
  return 1;
}

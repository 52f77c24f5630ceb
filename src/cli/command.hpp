#pragma once
// Each subcommand lives in its own file and registers itself on the root app.
#include <CLI/CLI.hpp>
#include <functional>

namespace meshplan::cli {

struct Command {
  CLI::App* app = nullptr;
  std::function<int()> run;  // returns the process exit code
};

Command add_model_command(CLI::App& root);
Command add_topology_command(CLI::App& root);
Command add_memory_command(CLI::App& root);
Command add_demo_command(CLI::App& root);
Command add_collective_command(CLI::App& root);
Command add_simulate_command(CLI::App& root);
Command add_plan_command(CLI::App& root);
Command add_kernel_command(CLI::App& root);
Command add_validate_command(CLI::App& root);
Command add_calibrate_command(CLI::App& root);
Command add_whatif_command(CLI::App& root);
Command add_lint_command(CLI::App& root);
Command add_capacity_command(CLI::App& root);
Command add_layout_command(CLI::App& root);

}  // namespace meshplan::cli

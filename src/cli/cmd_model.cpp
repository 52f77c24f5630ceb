// TEMPORARY during bring-up; replaced by the real command.
#include "cli/command.hpp"
namespace meshplan::cli {
Command add_model_command(CLI::App& root) {
  Command c;
  c.app = root.add_subcommand("model", "model");
  c.run = [] { return 1; };
  return c;
}
}  // namespace meshplan::cli

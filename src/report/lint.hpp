#pragma once
// meshplan lint: settings in a run config that have no effect, are rewritten by the runtime or are
// risky, each with one line of why. Reuses the importers' warnings and adds checks that need the
// resolved layout or a simulation (the cost of a risky setting is quantified by simulating the
// alternative through the same config edit as `whatif`).
#include <nlohmann/json.hpp>
#include <cstdint>
#include <string>
#include <vector>

#include "report/whatif.hpp"

namespace meshplan {

struct LintFinding {
  std::string key;       // in the file's own names ("fsdp_config.limit_all_gathers"); "" for the whole file
  std::string severity;  // "error" (will not run / will not fit), "warning" (rewritten, ignored or risky), "info"
  std::string message;   // one line: what happens and why
};

struct LintReport {
  std::string config;
  std::int64_t assumed_gpus = 0;      // > 0: no GPU count in the config or --gpus; linted on this many
  std::vector<LintFinding> findings;  // errors first, then warnings, then info; file order within
};

LintReport lint_config(const RunSource& src);

std::string lint_text(const LintReport& r);
nlohmann::json lint_json(const LintReport& r);

}  // namespace meshplan

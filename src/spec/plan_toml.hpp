#pragma once
// meshplan's own plan TOML: [model] [cluster] [layout] [sharding] [precision]
// [activation_checkpoint] [offload] [batch] [runtime]. Strict: unknown sections or keys are
// errors. Every key and default is documented in docs/plan_format.md.
#include <string>

#include "spec/import_common.hpp"
#include "spec/run_config.hpp"

namespace meshplan {

// `t` is the parsed content of `path` (relative model paths are taken from the file's directory).
// Throws InputError(path, "section.key", reason).
RunConfig read_plan_toml(const std::string& path, const toml::table& t, const ImportOptions& opts = {});

// True when a parsed TOML table uses meshplan's plan sections.
bool looks_like_plan_toml(const toml::table& t);

// Every field of the plan, the job, the model (inline, so the file stands alone), the cluster
// name and GPU count, written so that read_plan_toml gives the same RunConfig back (warnings and
// source_file aside). Unresolved values (-1 degrees, 'auto' micro-batch, a derived global batch)
// are written as such.
std::string to_plan_toml(const RunConfig& rc);

}  // namespace meshplan

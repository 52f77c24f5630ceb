#pragma once
// RunConfig: everything one run needs, as read from a user's config file.
#include <string>
#include <vector>

#include "spec/model_spec.hpp"
#include "spec/plan.hpp"

namespace meshplan {

enum class ConfigFormat { meshplan_plan, llm_foundry_yaml, torchtitan_toml, megatron_args };

// Knobs the config leaves to the runtime or that a published run does not state: they are
// resolved the way a tuned run settles them (workload/runtime_choices.hpp), not by a fixed default.
struct LeftToRuntime {
  bool micro_batch = false;  // e.g. Composer 'auto', a validation row without micro_batch/grad_accum
  bool recompute = false;    // activation recompute not stated
  bool sharding = false;     // ZeRO stage not stated
  bool offload_scope = false;  // activations offloaded, but not which (Megatron: fine-grained or whole layers)
  bool moe_dispatcher = false; // Megatron's flex dispatcher assumed, but not which backend (DeepEP or HybridEP)
  bool any() const { return micro_batch || recompute || sharding || offload_scope || moe_dispatcher; }
};

struct RunConfig {
  std::string source_file;
  ConfigFormat format = ConfigFormat::meshplan_plan;
  ModelSpec model;
  Plan plan;
  Job job;
  std::string cluster;             // hardware profile name; may be empty (CLI --cluster decides)
  std::int64_t n_gpus = 0;         // 0 when the file does not fix it (degrees -1 unresolved)
  std::vector<std::string> warnings;  // settings the runtime ignores, rewrites or rejects
  // Settings the file gives that change the real run but not meshplan's model of it (their names
  // as written: "--moe-grouped-gemm", "fsdp_config.forward_prefetch_limit"); each also has a warning.
  std::vector<std::string> unmodelled_settings;
  // Settings the input does not state, resolved from a default: the framework's (with its source),
  // meshplan's inference (a pipeline layout, the GPU count, the cluster) or the runtime choices
  // (workload/runtime_choices.hpp). One line each, "key: not stated; value (rule)"; simulate
  // --json lists them as `assumptions`.
  std::vector<std::string> assumptions;
  // Neither the file nor the command line gave the GPU count, so one node was assumed: reports
  // say so on their first line, where a wrong world size cannot be missed.
  bool n_gpus_assumed = false;
  // Steps between checkpoints the emitted config asks for (meshplan plan: Young/Daly's interval,
  // docs/goodput.md); 0 = the runtime's own default.
  std::int64_t checkpoint_interval_steps = 0;
  LeftToRuntime left_to_runtime;
};

}  // namespace meshplan

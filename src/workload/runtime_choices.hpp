#pragma once
// Settings a config leaves to the runtime (or a published run does not state), resolved the way a
// tuned run settles them: the least activation recompute that fits, the largest micro-batch that
// fits, the framework's sharding default unless nothing else fits (docs/validation.md, "Unknown
// settings"; docs/importers.md). One rule for `validate` and for every importer.
#include <string>
#include <vector>

#include "spec/cluster_spec.hpp"
#include "spec/run_config.hpp"
#include "workload/memory_estimate.hpp"

namespace meshplan {

// Whether the closed-form memory fits the device (MemoryEstimate::fits, the rule of device_fit.hpp).
bool fits_device(const ModelSpec& m, const Plan& p, const Job& j, const ClusterSpec& c);

struct RuntimeChoices {
  std::vector<std::string> assumptions;  // one line per resolved setting
  std::string no_fit;                    // non-empty: no resolution fits (the reason)
};

// Resolves every knob rc.left_to_runtime names against `c` and clears the flags. rc must be
// resolved (resolve_layout) with provisional values in those knobs; global batch and mesh stay.
// Order: the framework's sharding default first, a higher ZeRO stage only if nothing fits there;
// within a sharding, recompute from least to most (none -> selective -> full -> offload, as far as
// the framework offers them); within a recompute, the largest micro-batch (Megatron-family with
// pipelines: its default micro-batch 1). Nothing fits: the provisional values stay, `no_fit` says so.
RuntimeChoices resolve_runtime_choices(RunConfig& rc, const ClusterSpec& c);

}  // namespace meshplan

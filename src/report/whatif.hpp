#pragma once
// meshplan whatif: the cross product of setting changes, applied to the user's own config file
// (report/config_edit.hpp), re-imported and simulated, side by side, with a plain-language
// explanation of every one-setting difference derived from the simulated numbers.
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "report/config_edit.hpp"
#include "sim/step_result.hpp"
#include "spec/cluster_spec.hpp"
#include "spec/run_config.hpp"

namespace meshplan {

// What the command line says about the run (the CLI's --config/--model/--cluster/--gpus).
struct RunSource {
  std::string config;
  std::string model;            // model override (name or config.json); empty: the file's
  std::string cluster;          // hardware profile override; empty: the file's, else default_cluster
  std::string default_cluster = "h100-sxm-80gb";
  std::int64_t gpus = 0;        // 0: the file's, else the product of explicit degrees, else one node
  std::string nccl_version;     // --nccl-version; empty: the profile's
};

// One --vary KEY=V1,V2,...
struct Variation {
  std::string key;
  std::vector<std::string> values;
};
// Parses "KEY=V1,V2"; InputError(--vary) when malformed or a value repeats.
Variation parse_variation(std::string_view arg);

using Settings = std::vector<std::pair<std::string, std::string>>;  // key -> value, in --vary order

struct Variant {
  Settings settings;
  std::string error;           // non-empty when the variant does not import or resolve (why)
  std::string error_key;       // the key the error names, in the file's own names
  std::string error_reason;
  RunConfig run;               // resolved
  std::string cluster_name;
  double gpu_memory_bytes = 0;
  StepResult result;
  double peak_bytes = 0;       // simulated device peak, worst stage
  MemoryBreakdown peak_breakdown;  // of that stage at its peak
  MemoryBreakdown term_peaks;      // of that stage: each term's largest value over the step
  double peak_time_s = 0;          // when in the step that peak happens
  double host_bytes = 0;           // pinned host memory per rank at its peak, worst stage (offload)
  double needed_bytes = 0;         // worst stage's allocated peak + CUDA context + NCCL buffers
  bool fits = false;               // by device_fit.hpp's rule, as simulate
  bool tight = false;              // fits only without the allocator's usual reserve
  bool ok() const { return error.empty(); }
};

struct WhatIfReport {
  std::string config;
  std::vector<Variation> variations;
  std::vector<Variant> variants;          // cross product, first --vary outermost
  std::vector<std::string> explanations;  // one per pair of variants differing in one setting
  std::vector<std::string> notes;         // e.g. the GPU count assumption
};

// Imports `doc` (already edited), resolves it with the source's GPU count and cluster and
// simulates it. `fallback_gpus` is used when neither --gpus nor the file fixes the count.
// Import and layout errors end up in Variant::error, not as exceptions.
Variant evaluate_document(const ConfigDocument& doc, const RunSource& src, std::int64_t fallback_gpus,
                          Settings settings = {});

// The GPU count a config resolves to when the file and --gpus leave it open (one node), with
// a note saying so; 0 when the file or --gpus fixes it.
std::int64_t fallback_gpu_count(const RunSource& src, const RunConfig& base, std::vector<std::string>& notes);

WhatIfReport run_whatif(const RunSource& src, const std::vector<Variation>& vary);

// One sentence or two: what changes between two variants and why, from their numbers.
std::string explain_difference(const Variant& from, const Variant& to, const std::string& what);

std::string whatif_text(const WhatIfReport& r);
std::string whatif_markdown(const WhatIfReport& r);
nlohmann::json whatif_json(const WhatIfReport& r);

// "12.34 GB" (decimal, as communication volumes are quoted).
std::string format_gb(double bytes);

}  // namespace meshplan

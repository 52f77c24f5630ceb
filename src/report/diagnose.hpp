#pragma once
// Explaining a slow run: `meshplan simulate --observed-tokens-per-s X` compares the prediction with
// the observation, ranks plausible causes by how much of the gap each explains (each cause is a
// perturbed simulation: slower GEMMs, slower network, lost prefetch overlap; what no perturbation
// explains is reported as per-step host overhead), and simulates config changes that close it.
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "report/whatif.hpp"
#include "sim/step_result.hpp"
#include "spec/cluster_spec.hpp"
#include "spec/run_config.hpp"

namespace meshplan {

struct GapCause {
  std::string cause;          // short name: "lower achieved GEMM efficiency", ...
  double explains_s = 0;      // seconds of the per-step gap a plausible degree of this cause accounts for
  std::string detail;         // the numbers behind it, one sentence
  std::string fix;            // what to check or change
  // The remainder no simulated cause accounts for (data loading, logging, evaluation, host
  // overhead the profile lacks): what the others leave, not a cause found, so it ranks after them.
  bool unexplained = false;
};

struct GapSuggestion {
  Settings settings;          // config edits in the file's own names
  double tokens_per_s_per_gpu = 0;  // simulated
  double peak_bytes = 0;
  bool fits = false;
  double gain = 0;            // simulated tokens/s relative to the prediction for the file as is (1.1 = +10%)
};

struct Diagnosis {
  double observed_tokens_per_s_per_gpu = 0;
  double predicted_tokens_per_s_per_gpu = 0;
  double observed_step_s = 0;
  double predicted_step_s = 0;
  double gap_s = 0;           // observed - predicted step time (negative: faster than predicted)
  double observed_mfu = 0;    // the observation's model FLOPs utilization of the dense peak
  double observed_hfu = 0;    // ... counting recompute: above 1 no GPU could have done it
  bool physically_possible = true;
  std::vector<GapCause> causes;            // ranked by explains_s
  std::vector<GapSuggestion> suggestions;  // ranked by simulated tokens/s, only ones that fit
  std::vector<std::string> notes;
};

// `rc` is resolved and `predicted` is its simulation on `c`; `src` lets suggestions be simulated
// as edits of the same file.
Diagnosis diagnose_gap(const RunSource& src, const RunConfig& rc, const ClusterSpec& c, const StepResult& predicted,
                       double observed_tokens_per_s_per_gpu);

std::string diagnosis_text(const Diagnosis& d);
nlohmann::json diagnosis_json(const Diagnosis& d);

}  // namespace meshplan

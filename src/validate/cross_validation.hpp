#pragma once
// `validate --cross-validate GROUP`: what each fitted parameter is worth on runs it was not fitted
// to. Leave one group (source, GPU, framework or model) out, refit the declared parameters on the
// others, predict the group left out (docs/validation.md "Cross-validation").
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "validate/fit_runs.hpp"

namespace meshplan {

struct CrossValidationFold {
  std::string group;
  int n = 0;                              // runs of the group compared on throughput
  double mape_pct = 0, bias_pct = 0;      // held out: predicted with the other groups' fit
  double in_sample_mape_pct = 0, in_sample_bias_pct = 0;  // with the fit to every group
  double shipped_mape_pct = 0, shipped_bias_pct = 0;      // with the profiles' values
  std::vector<double> values;             // each parameter's value in this fold (fit order)
  std::vector<bool> identified;           // false: the other groups cannot identify it (left at prior)
};

struct CrossValidation {
  GroupBy by = GroupBy::source;
  RunsFit pooled;                         // the fit to every group
  std::vector<CrossValidationFold> folds; // by group name
  int n = 0;
  double mape_pct = 0, bias_pct = 0;      // row-weighted over the held-out predictions
  double in_sample_mape_pct = 0, in_sample_bias_pct = 0;
  double shipped_mape_pct = 0, shipped_bias_pct = 0;
};

// Each fold refits from the pooled fit by one Gauss-Newton step on the pooled Jacobian restricted
// to the fold's training runs (the parameters move little between folds; the step is exact for a
// model linear in them), then simulates the held-out runs exactly at the fold's values. A
// parameter the training runs pin down only to more than a quarter of its value keeps its prior.
CrossValidation cross_validate(const MeasuredRuns& runs, GroupBy by, const FitOptions& options);

std::string cross_validation_text(const CrossValidation& cv);
nlohmann::json cross_validation_json(const CrossValidation& cv);

}  // namespace meshplan

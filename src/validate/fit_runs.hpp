#pragma once
// Fitting the declared fitted parameters (validate/fitted_parameters.hpp) to measured runs:
// bounded Levenberg-Marquardt on the squared log error of each run's throughput, with a
// finite-difference Jacobian taken through the simulator (docs/validation.md "Fitting").
#include <Eigen/Dense>
#include <filesystem>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "validate/fitted_parameters.hpp"
#include "validate/validation.hpp"
#include "validate/validation_row.hpp"

namespace meshplan {

// The runs a fit reads: validation tables (the validation CSV schema) and runs read from training
// logs with their configs (validate/logged_run.hpp), keyed as one more table after the others.
struct MeasuredRuns {
  std::vector<CsvTable> tables;
  std::vector<ValidationCase> logged;
  std::vector<std::filesystem::path> cluster_dirs;
  int threads = 0;
};

// A row of one of the tables: which table, and its id.
struct RunKey {
  std::size_t table = 0;
  std::string id;
  auto operator<=>(const RunKey&) const = default;
};

// Every row of `runs` (or only `only`, when given) simulated with `values`; rows in table order.
struct RunsEvaluation {
  std::vector<RunKey> keys;
  std::vector<ValidationRowResult> rows;
};
RunsEvaluation evaluate_runs(const MeasuredRuns& runs, const ParameterValues& values,
                             const std::vector<RunKey>* only = nullptr);

// log(predicted / measured) of a row compared on throughput; nullopt for the others.
std::optional<double> log_ratio(const ValidationRowResult& r);

struct FitOptions {
  std::vector<const FittedParameter*> parameters;  // empty: every declared parameter
  int max_iterations = 12;
  // Finite-difference step, relative to the value: large enough to step over the simulator's
  // event-time rounding, small against any parameter's effect.
  double relative_step = 0.01;
};

struct ParameterFit {
  const FittedParameter* parameter = nullptr;
  double prior = 0;   // the profiles' value (the first profile the runs use that declares it)
  double value = 0;   // fitted (the prior when not identifiable)
  double lower = 0, upper = 0;             // the bounds searched: every profile's, intersected
  std::optional<double> standard_error;    // from the Jacobian at the fit; none at a bound
  bool identifiable = true;                // false: no run's prediction moves with it
  bool at_bound = false;
  int runs = 0;                            // compared runs whose profile it applies to
  std::vector<std::pair<std::string, double>> pulls;  // ids of the runs pulling it most, share of the pull
};

struct RunsFit {
  std::vector<ParameterFit> parameters;
  std::vector<RunKey> compared;           // rows compared on throughput, the residuals' order
  Eigen::VectorXd prior_residuals;        // log ratios at the profiles' values
  Eigen::VectorXd residuals;              // at the fit
  Eigen::MatrixXd jacobian;               // d residual / d value, at the fit (identifiable columns)
  RunsEvaluation fitted;                  // every row at the fitted values
  RunsEvaluation prior;                   // every row at the profiles' values
  int iterations = 0;
  int evaluations = 0;                    // row simulations, counted in rows
  ParameterValues values() const;
};

// Throws InputError when no row is compared on throughput.
RunsFit fit_runs(const MeasuredRuns& runs, const FitOptions& options);

// The fit as text (one line per parameter) and JSON.
std::string runs_fit_text(const RunsFit& fit);
nlohmann::json runs_fit_json(const RunsFit& fit);

// Root mean square of log ratios, in percent of a ratio (100 x rms).
double rms_log_pct(const Eigen::VectorXd& r);

}  // namespace meshplan

#include "validate/fit_runs.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "spec/error.hpp"
#include "validate/cluster_search.hpp"

namespace meshplan {
namespace {

using Index = Eigen::Index;

// Which compared rows each parameter applies to (the rows whose profile declares its key fitted).
class Applicability {
public:
  explicit Applicability(const MeasuredRuns& runs) : dirs_(runs.cluster_dirs) {}
  const ClusterSpec* profile(const std::string& cluster) {
    auto it = profiles_.find(cluster);
    if (it == profiles_.end()) {
      std::optional<ClusterSpec> c;
      try {
        c = load_cluster_search(cluster, dirs_);
      } catch (const InputError&) {  // the row already says why it was not simulated
      }
      it = profiles_.emplace(cluster, std::move(c)).first;
    }
    return it->second ? &*it->second : nullptr;
  }

private:
  std::vector<std::filesystem::path> dirs_;
  std::map<std::string, std::optional<ClusterSpec>> profiles_;
};

struct Problem {
  const MeasuredRuns* runs = nullptr;
  std::vector<RunKey> compared;
  std::map<RunKey, Index> row_index;               // key -> residual index
  std::vector<std::vector<RunKey>> rows_of;        // per parameter: compared rows it applies to
  std::vector<RunKey> affected;                    // union over the free parameters
  std::vector<std::size_t> free;                   // indices into the fit's parameters
  int evaluations = 0;
};

ParameterValues values_of(const std::vector<ParameterFit>& ps, const std::vector<double>& theta,
                          const std::vector<std::size_t>& free) {
  ParameterValues v;
  for (std::size_t j : free) v.push_back({ps[j].parameter, theta[j]});
  return v;
}

// Residuals at `theta`: the rows in `only` re-simulated, every other row as in `base`.
Eigen::VectorXd residuals_at(Problem& pb, const std::vector<ParameterFit>& ps, const std::vector<double>& theta,
                             const std::vector<RunKey>& only, const Eigen::VectorXd& base) {
  Eigen::VectorXd r = base;
  if (only.empty()) return r;
  const RunsEvaluation e = evaluate_runs(*pb.runs, values_of(ps, theta, pb.free), &only);
  pb.evaluations += static_cast<int>(e.rows.size());
  for (std::size_t i = 0; i < e.rows.size(); ++i)
    if (auto lr = log_ratio(e.rows[i]); lr) r[pb.row_index.at(e.keys[i])] = *lr;
  return r;
}

// Forward differences (backwards at the upper bound), one parameter's rows at a time.
Eigen::MatrixXd jacobian_at(Problem& pb, const std::vector<ParameterFit>& ps, const std::vector<double>& theta,
                            const Eigen::VectorXd& r, double relative_step) {
  Eigen::MatrixXd J = Eigen::MatrixXd::Zero(r.size(), static_cast<Index>(pb.free.size()));
  for (std::size_t c = 0; c < pb.free.size(); ++c) {
    const std::size_t j = pb.free[c];
    std::vector<double> t = theta;
    double h = relative_step * std::max(std::fabs(theta[j]), 1e-6);
    if (t[j] + h > ps[j].upper) h = -h;
    t[j] += h;
    const Eigen::VectorXd rp = residuals_at(pb, ps, t, pb.rows_of[j], r);
    J.col(static_cast<Index>(c)) = (rp - r) / h;
  }
  return J;
}

std::vector<double> clamp_to_bounds(std::vector<double> theta, const std::vector<ParameterFit>& ps) {
  for (std::size_t j = 0; j < ps.size(); ++j) theta[j] = std::clamp(theta[j], ps[j].lower, ps[j].upper);
  return theta;
}

// The parameters, their priors, bounds and the rows they apply to.
std::vector<ParameterFit> declare(Problem& pb, Applicability& app, const FitOptions& options, const RunsEvaluation& prior) {
  std::vector<const FittedParameter*> wanted = options.parameters;
  if (wanted.empty())
    for (const FittedParameter& p : fitted_parameters()) wanted.push_back(&p);
  std::vector<ParameterFit> ps;
  pb.rows_of.assign(wanted.size(), {});
  for (std::size_t j = 0; j < wanted.size(); ++j) {
    ParameterFit f;
    f.parameter = wanted[j];
    bool first = true;
    for (std::size_t i = 0; i < prior.rows.size(); ++i) {
      if (!log_ratio(prior.rows[i])) continue;
      const ClusterSpec* c = app.profile(prior.rows[i].cluster);
      if (c == nullptr || !applies_to(*f.parameter, *c)) continue;
      const auto [lo, hi] = f.parameter->bounds(*c);
      if (first) f.prior = *f.parameter->read(*c), f.lower = lo, f.upper = hi;
      f.lower = std::max(f.lower, lo);
      f.upper = std::min(f.upper, hi);
      first = false;
      pb.rows_of[j].push_back(prior.keys[i]);
    }
    f.runs = static_cast<int>(pb.rows_of[j].size());
    f.value = f.prior;
    ps.push_back(f);
  }
  return ps;
}

// The compared rows whose profile changes when the values `theta` are written into it. A profile
// stores a key rounded (the element-wise rate to three decimals per GPU), so one prior written into
// every profile may differ from what some of them hold: those rows are simulated again at the prior
// before the first Jacobian, or every parameter's finite difference would carry the change.
std::vector<RunKey> rows_moved_by_writing(const Problem& pb, Applicability& app, const std::vector<ParameterFit>& ps,
                                          const std::vector<double>& theta, const RunsEvaluation& prior) {
  std::vector<RunKey> moved;
  for (std::size_t i = 0; i < prior.rows.size(); ++i) {
    if (pb.row_index.count(prior.keys[i]) == 0) continue;
    const ClusterSpec* c = app.profile(prior.rows[i].cluster);
    if (c == nullptr) continue;
    ClusterSpec written = *c;
    for (std::size_t j : pb.free)
      if (applies_to(*ps[j].parameter, written)) ps[j].parameter->write(written, theta[j]);
    for (std::size_t j : pb.free)
      if (ps[j].parameter->key_value(written) != ps[j].parameter->key_value(*c)) {
        moved.push_back(prior.keys[i]);
        break;
      }
  }
  return moved;
}

// Shares of the pull on each parameter at the prior: |J_ij r_i| / sum_i |J_ij r_i|, the largest three.
void record_pulls(std::vector<ParameterFit>& ps, const Problem& pb, const Eigen::MatrixXd& J, const Eigen::VectorXd& r) {
  for (std::size_t c = 0; c < pb.free.size(); ++c) {
    std::vector<std::pair<double, std::string>> pull;
    double total = 0;
    for (Index i = 0; i < r.size(); ++i) {
      const double p = std::fabs(J(i, static_cast<Index>(c)) * r[i]);
      total += p;
      if (p > 0) pull.emplace_back(p, pb.compared[static_cast<std::size_t>(i)].id);
    }
    std::sort(pull.begin(), pull.end(), [](const auto& a, const auto& b) { return a.first > b.first || (a.first == b.first && a.second < b.second); });
    ParameterFit& f = ps[pb.free[c]];
    for (std::size_t k = 0; k < std::min<std::size_t>(3, pull.size()); ++k)
      f.pulls.emplace_back(pull[k].second, total > 0 ? pull[k].first / total : 0.0);
  }
}

void record_standard_errors(std::vector<ParameterFit>& ps, const Problem& pb, const Eigen::MatrixXd& J,
                            const Eigen::VectorXd& r) {
  std::vector<Index> cols;
  for (std::size_t c = 0; c < pb.free.size(); ++c) {
    ParameterFit& f = ps[pb.free[c]];
    f.at_bound = f.value <= f.lower + 1e-9 * std::fabs(f.lower) || f.value >= f.upper - 1e-9 * std::fabs(f.upper);
    if (!f.at_bound) cols.push_back(static_cast<Index>(c));
  }
  const Index n = r.size(), p = static_cast<Index>(cols.size());
  if (p == 0 || n <= p) return;
  Eigen::MatrixXd Jf(n, p);
  for (Index k = 0; k < p; ++k) Jf.col(k) = J.col(cols[static_cast<std::size_t>(k)]);
  const Eigen::MatrixXd A = Jf.transpose() * Jf;
  Eigen::FullPivLU<Eigen::MatrixXd> lu(A);
  if (!lu.isInvertible()) return;
  const double sigma2 = r.squaredNorm() / static_cast<double>(n - p);
  const Eigen::MatrixXd cov = sigma2 * lu.inverse();
  for (Index k = 0; k < p; ++k) ps[pb.free[static_cast<std::size_t>(cols[static_cast<std::size_t>(k)])]].standard_error = std::sqrt(cov(k, k));
}


// Drops from the free set every parameter no run's prediction moves with (a Jacobian column below
// 1e-6 of log ratio per unit), marks them, and returns the Jacobian of the rest at `theta`.
Eigen::MatrixXd identify(Problem& pb, std::vector<ParameterFit>& ps, const std::vector<double>& theta,
                         const Eigen::VectorXd& r, double relative_step) {
  const Eigen::MatrixXd J = jacobian_at(pb, ps, theta, r, relative_step);
  std::vector<std::size_t> identified;
  std::vector<Index> cols;
  for (std::size_t c = 0; c < pb.free.size(); ++c)
    if (J.col(static_cast<Index>(c)).norm() > 1e-6 * std::sqrt(static_cast<double>(r.size()))) {
      identified.push_back(pb.free[c]);
      cols.push_back(static_cast<Index>(c));
    }
  for (std::size_t j = 0; j < ps.size(); ++j)
    ps[j].identifiable = std::find(identified.begin(), identified.end(), j) != identified.end();
  // From here on a parameter re-simulates only the runs whose prediction moved with it (the
  // Megatron-DeepSpeed factor: those runs, not every run on a profile that declares it).
  for (std::size_t c = 0; c < pb.free.size(); ++c) {
    std::vector<RunKey> moved;
    for (const RunKey& k : pb.rows_of[pb.free[c]])
      if (J(pb.row_index.at(k), static_cast<Index>(c)) != 0.0) moved.push_back(k);
    pb.rows_of[pb.free[c]] = std::move(moved);
  }
  Eigen::MatrixXd Jk(r.size(), static_cast<Index>(cols.size()));
  for (std::size_t k = 0; k < cols.size(); ++k) Jk.col(static_cast<Index>(k)) = J.col(cols[k]);
  pb.free = identified;
  std::set<RunKey> affected;
  for (std::size_t j : pb.free) affected.insert(pb.rows_of[j].begin(), pb.rows_of[j].end());
  pb.affected.assign(affected.begin(), affected.end());
  return Jk;
}

// Levenberg-Marquardt with each step projected onto the bounds; a step is taken only when it
// lowers the sum of squares. Updates theta, r and J in place; returns the iterations run.
int levenberg_marquardt(Problem& pb, const std::vector<ParameterFit>& ps, std::vector<double>& theta,
                        Eigen::VectorXd& r, Eigen::MatrixXd& J, const FitOptions& options) {
  double lambda = 1e-3;
  int it = 0;
  while (it < options.max_iterations && !pb.free.empty()) {
    ++it;
    const Eigen::VectorXd g = J.transpose() * r;
    const Eigen::MatrixXd A = J.transpose() * J;
    bool improved = false;
    double moved = 0;
    for (int tries = 0; tries < 6 && !improved; ++tries, lambda *= 10) {
      Eigen::MatrixXd M = A;
      M.diagonal() += lambda * A.diagonal().cwiseMax(1e-12);
      const Eigen::VectorXd delta = M.ldlt().solve(-g);
      std::vector<double> t = theta;
      for (std::size_t c = 0; c < pb.free.size(); ++c) t[pb.free[c]] += delta[static_cast<Index>(c)];
      t = clamp_to_bounds(t, ps);
      const Eigen::VectorXd rt = residuals_at(pb, ps, t, pb.affected, r);
      if (rt.squaredNorm() >= r.squaredNorm()) continue;
      for (std::size_t j : pb.free) moved = std::max(moved, std::fabs(t[j] - theta[j]) / std::max(std::fabs(theta[j]), 1e-9));
      // A gain below 1e-6 of the sum is convergence whatever the step.
      if ((r.squaredNorm() - rt.squaredNorm()) < 1e-6 * std::max(r.squaredNorm(), 1e-300)) moved = 0;
      theta = t;
      r = rt;
      improved = true;
      lambda = std::max(lambda / 100, 1e-9);
    }
    // Converged when no parameter moved by 0.1 % of its value: well inside every standard error a
    // fit to measured runs has (1 % and more) and the 0.5 % the shipped fits are held to.
    if (!improved || moved < 1e-3) break;
    J = jacobian_at(pb, ps, theta, r, options.relative_step);
  }
  return it;
}
}  // namespace

RunsEvaluation evaluate_runs(const MeasuredRuns& runs, const ParameterValues& values, const std::vector<RunKey>* only) {
  RunsEvaluation out;
  for (std::size_t t = 0; t < runs.tables.size(); ++t) {
    ValidationOptions opts;
    opts.cluster_dirs = runs.cluster_dirs;
    opts.threads = runs.threads;
    opts.parameters = values;
    if (only != nullptr) {
      for (const RunKey& k : *only)
        if (k.table == t) opts.only_ids.push_back(k.id);
      if (opts.only_ids.empty()) continue;
    }
    ValidationReport rep = run_validation(runs.tables[t], opts);
    for (auto& r : rep.rows) {
      out.keys.push_back({t, r.id});
      out.rows.push_back(std::move(r));
    }
  }
  if (runs.logged.empty()) return out;
  const std::size_t t = runs.tables.size();
  std::vector<ValidationCase> cases;
  for (const ValidationCase& vc : runs.logged)
    if (only == nullptr || std::find(only->begin(), only->end(), RunKey{t, vc.id}) != only->end()) cases.push_back(vc);
  if (cases.empty()) return out;
  ValidationOptions opts;
  opts.cluster_dirs = runs.cluster_dirs;
  opts.threads = runs.threads;
  opts.parameters = values;
  ValidationReport rep = run_validation_cases(std::move(cases), "logs", opts);
  for (auto& r : rep.rows) {
    out.keys.push_back({t, r.id});
    out.rows.push_back(std::move(r));
  }
  return out;
}

std::optional<double> log_ratio(const ValidationRowResult& r) {
  if (!r.error_pct || !r.predicted_metric || !r.measured_metric) return std::nullopt;
  if (!(*r.predicted_metric > 0) || !(*r.measured_metric > 0)) return std::nullopt;
  return std::log(*r.predicted_metric / *r.measured_metric);
}

double rms_log_pct(const Eigen::VectorXd& r) {
  return r.size() == 0 ? 0.0 : 100.0 * std::sqrt(r.squaredNorm() / static_cast<double>(r.size()));
}

ParameterValues RunsFit::values() const {
  ParameterValues v;
  for (const ParameterFit& f : parameters)
    if (f.identifiable) v.push_back({f.parameter, f.value});
  return v;
}

RunsFit fit_runs(const MeasuredRuns& runs, const FitOptions& options) {
  RunsFit fit;
  Problem pb;
  pb.runs = &runs;
  fit.prior = evaluate_runs(runs, {});
  for (std::size_t i = 0; i < fit.prior.rows.size(); ++i)
    if (log_ratio(fit.prior.rows[i])) {
      pb.row_index[fit.prior.keys[i]] = static_cast<Index>(pb.compared.size());
      pb.compared.push_back(fit.prior.keys[i]);
    }
  if (pb.compared.empty())
    throw InputError(runs.tables.empty() ? "" : runs.tables.front().file, "rows",
                     "no row is compared on throughput: nothing to fit to");
  fit.compared = pb.compared;
  Eigen::VectorXd r(static_cast<Index>(pb.compared.size()));
  for (std::size_t i = 0, k = 0; i < fit.prior.rows.size(); ++i)
    if (auto lr = log_ratio(fit.prior.rows[i]); lr) r[static_cast<Index>(k++)] = *lr;
  fit.prior_residuals = r;
  Applicability profiles(runs);  // each row's profile, loaded once for declare and the prior's rows
  std::vector<ParameterFit> ps = declare(pb, profiles, options, fit.prior);
  for (std::size_t j = 0; j < ps.size(); ++j)
    if (ps[j].runs > 0) pb.free.push_back(j);
  std::vector<double> theta;
  for (const ParameterFit& f : ps) theta.push_back(f.prior);
  theta = clamp_to_bounds(theta, ps);
  r = residuals_at(pb, ps, theta, rows_moved_by_writing(pb, profiles, ps, theta, fit.prior), r);
  Eigen::MatrixXd J = identify(pb, ps, theta, r, options.relative_step);
  record_pulls(ps, pb, J, r);
  fit.iterations = levenberg_marquardt(pb, ps, theta, r, J, options);
  for (std::size_t j : pb.free) ps[j].value = theta[j];
  fit.jacobian = pb.free.empty() ? Eigen::MatrixXd(r.size(), 0) : jacobian_at(pb, ps, theta, r, options.relative_step);
  record_standard_errors(ps, pb, fit.jacobian, r);
  fit.parameters = ps;
  // Every row at the fitted values: the runs no parameter moved are as at the prior.
  fit.fitted = fit.prior;
  const RunsEvaluation moved = evaluate_runs(runs, fit.values(), &pb.affected);
  pb.evaluations += static_cast<int>(moved.rows.size());
  std::map<RunKey, std::size_t> at;
  for (std::size_t i = 0; i < fit.fitted.keys.size(); ++i) at[fit.fitted.keys[i]] = i;
  for (std::size_t i = 0; i < moved.rows.size(); ++i) fit.fitted.rows[at.at(moved.keys[i])] = moved.rows[i];
  Eigen::VectorXd rf = r;
  for (std::size_t i = 0; i < fit.fitted.rows.size(); ++i)
    if (auto lr = log_ratio(fit.fitted.rows[i]); lr) rf[pb.row_index.at(fit.fitted.keys[i])] = *lr;
  fit.residuals = rf;
  fit.evaluations = pb.evaluations + static_cast<int>(fit.prior.rows.size());
  return fit;
}

std::string runs_fit_text(const RunsFit& fit) {
  std::string out = fmt::format("fitted to {} runs compared on throughput: rms log error {:.2f} % -> {:.2f} % "
                                "({} iterations, {} row simulations)\n",
                                fit.compared.size(), rms_log_pct(fit.prior_residuals), rms_log_pct(fit.residuals),
                                fit.iterations, fit.evaluations);
  for (const ParameterFit& f : fit.parameters) {
    out += fmt::format("  {:<26} ", f.parameter->name);
    if (!f.identifiable) {
      out += fmt::format("{:.4g} (prior; not identified: {})\n", f.prior,
                         f.runs == 0 ? "no run's profile declares " + std::string(f.parameter->profile_key) + " fitted"
                                     : "no run's prediction moves with it");
      continue;
    }
    out += fmt::format("{:.4g}", f.value);
    if (f.standard_error) out += fmt::format(" +- {:.2g}", *f.standard_error);
    out += fmt::format(" (prior {:.4g}, bounds [{:.3g}, {:.3g}]{}, {} runs)", f.prior, f.lower, f.upper,
                       f.at_bound ? ", AT BOUND" : "", f.runs);
    if (!f.pulls.empty()) {
      out += "; pulled most by";
      for (const auto& [id, share] : f.pulls) out += fmt::format(" {} ({:.0f} %)", id, 100 * share);
    }
    out += "\n";
  }
  return out;
}

nlohmann::json runs_fit_json(const RunsFit& fit) {
  nlohmann::json j;
  j["runs_compared"] = fit.compared.size();
  j["rms_log_error_prior_pct"] = rms_log_pct(fit.prior_residuals);
  j["rms_log_error_fit_pct"] = rms_log_pct(fit.residuals);
  j["iterations"] = fit.iterations;
  j["row_simulations"] = fit.evaluations;
  j["parameters"] = nlohmann::json::array();
  for (const ParameterFit& f : fit.parameters) {
    nlohmann::json p{{"name", f.parameter->name},  {"profile_key", f.parameter->profile_key},
                     {"prior", f.prior},           {"value", f.value},
                     {"lower", f.lower},           {"upper", f.upper},
                     {"identifiable", f.identifiable}, {"at_bound", f.at_bound},
                     {"runs", f.runs}};
    p["standard_error"] = f.standard_error ? nlohmann::json(*f.standard_error) : nlohmann::json(nullptr);
    p["pulled_by"] = nlohmann::json::array();
    for (const auto& [id, share] : f.pulls) p["pulled_by"].push_back({{"id", id}, {"share", share}});
    j["parameters"].push_back(p);
  }
  return j;
}

}  // namespace meshplan

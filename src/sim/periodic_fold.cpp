#include "sim/periodic_fold.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <string>

#include "workload/pipeline_schedule.hpp"

namespace meshplan {
namespace {

// Extrapolating over k more periods: a figure may drift from the straight line by at most this
// share of itself (and 1 ns or 1 byte absolutely, for figures that are zero or all but zero).
constexpr double kFoldRelativeDrift = 1e-4;
constexpr double kFoldAbsoluteDrift = 1e-9;

// x at k periods beyond x3, when x1, x2, x3 are a period apart and move alike each period (checked
// unless `proven`: the third step's timeline already showed it, and x1 is not simulated).
class Line {
public:
  Line(std::int64_t k, bool proven) : k_(static_cast<double>(k)), proven_(proven) {}
  double operator()(double x1, double x2, double x3) {
    const double d1 = x2 - x1, d2 = x3 - x2;
    const double out = x3 + k_ * d2;
    if (!proven_ &&
        !(k_ * std::fabs(d2 - d1) <= kFoldRelativeDrift * std::max(std::fabs(out), std::fabs(x3)) + kFoldAbsoluteDrift))
      ok_ = false;
    return out;
  }
  // Maps keyed alike in all three (a key in one only breaks the fold).
  std::map<std::string, double> operator()(const std::map<std::string, double>& a, const std::map<std::string, double>& b,
                                           const std::map<std::string, double>& c) {
    std::map<std::string, double> out;
    if (a.size() != c.size() || b.size() != c.size()) ok_ = false;
    for (const auto& [key, x3] : c) {
      const auto ia = a.find(key), ib = b.find(key);
      if (ia == a.end() || ib == b.end()) {
        ok_ = false;
        continue;
      }
      out[key] = (*this)(ia->second, ib->second, x3);
    }
    return out;
  }
  MemoryBreakdown operator()(const MemoryBreakdown& a, const MemoryBreakdown& b, const MemoryBreakdown& c) {
    MemoryBreakdown o;
    o.params = (*this)(a.params, b.params, c.params);
    o.grads = (*this)(a.grads, b.grads, c.grads);
    o.optimizer = (*this)(a.optimizer, b.optimizer, c.optimizer);
    o.unsharded_params = (*this)(a.unsharded_params, b.unsharded_params, c.unsharded_params);
    o.reduce_buffers = (*this)(a.reduce_buffers, b.reduce_buffers, c.reduce_buffers);
    o.activations = (*this)(a.activations, b.activations, c.activations);
    o.recompute = (*this)(a.recompute, b.recompute, c.recompute);
    o.comm_buffers = (*this)(a.comm_buffers, b.comm_buffers, c.comm_buffers);
    o.framework = (*this)(a.framework, b.framework, c.framework);
    return o;
  }
  bool ok() const { return ok_; }

private:
  double k_;
  bool proven_;
  bool ok_ = true;
};

// One stage's passes in issue order: [first op, end) and whether it is a backward.
struct PassSpan {
  int first = 0, end = 0;
  bool backward = false;
};

std::vector<std::vector<PassSpan>> passes_by_stage(const StepProgram& prog) {
  std::vector<std::vector<PassSpan>> out(static_cast<std::size_t>(std::max(1, prog.n_stages)));
  const auto& firsts = prog.pass_first_ops;
  for (std::size_t i = 0; i < firsts.size(); ++i) {
    const int first = firsts[i];
    const int stage = prog.ops[static_cast<std::size_t>(first)].stage;
    // A stage's ops are contiguous and in issue order: the pass ends where the next one starts,
    // or with the stage (its last pass then also holds the step's tail).
    int end = first + 1;
    while (static_cast<std::size_t>(end) < prog.ops.size() && prog.ops[static_cast<std::size_t>(end)].stage == stage &&
           (i + 1 >= firsts.size() || end < firsts[i + 1]))
      ++end;
    const bool backward = std::binary_search(prog.backward_first_ops.begin(), prog.backward_first_ops.end(), first);
    out[static_cast<std::size_t>(stage)].push_back({first, end, backward});
  }
  return out;
}

bool same_schedule(const StepOp& a, const StepOp& b) {
  return a.work == b.work && a.stream == b.stream && a.category == b.category && a.kind == b.kind &&
         a.host_sync == b.host_sync && a.deps.size() == b.deps.size() && a.at_start == b.at_start && a.at_end == b.at_end;
}

}  // namespace

Job FoldPlan::at(int k) const {
  Job j = full;
  const std::int64_t m = first_microbatches + k * period_microbatches;
  j.global_batch = full.global_batch / full.grad_accum * m;
  // One schedule run of the whole step stays one run of the shorter step.
  if (full.pp_microbatches >= full.grad_accum) j.pp_microbatches = m;
  j.grad_accum = m;
  return j;
}

std::optional<FoldPlan> fold_plan(const Plan& p, const Job& j) {
  const std::int64_t m = j.grad_accum;
  if (m <= 0 || j.global_batch % m != 0) return std::nullopt;
  const int pp = std::max(1, p.mesh.pp);
  const std::int64_t per_run = microbatches_per_run(m, j.pp_microbatches, pp);
  FoldPlan f;
  f.full = j;
  if (per_run < m) {
    // Several schedule runs, each with its own fill and drain: a period is a run.
    if (per_run <= 0 || m % per_run != 0) return std::nullopt;
    f.period_microbatches = per_run;
    f.first_microbatches = per_run;
  } else {
    f.period_microbatches = pp;
    f.first_microbatches = 2 * pp + m % pp;
  }
  // Simulating a step costs more than its length in proportion (the engine's queues and shared
  // flows grow with it): three shorter steps of up to 5/4 of its micro-batches together took less
  // time than the whole step on the GPT-530B rows (35 stages x 3 virtual, 280 micro-batches: 70,
  // 105 and 140 simulated, 0.84x the time) and half the memory, the largest one's.
  const std::int64_t simulated = 3 * f.first_microbatches + 3 * f.period_microbatches;
  if (4 * simulated > 5 * m) return std::nullopt;
  f.periods_beyond = (m - f.first_microbatches) / f.period_microbatches - 2;
  return f;
}

std::optional<FoldPlan> fine_fold_plan(const Plan& p, const Job& j) {
  const std::int64_t m = j.grad_accum;
  const int pp = std::max(1, p.mesh.pp);
  if (pp <= 1 || p.mesh.vpp > 1 || m <= 0 || j.global_batch % m != 0) return std::nullopt;
  if (microbatches_per_run(m, j.pp_microbatches, pp) < m) return std::nullopt;
  FoldPlan f;
  f.full = j;
  f.period_microbatches = 1;
  f.first_microbatches = pp + 2;
  const std::int64_t simulated = 3 * f.first_microbatches + 3;
  if (m < 2 * simulated) return std::nullopt;
  f.periods_beyond = m - f.first_microbatches - 2;
  f.pass_pair_period = true;
  return f;
}

std::vector<FoldPlan> fold_plans(const Plan& p, const Job& j) {
  std::vector<FoldPlan> out;
  if (auto f = fine_fold_plan(p, j)) out.push_back(*f);
  if (auto f = fold_plan(p, j)) out.push_back(*f);
  return out;
}

namespace {

// Units w - 2, w - 1 and w of a stage hold the same ops in the same order (offset by offset).
bool alike_units(const StepProgram& prog, const std::vector<std::pair<int, int>>& units, std::size_t w) {
  const int length = units[w].second - units[w].first;
  for (std::size_t k = w - 2; k < w; ++k)
    if (units[k].second - units[k].first != length) return false;
  for (int o = 0; o < length; ++o)
    for (std::size_t k = w - 1; k <= w; ++k)
      if (!same_schedule(prog.ops[static_cast<std::size_t>(units[k].first + o)],
                         prog.ops[static_cast<std::size_t>(units[k - 1].first + o)]))
        return false;
  return true;
}

std::optional<StepResult> fold(const FoldPlan& f, const StepResult& a, const StepResult& b, const StepResult& c, bool proven) {
  Line line(f.periods_beyond, proven);
  StepResult r = c;
  if (a.critical_stage != c.critical_stage || b.critical_stage != c.critical_stage || a.stages.size() != c.stages.size() ||
      b.stages.size() != c.stages.size())
    return std::nullopt;
  r.step_time_s = line(a.step_time_s, b.step_time_s, c.step_time_s);
  r.host_busy_s = line(a.host_busy_s, b.host_busy_s, c.host_busy_s);
  r.breakdown_s = line(a.breakdown_s, b.breakdown_s, c.breakdown_s);
  r.exposed_comm_s = line(a.exposed_comm_s, b.exposed_comm_s, c.exposed_comm_s);
  r.comm_bytes = line(a.comm_bytes, b.comm_bytes, c.comm_bytes);
  r.n_tasks = std::llround(line(static_cast<double>(a.n_tasks), static_cast<double>(b.n_tasks), static_cast<double>(c.n_tasks)));
  // The engine's event count is a diagnostic, not a figure: a task sleeps until its host issue
  // ends (an event) or starts without one as the timing falls, so it need not move alike.
  r.n_events = c.n_events + f.periods_beyond * (c.n_events - b.n_events);
  for (std::size_t s = 0; s < c.stages.size(); ++s) {
    const StageTimeline &x = a.stages[s], &y = b.stages[s], &z = c.stages[s];
    StageTimeline& o = r.stages[s];
    o.peak_bytes = line(x.peak_bytes, y.peak_bytes, z.peak_bytes);
    o.host_bytes = line(x.host_bytes, y.host_bytes, z.host_bytes);
    o.allocated_peak_bytes = line(x.allocated_peak_bytes, y.allocated_peak_bytes, z.allocated_peak_bytes);
    o.peak_time_seconds = line(x.peak_time_seconds, y.peak_time_seconds, z.peak_time_seconds);
    o.breakdown = line(x.breakdown, y.breakdown, z.breakdown);
    o.term_peaks = line(x.term_peaks, y.term_peaks, z.term_peaks);
    o.compute_busy_seconds = line(x.compute_busy_seconds, y.compute_busy_seconds, z.compute_busy_seconds);
  }
  if (!line.ok() || !(r.step_time_s > 0) || !(c.step_time_s > 0)) return std::nullopt;
  // Throughput: the full step's tokens over its time; FLOP utilisation moves with it.
  const double tokens_ratio = static_cast<double>(f.full.global_batch) / static_cast<double>(f.at(2).global_batch);
  const double speed = tokens_ratio * c.step_time_s / r.step_time_s;
  r.tokens_per_s = c.tokens_per_s * speed;
  r.tokens_per_s_per_gpu = c.tokens_per_s_per_gpu * speed;
  r.mfu = c.mfu * speed;
  r.hfu = c.hfu * speed;
  r.host_bound = r.breakdown_s["host_wait"] >= kHostBoundFraction * r.step_time_s;
  r.folded_period_microbatches = f.period_microbatches;
  r.folded_periods = f.periods_beyond;
  r.folded_period_in_timeline = proven;
  return r;
}

}  // namespace

std::optional<StepResult> fold_steps(const FoldPlan& f, const StepResult& a, const StepResult& b, const StepResult& c) {
  return fold(f, a, b, c, false);
}

std::optional<StepResult> fold_proven_steps(const FoldPlan& f, const StepResult& b, const StepResult& c) {
  return fold(f, b, b, c, true);
}

std::optional<PeriodProbe> period_probe(const StepProgram& prog) {
  // Units: a forward directly followed by a backward that is not the stage's last pass. Unit j of
  // every stage runs backward j, so units of one index run at about the same time on every stage.
  std::vector<std::vector<std::pair<int, int>>> units;
  for (const std::vector<PassSpan>& stage : passes_by_stage(prog)) {
    units.emplace_back();
    for (std::size_t i = 0; i + 2 < stage.size(); ++i)
      if (!stage[i].backward && stage[i + 1].backward) units.back().emplace_back(stage[i].first, stage[i + 1].end);
  }
  // The latest three alike on the stage with the fewest, while every stage is in its steady state
  // (a later stage's last units run beside an earlier one's drain); the last unit itself may
  // differ (1F1B's last steady unit receives no next forward).
  std::size_t fewest = units.empty() ? 0 : units.front().size();
  for (const auto& u : units) fewest = std::min(fewest, u.size());
  std::optional<std::size_t> last;
  for (std::size_t w = fewest; w-- > 2 && !last;)
    if (std::all_of(units.begin(), units.end(), [&](const auto& u) { return alike_units(prog, u, w); })) last = w;
  if (!last) return std::nullopt;
  const std::size_t w = *last;
  PeriodProbe probe;
  for (const auto& stage_units : units) {
    probe.stage_begin.push_back(probe.unit_ops[0].size());
    for (int k = 0; k < 3; ++k) {
      const auto [first, end] = stage_units[w - 2 + static_cast<std::size_t>(k)];
      for (int op = first; op < end; ++op) probe.unit_ops[k].push_back(op);
    }
  }
  probe.stage_begin.push_back(probe.unit_ops[0].size());
  return probe;
}

bool repeats(const PeriodProbe& probe, const std::vector<sim::TaskTiming>& timings,
             const std::vector<sim::TaskTiming>& host_timings, double tolerance_seconds) {
  if (probe.unit_ops[0].empty()) return false;
  // Op o's move from unit k - 1 to unit k.
  auto shift_of = [&](const std::vector<sim::TaskTiming>& t, std::size_t o, int k) {
    return t[static_cast<std::size_t>(probe.unit_ops[k][o])].start_seconds -
           t[static_cast<std::size_t>(probe.unit_ops[k - 1][o])].start_seconds;
  };
  // Every op of rows [begin, end) moves by `shift` from unit k - 1 to unit k, for k in [first, 3).
  auto moves_by = [&](const std::vector<sim::TaskTiming>& t, std::size_t begin, std::size_t end, int first,
                      double shift) {
    for (std::size_t o = begin; o < end; ++o)
      for (int k = first; k < 3; ++k) {
        const sim::TaskTiming x = t[static_cast<std::size_t>(probe.unit_ops[k - 1][o])];
        const sim::TaskTiming y = t[static_cast<std::size_t>(probe.unit_ops[k][o])];
        if (!(std::fabs(y.start_seconds - x.start_seconds - shift) <= tolerance_seconds &&
              std::fabs(y.end_seconds - x.end_seconds - shift) <= tolerance_seconds))
          return false;
      }
    return true;
  };
  // The GPU's period is one for every stage, over both moves. Each stage's host thread repeats
  // with a shift of its own: its issue time per unit where it runs ahead, which must not exceed
  // the GPU's (a host that falls behind would come to hold the GPU back later in the step: another
  // regime). The host is held to the last move only: one that ran ahead through the fill may still
  // issue the window's first ops early, before a synchronizing op (an MoE dispatch reading its
  // token counts) ties it to the GPU, and ops issued ahead of the GPU do not bind it.
  const double shift = shift_of(timings, 0, 1);
  if (!(shift > 0) || !moves_by(timings, 0, probe.unit_ops[0].size(), 1, shift)) return false;
  for (std::size_t s = 0; s + 1 < probe.stage_begin.size(); ++s) {
    const std::size_t begin = probe.stage_begin[s], end = probe.stage_begin[s + 1];
    const double host_shift = shift_of(host_timings, begin, 2);
    if (!(host_shift <= shift + tolerance_seconds) || !moves_by(host_timings, begin, end, 2, host_shift)) return false;
  }
  return true;
}

double period_tolerance_seconds(const FoldPlan& f, double step_seconds) {
  return kFoldRelativeDrift * step_seconds / static_cast<double>(std::max<std::int64_t>(1, f.periods_beyond));
}

}  // namespace meshplan

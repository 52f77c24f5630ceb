// meshplan capacity (capacity.hpp).
#include "plan/capacity.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <string>
#include <vector>
#include <stdexcept>

#include "spec/error.hpp"
#include "workload/memory_estimate.hpp"
#include "spec/limits.hpp"

namespace meshplan {

double training_days(double tokens, double tokens_per_s_per_gpu, std::int64_t gpus) {
  if (!(tokens_per_s_per_gpu > 0) || gpus <= 0) return 0;
  return tokens / (tokens_per_s_per_gpu * static_cast<double>(gpus)) / 86400.0;
}

double checkpoint_state_bytes_per_rank(const ModelSpec& m, const Plan& p, const Job& j, const ClusterSpec& c) {
  // A checkpoint writes each distinct byte of the training state once: Megatron's distributed
  // format (torch_dist, its default) with its fully parallel save, and torch DCP (torchtitan,
  // Composer's sharded checkpoints) drop the copies data-parallel ranks hold and spread the writes
  // over them. The state of a model-parallel shard is its parameters as the model stores them plus
  // the optimizer's (fp32 master where kept, moments), unsharded; every data-parallel and context-
  // parallel rank of the shard writes an equal part. Where the params are offloaded they are the
  // same bytes, held on the host.
  Plan resident = p;
  resident.param_offload = false;
  const MemoryBreakdown per = state_bytes_per_param(resident, j).device;
  const double n_state = state_shard_group(p);
  const bool replicated_params = p.sharding == Sharding::none || p.sharding == Sharding::zero1;
  const double unique_per_param = per.params * (replicated_params ? 1.0 : n_state) + per.optimizer * n_state;
  const double writers = static_cast<double>(std::max(1, p.mesh.dp())) * std::max(1, p.mesh.cp);
  const MemoryEstimate est = estimate_memory(m, p, j, c);
  double most = 0;
  for (const StageMemory& s : est.stages) most = std::max(most, s.params_per_rank * unique_per_param / writers);
  return most;
}

CapacityGoodput price_failures(const ClusterSpec& c, std::int64_t gpus, double state_bytes_per_rank,
                               double step_time_s, double ideal_days, CheckpointMode mode,
                               double interval_override_s) {
  CapacityGoodput x;
  if (!c.reliability.present) return x;
  x.priced = true;
  x.interruptions = job_interruptions(c, gpus);
  auto solve = [&](const ClusterSpec& cc, CheckpointMode md, CheckpointCost* ck, double* restart) {
    GoodputInputs in;
    in.interruptions = x.interruptions;
    in.checkpoint = checkpoint_cost(state_bytes_per_rank, cc, md);
    in.restart_s = restart_seconds(cc, in.checkpoint);
    in.mode = md;
    in.step_time_s = step_time_s;
    in.ideal_run_seconds = ideal_days * 86400.0;
    in.interval_override_s = interval_override_s;
    if (ck) *ck = in.checkpoint;
    if (restart) *restart = in.restart_s;
    return plan_goodput(in);
  };
  x.goodput = solve(c, mode, &x.checkpoint, &x.restart_s);
  x.days_ideal = ideal_days;
  x.days_with_failures = x.goodput.run_seconds / 86400.0;
  x.gpu_hours_ideal = ideal_days * 24.0 * static_cast<double>(gpus);
  if (mode == CheckpointMode::sync) x.days_with_async = solve(c, CheckpointMode::async, nullptr, nullptr).run_seconds / 86400.0;
  auto days_at = [&](double speedup) {
    ClusterSpec f = c;
    f.reliability.storage_write_bytes_per_s *= speedup;
    f.reliability.storage_read_bytes_per_s *= speedup;
    return solve(f, mode, nullptr, nullptr).run_seconds / 86400.0;
  };
  // Faster storage shortens the save and the load; past ~1e6 x the copy over the host link and
  // the relaunch are all that is left.
  x.days_with_instant_storage = days_at(1e6);
  const double target = x.days_with_failures - 1.0;
  if (std::isfinite(x.days_with_failures) && x.days_with_instant_storage <= target) {
    double lo = 1, hi = 1e6;  // days_at is monotone in the speed-up: bisect in log space
    for (int i = 0; i < 60; ++i) {
      const double mid = std::sqrt(lo * hi);
      (days_at(mid) <= target ? hi : lo) = mid;
    }
    x.storage_speedup_for_a_day = hi;
  }
  return x;
}

namespace {

CapacityRow evaluate(const CapacityRequest& rq, const ClusterSpec& c, std::int64_t gpus) {
  CapacityRow row;
  row.cluster = c.name;
  row.gpus = gpus;
  PlanRequest p;
  p.model = rq.model;
  p.cluster = c;
  p.n_gpus = gpus;
  p.seq_len = rq.seq_len;
  p.global_batch_tokens = rq.global_batch_tokens;
  p.runtime = rq.runtime;
  p.top_k = 1;
  p.simulate_budget = rq.simulate_budget;
  p.threads = 1;  // exceptions stay on this thread; the table is short
  try {
    const PlanSearch s = search_plans(p);
    if (s.ranked.empty()) {
      row.note = s.notes.empty() ? "no layout fits" : s.notes.front();
      return row;
    }
    row.best = s.ranked.front();
  } catch (const std::exception& e) {
    row.note = e.what();
    return row;
  }
  row.feasible = true;
  row.tokens_per_s_per_gpu = row.best.result.tokens_per_s_per_gpu;
  row.days = training_days(rq.tokens, row.tokens_per_s_per_gpu, gpus);
  if (rq.price_failures) {
    row.failures = price_failures(c, gpus, checkpoint_state_bytes_per_rank(rq.model, row.best.plan, row.best.job, c),
                                  row.best.result.step_time_s, row.days, rq.checkpoint_mode, rq.checkpoint_interval_s);
    if (row.failures.priced) {
      if (rq.price_per_gpu_hour) row.failures.cost_ideal = row.failures.gpu_hours_ideal * *rq.price_per_gpu_hour;
      row.days = row.failures.days_with_failures;
    }
  }
  row.gpu_hours = row.days * 24.0 * static_cast<double>(gpus);
  if (rq.price_per_gpu_hour) row.cost = row.gpu_hours * *rq.price_per_gpu_hour;
  row.meets_deadline = !rq.deadline_days || row.days <= *rq.deadline_days;
  return row;
}

// The smallest node x 2^k >= n, stopping at the GPU maximum: an infinite, NaN or astronomically
// large need (a tiny throughput, a huge token count) must neither overflow nor loop forever.
std::int64_t round_up_to_grid(double n, std::int64_t node) {
  std::int64_t g = node;
  while (static_cast<double>(g) < n && g * 2 <= limits::kMaxGpus) g *= 2;
  return g;
}

// The request's limits (docs/limits.md), and that it asks exactly one question.
void check_request(const CapacityRequest& rq) {
  if (!(rq.tokens > 0)) throw InputError("", "--tokens", "must be positive");
  if (!(rq.tokens <= limits::kMaxTrainingTokens))
    throw InputError("", "--tokens", fmt::format("{:g} is above the maximum {:g} (docs/limits.md)", rq.tokens,
                                                 limits::kMaxTrainingTokens));
  if (rq.gpus > limits::kMaxGpus)
    throw InputError("", "--gpus", fmt::format("{} is above the maximum {} (docs/limits.md)", rq.gpus, limits::kMaxGpus));
  if (rq.deadline_days && !(*rq.deadline_days >= limits::kMinDeadlineDays && *rq.deadline_days <= limits::kMaxDeadlineDays))
    throw InputError("", "--deadline", fmt::format("{:g} days is outside one minute .. {:g} days (docs/limits.md)",
                                                   *rq.deadline_days, limits::kMaxDeadlineDays));
  if (rq.deadline_days.has_value() == (rq.gpus > 0))
    throw InputError("", "--deadline", "give exactly one of --deadline DAYS or --gpus N");
  if (rq.deadline_days && !(*rq.deadline_days > 0)) throw InputError("", "--deadline", "must be positive");
}

// One cluster's rows by GPU count, each evaluated (a plan search) once, when first asked for.
class RowsByCount {
public:
  RowsByCount(const CapacityRequest& rq, const ClusterSpec& c) : rq_(rq), c_(c) {}
  const CapacityRow& at(std::int64_t n) {
    auto it = rows_.find(n);
    if (it == rows_.end()) it = rows_.emplace(n, evaluate(rq_, c_, n)).first;
    return it->second;
  }
  const std::map<std::int64_t, CapacityRow>& all() const { return rows_; }

private:
  const CapacityRequest& rq_;
  const ClusterSpec& c_;
  std::map<std::int64_t, CapacityRow> rows_;
};

// Why no count up to `n` meets the deadline: the largest count where a plan exists, how long it
// takes there, and what stops the next doubling.
std::string missed_deadline_note(const CapacityRequest& rq, const ClusterSpec& c, std::int64_t n,
                                 const std::map<std::int64_t, CapacityRow>& rows) {
  const CapacityRow* widest = nullptr;
  for (const auto& [count, row] : rows)
    if (row.feasible && (widest == nullptr || row.gpus > widest->gpus)) widest = &row;
  std::string why;
  const auto next = widest != nullptr ? rows.find(widest->gpus * 2) : rows.end();
  if (widest != nullptr)
    why = fmt::format(": the most GPUs with a plan is {} ({:.1f} days){}", widest->gpus, widest->days,
                      next != rows.end() && !next->second.feasible
                          ? fmt::format(", and at {} GPUs {}", next->first, next->second.note)
                          : std::string());
  return fmt::format("{}: no GPU count up to {} meets the {:g}-day deadline{}", c.name, n, *rq.deadline_days, why);
}

// The fewest GPUs (node x 2^k) that meet the deadline on one cluster, or the closest there is;
// nullopt, with a note, when no plan fits at any count tried.
std::optional<std::int64_t> deadline_answer(const CapacityRequest& rq, const ClusterSpec& c, RowsByCount& rows,
                                            std::vector<std::string>& notes) {
  const std::int64_t node = std::max(1, c.node.gpus_per_node);
  // Per-GPU throughput changes slowly with scale: measure it at the smallest count (node x 2^k,
  // from 8 nodes) where a plan fits, size from it, then double until the deadline is met.
  std::int64_t ref = node * 8;
  int tries = 0;
  while (!rows.at(ref).feasible && tries++ < rq.max_doublings) ref *= 2;
  if (!rows.at(ref).feasible) {
    notes.push_back(fmt::format("{}: no plan fits up to {} GPUs", c.name, ref));
    return std::nullopt;
  }
  // Size from the effective rate: failures take their share at the reference count too.
  const CapacityRow& r0 = rows.at(ref);
  const double g0 = r0.failures.priced ? r0.failures.goodput.goodput_fraction : 1.0;
  const double effective = r0.tokens_per_s_per_gpu * (g0 > 0 ? g0 : 1.0);
  const double need = rq.tokens / (*rq.deadline_days * 86400.0 * effective);
  std::int64_t n = round_up_to_grid(need, node);
  auto meets = [&](std::int64_t k) { return rows.at(k).feasible && rows.at(k).meets_deadline; };
  // Fewer GPUs than the reference may not fit: start from the smallest count that does.
  while (n < ref && !rows.at(n).feasible) n *= 2;
  for (int k = 0; k < rq.max_doublings && !meets(n); ++k) {
    // Past the reference, a count where nothing fits means the batch no longer spreads over
    // more GPUs (too few sequences per data-parallel rank): more GPUs will not help.
    if (n > ref && !rows.at(n).feasible) break;
    n *= 2;
  }
  // Sized past what the batch can spread over: halve back to the largest count with a plan,
  // which is the fastest the run can go (the answer's row then says it misses the deadline).
  while (n > ref && !rows.at(n).feasible) n /= 2;
  // The fewest GPUs on the grid: step down while the half still meets the deadline.
  while (n / 2 >= node && meets(n / 2)) n /= 2;
  if (n / 2 >= node) rows.at(n / 2);
  if (rows.at(n).feasible) rows.at(n * 2);
  if (!meets(n)) notes.push_back(missed_deadline_note(rq, c, n, rows.all()));
  return n;
}

}  // namespace

CapacityReport plan_capacity(const CapacityRequest& rq) {
  check_request(rq);
  CapacityReport out;
  for (const ClusterSpec& c : rq.clusters) {
    if (rq.price_failures && !c.reliability.present)
      out.notes.push_back(fmt::format("{}: the profile has no [reliability] table; failures are not priced (ideal days)",
                                      c.name));
    RowsByCount rows(rq, c);
    std::optional<std::int64_t> answer;
    if (rq.gpus > 0) {
      // The count asked for, with its neighbours on the grid for comparison.
      answer = rq.gpus;
      if (rq.gpus / 2 >= 1 && rq.gpus % 2 == 0) rows.at(rq.gpus / 2);
      rows.at(rq.gpus);
      rows.at(rq.gpus * 2);
    } else {
      answer = deadline_answer(rq, c, rows, out.notes);
    }
    for (const auto& [n, r] : rows.all()) {
      CapacityRow x = r;
      if (answer) x.answer = n == *answer;
      out.rows.push_back(x);
    }
  }
  return out;
}

}  // namespace meshplan

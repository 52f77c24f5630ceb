// meshplan capacity (capacity.hpp).
#include "plan/capacity.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <stdexcept>

#include "spec/error.hpp"
#include "spec/limits.hpp"

namespace meshplan {

double training_days(double tokens, double tokens_per_s_per_gpu, std::int64_t gpus) {
  if (!(tokens_per_s_per_gpu > 0) || gpus <= 0) return 0;
  return tokens / (tokens_per_s_per_gpu * static_cast<double>(gpus)) / 86400.0;
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

}  // namespace

CapacityReport plan_capacity(const CapacityRequest& rq) {
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
  CapacityReport out;
  for (const ClusterSpec& c : rq.clusters) {
    const std::int64_t node = std::max(1, c.node.gpus_per_node);
    std::map<std::int64_t, CapacityRow> rows;
    auto at = [&](std::int64_t n) -> const CapacityRow& {
      auto it = rows.find(n);
      if (it == rows.end()) it = rows.emplace(n, evaluate(rq, c, n)).first;
      return it->second;
    };
    std::int64_t answer = 0;
    if (rq.gpus > 0) {
      answer = rq.gpus;
      if (rq.gpus / 2 >= 1 && rq.gpus % 2 == 0) at(rq.gpus / 2);
      at(rq.gpus);
      at(rq.gpus * 2);
    } else {
      // Per-GPU throughput changes slowly with scale: measure it at the smallest count (node x 2^k,
      // from 8 nodes) where a plan fits, size from it, then double until the deadline is met.
      std::int64_t ref = node * 8;
      int tries = 0;
      while (!at(ref).feasible && tries++ < rq.max_doublings) ref *= 2;
      if (!at(ref).feasible) {
        out.notes.push_back(fmt::format("{}: no plan fits up to {} GPUs", c.name, ref));
        for (auto& [n, r] : rows) out.rows.push_back(r);
        continue;
      }
      const double need = rq.tokens / (*rq.deadline_days * 86400.0 * at(ref).tokens_per_s_per_gpu);
      std::int64_t n = round_up_to_grid(need, node);
      // Fewer GPUs than the reference may not fit: start from the smallest count that does.
      while (n < ref && !at(n).feasible) n *= 2;
      for (int k = 0; k < rq.max_doublings && !(at(n).feasible && at(n).meets_deadline); ++k) {
        // Past the reference, a count where nothing fits means the batch no longer spreads over
        // more GPUs (too few sequences per data-parallel rank): more GPUs will not help.
        if (n > ref && !at(n).feasible) break;
        n *= 2;
      }
      // The fewest GPUs on the grid: step down while the half still meets the deadline.
      while (n / 2 >= node && at(n / 2).feasible && at(n / 2).meets_deadline) n /= 2;
      answer = n;
      if (n / 2 >= node) at(n / 2);
      if (at(n).feasible) at(n * 2);
      if (!(at(n).feasible && at(n).meets_deadline))
        out.notes.push_back(fmt::format("{}: no GPU count up to {} meets the {:g}-day deadline", c.name, n, *rq.deadline_days));
    }
    for (auto& [n, r] : rows) {
      CapacityRow x = r;
      x.answer = n == answer;
      out.rows.push_back(x);
    }
  }
  return out;
}

}  // namespace meshplan

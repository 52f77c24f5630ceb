// Goodput of a long run (goodput.hpp; docs/goodput.md).
#include "plan/goodput.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "spec/error.hpp"

namespace meshplan {

namespace {
constexpr double kSecondsPerYear = 365.25 * 86400.0;
}

JobInterruptions job_interruptions(const ClusterSpec& c, std::int64_t gpus) {
  const ReliabilitySpec& r = c.reliability;
  const double n_gpus = static_cast<double>(gpus);
  const double per_node = static_cast<double>(std::max(1, c.node.gpus_per_node));
  const double nodes = std::ceil(n_gpus / per_node);
  const double nics = n_gpus * static_cast<double>(c.node.nics_per_node) / per_node;
  JobInterruptions j;
  j.unexpected = {
      {"gpu", r.gpu_failures_per_gpu_year * n_gpus / kSecondsPerYear},
      {"hbm", r.hbm_failures_per_gpu_year * n_gpus / kSecondsPerYear},
      {"nic", r.nic_failures_per_nic_year * nics / kSecondsPerYear},
      {"switch", r.switch_failures_per_gpu_year * n_gpus / kSecondsPerYear},
      {"host", r.host_failures_per_node_year * nodes / kSecondsPerYear},
      {"software", r.software_failures_per_gpu_year * n_gpus / kSecondsPerYear},
  };
  for (const auto& x : j.unexpected) j.unexpected_per_s += x.interruptions_per_s;
  j.planned_per_s = r.planned_interruptions_per_gpu_year * n_gpus / kSecondsPerYear;
  j.mtbi_seconds = j.unexpected_per_s > 0 ? 1.0 / j.unexpected_per_s : std::numeric_limits<double>::infinity();
  return j;
}

CheckpointCost checkpoint_cost(double state_bytes_per_rank, const ClusterSpec& c, CheckpointMode mode) {
  CheckpointCost k;
  k.state_bytes_per_rank = state_bytes_per_rank;
  k.state_bytes_per_node = state_bytes_per_rank * std::max(1, c.node.gpus_per_node);
  k.copy_seconds = state_bytes_per_rank / c.node.host_d2h_bytes_per_s;
  k.write_seconds = k.state_bytes_per_node / c.reliability.storage_write_bytes_per_s;
  k.blocking_seconds = mode == CheckpointMode::async ? k.copy_seconds : k.copy_seconds + k.write_seconds;
  k.load_seconds = k.state_bytes_per_node / c.reliability.storage_read_bytes_per_s;
  return k;
}

double restart_seconds(const ClusterSpec& c, const CheckpointCost& ckpt) {
  return c.reliability.relaunch_seconds + ckpt.load_seconds + c.reliability.warmup_seconds;
}

double young_daly_interval_seconds(double checkpoint_seconds, double mtbi_seconds) {
  return std::sqrt(2.0 * checkpoint_seconds * mtbi_seconds);
}

double goodput_fraction(double interval_s, double checkpoint_s, double restart_s, double mtbi_s,
                        double planned_per_s, double planned_cost_s) {
  if (!(interval_s > 0)) return 0;
  const double segment = interval_s + checkpoint_s;
  // Renewal argument: a segment of length s is retried until it runs failure-free; each failed
  // try costs the time to the failure plus the restart, so E[time] = (M + R)(e^(s/M) - 1).
  const double expected_segment =
      std::isinf(mtbi_s) ? segment : (mtbi_s + restart_s) * std::expm1(segment / mtbi_s);
  const double unexpected = interval_s / expected_segment;
  // A planned stop takes planned_cost_s of wall clock and loses nothing: of wall time T, a
  // fraction planned_per_s x planned_cost_s is spent stopped.
  return unexpected * std::max(0.0, 1.0 - planned_per_s * planned_cost_s);
}

std::int64_t young_daly_interval_steps(const JobInterruptions& j, const CheckpointCost& k, CheckpointMode mode,
                                       double step_time_s) {
  if (!(step_time_s > 0) || std::isinf(j.mtbi_seconds)) return 0;
  const double tau = young_daly_interval_seconds(k.blocking_seconds, j.mtbi_seconds);
  double steps = std::max(1.0, std::round(tau / step_time_s));
  if (mode == CheckpointMode::async) steps = std::max(steps, std::ceil(k.write_seconds / step_time_s));
  return static_cast<std::int64_t>(std::min(steps, 1e12));
}

Goodput plan_goodput(const GoodputInputs& in) {
  Goodput g;
  const double step = in.step_time_s;
  const double mtbi = in.interruptions.mtbi_seconds;
  const CheckpointCost& k = in.checkpoint;
  if (!(step > 0) || !(in.ideal_run_seconds > 0)) return g;
  if (in.interval_override_s < 0 || !std::isfinite(in.interval_override_s))
    throw InputError("", "--checkpoint-interval", "must be positive");
  if (in.interval_override_s > in.ideal_run_seconds)
    throw InputError("", "--checkpoint-interval",
                     fmt::format("{:.0f} s is longer than the whole run ({:.0f} s without failures)",
                                 in.interval_override_s, in.ideal_run_seconds));
  g.young_daly_interval_s = young_daly_interval_seconds(k.blocking_seconds, mtbi);
  const double wanted = in.interval_override_s > 0 ? in.interval_override_s : g.young_daly_interval_s;
  const auto run_steps = static_cast<std::int64_t>(std::ceil(in.ideal_run_seconds / step));
  std::int64_t steps = std::clamp<std::int64_t>(std::llround(std::min(wanted, in.ideal_run_seconds) / step), 1, run_steps);
  // An async save must be durable before the next one starts (torchtitan waits on it).
  if (in.mode == CheckpointMode::async) {
    const auto min_steps = static_cast<std::int64_t>(std::ceil(k.write_seconds / step));
    if (steps < min_steps) {
      steps = std::min(min_steps, run_steps);
      g.notes.push_back(fmt::format("interval raised to {} steps: an async save takes {:.0f} s to write", steps,
                                    k.write_seconds));
    }
  }
  if (in.interval_override_s == 0 && g.young_daly_interval_s > in.ideal_run_seconds)
    g.notes.push_back("the Young/Daly interval is longer than the run: one checkpoint at the end");
  g.interval_steps = steps;
  g.interval_s = static_cast<double>(steps) * step;
  // Async: a failure during the background write falls back to the checkpoint before, so the
  // write time adds to the work lost per interruption.
  const double at_risk = in.mode == CheckpointMode::async ? k.write_seconds : 0.0;
  const double restart = in.restart_s + at_risk;
  const double planned_cost = k.copy_seconds + k.write_seconds + in.restart_s;
  g.lost_per_interruption_s = 0.5 * (g.interval_s + k.blocking_seconds) + restart;
  g.checkpoint_overhead_fraction = k.blocking_seconds / (g.interval_s + k.blocking_seconds);
  g.goodput_fraction = goodput_fraction(g.interval_s, k.blocking_seconds, restart, mtbi,
                                        in.interruptions.planned_per_s, planned_cost);
  if (!(g.goodput_fraction > 0)) {
    g.run_seconds = std::numeric_limits<double>::infinity();
    g.notes.push_back("interruptions come faster than a checkpoint and a restart: the run never finishes");
    return g;
  }
  g.run_seconds = in.ideal_run_seconds / g.goodput_fraction;
  g.expected_interruptions = g.run_seconds * in.interruptions.unexpected_per_s;
  g.expected_planned = g.run_seconds * in.interruptions.planned_per_s;
  return g;
}

}  // namespace meshplan

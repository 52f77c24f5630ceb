#include "workload/pipeline_schedule.hpp"

#include <algorithm>

namespace meshplan {

int chunks_per_stage(const Plan& p) {
  return p.schedule == PipelineSchedule::interleaved_1f1b ? std::max(1, p.mesh.vpp) : 1;
}

std::vector<Step> stage_order(const Plan& p, int stage, std::int64_t m) {
  const int pp = p.mesh.pp;
  const int v = chunks_per_stage(p);
  std::vector<Step> order;
  if (pp == 1 || p.schedule == PipelineSchedule::gpipe) {
    // pp == 1: each micro-batch runs forward then backward (gradient accumulation).
    if (pp == 1) {
      for (std::int64_t mb = 0; mb < m; ++mb) {
        for (int c = 0; c < v; ++c) order.push_back({true, mb, c, true});
        for (int c = v - 1; c >= 0; --c) order.push_back({false, mb, c, true});
      }
      return order;
    }
    for (std::int64_t mb = 0; mb < m; ++mb) order.push_back({true, mb, 0});
    for (std::int64_t mb = 0; mb < m; ++mb) order.push_back({false, mb, 0});
    return order;
  }
  const std::int64_t total = m * v;
  auto fwd_at = [&](std::int64_t k) {
    const std::int64_t group = k / (static_cast<std::int64_t>(pp) * v);
    return Step{true, group * pp + k % pp, static_cast<int>((k / pp) % v)};
  };
  auto bwd_at = [&](std::int64_t k) {
    const std::int64_t group = k / (static_cast<std::int64_t>(pp) * v);
    return Step{false, group * pp + k % pp, v - 1 - static_cast<int>((k / pp) % v)};
  };
  // Megatron's warm-up: pp - stage - 1 forwards (interleaved: 2 (pp - stage - 1) + (v - 1) pp),
  // then one forward and one backward in turn, then the cool-down backwards.
  std::int64_t warmup = v == 1 ? pp - stage - 1 : 2LL * (pp - stage - 1) + static_cast<std::int64_t>(v - 1) * pp;
  // The expert all-to-all overlap merges each steady-state forward with a backward, so a forward's
  // output leaves only when the merged step ends: one more warm-up forward keeps the next stage fed
  // (Megatron-Core's get_pp_rank_microbatches under overlap_moe_expert_parallel_comm).
  if (p.moe_a2a_overlap && p.mesh.ep > 1) ++warmup;
  warmup = std::min(warmup, total);
  std::int64_t f = 0, b = 0;
  for (; f < warmup; ++f) order.push_back(fwd_at(f));
  while (f < total) {
    order.push_back(fwd_at(f++));
    order.back().steady = true;
    order.push_back(bwd_at(b++));
    order.back().steady = true;
  }
  while (b < total) order.push_back(bwd_at(b++));
  return order;
}

std::vector<Step> stage_steps(const Plan& p, int stage, std::int64_t m, std::int64_t per_run) {
  std::vector<Step> order;
  for (std::int64_t base = 0; base < m; base += per_run)
    for (Step st : stage_order(p, stage, std::min(per_run, m - base))) {
      st.mb += base;
      order.push_back(st);
    }
  return order;
}

std::int64_t microbatches_per_run(std::int64_t microbatches, std::int64_t pp_microbatches, int pp) {
  return pp_microbatches > 0 && pp > 1 ? std::min(pp_microbatches, microbatches) : microbatches;
}

HeldForwards held_forwards(const Plan& p, int stage, std::int64_t per_run, const std::vector<double>& weight_per_chunk) {
  const int v = chunks_per_stage(p);
  const int pp = std::max(1, p.mesh.pp);
  const bool gpipe = pp > 1 && p.schedule == PipelineSchedule::gpipe;
  const std::int64_t run = std::max<std::int64_t>(1, gpipe ? per_run : std::min<std::int64_t>(per_run, 4LL * pp));
  std::vector<std::int64_t> held(static_cast<std::size_t>(v), 0);
  auto weight = [&] {
    double w = 0;
    for (int c = 0; c < v; ++c)
      w += static_cast<double>(held[static_cast<std::size_t>(c)]) * weight_per_chunk[static_cast<std::size_t>(c)];
    return w;
  };
  HeldForwards out;
  double best[4] = {-1, -1, -1, -1};
  std::vector<std::int64_t>* slots[4] = {&out.any, &out.last_chunk, &out.run_last, &out.run_last_last_chunk};
  for (const Step& st : stage_order(p, stage, run)) {
    auto& n = held[static_cast<std::size_t>(st.chunk)];
    if (st.forward) {
      ++n;
      continue;
    }
    const double w = weight();
    const bool moment[4] = {true, st.chunk == v - 1, st.mb == run - 1, st.chunk == v - 1 && st.mb == run - 1};
    for (int k = 0; k < 4; ++k)
      if (moment[k] && w > best[k]) {
        best[k] = w;
        *slots[k] = held;
      }
    --n;
  }
  return out;
}

}  // namespace meshplan

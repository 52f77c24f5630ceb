#include "plan/planner.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <map>
#include <thread>

#include "cost/collective_cost.hpp"
#include "sim/step_simulator.hpp"
#include "spec/pipeline_split.hpp"
#include "workload/memory_estimate.hpp"
#include "workload/step_program.hpp"

namespace meshplan {

bool runtime_supports(Runtime r, const Plan& p) {
  const Mesh& m = p.mesh;
  switch (r) {
    case Runtime::composer_fsdp1:
    case Runtime::composer_fsdp2:
      // llm-foundry: FSDP (+HSDP), MLP-only TP, no pipeline or context parallelism, AC whole blocks.
      return m.pp == 1 && m.cp == 1 && (m.tp == 1 || p.tp_style == TpStyle::mlp_only) &&
             (p.sharding == Sharding::zero3 || p.sharding == Sharding::zero2 || p.sharding == Sharding::none) &&
             (p.ac == AcMode::none || p.ac == AcMode::full);
    case Runtime::torchtitan_fsdp2:
      return p.tp_style == TpStyle::full && (p.sharding == Sharding::zero3 || p.sharding == Sharding::none) &&
             p.ac != AcMode::selective_attn && (m.tp == 1 || p.sequence_parallel);
    case Runtime::megatron:
      return p.tp_style == TpStyle::full && (p.sharding == Sharding::zero1 || p.sharding == Sharding::none) &&
             p.ac != AcMode::selective_op && p.ac != AcMode::selective_layer;
    case Runtime::generic: return true;
  }
  return false;
}

std::string describe_layout(const Plan& p) {
  const Mesh& m = p.mesh;
  std::string s;
  auto add = [&](const char* name, int v) {
    if (v > 1) s += fmt::format("{}{}{}", s.empty() ? "" : " x ", name, v);
  };
  add("PP", m.pp);
  add("VPP", m.vpp);
  add("DPr", m.dp_replicate);
  add("FSDP", m.dp_shard);
  add("CP", m.cp);
  add("TP", m.tp);
  return s.empty() ? "1 GPU" : s;
}

namespace {

std::vector<int> divisors_upto(std::int64_t n, int cap) {
  std::vector<int> d;
  for (int i = 1; i <= cap && i <= n; ++i)
    if (n % i == 0) d.push_back(i);
  return d;
}

// Plan skeleton for a runtime: its defaults and quirks.
Plan base_plan(Runtime r) {
  Plan p;
  p.runtime = r;
  switch (r) {
    case Runtime::composer_fsdp1:
      p.root_unsharded = true;
      p.backward_prefetch = BackwardPrefetch::backward_post;
      p.tp_style = TpStyle::mlp_only;
      break;
    case Runtime::torchtitan_fsdp2:
      p.sequence_parallel = true;
      break;
    case Runtime::megatron:
      p.sharding = Sharding::zero1;
      p.grad_sync_every_microbatch = false;
      p.sequence_parallel = true;
      break;
    default: break;
  }
  return p;
}

// A rough step time for pruning: compute at a nominal efficiency, blocking TP communication,
// the FSDP gathers that compute cannot hide, and the pipeline bubble.
double closed_form_step_seconds(const ModelSpec& m, const Plan& p, const Job& j, const ClusterSpec& c) {
  const double world = static_cast<double>(p.mesh.world());
  const double tokens_per_gpu = static_cast<double>(j.global_batch) * static_cast<double>(j.seq_len) / world;
  const double peak = c.peak_flops_per_s(p.compute_dtype);
  const double recompute = p.ac == AcMode::full ? 1.0 / 3.0
                           : p.ac == AcMode::selective_op ? 0.12
                           : p.ac == AcMode::selective_layer ? 1.0 / (3.0 * std::max(1, p.ac_every_n))
                                                             : 0.0;
  const double compute = model_flops_per_token(m, j.seq_len) * tokens_per_gpu * (1 + recompute) / (0.6 * peak);
  const int gpn = std::max(1, c.node.gpus_per_node);
  const double layers_per_stage = static_cast<double>(m.n_layers) / p.mesh.pp;
  const double mbs = static_cast<double>(j.grad_accum);
  double tp_time = 0;
  if (p.mesh.tp > 1) {
    const double act = bytes_per_element(p.compute_dtype) * static_cast<double>(j.seq_len / p.mesh.cp) *
                       static_cast<double>(j.micro_batch) * static_cast<double>(m.d_model);
    const CollectiveOp op = p.sequence_parallel ? CollectiveOp::all_gather : CollectiveOp::all_reduce;
    const double per = estimate_collective(c, op, act * (p.tp_style == TpStyle::mlp_only ? p.mesh.tp : 1),
                                           group_placement(p.mesh, GroupKind::tp, gpn)).seconds;
    const double per_layer = (p.sequence_parallel ? 8 : 4) * (p.ac == AcMode::full ? 1.5 : 1.0) * per;
    tp_time = per_layer * layers_per_stage * mbs;
  }
  double fsdp_exposed = 0;
  const std::int64_t shard = static_cast<std::int64_t>(p.mesh.dp_shard) * p.mesh.cp;
  if (shard > 1 && (p.sharding == Sharding::zero3 || p.sharding == Sharding::zero2)) {
    const double unit = static_cast<double>(param_counts(m).per_layer()) / p.mesh.tp;
    const double ag = estimate_collective(c, CollectiveOp::all_gather, 2 * unit,
                                          group_placement(p.mesh, GroupKind::fsdp, gpn)).seconds;
    const double rs = estimate_collective(c, CollectiveOp::reduce_scatter, bytes_per_element(p.reduce_dtype) * unit,
                                          group_placement(p.mesh, GroupKind::fsdp, gpn)).seconds;
    const double gathers = p.reshard_after_forward ? 2 : 1;
    const double per_mb = layers_per_stage * (gathers * ag + rs);
    const double total = per_mb * (p.mesh.pp > 1 && !p.reshard_after_forward ? 1 : mbs);
    fsdp_exposed = std::max(0.0, total - 0.8 * compute / p.mesh.pp);
  }
  double bubble = 0;
  if (p.mesh.pp > 1) {
    const double v = std::max(1, p.mesh.vpp);
    bubble = (p.mesh.pp - 1) / (v * mbs + p.mesh.pp - 1);
  }
  return (compute + tp_time) / std::max(0.05, 1 - bubble) + fsdp_exposed;
}

struct Enumerated {
  std::vector<PlanCandidate> feasible;
  std::int64_t evaluated = 0;
};

Enumerated enumerate(const PlanRequest& rq, std::int64_t global_batch) {
  Enumerated out;
  const ModelSpec& m = rq.model;
  const ClusterSpec& c = rq.cluster;
  const int gpn = std::max(1, c.node.gpus_per_node);
  const std::int64_t n = rq.n_gpus;
  const bool foundry = rq.runtime == Runtime::composer_fsdp1 || rq.runtime == Runtime::composer_fsdp2;
  const bool titan = rq.runtime == Runtime::torchtitan_fsdp2;
  std::vector<AcMode> acs = foundry ? std::vector<AcMode>{AcMode::none, AcMode::full}
                            : titan ? std::vector<AcMode>{AcMode::none, AcMode::selective_op, AcMode::full}
                                    : std::vector<AcMode>{AcMode::none, AcMode::selective_attn, AcMode::full};
  std::vector<Dtype> reduces = foundry ? std::vector<Dtype>{Dtype::fp32, Dtype::bf16} : std::vector<Dtype>{Dtype::fp32};
  const double budget = c.gpu.hbm_bytes * (1 - rq.headroom_fraction);

  for (int tp : divisors_upto(gpn, gpn)) {
    if (foundry ? (m.ffn_hidden % tp != 0) : (m.n_heads % tp != 0 || m.n_kv_heads % tp != 0)) continue;
    for (int pp : divisors_upto(n / tp, foundry ? 1 : 64)) {
      if (!split_layers(m.n_layers, pp)) continue;
      for (int cp : std::vector<int>{1, 2, 4, 8}) {
        if (foundry && cp > 1) break;
        if (cp > 1 && rq.seq_len % (2LL * cp * tp) != 0) continue;
        const std::int64_t rest = n / (static_cast<std::int64_t>(tp) * pp);
        if (n % (static_cast<std::int64_t>(tp) * pp) != 0 || rest % cp != 0) continue;
        const std::int64_t dp = rest / cp;
        if (global_batch % dp != 0) continue;
        const std::int64_t per_rank = global_batch / dp;
        std::vector<int> vpps = {1};
        if (pp > 1 && !foundry)
          for (int v : {2, 4})
            if (split_layers(m.n_layers, pp * v)) vpps.push_back(v);
        // Data-parallel splits: full sharding over dp, or HSDP with the shard group inside a node.
        std::vector<std::pair<std::int64_t, std::int64_t>> dp_splits;  // (replicate, shard)
        if (rq.runtime == Runtime::megatron) {
          dp_splits.push_back({dp, 1});
        } else {
          dp_splits.push_back({1, dp});
          const std::int64_t node_shard = std::max<std::int64_t>(1, gpn / (static_cast<std::int64_t>(tp) * cp));
          if (dp > node_shard && dp % node_shard == 0 && node_shard > 1) dp_splits.push_back({dp / node_shard, node_shard});
        }
        for (const auto& [rep, shard] : dp_splits) {
          for (int v : vpps) {
            for (std::int64_t mb : {1, 2, 4, 8}) {
              if (per_rank % mb != 0) continue;
              const std::int64_t accum = per_rank / mb;
              if (pp > 1 && accum < pp) continue;  // fewer micro-batches than stages: mostly bubble
              if (v > 1 && accum % pp != 0) continue;  // interleaving needs whole rounds of pp
              for (AcMode ac : acs) {
                for (Dtype reduce : reduces) {
                  for (bool zero2 : foundry ? std::vector<bool>{false, true} : std::vector<bool>{false}) {
                   // Activation CPU offload: Composer's activation_cpu_offload (save_on_cpu). Parameter
                   // offload is not searched: its host-side optimizer step is not simulated yet.
                   for (bool offload : foundry ? std::vector<bool>{false, true} : std::vector<bool>{false}) {
                    ++out.evaluated;
                    Plan p = base_plan(rq.runtime);
                    p.mesh.tp = tp;
                    p.mesh.pp = pp;
                    p.mesh.vpp = v;
                    p.mesh.cp = cp;
                    p.mesh.dp_replicate = static_cast<int>(rep);
                    p.mesh.dp_shard = static_cast<int>(shard);
                    p.sequence_parallel = tp > 1 && p.tp_style == TpStyle::full;
                    p.schedule = v > 1 ? PipelineSchedule::interleaved_1f1b : PipelineSchedule::one_f_one_b;
                    if (rq.runtime != Runtime::megatron) {
                      p.sharding = shard * cp > 1 ? (zero2 ? Sharding::zero2 : Sharding::zero3) : Sharding::none;
                      p.reshard_after_forward = !zero2 && !(titan && pp > 1);
                    } else {
                      p.sharding = rep > 1 ? Sharding::zero1 : Sharding::none;
                    }
                    if (zero2 && shard * cp <= 1) continue;
                    p.ac = ac;
                    p.act_offload = offload;
                    p.reduce_dtype = reduce;
                    p.mixed_precision_name = foundry ? (reduce == Dtype::bf16 ? "PURE" : "DEFAULT") : "";
                    if (!runtime_supports(rq.runtime, p)) continue;
                    Job j;
                    j.seq_len = rq.seq_len;
                    j.global_batch = global_batch;
                    j.micro_batch = mb;
                    j.grad_accum = accum;
                    const MemoryEstimate mem = estimate_memory(m, p, j, c);
                    double peak = 0;
                    for (const auto& s : mem.stages) peak = std::max(peak, s.peak_bytes);
                    if (peak > budget) continue;
                    PlanCandidate cand;
                    cand.plan = p;
                    cand.job = j;
                    cand.peak_bytes = peak;
                    const double step = closed_form_step_seconds(m, p, j, c);
                    cand.estimate_tokens_per_s_per_gpu =
                        static_cast<double>(global_batch * rq.seq_len) / step / static_cast<double>(n);
                    out.feasible.push_back(std::move(cand));
                   }
                  }
                }
              }
            }
          }
        }
      }
    }
  }
  return out;
}

std::string winner_sentence(const PlanCandidate& a, const PlanCandidate& b, int gpn) {
  const StepResult& ra = a.result;
  const StepResult& rb = b.result;
  // The breakdown term where the winner saves the most time.
  std::string best_key;
  double best_gain = 0;
  for (const auto& [k, v] : rb.breakdown_s) {
    const double gain = v - (ra.breakdown_s.count(k) ? ra.breakdown_s.at(k) : 0.0);
    if (gain > best_gain) {
      best_gain = gain;
      best_key = k;
    }
  }
  // Name the plans by their layout, plus whatever else tells them apart.
  auto name = [&](const PlanCandidate& x, const PlanCandidate& other) {
    std::string n = describe_layout(x.plan);
    if (x.job.micro_batch != other.job.micro_batch) n += fmt::format(", micro-batch {}", x.job.micro_batch);
    if (x.plan.ac != other.plan.ac) n += fmt::format(", AC {}", to_string(x.plan.ac));
    if (x.plan.reduce_dtype != other.plan.reduce_dtype) n += fmt::format(", reduce {}", to_string(x.plan.reduce_dtype));
    if (x.plan.sharding != other.plan.sharding) n += fmt::format(", {}", to_string(x.plan.sharding));
    if (x.plan.mesh.vpp != other.plan.mesh.vpp) n += fmt::format(", vpp {}", x.plan.mesh.vpp);
    if (x.plan.act_offload != other.plan.act_offload) n += x.plan.act_offload ? ", activation offload" : ", no offload";
    return n;
  };
  std::string s = fmt::format("{} beats {} by {:.1f}% ({:.0f} vs {:.0f} tokens/s/GPU)", name(a, b), name(b, a),
                              100 * (ra.tokens_per_s_per_gpu / rb.tokens_per_s_per_gpu - 1), ra.tokens_per_s_per_gpu,
                              rb.tokens_per_s_per_gpu);
  if (!best_key.empty())
    s += fmt::format(": it spends {:.3f} s less per step on {}", best_gain, best_key == "exposed_comm" ? "exposed communication" : best_key);
  s += ".";
  std::vector<std::string> reasons;
  if (a.plan.mesh.tp > 1 && a.plan.mesh.tp <= gpn)
    reasons.push_back(fmt::format("TP {} keeps its collectives on NVLink", a.plan.mesh.tp));
  const int shard = a.plan.mesh.dp_shard * a.plan.mesh.cp;
  const double fsdp_exposed = (ra.exposed_comm_s.count("fsdp_all_gather") ? ra.exposed_comm_s.at("fsdp_all_gather") : 0.0);
  if (shard > 1 && fsdp_exposed < 0.05 * ra.step_time_s)
    reasons.push_back(fmt::format("FSDP over {} ranks hides its all-gathers behind compute", shard));
  if (a.plan.mesh.pp > 1)
    reasons.push_back(fmt::format("PP {} costs a {:.0f}% bubble", a.plan.mesh.pp,
                                  100 * ra.breakdown_s.at("bubble") / ra.step_time_s));
  if (!reasons.empty()) {
    s += " ";
    for (std::size_t i = 0; i < reasons.size(); ++i) s += (i ? "; " : "") + reasons[i];
    s += ".";
  }
  return s;
}

}  // namespace

StepResult simulate_steady_state(const ModelSpec& m, const Plan& p, const Job& j, const ClusterSpec& c) {
  // A step repeats the same micro-batch pattern: with m micro-batches its time is
  // fill + m x period (1F1B, GPipe, interleaved, gradient accumulation alike). Simulating two
  // shorter steps with m0 < m1 micro-batches gives fill and period; the long step is the line
  // through them. Exact for periodic schedules; used when m is large.
  const std::int64_t m_full = std::max<std::int64_t>(1, j.grad_accum);
  const std::int64_t unit = p.mesh.pp > 1 ? p.mesh.pp : 1;  // keep whole pipeline rounds
  const std::int64_t m0 = unit, m1 = 2 * unit;
  if (m_full <= m1 + unit || j.pp_microbatches > 0) return simulate_step(m, p, j, c).result;
  auto shortened = [&](std::int64_t mbs) {
    Job s = j;
    s.grad_accum = mbs;
    s.global_batch = j.global_batch / m_full * mbs;
    return simulate_step(m, p, s, c).result;
  };
  const StepResult r0 = shortened(m0);
  StepResult r1 = shortened(m1);
  const double scale = static_cast<double>(m_full - m1) / static_cast<double>(m1 - m0);
  auto extend = [&](double v1, double v0) { return v1 + scale * (v1 - v0); };
  r1.step_time_s = extend(r1.step_time_s, r0.step_time_s);
  for (auto& [k, v] : r1.breakdown_s) v = extend(v, r0.breakdown_s.count(k) ? r0.breakdown_s.at(k) : 0.0);
  for (auto& [k, v] : r1.exposed_comm_s) v = extend(v, r0.exposed_comm_s.count(k) ? r0.exposed_comm_s.at(k) : 0.0);
  for (auto& [k, v] : r1.comm_bytes) v = extend(v, r0.comm_bytes.count(k) ? r0.comm_bytes.at(k) : 0.0);
  const double tokens = static_cast<double>(j.global_batch) * static_cast<double>(j.seq_len);
  r1.tokens_per_s = tokens / r1.step_time_s;
  const double world = static_cast<double>(p.mesh.world());
  const double mfu_per_tps = r1.tokens_per_s_per_gpu > 0 ? r1.mfu / r1.tokens_per_s_per_gpu : 0;
  const double hfu_per_mfu = r1.mfu > 0 ? r1.hfu / r1.mfu : 0;
  r1.tokens_per_s_per_gpu = r1.tokens_per_s / world;
  r1.mfu = mfu_per_tps * r1.tokens_per_s_per_gpu;
  r1.hfu = hfu_per_mfu * r1.mfu;
  return r1;
}

PlanSearch search_plans(const PlanRequest& rq, const std::function<void(std::size_t, std::size_t)>& progress) {
  const auto t0 = std::chrono::steady_clock::now();
  PlanSearch out;
  std::int64_t global_batch = rq.global_batch;
  if (global_batch <= 0 && rq.global_batch_tokens > 0)
    global_batch = std::max<std::int64_t>(1, (rq.global_batch_tokens + rq.seq_len / 2) / rq.seq_len);
  Enumerated e = enumerate(rq, global_batch);
  out.evaluated = e.evaluated;
  out.feasible = static_cast<std::int64_t>(e.feasible.size());
  // Closed-form prune, best first; ties broken by the layout for determinism.
  std::stable_sort(e.feasible.begin(), e.feasible.end(), [](const PlanCandidate& a, const PlanCandidate& b) {
    return a.estimate_tokens_per_s_per_gpu > b.estimate_tokens_per_s_per_gpu;
  });
  const std::size_t n_sim = std::min<std::size_t>(e.feasible.size(),
                                                  static_cast<std::size_t>(std::max({1, rq.simulate_budget, rq.top_k})));
  std::vector<PlanCandidate> sims(e.feasible.begin(), e.feasible.begin() + static_cast<std::ptrdiff_t>(n_sim));
  std::atomic<std::size_t> next{0}, done{0};
  // A plan the simulator rejects is dropped, never fatal (and never escapes a thread).
  auto simulate_one = [&](std::size_t i) {
    try {
      sims[i].result = simulate_steady_state(rq.model, sims[i].plan, sims[i].job, rq.cluster);
      sims[i].simulated = true;
    } catch (const std::exception&) {
      sims[i].simulated = false;
    }
    ++done;
  };
  auto worker = [&]() {
    for (std::size_t i = next++; i < sims.size(); i = next++) simulate_one(i);
  };
  std::vector<std::thread> pool;
  const int threads = std::max(1, rq.threads);
  for (int t = 1; t < threads; ++t) pool.emplace_back(worker);
  // The calling thread works too, and reports progress between plans.
  for (std::size_t i = next++; i < sims.size(); i = next++) {
    simulate_one(i);
    if (progress) progress(done.load(), sims.size());
  }
  for (auto& th : pool) th.join();
  if (progress) progress(sims.size(), sims.size());
  sims.erase(std::remove_if(sims.begin(), sims.end(), [](const PlanCandidate& c) { return !c.simulated; }),
             sims.end());
  std::stable_sort(sims.begin(), sims.end(), [](const PlanCandidate& a, const PlanCandidate& b) {
    return a.result.tokens_per_s_per_gpu > b.result.tokens_per_s_per_gpu;
  });
  out.ranked = std::move(sims);
  // Pareto front: no other plan is at least as fast with less memory.
  for (std::size_t i = 0; i < out.ranked.size(); ++i) {
    bool dominated = false;
    for (std::size_t k = 0; k < out.ranked.size() && !dominated; ++k) {
      if (k == i) continue;
      const auto& a = out.ranked[k];
      const auto& b = out.ranked[i];
      dominated = a.result.tokens_per_s_per_gpu >= b.result.tokens_per_s_per_gpu && a.peak_bytes <= b.peak_bytes &&
                  (a.result.tokens_per_s_per_gpu > b.result.tokens_per_s_per_gpu || a.peak_bytes < b.peak_bytes);
    }
    if (!dominated) out.pareto.push_back(i);
  }
  if (out.ranked.size() >= 2)
    out.why_winner = winner_sentence(out.ranked[0], out.ranked[1], rq.cluster.node.gpus_per_node);
  if (e.feasible.size() > n_sim)
    out.notes.push_back(fmt::format("{} feasible plans; the {} best by the closed-form estimate were simulated",
                                    e.feasible.size(), n_sim));
  if (out.feasible == 0) out.notes.push_back("no layout fits in memory with the requested headroom");
  out.search_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return out;
}

}  // namespace meshplan

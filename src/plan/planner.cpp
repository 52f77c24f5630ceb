#include "plan/planner.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <numeric>
#include <array>
#include <functional>
#include <optional>
#include <atomic>
#include <chrono>
#include <cmath>
#include <bit>
#include <map>
#include <set>
#include <tuple>
#include <thread>

#include "cost/collective_cost.hpp"
#include "cost/compute_cost.hpp"
#include "plan/step_fingerprint.hpp"
#include "sim/step_simulator.hpp"
#include "spec/numerics.hpp"
#include "spec/pipeline_split.hpp"
#include "spec/runtimes.hpp"
#include "spec/units.hpp"
#include "spec/validated_mfu.hpp"
#include "workload/eager_ops.hpp"
#include "workload/memory_estimate.hpp"
#include "workload/step_program.hpp"

namespace meshplan {

bool runtime_supports(Runtime r, const Plan& p) { return runtime_info(r).supports(p); }

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
  add("EP", m.ep);
  return s.empty() ? "1 GPU" : s;
}

std::string describe_setting_differences(const Plan& x, const Plan& other) {
  std::string n;
  if (x.ac != other.ac) n += fmt::format(", AC {}", to_string(x.ac));
  if (x.reduce_dtype != other.reduce_dtype) n += fmt::format(", reduce {}", to_string(x.reduce_dtype));
  if (x.sharding != other.sharding) n += fmt::format(", {}", to_string(x.sharding));
  if (x.mesh.vpp != other.mesh.vpp) n += fmt::format(", vpp {}", x.mesh.vpp);
  if (x.act_offload != other.act_offload) n += x.act_offload ? ", activation offload" : ", no offload";
  if (x.backward_prefetch != other.backward_prefetch) n += fmt::format(", {}", to_string(x.backward_prefetch));
  return n;
}

namespace {

// The closed-form step estimate below only orders candidates for the prune: the simulator, not
// these numbers, ranks the survivors. Each constant still changes which plans survive, so each
// says where it comes from.

// Share of dense peak FLOP/s the estimate assumes for all compute. The shipped H100/A100 profiles
// put large training GEMMs at 0.7-0.8 of peak before their sustained-clock factor (0.9); attention
// and element-wise kernels run below that, so a whole step sustains about 0.6 (Narayanan et al.,
// SC'21, report 52 % of peak end to end for GPT-3-scale models on A100 with Megatron-LM).
constexpr double kNominalComputeEfficiency = 0.6;
// Selective per-op checkpointing (torchtitan "op" SAC, as lowered in step_program.cpp) recomputes
// every second matmul of a block (wk, wo, w3 of wq wk wv wo w1 w3 w2: ~36 % of a Llama block's
// linear FLOPs at GQA 8:1 and FFN 3.5 d) plus its element-wise kernels, about a third of the
// forward, i.e. ~1/9 of forward + backward (3 forward units); rounded up to 0.12 for the
// element-wise work.
constexpr double kSelectiveOpRecomputeFraction = 0.12;
// Full checkpointing repeats the forward, and with it the forward's TP collectives: forward and
// backward issue the same number of collectives per block (Korthikanti et al. 2022, §4.2.2), so
// the recompute adds half again.
constexpr double kFullAcTpCommFactor = 1.5;
// Share of a stage's compute behind which FSDP's gathers and reduce-scatters can hide: a
// judgement, neither measured nor fitted. The first unit's all-gather and the last unit's
// reduce-scatter have no compute to overlap with, and the collectives slow the kernels they
// overlap (comm_interference in the profiles); the simulator models both, the estimate only has
// to charge some exposure.
constexpr double kFsdpOverlappableCompute = 0.8;
// TP collectives per transformer block and micro-batch (Megatron's f/g operators, Shoeybi et al.
// 2019): without sequence parallelism an all-reduce after attention and after the MLP in the
// forward and two in the backward; with it each becomes an all-gather plus a reduce-scatter.
constexpr double kTpCollectivesPerBlock = 4;
constexpr double kTpCollectivesPerBlockSp = 8;

// The searched grid: a choice of what is worth simulating, not a derivation. CP beyond 8 cuts an
// 8k sequence into 2 x cp chunks of 512 tokens or fewer, too short to keep attention kernels
// efficient; a micro-batch of 8 sequences of 8k tokens already gives GEMMs 64k rows, so larger
// ones add activation memory without speed; a pipeline deeper than 64 stages leaves under two
// 405B blocks per stage.
constexpr int kMaxPipelineStages = 64;
constexpr std::array<int, 4> kContextParallelDegrees = {1, 2, 4, 8};
constexpr std::array<std::int64_t, 4> kMicroBatchSizes = {1, 2, 4, 8};
constexpr std::array<int, 2> kVirtualStages = {2, 4};
// The second round's margin on the largest simulated / estimated throughput ratio seen: the
// unsimulated plans were estimated by the same closed form, but none of them was checked.
constexpr double kSecondRoundMargin = 1.05;

// In the winner sentence, FSDP all-gathers exposed for under this share of the step count as
// hidden behind compute.
constexpr double kHiddenCommStepFraction = 0.05;

std::vector<int> divisors_upto(std::int64_t n, int cap) {
  std::vector<int> d;
  for (int i = 1; i <= cap && i <= n; ++i)
    if (n % i == 0) d.push_back(i);
  return d;
}

// Plan skeleton for a runtime: its defaults and quirks (its registry row).
Plan base_plan(Runtime r) {
  Plan p;
  p.runtime = r;
  runtime_info(r).planner_defaults(p);
  return p;
}

double recompute_fraction(const Plan& p) {
  switch (p.ac) {
    case AcMode::full: return 1.0 / 3.0;  // one more forward on top of forward + backward (3 units)
    case AcMode::selective_op: return kSelectiveOpRecomputeFraction;
    case AcMode::selective_layer: return 1.0 / (3.0 * std::max(1, p.ac_every_n));
    default: return 0.0;
  }
}

// Blocking TP communication of one step on a stage.
double tp_seconds(const ModelSpec& m, const Plan& p, const Job& j, const ClusterSpec& c) {
  if (p.mesh.tp <= 1) return 0;
  const int gpn = std::max(1, c.node.gpus_per_node);
  const double act = bytes_per_element(p.compute_dtype) * static_cast<double>(j.seq_len / p.mesh.cp) *
                     static_cast<double>(j.micro_batch) * static_cast<double>(m.d_model);
  const CollectiveOp op = p.sequence_parallel ? CollectiveOp::all_gather : CollectiveOp::all_reduce;
  const double per = estimate_collective(c, op, act * (p.tp_style == TpStyle::mlp_only ? p.mesh.tp : 1),
                                         group_placement(p.mesh, GroupKind::tp, gpn)).seconds;
  const double per_layer = (p.sequence_parallel ? kTpCollectivesPerBlockSp : kTpCollectivesPerBlock) *
                           (p.ac == AcMode::full ? kFullAcTpCommFactor : 1.0) * per;
  const double layers_per_stage = static_cast<double>(m.n_layers) / p.mesh.pp;
  return per_layer * layers_per_stage * static_cast<double>(j.grad_accum);
}

// Expert-parallel all-to-alls of one step on a stage: dispatch and combine in forward and again
// in backward (and in a full recompute), each moving the rank's top_k token copies.
double ep_seconds(const ModelSpec& m, const Plan& p, const Job& j, const ClusterSpec& c) {
  if (p.mesh.ep <= 1 || !m.moe.enabled()) return 0;
  const int gpn = std::max(1, c.node.gpus_per_node);
  const double capacity = m.moe.capacity_factor > 0 ? m.moe.capacity_factor : 1.0;
  const double bytes = bytes_per_element(p.compute_dtype) * static_cast<double>(j.seq_len / p.mesh.cp) *
                       static_cast<double>(j.micro_batch) * m.moe.top_k * capacity * static_cast<double>(m.d_model);
  const double per = estimate_collective(c, CollectiveOp::all_to_all, bytes,
                                         group_placement(p.mesh, GroupKind::ep, gpn)).seconds;
  const double per_layer = (p.ac == AcMode::full ? 6.0 : 4.0) * per;
  const double moe_layers = static_cast<double>(m.n_layers - m.moe.n_dense_layers) / p.mesh.pp;
  return per_layer * moe_layers * static_cast<double>(j.grad_accum);
}

// torch's ring attention merges each step's block output and accumulates the gradients in fp32
// (workload/eager_ops.hpp): the element-wise passes of one step on a stage, forward (twice under
// full recompute) and backward, at the memory-bound rate.
double cp_merge_seconds(const ModelSpec& m, const Plan& p, const Job& j, const ClusterSpec& c) {
  if (p.mesh.cp <= 1 || !runtime_traits(p).ring_attention_merges_eagerly) return 0;
  const double tokens = static_cast<double>(j.seq_len / p.mesh.cp) * static_cast<double>(j.micro_batch);
  const double head_dim = static_cast<double>(m.head_dim > 0 ? m.head_dim : m.d_model / m.n_heads);
  const double q = tokens * static_cast<double>(m.n_heads) / p.mesh.tp * head_dim;
  const double kv = tokens * static_cast<double>(m.n_kv_heads) / p.mesh.tp * head_dim;
  const double e = bytes_per_element(p.compute_dtype);
  const double forwards = p.ac == AcMode::full ? 2 : 1;
  const double per_layer = forwards * ring_attention_merge(q, kv, p.mesh.cp, e, false, p.compile).bytes +
                           ring_attention_merge(q, kv, p.mesh.cp, e, true, p.compile).bytes;
  const double layers_per_stage = static_cast<double>(m.n_layers) / p.mesh.pp;
  return memory_bound_time(c, per_layer).seconds * layers_per_stage * static_cast<double>(j.grad_accum);
}

// FSDP gathers and reduce-scatters of one step that the stage's compute cannot hide.
double fsdp_exposed_seconds(const ModelSpec& m, const Plan& p, const Job& j, const ClusterSpec& c, double compute) {
  const std::int64_t shard = static_cast<std::int64_t>(p.mesh.dp_shard) * p.mesh.cp;
  if (shard <= 1 || (p.sharding != Sharding::zero3 && p.sharding != Sharding::zero2)) return 0;
  const int gpn = std::max(1, c.node.gpus_per_node);
  // Expert parallelism splits the routed experts over ep ranks before FSDP shards what is left
  // (torchtitan, Megatron-FSDP): a rank gathers its own experts only, so an MoE block's unit
  // shrinks by the routed share (all experts but the shared ones and the router) x (1 - 1/ep).
  // Without this the estimate charged EP its all-to-alls and credited nothing, and the prune kept
  // every ep > 1 layout out of the simulated set.
  const ParamCounts pc = param_counts(m);
  double per_layer = static_cast<double>(pc.per_layer());
  if (m.moe.enabled() && p.mesh.ep > 1) {
    const double routed = static_cast<double>(pc.mlp_per_layer - pc.shared_experts_per_layer - pc.router_per_layer);
    per_layer -= routed * (1.0 - 1.0 / p.mesh.ep);
  }
  const double unit = per_layer / p.mesh.tp;
  const GroupPlacement fsdp = group_placement(p.mesh, GroupKind::fsdp, gpn);
  const double ag = estimate_collective(c, CollectiveOp::all_gather, 2 * unit, fsdp).seconds;
  const double rs =
      estimate_collective(c, CollectiveOp::reduce_scatter, bytes_per_element(p.reduce_dtype) * unit, fsdp).seconds;
  const double gathers = p.reshard_after_forward ? 2 : 1;
  const double layers_per_stage = static_cast<double>(m.n_layers) / p.mesh.pp;
  const double per_mb = layers_per_stage * (gathers * ag + rs);
  const double total = per_mb * (p.mesh.pp > 1 && !p.reshard_after_forward ? 1 : static_cast<double>(j.grad_accum));
  return std::max(0.0, total - kFsdpOverlappableCompute * compute / p.mesh.pp);
}

// A rough step time for pruning: compute at a nominal efficiency, blocking TP communication,
// ring attention's merges, the FSDP gathers that compute cannot hide, and the pipeline bubble.
double closed_form_step_seconds(const ModelSpec& m, const Plan& p, const Job& j, const ClusterSpec& c) {
  const double world = static_cast<double>(p.mesh.world());
  const double tokens_per_gpu = static_cast<double>(j.global_batch) * static_cast<double>(j.seq_len) / world;
  const double peak = c.peak_flops_per_s(p.compute_dtype);
  const double compute = model_flops_per_token(m, j.seq_len) * tokens_per_gpu * (1 + recompute_fraction(p)) /
                         (kNominalComputeEfficiency * peak);
  // 1F1B bubble (Narayanan et al. 2021): (pp - 1) / (v m + pp - 1). The grid keeps m >= pp, so
  // the bubble stays under 1/2 and the division below is safe.
  double bubble = 0;
  if (p.mesh.pp > 1) {
    const double v = std::max(1, p.mesh.vpp);
    bubble = (p.mesh.pp - 1) / (v * static_cast<double>(j.grad_accum) + p.mesh.pp - 1);
  }
  return (compute + tp_seconds(m, p, j, c) + ep_seconds(m, p, j, c) + cp_merge_seconds(m, p, j, c)) / (1 - bubble) +
         fsdp_exposed_seconds(m, p, j, c, compute);
}

// One point of the layout grid: mesh degrees and the split of a rank's batch into micro-batches.
struct Layout {
  int tp = 1, pp = 1, cp = 1, vpp = 1, ep = 1;
  std::int64_t dp = 1, replicate = 1, shard = 1;
  std::int64_t per_rank = 0;  // sequences per data-parallel rank and step
  std::int64_t micro_batch = 1, accum = 1;
};

// The settings tried at every layout.
struct Setting {
  AcMode ac = AcMode::none;
  Dtype reduce = Dtype::fp32;
  bool zero2 = false;
  // Activation CPU offload: Composer's activation_cpu_offload (save_on_cpu). Parameter offload
  // is not searched: its host-side optimizer step is not simulated yet.
  bool offload = false;
  // llm-foundry's fsdp_config.backward_prefetch: Composer defaults to BACKWARD_POST, and
  // BACKWARD_PRE (one more unit gathered, the all-gather overlapped with the gradient computation)
  // is often faster at the same peak, which `lint` reports; so the search tries both.
  BackwardPrefetch prefetch = BackwardPrefetch::backward_post;
};

struct Grid {
  const PlanRequest& rq;
  std::int64_t global_batch;
  int gpn;
  bool foundry;  // llm-foundry (Composer FSDP)
  bool titan;
};

std::vector<Setting> searched_settings(const Grid& g) {
  const std::vector<AcMode> acs = g.foundry ? std::vector<AcMode>{AcMode::none, AcMode::full}
                                  : g.titan ? std::vector<AcMode>{AcMode::none, AcMode::selective_op, AcMode::full}
                                            : std::vector<AcMode>{AcMode::none, AcMode::selective_attn, AcMode::full};
  const std::vector<Dtype> reduces = g.foundry ? std::vector<Dtype>{Dtype::fp32, Dtype::bf16} : std::vector<Dtype>{Dtype::fp32};
  const std::vector<bool> toggles = g.foundry ? std::vector<bool>{false, true} : std::vector<bool>{false};
  const std::vector<BackwardPrefetch> prefetches =
      g.foundry ? std::vector<BackwardPrefetch>{BackwardPrefetch::backward_post, BackwardPrefetch::backward_pre}
                : std::vector<BackwardPrefetch>{BackwardPrefetch::backward_post};
  std::vector<Setting> out;
  for (AcMode ac : acs)
    for (Dtype reduce : reduces)
      for (bool zero2 : toggles)
        for (bool offload : toggles)
          for (BackwardPrefetch prefetch : prefetches) out.push_back({ac, reduce, zero2, offload, prefetch});
  return out;
}

// The grid is built one dimension at a time: every layout so far is replaced by its valid
// children in order, so the final list is in the order of nested loops over (TP, PP, CP, DP
// split, VPP, micro-batch), outermost first.
template <typename Children>
std::vector<Layout> expand(const std::vector<Layout>& in, Children&& children) {
  std::vector<Layout> out;
  for (const Layout& l : in) children(l, out);
  return out;
}

void tp_children(const Grid& g, const Layout& l, std::vector<Layout>& out) {
  const ModelSpec& m = g.rq.model;
  for (int tp : divisors_upto(g.gpn, g.gpn)) {
    const bool divides = g.foundry ? m.ffn_hidden % tp == 0 : m.n_heads % tp == 0 && m.n_kv_heads % tp == 0;
    if (!divides) continue;
    Layout c = l;
    c.tp = tp;
    out.push_back(c);
  }
}

// Whether the runtime can place the model's layers on pp x vpp chunks: torchtitan's uneven split,
// or for Megatron the rule it needs (megatron_split_for).
bool splits(const Grid& g, int pp, int vpp) {
  const ModelSpec& m = g.rq.model;
  if (runtime_traits(g.rq.runtime, false).pipeline_split_by_flags) return megatron_split_for(m.n_layers, pp, vpp, m.n_mtp_layers).has_value();
  return split_layers(m.n_layers, pp * vpp).has_value();
}

void pp_children(const Grid& g, const Layout& l, std::vector<Layout>& out) {
  for (int pp : divisors_upto(g.rq.n_gpus / l.tp, g.foundry ? 1 : kMaxPipelineStages)) {
    if (!splits(g, pp, 1)) continue;
    Layout c = l;
    c.pp = pp;
    out.push_back(c);
  }
}

void cp_children(const Grid& g, const Layout& l, std::vector<Layout>& out) {
  const std::int64_t tp_pp = static_cast<std::int64_t>(l.tp) * l.pp;
  for (int cp : kContextParallelDegrees) {
    if (g.foundry && cp > 1) break;
    // Load-balanced causal CP splits each sequence into 2 cp chunks, each divisible by TP.
    if (cp > 1 && g.rq.seq_len % (2LL * cp * l.tp) != 0) continue;
    const std::int64_t rest = g.rq.n_gpus / tp_pp;
    if (g.rq.n_gpus % tp_pp != 0 || rest % cp != 0) continue;
    const std::int64_t dp = rest / cp;
    if (g.global_batch % dp != 0) continue;
    Layout c = l;
    c.cp = cp;
    c.dp = dp;
    c.per_rank = g.global_batch / dp;
    out.push_back(c);
  }
}

// Data-parallel splits: full sharding over dp, or HSDP with the shard group inside a node
// (Megatron: replication, its distributed optimizer shards the optimizer state only).
void dp_children(const Grid& g, const Layout& l, std::vector<Layout>& out) {
  auto add = [&](std::int64_t replicate, std::int64_t shard) {
    Layout c = l;
    c.replicate = replicate;
    c.shard = shard;
    out.push_back(c);
  };
  if (runtime_traits(g.rq.runtime, false).sharding_by_distributed_optimizer) {
    add(l.dp, 1);
    return;
  }
  add(1, l.dp);
  const std::int64_t node_shard = std::max<std::int64_t>(1, g.gpn / (static_cast<std::int64_t>(l.tp) * l.cp));
  if (l.dp > node_shard && l.dp % node_shard == 0 && node_shard > 1) add(l.dp / node_shard, node_shard);
}

// Expert parallelism for MoE models: every ep that divides the experts and the data x context
// ranks it borrows (experts keep etp = tp, so EP groups never span TP ranks), from 1 up.
void ep_children(const Grid& g, const Layout& l, std::vector<Layout>& out) {
  const MoeSpec& moe = g.rq.model.moe;
  if (!moe.enabled() || g.foundry) {
    out.push_back(l);
    return;
  }
  const std::int64_t pool = l.dp * l.cp;
  for (int ep : divisors_upto(moe.n_experts, moe.n_experts)) {
    if (pool % ep != 0) continue;
    Layout c = l;
    c.ep = ep;
    out.push_back(c);
  }
}

void vpp_children(const Grid& g, const Layout& l, std::vector<Layout>& out) {
  out.push_back(l);
  if (l.pp == 1 || g.foundry) return;
  for (int v : kVirtualStages) {
    if (!splits(g, l.pp, v)) continue;
    Layout c = l;
    c.vpp = v;
    out.push_back(c);
  }
}

void micro_batch_children(const Layout& l, std::vector<Layout>& out) {
  for (std::int64_t mb : kMicroBatchSizes) {
    if (l.per_rank % mb != 0) continue;
    const std::int64_t accum = l.per_rank / mb;
    if (l.pp > 1 && accum < l.pp) continue;  // fewer micro-batches than stages: mostly bubble
    if (l.vpp > 1 && accum % l.pp != 0) continue;  // interleaving needs whole rounds of pp
    Layout c = l;
    c.micro_batch = mb;
    c.accum = accum;
    out.push_back(c);
  }
}

std::vector<Layout> layout_grid(const Grid& g) {
  using namespace std::placeholders;
  std::vector<Layout> grid{Layout{}};
  grid = expand(grid, std::bind(tp_children, std::cref(g), _1, _2));
  grid = expand(grid, std::bind(pp_children, std::cref(g), _1, _2));
  grid = expand(grid, std::bind(cp_children, std::cref(g), _1, _2));
  grid = expand(grid, std::bind(dp_children, std::cref(g), _1, _2));
  grid = expand(grid, std::bind(ep_children, std::cref(g), _1, _2));
  grid = expand(grid, std::bind(vpp_children, std::cref(g), _1, _2));
  return expand(grid, micro_batch_children);
}

// The plan a (layout, setting) pair stands for, or nullopt when the runtime cannot express it.
std::optional<Plan> make_plan(const Grid& g, const Layout& l, const Setting& s) {
  Plan p = base_plan(g.rq.runtime);
  p.mesh.tp = l.tp;
  p.mesh.pp = l.pp;
  p.mesh.vpp = l.vpp;
  p.mesh.cp = l.cp;
  p.mesh.dp_replicate = static_cast<int>(l.replicate);
  p.mesh.dp_shard = static_cast<int>(l.shard);
  p.mesh.ep = l.ep;
  p.sequence_parallel = l.tp > 1 && p.tp_style == TpStyle::full;
  p.schedule = l.vpp > 1 ? PipelineSchedule::interleaved_1f1b : PipelineSchedule::one_f_one_b;
  const std::int64_t shard_group = l.shard * l.cp;
  if (!runtime_traits(p).sharding_by_distributed_optimizer) {
    p.sharding = shard_group > 1 ? (s.zero2 ? Sharding::zero2 : Sharding::zero3) : Sharding::none;
    p.reshard_after_forward = !s.zero2 && !(g.titan && l.pp > 1);
  } else {
    p.sharding = l.replicate > 1 ? Sharding::zero1 : Sharding::none;
    // Megatron splits unevenly only when told how: the rule its flags give.
    const auto split = megatron_split_for(g.rq.model.n_layers, l.pp, l.vpp, g.rq.model.n_mtp_layers);
    if (!split) return std::nullopt;
    p.pipeline_split = *split;
  }
  if (s.zero2 && shard_group <= 1) return std::nullopt;
  p.ac = s.ac;
  p.act_offload = s.offload;
  p.reduce_dtype = s.reduce;
  p.mixed_precision_name = g.foundry ? (s.reduce == Dtype::bf16 ? "PURE" : "DEFAULT") : "";
  if (g.foundry) p.backward_prefetch = s.prefetch;
  if (!runtime_supports(g.rq.runtime, p)) return std::nullopt;
  return p;
}

struct Enumerated {
  std::vector<PlanCandidate> feasible;
  std::int64_t evaluated = 0;
};

Grid grid_for(const PlanRequest& rq, std::int64_t global_batch) {
  const Framework f = runtime_info(rq.runtime).framework;
  return Grid{rq, global_batch, std::max(1, rq.cluster.node.gpus_per_node), f == Framework::llm_foundry,
              f == Framework::torchtitan};
}

// Whether some layout of the runtime can run `global_batch` sequences per step on the GPUs (before
// memory: the degrees and the batch divide).
bool batch_admits_a_layout(const PlanRequest& rq, std::int64_t global_batch) {
  const Grid g = grid_for(rq, global_batch);
  const std::vector<Setting> settings = searched_settings(g);
  for (const Layout& l : layout_grid(g))
    for (const Setting& s : settings)
      if (make_plan(g, l, s)) return true;
  return false;
}

// A token target is approximate: the whole number of sequences nearest to tokens / seq that some
// layout admits (4M tokens of 8192 is 488.28 sequences; on 256 GPUs under llm-foundry 488 has no
// data-parallel degree, 480 does). Within a quarter of the target; else the nearest count, and
// the empty grid explains itself.
std::int64_t sequences_for_tokens(const PlanRequest& rq) {
  const double exact = static_cast<double>(rq.global_batch_tokens) / static_cast<double>(rq.seq_len);
  const std::int64_t nearest = std::max<std::int64_t>(1, std::llround(exact));
  if (batch_admits_a_layout(rq, nearest)) return nearest;
  const std::int64_t reach = std::max<std::int64_t>(1, nearest / 4);
  for (std::int64_t k = 1; k <= reach; ++k) {
    // Of the two counts k away, the one nearer the target first.
    std::array<std::int64_t, 2> pair = {nearest - k, nearest + k};
    if (std::abs(static_cast<double>(pair[1]) - exact) < std::abs(static_cast<double>(pair[0]) - exact))
      std::swap(pair[0], pair[1]);
    for (std::int64_t b : pair)
      if (b >= 1 && batch_admits_a_layout(rq, b)) return b;
  }
  return nearest;
}

// "4Mi" when the token count is an SI figure (4M) whose binary twin (4 x 2^20) is whole sequences.
std::string binary_twin(std::int64_t tokens, std::int64_t seq) {
  const std::array<std::pair<const char*, int>, 4> units = {{{"T", 4}, {"G", 3}, {"M", 2}, {"K", 1}}};
  for (const auto& [suffix, k] : units) {
    std::int64_t si = 1, bin = 1;
    for (int i = 0; i < k; ++i) {
      si *= 1000;
      bin *= 1024;
    }
    if (tokens % si != 0) continue;
    const std::int64_t mantissa = tokens / si;
    if (mantissa > (std::int64_t{1} << 62) / bin) return "";
    const std::int64_t twin = mantissa * bin;
    if (twin % seq != 0) return "";
    return fmt::format("{}{}i ({} tokens) is {} whole sequences", mantissa, suffix, twin, twin / seq);
  }
  return "";
}

// Every (layout, setting) the runtime can express, kept when it fits in memory with headroom,
// with its closed-form estimate.
Enumerated enumerate(const PlanRequest& rq, std::int64_t global_batch) {
  const Grid g = grid_for(rq, global_batch);
  const double budget = rq.cluster.gpu.device_memory_bytes() * (1 - rq.headroom_fraction);
  const std::vector<Setting> settings = searched_settings(g);
  const std::vector<Layout> layouts = layout_grid(g);
  // Each layout's feasible candidates, filled on `threads` threads and joined in grid order: the
  // memory estimates are most of the work, and the result does not depend on who did which.
  std::vector<std::vector<PlanCandidate>> per_layout(layouts.size());
  auto evaluate = [&](std::size_t i) {
    const Layout& l = layouts[i];
    for (const Setting& s : settings) {
      const std::optional<Plan> p = make_plan(g, l, s);
      if (!p) continue;
      Job j;
      j.seq_len = rq.seq_len;
      j.global_batch = global_batch;
      j.micro_batch = l.micro_batch;
      j.grad_accum = l.accum;
      const MemoryEstimate mem = estimate_memory(rq.model, *p, j, rq.cluster);
      double peak = 0;
      for (const auto& st : mem.stages) peak = std::max(peak, st.peak_bytes);
      if (peak > budget) continue;
      PlanCandidate cand;
      cand.plan = *p;
      cand.job = j;
      cand.peak_bytes = peak;
      const double step = closed_form_step_seconds(rq.model, *p, j, rq.cluster);
      cand.estimate_tokens_per_s_per_gpu =
          static_cast<double>(global_batch * rq.seq_len) / step / static_cast<double>(rq.n_gpus);
      per_layout[i].push_back(std::move(cand));
    }
  };
  std::atomic<std::size_t> next{0};
  auto worker = [&]() {
    for (std::size_t i = next++; i < layouts.size(); i = next++) evaluate(i);
  };
  std::vector<std::thread> pool;
  for (int t = 1; t < std::max(1, rq.threads); ++t) pool.emplace_back(worker);
  worker();
  for (auto& th : pool) th.join();
  Enumerated out;
  out.evaluated = static_cast<std::int64_t>(layouts.size() * settings.size());
  for (auto& cands : per_layout)
    for (PlanCandidate& c : cands) out.feasible.push_back(std::move(c));
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
    return n + describe_setting_differences(x.plan, other.plan);
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
  // FSDP only where parameters are sharded: a ZeRO-1 (distributed optimizer) layout shards
  // optimizer state and gathers no parameters, so it has no all-gathers to hide.
  const bool fsdp = a.plan.sharding == Sharding::zero2 || a.plan.sharding == Sharding::zero3;
  if (fsdp && shard > 1 && fsdp_exposed < kHiddenCommStepFraction * ra.step_time_s)
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

std::vector<Job> steady_state_jobs(const Plan& p, const Job& j) {
  // A step repeats the same micro-batch pattern: with m micro-batches its time is
  // fill + m x period (1F1B, GPipe, interleaved, gradient accumulation alike). Simulating two
  // shorter steps with m0 < m1 micro-batches gives fill and period; the long step is the line
  // through them. Exact for periodic schedules; used when m is large.
  const std::int64_t m_full = std::max<std::int64_t>(1, j.grad_accum);
  const std::int64_t unit = p.mesh.pp > 1 ? p.mesh.pp : 1;  // keep whole pipeline rounds
  if (m_full <= 3 * unit || j.pp_microbatches > 0) return {j};
  auto shortened = [&](std::int64_t mbs) {
    Job s = j;
    s.grad_accum = mbs;
    s.global_batch = j.global_batch / m_full * mbs;
    return s;
  };
  return {shortened(unit), shortened(2 * unit)};
}

StepResult simulate_steady_state(const ModelSpec& m, const Plan& p, const Job& j, const ClusterSpec& c) {
  const std::vector<Job> jobs = steady_state_jobs(p, j);
  if (jobs.size() == 1) return simulate_step(m, p, j, c).result;
  const std::int64_t m_full = std::max<std::int64_t>(1, j.grad_accum);
  const std::int64_t m0 = jobs[0].grad_accum, m1 = jobs[1].grad_accum;
  auto shortened = [&](std::size_t k) { return simulate_step(m, p, jobs[k], c).result; };
  const StepResult r0 = shortened(0);
  StepResult r1 = shortened(1);
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

namespace {

// Ops a candidate's simulation lowers, up to a constant: the micro-batches its steady-state jobs
// run times the layers on a stage. Only the order plans are handed to threads depends on it.
double simulation_work(const ModelSpec& m, const PlanCandidate& c) {
  double microbatches = 0;
  for (const Job& j : steady_state_jobs(c.plan, c.job))
    microbatches += static_cast<double>(std::max<std::int64_t>(1, j.grad_accum));
  return microbatches * static_cast<double>(m.n_layers) / std::max(1, c.plan.mesh.pp);
}

// Simulates every candidate on `threads` threads (the calling one included, which reports
// progress between plans). A plan the simulator rejects is marked unsimulated with the reason in
// errors[i], never fatal (and never escapes a thread).
void simulate_all(const PlanRequest& rq, std::vector<PlanCandidate>& sims, std::vector<std::string>& errors,
                  const std::function<void(std::size_t, std::size_t)>& progress) {
  std::atomic<std::size_t> next{0}, done{0};
  errors.assign(sims.size(), "");
  // Longest first, so that no thread is left alone with a long plan at the end; every result is
  // stored at its candidate's index, so the answer does not depend on the order.
  std::vector<std::size_t> order(sims.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::vector<double> work(sims.size());
  for (std::size_t i = 0; i < sims.size(); ++i) work[i] = simulation_work(rq.model, sims[i]);
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return work[a] > work[b]; });
  auto simulate_one = [&](std::size_t k) {
    const std::size_t i = order[k];
    try {
      sims[i].result = simulate_steady_state(rq.model, sims[i].plan, sims[i].job, rq.cluster);
      sims[i].simulated = true;
      // A ranked row reports the timeline's peak, the figure `simulate` prints for the plan (the
      // closed form it was pruned with is the same terms' upper bound).
      double timeline_peak = 0;
      for (const auto& st : sims[i].result.stages) timeline_peak = std::max(timeline_peak, st.peak_bytes);
      if (timeline_peak > 0) sims[i].peak_bytes = timeline_peak;
    } catch (const std::exception& e) {
      sims[i].simulated = false;
      errors[i] = std::string("the simulator rejected it: ") + e.what();
    }
    ++done;
  };
  auto worker = [&]() {
    for (std::size_t i = next++; i < sims.size(); i = next++) simulate_one(i);
  };
  std::vector<std::thread> pool;
  const int threads = std::max(1, rq.threads);
  for (int t = 1; t < threads; ++t) pool.emplace_back(worker);
  for (std::size_t i = next++; i < sims.size(); i = next++) {
    simulate_one(i);
    if (progress) progress(done.load(), sims.size());
  }
  for (auto& th : pool) th.join();
  if (progress) progress(sims.size(), sims.size());
}

// Plans that can only be twins when they share a layout (mesh and micro-batching) and the same
// closed-form peak memory, bit for bit: only such plans are lowered to compare their steps.
using TwinBucket = std::tuple<int, int, int, int, int, int, int, std::int64_t, std::int64_t, std::uint64_t>;

TwinBucket twin_bucket(const PlanCandidate& c) {
  const Mesh& m = c.plan.mesh;
  return {m.pp, m.vpp, m.dp_replicate, m.dp_shard, m.cp, m.tp, m.ep, c.job.micro_batch, c.job.grad_accum,
          std::bit_cast<std::uint64_t>(c.peak_bytes)};
}

// Everything simulate_steady_state reads for the candidate (step_fingerprint.hpp).
StepFingerprint simulation_fingerprint(const PlanRequest& rq, const PlanCandidate& c) {
  StepFingerprint f = memory_fingerprint(rq.model, c.plan, c.job, rq.cluster);
  for (const Job& j : steady_state_jobs(c.plan, c.job)) {
    f = combine(f, program_fingerprint(rq.model, c.plan, j, rq.cluster));
    f = combine(f, memory_fingerprint(rq.model, c.plan, j, rq.cluster));
  }
  return f;
}

struct Selection {
  std::vector<PlanCandidate> distinct;
  std::vector<DroppedPlan> dropped;
  std::int64_t merged = 0;
};

// Digests of the candidates in shared buckets among the first `window`, computed on `threads`
// threads ahead of the walk (which is sequential, so the result does not depend on the order they
// finish in). A lowering error is kept as the candidate's reason to be dropped.
struct Digest {
  std::optional<StepFingerprint> fingerprint;
  std::string error;
};

std::vector<Digest> digests_ahead(const PlanRequest& rq, const std::vector<PlanCandidate>& sorted,
                                  const std::vector<bool>& shared, std::size_t window) {
  std::vector<Digest> out(sorted.size());
  std::vector<std::size_t> todo;
  for (std::size_t i = 0; i < std::min(window, sorted.size()); ++i)
    if (shared[i]) todo.push_back(i);
  std::atomic<std::size_t> next{0};
  auto worker = [&]() {
    for (std::size_t k = next++; k < todo.size(); k = next++) {
      try {
        out[todo[k]].fingerprint = simulation_fingerprint(rq, sorted[todo[k]]);
      } catch (const std::exception& e) {
        out[todo[k]].error = std::string("the lowering rejected it: ") + e.what();
      }
    }
  };
  std::vector<std::thread> pool;
  for (int t = 1; t < std::max(1, rq.threads); ++t) pool.emplace_back(worker);
  worker();
  for (auto& th : pool) th.join();
  return out;
}

// Walks the candidates best first and keeps the first `budget` whose simulation inputs differ;
// a candidate identical to a kept one joins its row's equivalent_plans. Candidates further down
// are looked at only when they share a bucket with a kept row, so a twin still joins its row.
// The walk also goes on past `budget` while the candidates' estimates are at least
// `min_estimate` (the second round of search_plans).
Selection select_distinct(const PlanRequest& rq, const std::vector<PlanCandidate>& sorted, std::size_t budget,
                          double min_estimate = std::numeric_limits<double>::infinity()) {
  std::map<TwinBucket, int> bucket_size;
  for (const PlanCandidate& c : sorted) ++bucket_size[twin_bucket(c)];
  std::vector<bool> shared(sorted.size());
  for (std::size_t i = 0; i < sorted.size(); ++i) shared[i] = bucket_size[twin_bucket(sorted[i])] > 1;
  // Twins come in pairs or small groups next to each other in the prune order: twice the budget
  // is about what the walk reaches when half the candidates are twins.
  std::size_t reach = 0;  // candidates the walk will keep rows from, at least
  while (reach < sorted.size() && sorted[reach].estimate_tokens_per_s_per_gpu >= min_estimate) ++reach;
  std::vector<Digest> digests = digests_ahead(rq, sorted, shared, std::max(2 * budget, reach));
  Selection out;
  std::map<std::pair<TwinBucket, StepFingerprint>, std::size_t> row_of;
  std::set<TwinBucket> kept_buckets;
  auto keep = [&](const PlanCandidate& c) {
    out.distinct.push_back(c);
    out.distinct.back().equivalent_plans = {c.plan};
    kept_buckets.insert(twin_bucket(c));
  };
  auto place = [&](std::size_t i, bool may_keep) {
    const PlanCandidate& c = sorted[i];
    if (!shared[i]) {
      if (may_keep) keep(c);
      return;
    }
    Digest& d = digests[i];
    if (!d.fingerprint && d.error.empty()) d = digests_ahead(rq, {c}, {true}, 1).front();
    if (!d.fingerprint) {
      if (may_keep) out.dropped.push_back({c, d.error});
      return;
    }
    const auto key = std::make_pair(twin_bucket(c), *d.fingerprint);
    if (const auto it = row_of.find(key); it != row_of.end()) {
      out.distinct[it->second].equivalent_plans.push_back(c.plan);
      ++out.merged;
    } else if (may_keep) {
      row_of[key] = out.distinct.size();
      keep(c);
    }
  };
  std::size_t i = 0;
  for (; i < sorted.size() && (out.distinct.size() < budget || i < reach); ++i) place(i, true);
  for (; i < sorted.size(); ++i)
    if (kept_buckets.count(twin_bucket(sorted[i])) != 0) place(i, false);
  return out;
}

// The second round's threshold: the shown rows' last throughput over the largest ratio of
// simulated to estimated throughput among the simulated plans, less a margin for what the
// simulated ones do not show; infinity when fewer than `shown` were simulated.
double second_round_min_estimate(const std::vector<PlanCandidate>& sims, std::size_t shown) {
  std::vector<double> simulated;
  double ratio = 0;
  for (const PlanCandidate& c : sims) {
    if (!c.simulated || !(c.estimate_tokens_per_s_per_gpu > 0)) continue;
    simulated.push_back(c.result.tokens_per_s_per_gpu);
    ratio = std::max(ratio, c.result.tokens_per_s_per_gpu / c.estimate_tokens_per_s_per_gpu);
  }
  if (simulated.size() < shown || !(ratio > 0)) return std::numeric_limits<double>::infinity();
  std::nth_element(simulated.begin(), simulated.begin() + static_cast<std::ptrdiff_t>(shown - 1), simulated.end(),
                   std::greater<>());
  return simulated[shown - 1] / (ratio * kSecondRoundMargin);
}

// The winner simulated with a setting changed, for a note beside it; none where that fails (the
// winner stands as simulated; the note is an extra).
std::optional<StepResult> winner_with(const PlanRequest& rq, const PlanCandidate& w, const Plan& with) {
  try {
    return simulate_steady_state(rq.model, with, w.job, rq.cluster);
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

// Megatron-Core's expert all-to-all overlap for the winner, where its runtime would accept it
// (ep > 1; pp 1 or the interleaved schedule; no full recompute): the winner simulated with it,
// as a note, not a row. The search does not switch it on by itself: on the one published pair
// (dev-moe's cross-node EP 32 rows) the model predicts about twice the gain that was measured
// (docs/validation.md, "Known gaps").
std::string expert_overlap_note(const PlanRequest& rq, const PlanCandidate& w) {
  const Plan& p = w.plan;
  if (p.moe_a2a_overlap || !expert_a2a_overlap_refusal(p, rq.model.moe.enabled()).empty()) return "";
  Plan with = p;
  with.moe_a2a_overlap = true;
  const std::optional<StepResult> sim = winner_with(rq, w, with);
  if (!sim) return "";
  const StepResult& r = *sim;
  const double a = w.result.tokens_per_s_per_gpu, b = r.tokens_per_s_per_gpu;
  if (!(a > 0) || !(b > a)) return "";
  double peak = 0;
  for (const auto& st : r.stages) peak = std::max(peak, st.peak_bytes);
  const double device = rq.cluster.gpu.device_memory_bytes();
  return fmt::format("rank 1 with Megatron-Core's expert all-to-all overlap (--overlap-moe-expert-parallel-comm, "
                     "runtime.moe_a2a_overlap): {:.1f} tokens/s/GPU ({:+.1f}%), peak {:.2f} GiB{}; not applied: the "
                     "model predicts about twice the gain measured on the one published pair (docs/validation.md)",
                     b, 100 * (b / a - 1), peak / kGiB,
                     peak > device ? fmt::format(", over the {:.2f} GiB GPU", device / kGiB) : "");
}

// Megatron-Core's fused MoE kernels for a winner that runs its MoE layer op by op without them
// (--moe-permute-fusion, --moe-router-fusion; off by default and in fresh plans, which stay on
// what every Megatron-Core release accepts): the winner simulated with both, as a note, where
// the fewer launches make it faster (a host-bound step).
std::string moe_fusion_note(const PlanRequest& rq, const PlanCandidate& w) {
  const Plan& p = w.plan;
  if (!rq.model.moe.enabled() || !runtime_traits(p).moe_layer_op_by_op || (p.moe_permute_fusion && p.moe_router_fusion))
    return "";
  Plan with = p;
  with.moe_permute_fusion = with.moe_router_fusion = true;
  const std::optional<StepResult> sim = winner_with(rq, w, with);
  if (!sim) return "";
  const double a = w.result.tokens_per_s_per_gpu, b = sim->tokens_per_s_per_gpu;
  if (!(a > 0) || !(b > a * 1.001)) return "";
  return fmt::format("rank 1 with Megatron-Core's fused MoE kernels (--moe-permute-fusion --moe-router-fusion, "
                     "runtime.moe_permute_fusion / moe_router_fusion): {:.1f} tokens/s/GPU ({:+.1f}%), fewer host "
                     "launches per MoE layer (docs/host.md); not applied: they need a Transformer Engine with the fused "
                     "permute and router kernels",
                     b, 100 * (b / a - 1));
}

// Why no layout could even be formed: the degrees' constraints, with the one that binds. The
// batch is the usual culprit at scale: each data-parallel rank needs a whole sequence, and a
// pipeline of pp stages needs pp micro-batches per rank, so pp x dp <= the global batch and the
// run holds at most tp x cp x global-batch GPUs.
std::string empty_grid_reason(const PlanRequest& rq, std::int64_t global_batch) {
  const ModelSpec& m = rq.model;
  const int gpn = std::max(1, rq.cluster.node.gpus_per_node);
  const std::int64_t most_model_parallel = static_cast<std::int64_t>(gpn) * kContextParallelDegrees.back();
  // The pipeline rule is split_layers, not divisibility: with the embedding and the head counted
  // as a layer each, 126 layers run on 16 stages.
  std::string why = fmt::format(
      "no layout of {} GPUs: tp x pp x cp x dp must equal the GPU count, with tp at most {} (one node) dividing the {} "
      "heads and {} KV heads, pp splitting the {} layers evenly (or, with the embedding and the head counted as a "
      "layer each, {} + 2) with pp micro-batches per rank, and dp dividing the global batch of {} sequences",
      rq.n_gpus, gpn, m.n_heads, m.n_kv_heads, m.n_layers, m.n_layers, global_batch);
  if (rq.n_gpus > global_batch * most_model_parallel)
    why += fmt::format("; {} sequences per step cap the run at about {} GPUs: raise --global-batch-tokens", global_batch,
                       global_batch * most_model_parallel);
  else if (rq.n_gpus % gpn != 0 && rq.n_gpus > gpn)
    why += fmt::format("; {} is not a multiple of the {}-GPU node", rq.n_gpus, gpn);
  return why;
}

// The plan under Megatron-Bridge's ceil(L / stages) layout (spec/pipeline_layout.hpp
// ceil_split_layout: ceil(L / s) layers per virtual stage, the remainder last), where its runtime
// takes any per-stage layer counts, its layers do not divide over pp x vpp, and the layout differs
// from the split it has; nullopt otherwise.
std::optional<Plan> ceil_layout_twin(const ModelSpec& m, const Plan& p) {
  const int chunks = p.mesh.pp * p.mesh.vpp;
  if (!runtime_traits(p).any_stage_layers || chunks <= 1 || m.n_layers % chunks == 0) return std::nullopt;
  const auto current = split_pipeline(m.n_layers, p.mesh.pp, p.mesh.vpp, p.pipeline_split);
  const auto layout = ceil_split_layout(m.n_layers, chunks, m.n_mtp_layers);
  if (!current || !layout || layout->chunk_layers == *current) return std::nullopt;
  // The loss-alone shape (ceil_split_layout where ceil(L / stages) leaves the last stage empty) is
  // how Megatron runs a split nothing else gives; beside a split the runtime already has, it is
  // one more simulation per plan that the shapes tried never kept (405B on 16,384 GPUs: 14 more,
  // none faster), so the search leaves it out.
  if (layout->chunk_layers.back() == 0) return std::nullopt;
  Plan q = p;
  q.pipeline_split = {};
  set_layout(q.pipeline_split, *layout);
  if (!split_pipeline(m.n_layers, q.mesh.pp, q.mesh.vpp, q.pipeline_split)) return std::nullopt;
  return q;
}

// Uneven pipelines: every plan to simulate with a ceil-layout twin that fits (with headroom) has it
// simulated too, in the same batch (keep_faster_twins then compares them).
struct CeilTwins {
  std::vector<PlanCandidate> twins;
  std::vector<std::size_t> of;  // the plan each twin is the twin of
};

CeilTwins ceil_layout_twins(const PlanRequest& rq, const std::vector<PlanCandidate>& sims) {
  const double budget = rq.cluster.gpu.device_memory_bytes() * (1 - rq.headroom_fraction);
  CeilTwins out;
  auto& [twins, of] = out;
  for (std::size_t i = 0; i < sims.size(); ++i) {
    const std::optional<Plan> q = ceil_layout_twin(rq.model, sims[i].plan);
    if (!q) continue;
    const MemoryEstimate mem = estimate_memory(rq.model, *q, sims[i].job, rq.cluster);
    double peak = 0;
    for (const auto& st : mem.stages) peak = std::max(peak, st.peak_bytes);
    if (peak > budget) continue;
    PlanCandidate twin = sims[i];
    twin.plan = *q;
    twin.peak_bytes = peak;
    twin.simulated = false;
    twin.equivalent_plans = {*q};
    twins.push_back(std::move(twin));
    of.push_back(i);
  }
  return out;
}

// A simulated twin takes its plan's place only where it is faster: the layout is considered beside
// the runtime's own split, never preferred for itself. Twins of plans the simulator rejected are
// not counted. Returns {tried, kept}.
std::pair<std::int64_t, std::int64_t> keep_faster_twins(CeilTwins& t, std::vector<PlanCandidate>& sims) {
  std::int64_t tried = 0, kept = 0;
  for (std::size_t k = 0; k < t.twins.size(); ++k) {
    PlanCandidate& plan = sims[t.of[k]];
    if (!plan.simulated) continue;
    ++tried;
    if (t.twins[k].simulated && t.twins[k].result.tokens_per_s_per_gpu > plan.result.tokens_per_s_per_gpu) {
      plan = std::move(t.twins[k]);
      ++kept;
    }
  }
  return {tried, kept};
}

// Ties within the model's own resolution go to the numerically safer plan. Two plans that differ
// by less than kTieFraction in predicted tokens/s are not told apart by the simulator (its error
// between variants of one layout is larger), so a plan summing gradients in bf16 over a large
// group does not win on that margin over one that reduces in fp32; where it wins by more, its row
// says what the speed costs.
constexpr double kTieFraction = 0.01;

void prefer_numerically_safer(std::vector<PlanCandidate>& ranked) {
  for (std::size_t i = 0; i < ranked.size(); ++i) {
    if (!low_precision_reduce_is_risky(ranked[i].plan)) continue;
    const double fast = ranked[i].result.tokens_per_s_per_gpu;
    std::size_t safe = i + 1;
    while (safe < ranked.size() && low_precision_reduce_is_risky(ranked[safe].plan)) ++safe;
    const std::int64_t ranks = gradient_reduce_ranks(ranked[i].plan.mesh);
    if (safe < ranked.size() && ranked[safe].result.tokens_per_s_per_gpu >= fast * (1 - kTieFraction)) {
      ranked[safe].numerics_note = fmt::format(
          "ranked above a {} gradient reduction over {} ranks that predicts {:.2f}% more tokens/s, within the "
          "simulator's resolution ({:.0f}%): fp32 reduction keeps the low bits",
          to_string(ranked[i].plan.reduce_dtype), ranks, 100 * (fast / ranked[safe].result.tokens_per_s_per_gpu - 1),
          100 * kTieFraction);
      std::rotate(ranked.begin() + static_cast<std::ptrdiff_t>(i), ranked.begin() + static_cast<std::ptrdiff_t>(safe),
                  ranked.begin() + static_cast<std::ptrdiff_t>(safe) + 1);
      continue;
    }
    // Faster than every safe plan (all of them rank below it): say by how much.
    std::string margin;
    if (std::none_of(ranked.begin(), ranked.begin() + static_cast<std::ptrdiff_t>(i),
                     [](const PlanCandidate& c) { return !low_precision_reduce_is_risky(c.plan); }))
      margin = safe < ranked.size()
                   ? fmt::format("; {:.1f}% faster than the best fp32-reduction plan ({})",
                                 100 * (fast / ranked[safe].result.tokens_per_s_per_gpu - 1),
                                 describe_layout(ranked[safe].plan))
                   : std::string("; no fp32-reduction plan was simulated");
    ranked[i].numerics_note = fmt::format("sums gradients in {} over {} ranks (lint warns: low bits lost as the group "
                                          "grows){}",
                                          to_string(ranked[i].plan.reduce_dtype), ranks, margin);
  }
}

// The first two plans predict within the tie band and the first was put first for numerics.
std::string tie_sentence(const PlanCandidate& a, const PlanCandidate& b) {
  return fmt::format("{} and {} tie ({:.0f} vs {:.0f} tokens/s/GPU, {:.2f}% apart, within the simulator's {:.0f}% "
                     "resolution); the first is ranked first because it {}.",
                     describe_layout(a.plan) + describe_setting_differences(a.plan, b.plan),
                     describe_layout(b.plan) + describe_setting_differences(b.plan, a.plan),
                     a.result.tokens_per_s_per_gpu, b.result.tokens_per_s_per_gpu,
                     100 * (b.result.tokens_per_s_per_gpu / a.result.tokens_per_s_per_gpu - 1), 100 * kTieFraction,
                     fmt::format("reduces gradients in fp32, which keeps the low bits a {} sum over {} ranks loses",
                                 to_string(b.plan.reduce_dtype), gradient_reduce_ranks(b.plan.mesh)));
}

// Indices of the plans no other plan beats on both tokens/s and peak memory.
std::vector<std::size_t> pareto_front(const std::vector<PlanCandidate>& ranked) {
  std::vector<std::size_t> front;
  for (std::size_t i = 0; i < ranked.size(); ++i) {
    const PlanCandidate& b = ranked[i];
    auto dominates = [&b](const PlanCandidate& a) {
      return a.result.tokens_per_s_per_gpu >= b.result.tokens_per_s_per_gpu && a.peak_bytes <= b.peak_bytes &&
             (a.result.tokens_per_s_per_gpu > b.result.tokens_per_s_per_gpu || a.peak_bytes < b.peak_bytes);
    };
    bool dominated = false;
    for (std::size_t k = 0; k < ranked.size() && !dominated; ++k) dominated = k != i && dominates(ranked[k]);
    if (!dominated) front.push_back(i);
  }
  return front;
}

// Why the winner's expert-parallel degree: the best simulated plan of every other ep, and what the
// winner's ep does to the experts' memory and the all-to-all.
std::string ep_choice_note(const PlanRequest& rq, const std::vector<PlanCandidate>& ranked) {
  const PlanCandidate& w = ranked.front();
  const int ep = w.plan.mesh.ep;
  const double a2a = w.result.exposed_comm_s.count("ep") ? w.result.exposed_comm_s.at("ep") : 0.0;
  // comm_bytes sums the simulated ranks, one per pipeline stage.
  const double a2a_bytes =
      (w.result.comm_bytes.count("ep") ? w.result.comm_bytes.at("ep") : 0.0) / std::max(1, w.plan.mesh.pp);
  std::string s = fmt::format("ep {} chosen: {} of {} experts per rank", ep, rq.model.moe.n_experts / ep,
                              rq.model.moe.n_experts);
  if (ep > 1)
    s += fmt::format(", {:.1f} GB of all-to-all per rank and step ({:.3f} s exposed)", a2a_bytes / 1e9, a2a);
  std::map<int, const PlanCandidate*> best_other;
  for (const PlanCandidate& c : ranked)
    if (c.plan.mesh.ep != ep && best_other.find(c.plan.mesh.ep) == best_other.end()) best_other[c.plan.mesh.ep] = &c;
  std::vector<std::string> parts;
  for (const auto& [other_ep, c] : best_other)
    parts.push_back(fmt::format("ep {}: {:.0f} tokens/s/GPU at best ({})", other_ep, c->result.tokens_per_s_per_gpu,
                                describe_layout(c->plan)));
  if (!parts.empty()) {
    s += fmt::format("; vs {:.0f} tokens/s/GPU, the best simulated with other ep: ", w.result.tokens_per_s_per_gpu);
    for (std::size_t i = 0; i < parts.size(); ++i) s += (i ? "; " : "") + parts[i];
  } else {
    s += "; no plan with another ep reached the simulated set (the closed-form prune ranked them lower, or they "
         "do not fit)";
  }
  return s;
}

// The global batch in sequences: the request's, or its token count over the sequence length,
// with a note where the tokens do not divide into whole sequences (and what was planned instead).
std::pair<std::int64_t, std::string> planned_global_batch(const PlanRequest& rq) {
  std::int64_t global_batch = rq.global_batch;
  std::string batch_note;
  if (global_batch <= 0 && rq.global_batch_tokens > 0) {
    global_batch = sequences_for_tokens(rq);
    const double exact = static_cast<double>(rq.global_batch_tokens) / static_cast<double>(rq.seq_len);
    if (rq.global_batch_tokens % rq.seq_len != 0) {
      const std::int64_t nearest = std::max<std::int64_t>(1, std::llround(exact));
      batch_note = fmt::format("{} tokens per step is {:.2f} sequences of {}: planned with {} ({} tokens, {:+.2f}%){}",
                               rq.global_batch_tokens, exact, rq.seq_len, global_batch, global_batch * rq.seq_len,
                               100 * (static_cast<double>(global_batch) / exact - 1),
                               global_batch != nearest ? fmt::format(", the nearest count a layout admits ({} does "
                                                                     "not divide over any)",
                                                                     nearest)
                                                       : std::string());
      if (const std::string twin = binary_twin(rq.global_batch_tokens, rq.seq_len); !twin.empty())
        batch_note += "; " + twin;
    }
  }
  return {global_batch, batch_note};
}

// The distinct plans the search simulates, simulated: the first `n_sim` by the estimate, then the
// second round's (second_round_min_estimate). Sets the search's merged, dropped and uneven counts;
// errors[i] is why rows[i] could not be simulated.
struct Simulated {
  std::vector<PlanCandidate> rows;
  std::vector<std::string> errors;
};
Simulated simulate_selected(const PlanRequest& rq, const std::vector<PlanCandidate>& feasible, std::size_t n_sim,
                            PlanSearch& out, const std::function<void(std::size_t, std::size_t)>& progress) {
  Selection sel = select_distinct(rq, feasible, n_sim);
  std::vector<PlanCandidate> sims = std::move(sel.distinct);
  std::vector<std::string> errors;
  // Simulates rows [from, end) of `sims` with their ceil-layout twins in one batch: one pool, no
  // idle thread between the two.
  auto simulate_rows = [&](std::size_t from) {
    std::vector<PlanCandidate> rows(std::make_move_iterator(sims.begin() + static_cast<std::ptrdiff_t>(from)),
                                    std::make_move_iterator(sims.end()));
    CeilTwins twins = ceil_layout_twins(rq, rows);
    const std::size_t n_plans = rows.size();
    rows.insert(rows.end(), twins.twins.begin(), twins.twins.end());
    std::vector<std::string> row_errors;
    simulate_all(rq, rows, row_errors, progress);
    std::move(rows.begin() + static_cast<std::ptrdiff_t>(n_plans), rows.end(), twins.twins.begin());
    rows.resize(n_plans);
    row_errors.resize(n_plans);
    const auto [tried, kept] = keep_faster_twins(twins, rows);
    out.uneven_tried += tried;
    out.uneven_kept += kept;
    std::move(rows.begin(), rows.end(), sims.begin() + static_cast<std::ptrdiff_t>(from));
    errors.insert(errors.end(), row_errors.begin(), row_errors.end());
  };
  simulate_rows(0);
  // Second round: the closed form misranks plans, by as much as the simulated ones show. Every
  // candidate whose estimate, scaled by the largest simulated / estimated ratio seen (and a
  // margin), could still reach the verified rows (the winner by default) is simulated too, so the
  // pruning cuts no plan the simulator would rank there (a test checks the top 10 against a search
  // that simulates every plan).
  if (const double reach = second_round_min_estimate(sims, static_cast<std::size_t>(std::max(1, rq.verified_rows)));
      reach < std::numeric_limits<double>::infinity()) {
    const std::size_t n_first = sims.size();
    Selection wider = select_distinct(rq, feasible, n_sim, reach);
    if (wider.distinct.size() > n_first) {
      // The walk repeats the first round's rows in the same order; only the rows after them are new.
      for (std::size_t i = 0; i < n_first; ++i) wider.distinct[i] = std::move(sims[i]);
      sims = std::move(wider.distinct);
      sel.merged = wider.merged;
      sel.dropped = std::move(wider.dropped);
      simulate_rows(n_first);
    }
  }
  out.merged = sel.merged;
  out.dropped = std::move(sel.dropped);
  return {std::move(sims), std::move(errors)};
}

}  // namespace

// The search's one pipeline: enumerate, prune by the closed form, simulate the survivors in
// parallel, retry uneven splits, rank, explain.
PlanSearch search_plans(const PlanRequest& rq, const std::function<void(std::size_t, std::size_t)>& progress) {
  const auto t0 = std::chrono::steady_clock::now();
  PlanSearch out;
  const auto [global_batch, batch_note] = planned_global_batch(rq);
  out.global_batch = global_batch;
  if (!batch_note.empty()) out.notes.push_back(batch_note);
  Enumerated e = enumerate(rq, global_batch);
  out.evaluated = e.evaluated;
  out.feasible = static_cast<std::int64_t>(e.feasible.size());
  // Closed-form prune, best first; ties keep the enumeration order, for determinism.
  std::stable_sort(e.feasible.begin(), e.feasible.end(), [](const PlanCandidate& a, const PlanCandidate& b) {
    return a.estimate_tokens_per_s_per_gpu > b.estimate_tokens_per_s_per_gpu;
  });
  const std::size_t n_sim = static_cast<std::size_t>(std::max({1, rq.simulate_budget, rq.top_k}));
  // Every expert-parallel degree gets its best plan by the estimate simulated: the closed form
  // prices the all-to-alls and the smaller expert gathers only roughly, and a whole ep degree
  // pruned away is a choice the "ep chosen" note could not explain.
  if (rq.model.moe.enabled()) {
    std::set<int> seen_ep;
    std::vector<PlanCandidate> first, rest;
    for (PlanCandidate& c : e.feasible)
      (seen_ep.insert(c.plan.mesh.ep).second && first.size() < n_sim ? first : rest).push_back(std::move(c));
    first.insert(first.end(), std::make_move_iterator(rest.begin()), std::make_move_iterator(rest.end()));
    e.feasible = std::move(first);
  }
  Simulated run = simulate_selected(rq, e.feasible, n_sim, out, progress);
  std::vector<PlanCandidate>& sims = run.rows;
  const std::vector<std::string>& errors = run.errors;
  const std::size_t n_simulated = sims.size();
  const std::size_t looked_at = n_simulated + static_cast<std::size_t>(out.merged) + out.dropped.size();
  for (std::size_t i = 0; i < sims.size(); ++i)
    if (!sims[i].simulated) out.dropped.push_back({sims[i], errors[i]});
  sims.erase(std::remove_if(sims.begin(), sims.end(), [](const PlanCandidate& c) { return !c.simulated; }),
             sims.end());
  std::stable_sort(sims.begin(), sims.end(), [](const PlanCandidate& a, const PlanCandidate& b) {
    return a.result.tokens_per_s_per_gpu > b.result.tokens_per_s_per_gpu;
  });
  prefer_numerically_safer(sims);
  out.ranked = std::move(sims);
  out.pareto = pareto_front(out.ranked);
  if (out.ranked.size() >= 2)
    out.why_winner = out.ranked[0].result.tokens_per_s_per_gpu < out.ranked[1].result.tokens_per_s_per_gpu
                         ? tie_sentence(out.ranked[0], out.ranked[1])
                         : winner_sentence(out.ranked[0], out.ranked[1], rq.cluster.node.gpus_per_node);
  if (rq.model.moe.enabled() && !out.ranked.empty()) out.notes.push_back(ep_choice_note(rq, out.ranked));
  if (!out.ranked.empty()) {
    const PlanCandidate& w = out.ranked[0];
    if (const auto v = validated_mfu_of(w.plan, rq.cluster.gpu.arch, rq.model.moe.enabled(), rq.seq_len))
      if (std::string n = beyond_validated_note(w.result.mfu, *v); !n.empty()) out.notes.push_back("rank 1: " + n);
    if (std::string n = expert_overlap_note(rq, w); !n.empty()) out.notes.push_back(n);
    if (std::string n = moe_fusion_note(rq, w); !n.empty()) out.notes.push_back(n);
  }
  if (e.feasible.size() > looked_at)
    out.notes.push_back(fmt::format("{} feasible plans; the {} best {}by the closed-form estimate were simulated",
                                    e.feasible.size(), n_simulated, out.merged > 0 ? "distinct ones " : ""));
  if (out.uneven_kept > 0)
    out.notes.push_back(fmt::format("uneven pipelines: {} of the {} simulated plans whose layers do not divide over pp x "
                                    "vpp run faster under Megatron-Bridge's ceil(L / stages) layout, which replaces "
                                    "their split",
                                    out.uneven_kept, out.uneven_tried));
  if (out.merged > 0)
    out.notes.push_back(fmt::format("{} plans lower to the same step and memory as a better-ranked one; each is "
                                    "named in that row's equivalent settings instead of simulated",
                                    out.merged));
  if (out.evaluated == 0)
    out.notes.push_back(empty_grid_reason(rq, global_batch));
  else if (out.feasible == 0)
    out.notes.push_back("no layout fits in memory with the requested headroom");
  out.search_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return out;
}

}  // namespace meshplan

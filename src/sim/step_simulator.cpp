#include "sim/step_simulator.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstdint>
#include <map>
#include <optional>
#include <tuple>
#include <unordered_map>

#include "cost/collective_cost.hpp"
#include "cost/compute_cost.hpp"
#include "cost/host_cost.hpp"
#include "spec/placement.hpp"

namespace meshplan {

namespace {
// The workload names process groups by what they do; placement knows where their ranks sit.
MeshGroup mesh_group(GroupKind g) {
  switch (g) {
    case GroupKind::tp: return MeshGroup::tp;
    case GroupKind::cp: return MeshGroup::cp;
    case GroupKind::fsdp: return MeshGroup::fsdp;
    case GroupKind::dp_replicate: return MeshGroup::dp_replicate;
    case GroupKind::dp: return MeshGroup::dp;
    case GroupKind::ep: return MeshGroup::ep;
    case GroupKind::pp: return MeshGroup::pp;
    case GroupKind::stage: return MeshGroup::stage;
  }
  return MeshGroup::dp;
}
}  // namespace

GroupPlacement group_placement(const Mesh& mesh, GroupKind g, int gpus_per_node) {
  const GroupShape shape = group_shape(mesh, mesh_group(g));
  GroupPlacement gp;
  gp.n_ranks = shape.n_ranks;
  // Consecutive members are `stride` ranks apart: a node of G GPUs holds G/stride of them.
  const std::int64_t per_node = shape.stride >= gpus_per_node ? 1 : std::max<std::int64_t>(1, gpus_per_node / shape.stride);
  gp.ranks_per_node = static_cast<int>(std::min<std::int64_t>(shape.n_ranks, per_node));
  return gp;
}

namespace {

// The dtypes an op's kernels run in: the compute dtype, and the plan's low-precision recipe for
// the block linears and (with FP8 attention) the fused attention.
struct OpDtypes {
  Dtype compute = Dtype::bf16;
  Dtype linears = Dtype::bf16;
  Dtype attention = Dtype::bf16;
};

// An op's GPU time is the sum of its kernels' roofline times; the CPU enqueues its launches
// ahead of the GPU (eager PyTorch), so launch overhead only shows when the kernels are shorter
// than their dispatch: time = max(GPU time, kernels x launch).
double compute_seconds(const Op& op, const ClusterSpec& c, const OpDtypes& t) {
  double gpu_seconds = 0;
  for (const auto& g : op.gemms) {
    const KernelEstimate k = gemm_time(c, g, op.low_precision_gemms ? t.linears : t.compute);
    gpu_seconds += k.seconds - k.launch_seconds;
  }
  for (const auto& a : op.attention) {
    const KernelEstimate k = attention_time(c, a, op.attention_pass, op.low_precision_attention ? t.attention : t.compute);
    gpu_seconds += k.seconds - k.launch_seconds;
  }
  if (op.memory_bound_bytes > 0) {
    const KernelEstimate k = memory_bound_time(c, op.memory_bound_bytes);
    gpu_seconds += k.seconds - k.launch_seconds;
  }
  if (op.cast_bytes > 0) {
    const KernelEstimate k = cast_time(c, op.cast_bytes);
    gpu_seconds += k.seconds - k.launch_seconds;
  }
  const int kernels = std::max<int>(op.kernels, static_cast<int>(op.gemms.size() + op.attention.size()));
  return std::max(gpu_seconds, kernels * c.gpu.kernel_launch_seconds);
}

// The layers of a model repeat a handful of kernel mixes, so ops of the same shape are priced
// once: the cost models are pure functions of their inputs, and pricing every op again was a
// fifth of a 16k-GPU step.
class ComputeCosts {
public:
  ComputeCosts(const ClusterSpec& c, OpDtypes dtypes) : c_(c), dtypes_(dtypes) {}

  double seconds(const Op& op) {
    std::vector<Entry>& bucket = by_hash_[hash(op)];
    for (const Entry& e : bucket)
      if (same(e, op)) return e.seconds;
    bucket.push_back({op.gemms, op.attention, op.attention_pass, op.memory_bound_bytes, op.cast_bytes, op.kernels,
                      op.low_precision_gemms, op.low_precision_attention, compute_seconds(op, c_, dtypes_)});
    return bucket.back().seconds;
  }

private:
  struct Entry {
    Gemms gemms;
    decltype(Op::attention) attention;
    Pass attention_pass;
    double memory_bound_bytes;
    double cast_bytes;
    int kernels;
    bool low_precision_gemms;
    bool low_precision_attention;
    double seconds;
  };
  // Doubles compare by bit pattern: equal bits are the same input, whatever they mean.
  static std::uint64_t bits(double x) { return std::bit_cast<std::uint64_t>(x); }
  static std::uint64_t hash(const Op& op) {
    std::uint64_t h = 1469598103934665603ull;
    auto mix = [&h](std::uint64_t v) { h = (h ^ v) * 1099511628211ull; };
    for (const auto& g : op.gemms) {
      mix(static_cast<std::uint64_t>(g.m));
      mix(static_cast<std::uint64_t>(g.n));
      mix(static_cast<std::uint64_t>(g.k));
      mix(static_cast<std::uint64_t>(g.batch));
    }
    for (const auto& a : op.attention) {
      mix(static_cast<std::uint64_t>(a.seq_q));
      mix(static_cast<std::uint64_t>(a.heads));
    }
    mix(bits(op.memory_bound_bytes));
    mix(bits(op.cast_bytes));
    mix(static_cast<std::uint64_t>(op.kernels));
    mix(op.low_precision_gemms ? 1 : 0);
    mix(op.low_precision_attention ? 1 : 0);
    return h;
  }
  static bool same(const Entry& e, const Op& op) {
    auto same_gemm = [](const GemmShape& a, const GemmShape& b) {
      return a.m == b.m && a.n == b.n && a.k == b.k && a.batch == b.batch;
    };
    auto same_attention = [](const AttentionShape& a, const AttentionShape& b) {
      return a.batch == b.batch && a.heads == b.heads && a.kv_heads == b.kv_heads && a.seq_q == b.seq_q &&
             a.seq_kv == b.seq_kv && a.head_dim == b.head_dim && a.causal == b.causal &&
             a.flash_version == b.flash_version && a.backend == b.backend && a.kernel == b.kernel;
    };
    return e.attention_pass == op.attention_pass && bits(e.memory_bound_bytes) == bits(op.memory_bound_bytes) &&
           bits(e.cast_bytes) == bits(op.cast_bytes) &&
           e.kernels == op.kernels && e.low_precision_gemms == op.low_precision_gemms &&
           e.low_precision_attention == op.low_precision_attention &&
           std::equal(e.gemms.begin(), e.gemms.end(), op.gemms.begin(), op.gemms.end(), same_gemm) &&
           std::equal(e.attention.begin(), e.attention.end(), op.attention.begin(), op.attention.end(), same_attention);
  }

  const ClusterSpec& c_;
  OpDtypes dtypes_;
  std::unordered_map<std::uint64_t, std::vector<Entry>> by_hash_;
};

// What the simulator needs of a collective's estimate, priced once per distinct (operation,
// size, placement): a step repeats the same few collectives thousands of times.
struct PricedCollective {
  double seconds = 0;
  double latency_seconds = 0;
  double bus_bytes = 0;
  double bus_bandwidth_bytes_per_s = 0;
  bool uses_network = false;
  int ranks_per_domain = 1;
};

class CollectiveCosts {
public:
  explicit CollectiveCosts(const ClusterSpec& c) : c_(c) {}

  const PricedCollective& estimate(CollectiveOp op, double bytes, GroupPlacement g, int dedup_top_k = 0,
                                   int dedup_experts = 0) {
    const Key key{static_cast<int>(op), std::bit_cast<std::uint64_t>(bytes), g.n_ranks, g.ranks_per_node,
                  dedup_top_k, dedup_experts};
    auto [it, inserted] = priced_.try_emplace(key);
    if (inserted) {
      CollectiveOptions o;
      o.dedup_top_k = dedup_top_k;
      o.dedup_experts = dedup_experts;
      const CollectiveEstimate e = estimate_collective(c_, op, bytes, g, o);
      it->second = {e.seconds, e.latency_seconds, e.bus_bytes, e.bus_bandwidth_bytes_per_s, e.uses_network,
                    e.ranks_per_domain};
    }
    return it->second;
  }

private:
  using Key = std::tuple<int, std::uint64_t, int, int, int, int>;
  const ClusterSpec& c_;
  std::map<Key, PricedCollective> priced_;
};

struct Links {
  sim::LinkId nvlink, nic, h2d, d2h;
};

// What the host threads were given, per op of the program (every rank of a stage mirrors it).
struct HostTasks {
  std::vector<double> seconds;  // host time to issue the op
  std::vector<char> syncs;      // the host first waited for the GPU work issued before it
  std::map<std::size_t, std::vector<int>> sync_deps;  // for those ops: what it waited for
};

// The host thread of every simulated rank issues that rank's ops in program order, each after
// the host time it costs; a synchronizing op first waits for everything issued before it. Added
// right after the GPU tasks: op i of rank k is task (n_ops + i) * R + k.
HostTasks add_host_tasks(sim::Engine& engine, const StepProgram& prog, const HostModel& host,
                         const std::vector<sim::StreamId>& host_streams, std::size_t R) {
  const std::size_t n_ops = prog.ops.size();
  const std::size_t n_slots = host_streams.size();
  HostTasks out{std::vector<double>(n_ops, 0.0), std::vector<char>(n_ops, 0), {}};
  // Per stage, the last op issued on each stream: stream order makes it stand for the others.
  std::vector<std::array<int, kStreamKinds>> issued(static_cast<std::size_t>(prog.n_stages));
  for (auto& a : issued) a.fill(-1);
  std::size_t next_pass = 0;
  sim::Task t;
  std::vector<int> waits;
  for (std::size_t i = 0; i < n_ops; ++i) {
    const Op& op = prog.ops[i];
    while (next_pass < prog.pass_first_ops.size() && static_cast<std::size_t>(prog.pass_first_ops[next_pass]) < i)
      ++next_pass;
    const bool pass_start =
        next_pass < prog.pass_first_ops.size() && static_cast<std::size_t>(prog.pass_first_ops[next_pass]) == i;
    const bool sync = (host.sync_every_pass && pass_start) ||
                      (host.sync_before_optimizer && op.category == OpCategory::optimizer);
    out.seconds[i] = host_seconds(op, host);
    out.syncs[i] = sync || op.host_sync ? 1 : 0;
    auto& last = issued[static_cast<std::size_t>(op.stage)];
    // The GPU ops the host waits for: everything issued, or for a device-to-host read only the
    // work it reads (the op's own dependencies).
    waits.clear();
    if (sync) {
      for (int j : last)
        if (j >= 0) waits.push_back(j);
    } else if (op.host_sync) {
      waits.assign(op.deps.begin(), op.deps.end());
    }
    if (!waits.empty()) out.sync_deps[i] = waits;
    for (std::size_t k = 0; k < R; ++k) {
      const std::size_t slot = static_cast<std::size_t>(op.stage) * R + k;
      t.reset();
      t.stream = host_streams[slot];
      t.owner = static_cast<int>(n_slots + slot);  // no NCCL kernel slows the CPU
      t.work_seconds = out.seconds[i];
      for (int j : waits) t.deps.push_back(static_cast<sim::TaskId>(static_cast<std::size_t>(j) * R + k));
      engine.add_task(t);
    }
    last[static_cast<std::size_t>(op.stream)] = static_cast<int>(i);
  }
  return out;
}

}  // namespace

SimulatedStep simulate_step(const ModelSpec& m, const Plan& p, const Job& j, const ClusterSpec& c,
                            SimOptions options) {
  SimulatedStep out;
  StepProgram prog = lower_step(m, p, j, LowerOptions{.op_names = options.keep_timeline});
  const int gpn = std::max(1, c.node.gpus_per_node);
  sim::Engine engine(sim::EngineOptions{c.gpu.comm_interference_factor});

  // Ranks simulated per stage: one representative (symmetric mode), or every rank (`full`),
  // where each rank has its own links and streams and a collective starts on all members once
  // all of them are ready (a barrier task per group instance).
  const Mesh& mesh = p.mesh;
  const int per_stage = options.full ? static_cast<int>(mesh.world() / std::max(1, mesh.pp)) : 1;
  const auto R = static_cast<std::size_t>(per_stage);
  const auto n_st = static_cast<std::size_t>(prog.n_stages);
  std::vector<Links> links;
  const double nic_per_gpu = c.node.nics_per_node * c.node.nic_bandwidth_bytes_per_s *
                             (c.node.nic_efficiency > 0 ? c.node.nic_efficiency : 1.0) / gpn;
  const double nvlink = c.node.nvlink_bandwidth_bytes_per_s *
                        (c.node.nvlink_efficiency > 0 ? c.node.nvlink_efficiency : 1.0);
  std::vector<std::array<sim::StreamId, kStreamKinds>> streams;
  std::vector<sim::StreamId> host_streams;  // one CPU thread per simulated rank
  for (std::size_t s = 0; s < n_st; ++s)
    for (std::size_t k = 0; k < R; ++k) {
      const std::string rank = options.full ? fmt::format("rank{}", s * R + k) : fmt::format("stage{}", s);
      links.push_back({engine.add_link({rank + ".nvlink", nvlink}), engine.add_link({rank + ".nic", nic_per_gpu}),
                       engine.add_link({rank + ".h2d", c.node.host_h2d_bytes_per_s}),
                       engine.add_link({rank + ".d2h", c.node.host_d2h_bytes_per_s})});
      std::array<sim::StreamId, kStreamKinds> ids{};
      for (int kind = 0; kind < kStreamKinds; ++kind)
        ids[static_cast<std::size_t>(kind)] =
            engine.add_stream(fmt::format("{}.{}", rank, to_string(static_cast<StreamKind>(kind))));
      streams.push_back(ids);
      host_streams.push_back(engine.add_stream(rank + ".host"));
    }
  // Members of the group of kind g around rank k of a stage, as indices within that stage
  // (pp is the outermost rank dimension, so a stage's ranks are one contiguous block).
  auto members = [&](std::size_t stage, std::size_t k, GroupKind g) {
    std::vector<std::size_t> out;
    for (std::int64_t r : group_members(mesh, mesh_group(g), static_cast<std::int64_t>(stage * R + k)))
      out.push_back(static_cast<std::size_t>(r) % R);
    return out;
  };
  auto task_id = [&](std::size_t op, std::size_t k) { return static_cast<sim::TaskId>(op * R + k); };
  // The host thread's issue of op `op` on rank k: a task on that rank's host stream (after every
  // GPU task, so ids are known before they are added).
  const std::size_t n_ops = prog.ops.size();
  auto host_id = [&](std::size_t op, std::size_t k) { return static_cast<sim::TaskId>((n_ops + op) * R + k); };

  // Per report category, summed in op order (as a map keyed by name would, without the lookups).
  std::array<double, kOpCategories> comm_bytes{};
  std::array<bool, kOpCategories> has_comm_bytes{};
  ComputeCosts compute_costs(c, {p.compute_dtype, low_precision_gemm_dtype(p.fp8), fp8_attention_dtype(p.fp8)});
  CollectiveCosts collective_costs(c);
  // Placement per group kind, worked out the first time an op needs it.
  std::array<std::optional<GroupPlacement>, kGroupKinds> placement_of;
  auto placement = [&](GroupKind g) {
    auto& slot = placement_of[static_cast<std::size_t>(g)];
    if (!slot) slot = group_placement(mesh, g, gpn);
    return *slot;
  };
  engine.reserve_tasks(2 * n_ops * R);
  std::vector<sim::Task> barriers;
  std::map<std::pair<std::size_t, std::size_t>, sim::TaskId> barrier_of;  // (op, first member)
  const auto first_barrier = static_cast<sim::TaskId>(2 * n_ops * R);
  // What the report reads of every op, kept compact: its passes below would otherwise stream the
  // whole program (hundreds of bytes per op) through the cache again and again.
  struct OpBrief {
    int stage;
    StreamKind stream;
    OpCategory category;
  };
  std::vector<OpBrief> brief(prog.ops.size());
  double model_flops = 0, hardware_flops = 0;
  sim::Task t;  // names stay in the program; the engine only needs indices
  for (std::size_t i = 0; i < prog.ops.size(); ++i) {
    const Op& op = prog.ops[i];
    brief[i] = {op.stage, op.stream, op.category};
    model_flops += op.model_flops;
    hardware_flops += op.hardware_flops;
    for (std::size_t k = 0; k < R; ++k) {
      const std::size_t slot = static_cast<std::size_t>(op.stage) * R + k;
      t.reset();
      t.stream = streams[slot][static_cast<std::size_t>(op.stream)];
      for (int d : op.deps) t.deps.push_back(task_id(static_cast<std::size_t>(d), k));
      t.deps.push_back(host_id(i, k));  // never before the host has issued it
      t.owner = static_cast<int>(slot);
      for (const auto& [term, bytes] : op.at_start) t.at_start.push_back({static_cast<int>(term), bytes});
      for (const auto& [term, bytes] : op.at_end) t.at_end.push_back({static_cast<int>(term), bytes});
      const Links& l = links[slot];
      switch (op.kind) {
        case OpKind::compute:
          t.kind = sim::TaskKind::work;
          t.work_seconds = compute_costs.seconds(op);
          if (options.full && slot < options.rank_speed.size()) t.work_seconds /= options.rank_speed[slot];
          break;
        case OpKind::collective:
        case OpKind::p2p: {
          const GroupPlacement gp = op.kind == OpKind::p2p ? GroupPlacement{2, placement(GroupKind::pp).ranks_per_node}
                                                           : placement(op.group);
          if (gp.n_ranks <= 1) {
            t.kind = sim::TaskKind::work;  // a group of one moves nothing
            break;
          }
          const CollectiveOp cop = op.kind == OpKind::p2p ? CollectiveOp::send_recv : op.collective;
          const PricedCollective& est =
              collective_costs.estimate(cop, op.bytes, gp, op.a2a_dedup_top_k, op.a2a_dedup_experts);
          t.kind = sim::TaskKind::flow;
          t.latency_seconds = est.latency_seconds;
          // Bus bytes are what each rank moves over all its hops. Across NVLink domains a ring or
          // tree with r members per domain crosses the network on only 1/r of those hops (the
          // rest are NVLink), so the rank's NIC share carries bus_bytes / r: 8 GPUs of a node in
          // one ring reach the node's whole NIC bandwidth, one GPU per node only its own rail.
          // Nodes of one NVLink domain (GB200 NVL72 trays) talk over NVLink, not their NICs.
          const double on_link = est.uses_network ? std::max(1, est.ranks_per_domain) : 1;
          t.bytes = est.bus_bytes / on_link;
          t.max_rate_bytes_per_s = est.bus_bandwidth_bytes_per_s / on_link;
          t.links.push_back(est.uses_network ? l.nic : l.nvlink);
          if (t.bytes <= 0 || t.max_rate_bytes_per_s <= 0) {
            t.kind = sim::TaskKind::work;
            t.work_seconds = est.seconds;
          }
          if (k == 0) {
            comm_bytes[static_cast<std::size_t>(op.category)] += op.bytes;
            has_comm_bytes[static_cast<std::size_t>(op.category)] = true;
          }
          if (options.full && op.kind == OpKind::collective) {
            // Every member must be ready: one barrier per group instance gates all members.
            const auto group = members(static_cast<std::size_t>(op.stage), k, op.group);
            auto [it, inserted] = barrier_of.try_emplace({i, group.front()}, 0);
            if (inserted) {
              sim::Task b;
              b.stream = sim::kNoStream;
              b.owner = t.owner;
              for (std::size_t mk : group) {
                for (int d : op.deps) b.deps.push_back(task_id(static_cast<std::size_t>(d), mk));
                b.deps.push_back(host_id(i, mk));
              }
              it->second = first_barrier + static_cast<sim::TaskId>(barriers.size());
              barriers.push_back(std::move(b));
            }
            t.deps = {it->second};
          }
          break;
        }
        case OpKind::host_copy:
          t.kind = sim::TaskKind::flow;
          t.bytes = op.bytes;
          t.links.push_back(op.host_to_device ? l.h2d : l.d2h);
          break;
      }
      engine.add_task(t);
    }
  }
  const HostModel host = host_model(c, p);
  const HostTasks host_tasks = add_host_tasks(engine, prog, host, host_streams, R);
  for (const auto& b : barriers) engine.add_task(b);

  const sim::RunResult full_run = engine.run();
  // The report follows rank 0 of each stage (every rank of a stage does the same work).
  sim::RunResult run;
  run.makespan_seconds = full_run.makespan_seconds;
  run.events_processed = full_run.events_processed;
  run.timings.resize(prog.ops.size());
  for (std::size_t i = 0; i < prog.ops.size(); ++i) run.timings[i] = full_run.timings[i * R];
  std::vector<sim::TaskTiming> host_timings(n_ops);
  for (std::size_t i = 0; i < n_ops; ++i) host_timings[i] = full_run.timings[static_cast<std::size_t>(host_id(i, 0))];
  for (const auto& ev : full_run.memory)
    if (static_cast<std::size_t>(ev.owner) % R == 0) {
      sim::MemoryEvent e = ev;
      e.owner = static_cast<int>(static_cast<std::size_t>(ev.owner) / R);
      run.memory.push_back(e);
    }
  StepResult& r = out.result;
  r.step_time_s = run.makespan_seconds;
  r.n_tasks = static_cast<std::int64_t>(prog.ops.size());
  r.n_events = run.events_processed;
  const double world = static_cast<double>(p.mesh.world());
  r.tokens_per_s = r.step_time_s > 0 ? prog.tokens_per_step / r.step_time_s : 0;
  r.tokens_per_s_per_gpu = r.tokens_per_s / world;
  r.model_flops_per_token = model_flops_per_token(m, j.seq_len);
  r.flops_formula = "6*(N - embedding) + 12*L*(heads*head_dim)*seq per token (PaLM/torchtitan), over dense peak";
  const double peak = c.peak_flops_per_s(p.compute_dtype);
  r.mfu = peak > 0 ? r.model_flops_per_token * r.tokens_per_s_per_gpu / peak : 0;
  r.hfu = model_flops > 0 ? r.mfu * hardware_flops / model_flops : 0;
  for (int cat = 0; cat < kOpCategories; ++cat)
    if (has_comm_bytes[static_cast<std::size_t>(cat)])
      r.comm_bytes[std::string(to_string(static_cast<OpCategory>(cat)))] = comm_bytes[static_cast<std::size_t>(cat)];

  // Breakdown: walk the compute stream of the stage that finishes last. Busy time goes to the op's
  // category; each idle gap goes to whatever the next compute op was waiting for.
  for (const char* k : kBreakdownKeys) r.breakdown_s[k] = 0;
  std::vector<double> compute_end(static_cast<std::size_t>(prog.n_stages), 0.0);
  for (std::size_t i = 0; i < brief.size(); ++i)
    if (brief[i].stream == StreamKind::compute)
      compute_end[static_cast<std::size_t>(brief[i].stage)] =
          std::max(compute_end[static_cast<std::size_t>(brief[i].stage)], run.timings[i].end_seconds);
  r.critical_stage = static_cast<int>(std::max_element(compute_end.begin(), compute_end.end()) - compute_end.begin());
  auto charge = [&](OpCategory cat, bool other_stage, double seconds) {
    if (seconds <= 0) return;
    if (cat == OpCategory::pp || other_stage) {
      r.breakdown_s["bubble"] += seconds;
    } else if (cat == OpCategory::offload) {
      r.breakdown_s["offload_stall"] += seconds;
    } else if (is_communication(cat)) {
      r.breakdown_s["exposed_comm"] += seconds;
      r.exposed_comm_s[std::string(to_string(cat))] += seconds;
    } else {
      r.breakdown_s["other"] += seconds;
    }
  };
  // An idle gap [from, to) on the compute stream is blamed along the critical chain: the
  // dependency that finished last owns the part of the gap it was running; whatever it was
  // itself waiting for owns the part before it started, and so on.
  // The host thread gates an op when its issue ended after every dependency: the part of the gap
  // while the host was issuing (or had not reached it) is host_wait, unless the host was itself
  // blocked on the GPU at a synchronizing op, whose own wait is then followed.
  auto host_gate = [&](std::size_t op, double deps_end) {
    return host_timings[op].end_seconds > deps_end && host_tasks.seconds[op] > 0;
  };
  auto charge_wait = [&](std::size_t waiting_op, double from) {
    double to = run.timings[waiting_op].start_seconds;
    std::size_t op = waiting_op;
    for (int depth = 0; to > from && depth < 64; ++depth) {
      int gate = -1;
      double gate_end = -1;
      for (int d : prog.ops[op].deps) {
        const double e = run.timings[static_cast<std::size_t>(d)].end_seconds;
        if (e > gate_end) {
          gate_end = e;
          gate = d;
        }
      }
      if (host_gate(op, gate_end)) {
        const double h_start = host_timings[op].start_seconds;
        r.breakdown_s["host_wait"] += std::max(0.0, std::min(to, host_timings[op].end_seconds) - std::max(from, h_start));
        to = std::min(to, std::max(from, h_start));
        if (!host_tasks.syncs[op]) {
          r.breakdown_s["host_wait"] += std::max(0.0, to - from);  // the host was busy before it
          to = from;
          break;
        }
        // A synchronizing host waited for the GPU work it had issued: that work gates the rest.
        gate = -1;
        gate_end = -1;
        if (const auto it = host_tasks.sync_deps.find(op); it != host_tasks.sync_deps.end())
          for (int d : it->second) {
            const double e = run.timings[static_cast<std::size_t>(d)].end_seconds;
            if (e > gate_end) {
              gate_end = e;
              gate = d;
            }
          }
      }
      if (gate < 0) break;
      const OpBrief& g = brief[static_cast<std::size_t>(gate)];
      const bool other_stage = g.stage != brief[waiting_op].stage;
      const double g_start = run.timings[static_cast<std::size_t>(gate)].start_seconds;
      const double own = std::min(to, gate_end) - std::max(from, g_start);
      if (g.stream == StreamKind::compute && !other_stage) {
        // Waiting on our own compute cannot leave a gap; anything left is scheduling slack.
        break;
      }
      charge(g.category, other_stage, own);
      to = std::min(to, std::max(from, g_start));
      if (other_stage) {
        charge(g.category, true, to - from);  // everything earlier is the other stage's doing
        to = from;
      }
      op = static_cast<std::size_t>(gate);
    }
    if (to > from) r.breakdown_s["other"] += to - from;
  };
  double cursor = 0;
  bool any = false;
  for (std::size_t i = 0; i < brief.size(); ++i) {
    const OpBrief& op = brief[i];
    if (op.stage != r.critical_stage || op.stream != StreamKind::compute) continue;
    const auto& tm = run.timings[i];
    if (tm.start_seconds > cursor) charge_wait(i, cursor);
    const double busy = tm.end_seconds - tm.start_seconds;
    const char* key = op.category == OpCategory::recompute ? "recompute"
                      : op.category == OpCategory::optimizer ? "optimizer"
                                                             : "compute";
    r.breakdown_s[key] += busy;
    cursor = tm.end_seconds;
    any = true;
  }
  if (any && r.step_time_s > cursor) {
    // Communication still draining after the critical stage's last compute op.
    double tail = r.step_time_s - cursor;
    OpCategory cat = OpCategory::compute;
    double latest = -1;
    for (std::size_t i = 0; i < brief.size(); ++i)
      if (run.timings[i].end_seconds > latest) {
        latest = run.timings[i].end_seconds;
        cat = brief[i].category;
      }
    if (is_communication(cat)) {
      r.breakdown_s["exposed_comm"] += tail;
      r.exposed_comm_s[std::string(to_string(cat))] += tail;
    } else {
      r.breakdown_s["other"] += tail;
    }
  }

  for (std::size_t i = 0; i < n_ops; ++i)
    if (brief[i].stage == r.critical_stage) r.host_busy_s += host_tasks.seconds[i];
  r.host_bound = r.step_time_s > 0 && r.breakdown_s["host_wait"] >= kHostBoundFraction * r.step_time_s;

  // Memory along the timeline: the state every moment holds from the memory model, the
  // transients from the events the lowering attached to the ops (the same terms).
  const MemoryEstimate est = estimate_memory(m, p, j, c);
  // One pass over the memory events, tracking every stage's live bytes and its peak; host memory
  // (activation offload) is tracked beside the device's and has its own peak.
  const auto host_term = static_cast<std::size_t>(MemoryTerm::host);
  std::vector<std::array<double, kMemoryTerms>> live(n_st), at_best(n_st), term_max(n_st);
  std::vector<double> transient(n_st, 0), best(n_st, 0), best_t(n_st, 0), host_best(n_st, 0);
  for (const auto& ev : run.memory) {
    const auto o = static_cast<std::size_t>(ev.owner);
    const auto tag = static_cast<std::size_t>(ev.tag);
    live[o][tag] += ev.delta_bytes;
    term_max[o][tag] = std::max(term_max[o][tag], live[o][tag]);
    if (tag == host_term) {
      host_best[o] = std::max(host_best[o], live[o][tag]);
      continue;
    }
    transient[o] += ev.delta_bytes;
    if (transient[o] > best[o]) {
      best[o] = transient[o];
      best_t[o] = ev.time_seconds;
      at_best[o] = live[o];
    }
  }
  std::vector<double> busy(n_st, 0);
  for (std::size_t i = 0; i < brief.size(); ++i)
    if (brief[i].stream == StreamKind::compute)
      busy[static_cast<std::size_t>(brief[i].stage)] += run.timings[i].end_seconds - run.timings[i].start_seconds;
  for (int s = 0; s < prog.n_stages; ++s) {
    StageTimeline tl;
    tl.stage = s;
    const StageMemory& sm = est.stages[static_cast<std::size_t>(s)];
    const MemoryBreakdown& held = sm.persistent;
    const double best_time = best_t[static_cast<std::size_t>(s)];
    // The persistent state plus the timeline's terms, from one set of live bytes per term.
    auto with_terms = [&](const std::array<double, kMemoryTerms>& live_terms) {
      auto term = [&](MemoryTerm t) { return live_terms[static_cast<std::size_t>(t)]; };
      MemoryBreakdown out_b;
      out_b.params = held.params;
      out_b.optimizer = held.optimizer + term(MemoryTerm::optimizer);
      out_b.grads = held.grads + term(MemoryTerm::grads);
      out_b.unsharded_params = term(MemoryTerm::unsharded_params);
      out_b.reduce_buffers = held.reduce_buffers + term(MemoryTerm::reduce_buffers);
      out_b.activations = term(MemoryTerm::activations);
      out_b.recompute = term(MemoryTerm::recompute);
      out_b.comm_buffers = held.comm_buffers;
      return out_b;
    };
    MemoryBreakdown b = with_terms(at_best[static_cast<std::size_t>(s)]);
    const double allocated = b.params + b.grads + b.optimizer + b.unsharded_params + b.reduce_buffers +
                             b.activations + b.recompute;
    b.framework = c.framework.cuda_context_bytes + c.framework.allocator_reserve_fraction * allocated;
    tl.breakdown = b;
    tl.term_peaks = with_terms(term_max[static_cast<std::size_t>(s)]);
    tl.term_peaks.framework = b.framework;
    tl.allocated_peak_bytes = allocated;
    tl.peak_bytes = b.total();
    tl.peak_time_seconds = best_time;
    // Pinned host memory: what param offload keeps there plus the activations offloaded at once.
    tl.host_bytes = sm.host_state_bytes + host_best[static_cast<std::size_t>(s)];
    tl.compute_busy_seconds = busy[static_cast<std::size_t>(s)];
    r.stages.push_back(tl);
  }

  if (options.keep_timeline) {
    out.program = std::move(prog);
    out.timings = run.timings;
    out.host_timings = std::move(host_timings);
  }
  return out;
}

}  // namespace meshplan

#include "sim/step_simulator.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstdint>
#include <future>
#include <map>
#include <optional>
#include <span>
#include <tuple>
#include <unordered_map>

#include "cost/collective_cost.hpp"
#include "cost/compute_cost.hpp"
#include "cost/host_cost.hpp"
#include "sim/periodic_fold.hpp"
#include "sim/rank_classes.hpp"
#include "spec/placement.hpp"

namespace meshplan {

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

// An op's GPU time is the sum of its kernels' times; the CPU enqueues its launches ahead of the
// GPU (eager PyTorch), so the host's dispatch only shows when the kernels are shorter than it:
// time = max(GPU time, kernels x launch). A GEMM's or attention kernel's time keeps its fixed
// per-kernel latency (gpu.kernel_launch): the GEMM model is calibrated on back-to-back kernel
// times that hold it once (compute_cost.cpp, implied_tile_efficiency), and CUDA-graph replays on
// the lent H200, with no host launch at all, still take it (tests/cost/measured_h200_shapes.csv:
// without it the hidden-1024 layer GEMMs come out 19 % too fast, with it +0.9 %). Element-wise
// bytes are priced as one stream per op, without a per-kernel term.
double compute_seconds(const OpWork& op, const ClusterSpec& c, const OpDtypes& t) {
  double gpu_seconds = 0;
  for (const auto& g : op.gemms) gpu_seconds += gemm_time(c, g, op.low_precision_gemms ? t.linears : t.compute).seconds;
  for (const auto& a : op.attention) {
    const KernelEstimate k = attention_time(c, a, op.attention_pass, op.low_precision_attention ? t.attention : t.compute);
    gpu_seconds += k.seconds;
  }
  // LayerNorm kernels priced by width (layernorm_time) are part of the element-wise bytes.
  const double generic_bytes = op.memory_bound_bytes - op.layernorm.bytes;
  if (generic_bytes > 0) {
    const KernelEstimate k = memory_bound_time(c, generic_bytes);
    gpu_seconds += k.seconds - k.launch_seconds;
  }
  if (op.layernorm.bytes > 0) {
    const KernelEstimate k = layernorm_time(c, op.layernorm);
    gpu_seconds += k.seconds - k.launch_seconds;
  }
  if (op.cast_bytes > 0) {
    const KernelEstimate k = cast_time(c, op.cast_bytes);
    gpu_seconds += k.seconds - k.launch_seconds;
  }
  const int kernels = std::max<int>(op.kernels, static_cast<int>(op.gemms.size() + op.attention.size()));
  return std::max(gpu_seconds, kernels * c.gpu.kernel_launch_seconds);
}

// The layers of a model repeat a handful of kernel mixes: a program keeps each distinct work once
// (StepProgram::works), and each is priced once, the first time an op of it is added.
class ComputeCosts {
public:
  ComputeCosts(const ClusterSpec& c, OpDtypes dtypes, std::size_t works)
      : c_(c), dtypes_(dtypes), seconds_(works, -1.0) {}

  double seconds(std::uint32_t work, const OpWork& w) {
    double& s = seconds_[work];
    if (s < 0) s = compute_seconds(w, c_, dtypes_);
    return s;
  }

private:
  const ClusterSpec& c_;
  OpDtypes dtypes_;
  std::vector<double> seconds_;  // by work index; < 0: not priced yet
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

// What the host thread of every simulated rank does for each op of its stage, in program order:
// the host time the op costs, and for a synchronizing op the GPU ops it first waits for.
HostTasks plan_host(const StepProgram& prog, const HostModel& host) {
  const std::size_t n_ops = prog.ops.size();
  HostTasks out{std::vector<double>(n_ops, 0.0), std::vector<char>(n_ops, 0), {}};
  // Per stage, the last op issued on each stream: stream order makes it stand for the others.
  std::vector<std::array<int, kStreamKinds>> issued(static_cast<std::size_t>(prog.n_stages));
  for (auto& a : issued) a.fill(-1);
  std::size_t next_pass = 0;
  std::vector<int> waits;
  for (std::size_t i = 0; i < n_ops; ++i) {
    const StepOp& op = prog.ops[i];
    while (next_pass < prog.pass_first_ops.size() && static_cast<std::size_t>(prog.pass_first_ops[next_pass]) < i)
      ++next_pass;
    const bool pass_start =
        next_pass < prog.pass_first_ops.size() && static_cast<std::size_t>(prog.pass_first_ops[next_pass]) == i;
    const bool sync = (host.sync_every_pass && pass_start) ||
                      (host.sync_before_optimizer && op.category == OpCategory::optimizer);
    out.seconds[i] = host_seconds(op, prog.work(op), host);
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
    last[static_cast<std::size_t>(op.stream)] = static_cast<int>(i);
  }
  return out;
}

// Each simulated rank's host thread as an engine issue thread: op i of rank k is issue i * R + k,
// releasing `releases[i * R + k]` (the op's GPU task, or in full mode its collective's barrier).
void add_host_issues(sim::Engine& engine, const StepProgram& prog, const HostTasks& host,
                     const std::vector<sim::ThreadId>& threads, const std::vector<sim::TaskId>& releases, std::size_t R) {
  std::vector<sim::TaskId> waits;
  for (std::size_t i = 0; i < prog.ops.size(); ++i) {
    const auto sync = host.sync_deps.find(i);
    for (std::size_t k = 0; k < R; ++k) {
      waits.clear();
      if (sync != host.sync_deps.end())
        for (int j : sync->second) waits.push_back(static_cast<sim::TaskId>(static_cast<std::size_t>(j) * R + k));
      const std::size_t slot = static_cast<std::size_t>(prog.ops[i].stage) * R + k;
      engine.add_issue(threads[slot], host.seconds[i], std::span(&releases[i * R + k], 1), waits);
    }
  }
}

// The engine's resources of every simulated rank: its links, its GPU streams and its host thread.
struct RankResources {
  std::vector<Links> links;
  std::vector<std::array<sim::StreamId, kStreamKinds>> streams;
  std::vector<sim::ThreadId> host_threads;
};

// Ranks simulated per stage: one representative (symmetric mode), or in full mode one per class
// of ranks that run alike (sim/rank_classes.hpp), each with its own links and streams, named for
// the rank that represents it.
RankResources add_rank_resources(sim::Engine& engine, const ClusterSpec& c, std::size_t n_st,
                                 const RankClasses* classes) {
  const std::size_t R = classes ? classes->size() : 1;
  const int gpn = std::max(1, c.node.gpus_per_node);
  RankResources out;
  const double nic_per_gpu = c.node.nics_per_node * c.node.nic_bandwidth_bytes_per_s *
                             (c.node.nic_efficiency > 0 ? c.node.nic_efficiency : 1.0) / gpn;
  const double nvlink = c.node.nvlink_bandwidth_bytes_per_s *
                        (c.node.nvlink_efficiency > 0 ? c.node.nvlink_efficiency : 1.0);
  for (std::size_t s = 0; s < n_st; ++s)
    for (std::size_t k = 0; k < R; ++k) {
      const std::string rank =
          classes ? fmt::format("rank{}", static_cast<std::int64_t>(s) * classes->ranks_per_stage + classes->representative[k])
                  : fmt::format("stage{}", s);
      out.links.push_back({engine.add_link({rank + ".nvlink", nvlink}), engine.add_link({rank + ".nic", nic_per_gpu}),
                           engine.add_link({rank + ".h2d", c.node.host_h2d_bytes_per_s}),
                           engine.add_link({rank + ".d2h", c.node.host_d2h_bytes_per_s})});
      std::array<sim::StreamId, kStreamKinds> ids{};
      for (int kind = 0; kind < kStreamKinds; ++kind)
        ids[static_cast<std::size_t>(kind)] =
            engine.add_stream(fmt::format("{}.{}", rank, to_string(static_cast<StreamKind>(kind))));
      out.streams.push_back(ids);
      out.host_threads.push_back(engine.add_issue_thread());
    }
  return out;
}

// What the report reads of every op, kept compact: its passes would otherwise stream the whole
// program (hundreds of bytes per op) through the cache again and again.
struct OpBrief {
  int stage;
  StreamKind stream;
  OpCategory category;
};

// What instantiating the program's GPU tasks gathered on the way, for the report.
struct GpuTasks {
  std::vector<OpBrief> brief;
  double model_flops = 0, hardware_flops = 0;
  // Per report category, summed in op order (as a map keyed by name would, without the lookups).
  std::array<double, kOpCategories> comm_bytes{};
  std::array<bool, kOpCategories> has_comm_bytes{};
  // What the host's issue of op i on rank k releases, at i * R + k: the op's GPU task, or in full
  // mode a collective's barrier.
  std::vector<sim::TaskId> releases;
  // Full mode's barriers, added right after the GPU tasks (their ids follow those): barrier
  // b waits on barrier_deps[barrier_begin[b] .. barrier_begin[b + 1]) and belongs to barrier_owner[b].
  std::vector<int> barrier_owner;
  std::vector<std::uint32_t> barrier_begin{0};
  std::vector<sim::TaskId> barrier_deps;

  void add_barriers(sim::Engine& engine) const {
    sim::Task b;
    b.stream = sim::kNoStream;
    for (std::size_t i = 0; i < barrier_owner.size(); ++i) {
      b.owner = barrier_owner[i];
      b.deps.assign(barrier_deps.begin() + barrier_begin[i], barrier_deps.begin() + barrier_begin[i + 1]);
      engine.add_task(b);
    }
  }
};

// The program's ops as engine tasks, R per op (op i of rank k is task i * R + k), each priced by
// the cost models. In full mode a collective starts on all members once all are ready: one
// barrier task per group instance gates them.
class GpuTaskAdder {
public:
  GpuTaskAdder(sim::Engine& engine, const StepProgram& prog, const Plan& p, const ClusterSpec& c,
               const SimOptions& options, const RankResources& ranks, const RankClasses* classes)
      : engine_(engine), prog_(prog), mesh_(p.mesh), options_(options), ranks_(ranks), classes_(classes),
        R_(classes ? classes->size() : 1),
        gpn_(std::max(1, c.node.gpus_per_node)), n_ops_(prog.ops.size()),
        compute_costs_(c, {p.compute_dtype, low_precision_gemm_dtype(p.fp8), fp8_attention_dtype(p.fp8)}, prog.works.size()),
        collective_costs_(c), comm_price_(2 * prog.works.size(), nullptr), comm_priced_(2 * prog.works.size(), 0),
        first_barrier_(static_cast<sim::TaskId>(n_ops_ * R_)) {}

  GpuTasks add(const HostTasks& host) {
    // Each op is a GPU task (its dependencies; the host's issue of it releases it) and, where the
    // host synchronizes, a gate on what it waits for; a collective crosses a link or a few.
    sim::Engine::Sizes sizes{.tasks = n_ops_ * R_, .links = n_ops_ * R_, .issues = n_ops_ * R_};
    for (const StepOp& op : prog_.ops) {
      sizes.deps += op.deps.size() * R_;
      sizes.memory_changes += op.at_start.size() + op.at_end.size();  // rank 0's alone
      if (classes_ != nullptr && op.kind == OpKind::collective) sizes.tasks += R_;  // at most a barrier per rank
    }
    for (const auto& [op, waits] : host.sync_deps) {
      sizes.tasks += R_;
      sizes.deps += waits.size() * R_;
    }
    engine_.reserve_tasks(sizes);
    out_.brief.resize(n_ops_);
    out_.releases.resize(n_ops_ * R_);
    sim::Task t;  // names stay in the program; the engine only needs indices
    for (std::size_t i = 0; i < n_ops_; ++i) {
      const StepOp& op = prog_.ops[i];
      const OpWork& w = prog_.work(op);
      out_.brief[i] = {op.stage, op.stream, op.category};
      out_.model_flops += w.model_flops;
      out_.hardware_flops += w.hardware_flops;
      for (std::size_t k = 0; k < R_; ++k) {
        const std::size_t slot = static_cast<std::size_t>(op.stage) * R_ + k;
        t.reset();
        t.stream = ranks_.streams[slot][static_cast<std::size_t>(op.stream)];
        for (int d : op.deps) t.deps.push_back(task_id(static_cast<std::size_t>(d), k));
        out_.releases[i * R_ + k] = task_id(i, k);  // never before the host has issued it
        t.owner = static_cast<int>(slot);
        // The report follows rank 0 of each stage: no other rank's memory is logged.
        if (k == 0) {
          for (const auto& [term, bytes] : op.at_start) t.at_start.push_back({static_cast<int>(term), bytes});
          for (const auto& [term, bytes] : op.at_end) t.at_end.push_back({static_cast<int>(term), bytes});
        }
        const Links& l = ranks_.links[slot];
        switch (op.kind) {
          case OpKind::compute:
            t.kind = sim::TaskKind::work;
            t.work_seconds = compute_costs_.seconds(op.work, w);
            if (classes_ != nullptr) t.work_seconds /= speed_of(op.stage, k);
            break;
          case OpKind::collective:
          case OpKind::p2p: communication(t, op, w, i, k, l); break;
          case OpKind::host_copy:
            t.kind = sim::TaskKind::flow;
            t.bytes = w.bytes;
            t.links.push_back(w.host_to_device ? l.h2d : l.d2h);
            break;
        }
        engine_.add_task(t);
      }
    }
    return std::move(out_);
  }

private:
  sim::TaskId task_id(std::size_t op, std::size_t k) const { return static_cast<sim::TaskId>(op * R_ + k); }

  // The speed factor of class k's representative in `stage`.
  double speed_of(int stage, std::size_t k) const {
    const auto rank = static_cast<std::size_t>(stage * classes_->ranks_per_stage + classes_->representative[k]);
    return rank < options_.rank_speed.size() ? options_.rank_speed[rank] : 1.0;
  }

  // Placement per group kind, worked out the first time an op needs it.
  GroupPlacement placement(GroupKind g) {
    auto& slot = placement_of_[static_cast<std::size_t>(g)];
    if (!slot) slot = group_placement(mesh_, g, gpn_);
    return *slot;
  }

  // The price of op's communication, looked up once per work (and per p2p / collective use of it):
  // nullptr for a group of one.
  const PricedCollective* communication_price(const StepOp& op, const OpWork& w) {
    const std::size_t slot = 2 * static_cast<std::size_t>(op.work) + (op.kind == OpKind::p2p ? 1 : 0);
    if (comm_priced_[slot]) return comm_price_[slot];
    comm_priced_[slot] = 1;
    const GroupPlacement gp = op.kind == OpKind::p2p ? GroupPlacement{2, placement(GroupKind::pp).ranks_per_node}
                                                     : placement(w.group);
    if (gp.n_ranks <= 1) return nullptr;
    const CollectiveOp cop = op.kind == OpKind::p2p ? CollectiveOp::send_recv : w.collective;
    return comm_price_[slot] = &collective_costs_.estimate(cop, w.bytes, gp, w.a2a_dedup_top_k, w.a2a_dedup_experts);
  }

  void communication(sim::Task& t, const StepOp& op, const OpWork& w, std::size_t i, std::size_t k, const Links& l) {
    const PricedCollective* priced = communication_price(op, w);
    if (priced == nullptr) {
      t.kind = sim::TaskKind::work;  // a group of one moves nothing
      return;
    }
    const PricedCollective& est = *priced;
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
      out_.comm_bytes[static_cast<std::size_t>(op.category)] += w.bytes;
      out_.has_comm_bytes[static_cast<std::size_t>(op.category)] = true;
    }
    if (classes_ != nullptr && op.kind == OpKind::collective) {
      // Every member's issue releases the barrier, which the collective on each member waits on.
      t.deps = {barrier(t, op, w.group, i, k)};
      out_.releases[i * R_ + k] = t.deps.front();
    }
  }

  // Every member must be ready: one barrier per group instance gates all members. An op's ranks
  // are instantiated one after another, so its instances' barriers are looked up in a slot per
  // instance, reset when the op changes.
  sim::TaskId barrier(const sim::Task& t, const StepOp& op, GroupKind g, std::size_t i, std::size_t k) {
    const ClassGroups& groups = classes_->groups[static_cast<std::size_t>(g)];
    if (barrier_op_ != i) {
      barrier_op_ = i;
      barrier_of_instance_.assign(groups.members.size(), -1);
    }
    sim::TaskId& id = barrier_of_instance_[groups.instance_of[k]];
    if (id >= 0) return id;
    id = first_barrier_ + static_cast<sim::TaskId>(out_.barrier_owner.size());
    out_.barrier_owner.push_back(t.owner);
    for (std::uint32_t mk : groups.members[groups.instance_of[k]])
      for (int d : op.deps) out_.barrier_deps.push_back(task_id(static_cast<std::size_t>(d), mk));
    out_.barrier_begin.push_back(static_cast<std::uint32_t>(out_.barrier_deps.size()));
    return id;
  }

  sim::Engine& engine_;
  const StepProgram& prog_;
  const Mesh& mesh_;
  const SimOptions& options_;
  const RankResources& ranks_;
  const RankClasses* classes_;  // full mode: the simulated ranks stand for their classes
  const std::size_t R_;
  const int gpn_;
  const std::size_t n_ops_;
  ComputeCosts compute_costs_;
  CollectiveCosts collective_costs_;
  // By 2 x work + (p2p): the cached price (std::map nodes do not move), and whether it was looked up.
  std::vector<const PricedCollective*> comm_price_;
  std::vector<char> comm_priced_;
  std::array<std::optional<GroupPlacement>, kGroupKinds> placement_of_;
  std::size_t barrier_op_ = static_cast<std::size_t>(-1);  // the op whose barriers are below
  std::vector<sim::TaskId> barrier_of_instance_;          // -1: none yet
  const sim::TaskId first_barrier_;
  GpuTasks out_;
};

// The report follows rank 0 of each stage (every rank of a stage does the same work): its GPU
// tasks' timings, its host thread's, and its memory events (owner = stage).
struct RankZero {
  sim::RunResult run;
  std::vector<sim::TaskTiming> host_timings;
};

RankZero rank_zero(const sim::RunResult& full_run, std::size_t n_ops, std::size_t R) {
  RankZero out;
  sim::RunResult& run = out.run;
  run.makespan_seconds = full_run.makespan_seconds;
  run.events_processed = full_run.events_processed;
  run.timings.resize(n_ops);
  for (std::size_t i = 0; i < n_ops; ++i) run.timings[i] = full_run.timings[i * R];
  out.host_timings.resize(n_ops);
  for (std::size_t i = 0; i < n_ops; ++i) out.host_timings[i] = full_run.issue_timings[i * R];
  for (const auto& ev : full_run.memory)
    if (static_cast<std::size_t>(ev.owner) % R == 0) {
      sim::MemoryEvent e = ev;
      e.owner = static_cast<int>(static_cast<std::size_t>(ev.owner) / R);
      run.memory.push_back(e);
    }
  return out;
}

// Throughput, FLOP utilisation and bytes moved per category.
void headline_figures(StepResult& r, const ModelSpec& m, const Plan& p, const Job& j, const ClusterSpec& c,
                      const StepProgram& prog, const GpuTasks& gpu, const sim::RunResult& run) {
  r.step_time_s = run.makespan_seconds;
  r.n_tasks = static_cast<std::int64_t>(gpu.brief.size());
  r.n_events = run.events_processed;
  const double world = static_cast<double>(p.mesh.world());
  r.tokens_per_s = r.step_time_s > 0 ? prog.tokens_per_step / r.step_time_s : 0;
  r.tokens_per_s_per_gpu = r.tokens_per_s / world;
  r.model_flops_per_token = model_flops_per_token(m, j.seq_len);
  r.flops_formula = "6*(N - embedding) + 12*L*(heads*head_dim)*seq per token (PaLM/torchtitan), over dense peak";
  if (m.n_mtp_layers > 0) r.flops_formula += "; L and N count the MTP modules' blocks, + 6*d*V per module (its logits)";
  const double peak = c.peak_flops_per_s(p.compute_dtype);
  r.mfu = peak > 0 ? r.model_flops_per_token * r.tokens_per_s_per_gpu / peak : 0;
  r.hfu = gpu.model_flops > 0 ? r.mfu * gpu.hardware_flops / gpu.model_flops : 0;
  for (int cat = 0; cat < kOpCategories; ++cat)
    if (gpu.has_comm_bytes[static_cast<std::size_t>(cat)])
      r.comm_bytes[std::string(to_string(static_cast<OpCategory>(cat)))] = gpu.comm_bytes[static_cast<std::size_t>(cat)];
}

// Every op's dependencies, flat (4 bytes each, where the program's ops hold 144 bytes apiece):
// what the breakdown reads of the program after the run, so that the ops themselves can go
// before it.
struct OpDeps {
  std::vector<std::uint32_t> begin;  // op i's are deps[begin[i], begin[i + 1])
  std::vector<int> deps;
  explicit OpDeps(const StepProgram& prog) {
    begin.reserve(prog.ops.size() + 1);
    for (const StepOp& op : prog.ops) {
      begin.push_back(static_cast<std::uint32_t>(deps.size()));
      deps.insert(deps.end(), op.deps.begin(), op.deps.end());
    }
    begin.push_back(static_cast<std::uint32_t>(deps.size()));
  }
  std::span<const int> of(std::size_t op) const { return {deps.data() + begin[op], deps.data() + begin[op + 1]}; }
};

// Breakdown: walk the compute stream of the stage that finishes last. Busy time goes to the op's
// category; each idle gap goes to whatever the next compute op was waiting for.
class Breakdown {
public:
  Breakdown(StepResult& r, int n_stages, const OpDeps& deps, const std::vector<OpBrief>& brief, const RankZero& rank0,
            const HostTasks& host_tasks)
      : r_(r), n_stages_(n_stages), deps_(deps), brief_(brief), timings_(rank0.run.timings),
        host_timings_(rank0.host_timings), host_tasks_(host_tasks) {}

  void charge_step() {
    for (const char* k : kBreakdownKeys) r_.breakdown_s[k] = 0;
    std::vector<double> compute_end(static_cast<std::size_t>(n_stages_), 0.0);
    for (std::size_t i = 0; i < brief_.size(); ++i)
      if (brief_[i].stream == StreamKind::compute)
        compute_end[static_cast<std::size_t>(brief_[i].stage)] =
            std::max(compute_end[static_cast<std::size_t>(brief_[i].stage)], timings_[i].end_seconds);
    r_.critical_stage = static_cast<int>(std::max_element(compute_end.begin(), compute_end.end()) - compute_end.begin());
    double cursor = 0;
    bool any = false;
    for (std::size_t i = 0; i < brief_.size(); ++i) {
      const OpBrief& op = brief_[i];
      if (op.stage != r_.critical_stage || op.stream != StreamKind::compute) continue;
      const auto& tm = timings_[i];
      if (tm.start_seconds > cursor) charge_wait(i, cursor);
      const double busy = tm.end_seconds - tm.start_seconds;
      const char* key = op.category == OpCategory::recompute ? "recompute"
                        : op.category == OpCategory::optimizer ? "optimizer"
                                                               : "compute";
      r_.breakdown_s[key] += busy;
      cursor = tm.end_seconds;
      any = true;
    }
    if (any && r_.step_time_s > cursor) charge_tail(cursor);
  }

private:
  void charge(OpCategory cat, bool other_stage, double seconds) {
    if (seconds <= 0) return;
    if (cat == OpCategory::pp || other_stage) {
      r_.breakdown_s["bubble"] += seconds;
    } else if (cat == OpCategory::offload) {
      r_.breakdown_s["offload_stall"] += seconds;
    } else if (is_communication(cat)) {
      r_.breakdown_s["exposed_comm"] += seconds;
      r_.exposed_comm_s[std::string(to_string(cat))] += seconds;
    } else {
      r_.breakdown_s["other"] += seconds;
    }
  }

  // The host thread gates an op when its issue ended after every dependency.
  bool host_gate(std::size_t op, double deps_end) const {
    return host_timings_[op].end_seconds > deps_end && host_tasks_.seconds[op] > 0;
  }

  // The dependency of `deps` that finished last, and when (-1 for none).
  std::pair<int, double> last_to_finish(const auto& deps) const {
    int gate = -1;
    double gate_end = -1;
    for (int d : deps) {
      const double e = timings_[static_cast<std::size_t>(d)].end_seconds;
      if (e > gate_end) {
        gate_end = e;
        gate = d;
      }
    }
    return {gate, gate_end};
  }

  // An idle gap [from, to) on the compute stream is blamed along the critical chain: the
  // dependency that finished last owns the part of the gap it was running; whatever it was
  // itself waiting for owns the part before it started, and so on.
  // The part of the gap while the host was issuing (or had not reached it) is host_wait, unless
  // the host was itself blocked on the GPU at a synchronizing op, whose own wait is then followed.
  void charge_wait(std::size_t waiting_op, double from) {
    double to = timings_[waiting_op].start_seconds;
    std::size_t op = waiting_op;
    for (int depth = 0; to > from && depth < 64; ++depth) {
      auto [gate, gate_end] = last_to_finish(deps_.of(op));
      if (host_gate(op, gate_end)) {
        const double h_start = host_timings_[op].start_seconds;
        r_.breakdown_s["host_wait"] += std::max(0.0, std::min(to, host_timings_[op].end_seconds) - std::max(from, h_start));
        to = std::min(to, std::max(from, h_start));
        if (!host_tasks_.syncs[op]) {
          r_.breakdown_s["host_wait"] += std::max(0.0, to - from);  // the host was busy before it
          to = from;
          break;
        }
        // A synchronizing host waited for the GPU work it had issued: that work gates the rest.
        gate = -1;
        gate_end = -1;
        if (const auto it = host_tasks_.sync_deps.find(op); it != host_tasks_.sync_deps.end())
          std::tie(gate, gate_end) = last_to_finish(it->second);
      }
      if (gate < 0) break;
      const OpBrief& g = brief_[static_cast<std::size_t>(gate)];
      const bool other_stage = g.stage != brief_[waiting_op].stage;
      const double g_start = timings_[static_cast<std::size_t>(gate)].start_seconds;
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
    if (to > from) r_.breakdown_s["other"] += to - from;
  }

  // Communication still draining after the critical stage's last compute op.
  void charge_tail(double cursor) {
    double tail = r_.step_time_s - cursor;
    OpCategory cat = OpCategory::compute;
    double latest = -1;
    for (std::size_t i = 0; i < brief_.size(); ++i)
      if (timings_[i].end_seconds > latest) {
        latest = timings_[i].end_seconds;
        cat = brief_[i].category;
      }
    if (is_communication(cat)) {
      r_.breakdown_s["exposed_comm"] += tail;
      r_.exposed_comm_s[std::string(to_string(cat))] += tail;
    } else {
      r_.breakdown_s["other"] += tail;
    }
  }

  StepResult& r_;
  const int n_stages_;
  const OpDeps& deps_;
  const std::vector<OpBrief>& brief_;
  const std::vector<sim::TaskTiming>& timings_;
  const std::vector<sim::TaskTiming>& host_timings_;
  const HostTasks& host_tasks_;
};

// Memory along the timeline: the state every moment holds from the memory model, the
// transients from the events the lowering attached to the ops (the same terms).
void track_memory(StepResult& r, const ModelSpec& m, const Plan& p, const Job& j, const ClusterSpec& c,
                  const StepProgram& prog, const std::vector<OpBrief>& brief, const sim::RunResult& run) {
  const auto n_st = static_cast<std::size_t>(prog.n_stages);
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
}


// `ranks_of`: full mode's classes of ranks that run alike (the layout's, the same for every length
// of the step); nullptr in the symmetric mode. With `period_of`, `*repeats` says whether the step's
// timeline showed that fold's period repeating (periodic_fold's probe).
SimulatedStep simulate_whole(const ModelSpec& m, const Plan& p, const Job& j, const ClusterSpec& c,
                             const SimOptions& options, const RankClasses* ranks_of,
                             const FoldPlan* period_of = nullptr, bool* repeats_out = nullptr) {
  SimulatedStep out;
  StepProgram prog =
      lower_step(m, p, j, LowerOptions{.op_names = options.keep_timeline, .moe_router_load_cv = c.framework.moe_router_load_cv});
  const std::optional<PeriodProbe> probe = period_of ? period_probe(prog) : std::nullopt;
  const std::size_t R = ranks_of ? ranks_of->size() : 1;
  const std::size_t n_ops = prog.ops.size();
  const OpDeps deps(prog);
  GpuTasks gpu;
  HostTasks host_tasks;
  RankZero rank0;
  {
    sim::Engine engine(sim::EngineOptions{c.gpu.comm_interference_factor});
    const RankResources ranks = add_rank_resources(engine, c, static_cast<std::size_t>(prog.n_stages), ranks_of);
    host_tasks = plan_host(prog, host_model(c, p));
    gpu = GpuTaskAdder(engine, prog, p, c, options, ranks, ranks_of).add(host_tasks);
    gpu.add_barriers(engine);
    add_host_issues(engine, prog, host_tasks, ranks.host_threads, gpu.releases, R);
    std::vector<sim::TaskId>().swap(gpu.releases);
    // The engine holds what the run needs: the program's ops (the largest array a simulation
    // holds) go before the run's own state is allocated, unless a trace will show them.
    if (!options.keep_timeline) std::vector<StepOp>().swap(prog.ops);
    rank0 = rank_zero(engine.run(), n_ops, R);
  }  // and the engine's task arrays before the report's passes
  StepResult& r = out.result;
  if (repeats_out)
    *repeats_out = probe && repeats(*probe, rank0.run.timings, rank0.host_timings,
                                    period_tolerance_seconds(*period_of, rank0.run.makespan_seconds));
  headline_figures(r, m, p, j, c, prog, gpu, rank0.run);
  Breakdown(r, prog.n_stages, deps, gpu.brief, rank0, host_tasks).charge_step();
  for (std::size_t i = 0; i < n_ops; ++i)
    if (gpu.brief[i].stage == r.critical_stage) r.host_busy_s += host_tasks.seconds[i];
  r.host_bound = r.step_time_s > 0 && r.breakdown_s["host_wait"] >= kHostBoundFraction * r.step_time_s;
  track_memory(r, m, p, j, c, prog, gpu.brief, rank0.run);

  if (options.keep_timeline) {
    out.program = std::move(prog);
    out.timings = std::move(rank0.run.timings);
    out.host_timings = std::move(rank0.host_timings);
  }
  return out;
}

}  // namespace

SimulatedStep simulate_step(const ModelSpec& m, const Plan& p, const Job& j, const ClusterSpec& c,
                            SimOptions options) {
  std::optional<RankClasses> classes;
  if (options.full) classes = rank_classes(p.mesh, options.rank_speed);
  const RankClasses* ranks_of = classes ? &*classes : nullptr;
  if (!options.exact && !options.keep_timeline)
    for (const FoldPlan& f : fold_plans(p, j)) {
      auto step_of = [&](int k) { return simulate_whole(m, p, f.at(k), c, options, ranks_of).result; };
      // A period of one forward and backward pass can show itself in the longest step's timeline
      // (symmetric mode: one rank per stage holds the whole timeline); then the shortest step
      // need not run.
      const bool probe = f.pass_pair_period && ranks_of == nullptr;
      bool repeated = false;
      auto longest = [&] {
        return simulate_whole(m, p, f.at(2), c, options, ranks_of, probe ? &f : nullptr, &repeated).result;
      };
      // The longest first: the shorter ones then reuse its pages rather than fault in their own.
      // On two threads the longest (m1 + 2P micro-batches) runs against the others (2 m1 + P, or
      // m1 + P where the proof may spare the shortest).
      std::optional<StepResult> a;
      StepResult b, d;
      if (options.parallel_fold) {
        std::future<void> shorter = std::async(std::launch::async, [&] {
          b = step_of(1);
          if (!probe) a = step_of(0);
        });
        d = longest();
        shorter.get();
      } else {
        d = longest();
        b = step_of(1);
      }
      std::optional<StepResult> folded = repeated ? fold_proven_steps(f, b, d) : std::nullopt;
      if (!folded) folded = fold_steps(f, a ? *a : step_of(0), b, d);
      if (folded) {
        SimulatedStep out;
        out.result = std::move(*folded);
        return out;
      }
    }
  return simulate_whole(m, p, j, c, options, ranks_of);
}

}  // namespace meshplan

#include "sim/step_simulator.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>

#include "cost/collective_cost.hpp"
#include "cost/compute_cost.hpp"

namespace meshplan {

GroupPlacement group_placement(const Mesh& mesh, GroupKind g, int gpus_per_node) {
  // Stride of the group's ranks in the global rank order and its size.
  long stride = 1, size = 1;
  switch (g) {
    case GroupKind::tp: stride = 1; size = mesh.tp; break;
    case GroupKind::cp: stride = mesh.tp; size = mesh.cp; break;
    case GroupKind::fsdp: stride = mesh.tp; size = static_cast<long>(mesh.cp) * mesh.dp_shard; break;
    case GroupKind::dp_replicate:
      stride = static_cast<long>(mesh.tp) * mesh.cp * mesh.dp_shard;
      size = mesh.dp_replicate;
      break;
    case GroupKind::dp:
      stride = mesh.tp;
      size = static_cast<long>(mesh.cp) * mesh.dp_shard * mesh.dp_replicate;
      break;
    case GroupKind::ep: stride = mesh.tp; size = std::max(1, mesh.ep); break;
    case GroupKind::pp:
      stride = static_cast<long>(mesh.tp) * mesh.cp * mesh.dp_shard * mesh.dp_replicate;
      size = mesh.pp;
      break;
  }
  GroupPlacement gp;
  gp.n_ranks = static_cast<int>(size);
  // Consecutive members are `stride` ranks apart: a node of G GPUs holds G/stride of them.
  const long per_node = stride >= gpus_per_node ? 1 : std::max<long>(1, gpus_per_node / stride);
  gp.ranks_per_node = static_cast<int>(std::min(size, per_node));
  return gp;
}

namespace {

constexpr std::array<const char*, 7> kBreakdownKeys = {"compute", "recompute", "exposed_comm", "bubble",
                                                        "optimizer", "offload_stall", "other"};

// An op's GPU time is the sum of its kernels' roofline times; the CPU enqueues its launches
// ahead of the GPU (eager PyTorch), so launch overhead only shows when the kernels are shorter
// than their dispatch: time = max(GPU time, kernels x launch).
double compute_seconds(const Op& op, const ClusterSpec& c, Dtype dtype) {
  double gpu_seconds = 0;
  for (const auto& g : op.gemms) {
    const KernelEstimate k = gemm_time(c, g, dtype);
    gpu_seconds += k.seconds - k.launch_seconds;
  }
  for (const auto& a : op.attention) {
    const KernelEstimate k = attention_time(c, a, op.attention_pass, dtype);
    gpu_seconds += k.seconds - k.launch_seconds;
  }
  if (op.memory_bound_bytes > 0) {
    const KernelEstimate k = memory_bound_time(c, op.memory_bound_bytes);
    gpu_seconds += k.seconds - k.launch_seconds;
  }
  const int kernels = std::max<int>(op.kernels, static_cast<int>(op.gemms.size() + op.attention.size()));
  return std::max(gpu_seconds, kernels * c.gpu.kernel_launch_seconds);
}

struct Links {
  sim::LinkId nvlink, nic, h2d, d2h;
};

}  // namespace

SimulatedStep simulate_step(const ModelSpec& m, const Plan& p, const Job& j, const ClusterSpec& c,
                            SimOptions options) {
  SimulatedStep out;
  StepProgram prog = lower_step(m, p, j);
  const int gpn = std::max(1, c.node.gpus_per_node);
  sim::Engine engine(sim::EngineOptions{c.gpu.comm_interference_factor});

  // One representative rank per stage: its NVLink port, its share of the node's NICs, its host link.
  std::vector<Links> links;
  const double nic_per_gpu = c.node.nics_per_node * c.node.nic_bandwidth_bytes_per_s *
                             (c.node.nic_efficiency > 0 ? c.node.nic_efficiency : 1.0) / gpn;
  const double nvlink = c.node.nvlink_bandwidth_bytes_per_s *
                        (c.node.nvlink_efficiency > 0 ? c.node.nvlink_efficiency : 1.0);
  for (int s = 0; s < prog.n_stages; ++s) {
    links.push_back({engine.add_link({fmt::format("stage{}.nvlink", s), nvlink}),
                     engine.add_link({fmt::format("stage{}.nic", s), nic_per_gpu}),
                     engine.add_link({fmt::format("stage{}.h2d", s), c.node.host_h2d_bytes_per_s}),
                     engine.add_link({fmt::format("stage{}.d2h", s), c.node.host_d2h_bytes_per_s})});
  }
  std::vector<std::array<sim::StreamId, kStreamKinds>> streams(static_cast<std::size_t>(prog.n_stages));
  for (int s = 0; s < prog.n_stages; ++s)
    for (int k = 0; k < kStreamKinds; ++k)
      streams[static_cast<std::size_t>(s)][static_cast<std::size_t>(k)] =
          engine.add_stream(fmt::format("stage{}.{}", s, to_string(static_cast<StreamKind>(k))));

  std::map<std::string, double> comm_bytes;
  for (const Op& op : prog.ops) {
    sim::Task t;
    t.name = op.name;
    t.category = std::string(to_string(op.category));
    t.stream = streams[static_cast<std::size_t>(op.stage)][static_cast<std::size_t>(op.stream)];
    t.deps.assign(op.deps.begin(), op.deps.end());
    t.owner = op.stage;
    for (const auto& [tag, bytes] : op.at_start) t.at_start.push_back({tag, bytes});
    for (const auto& [tag, bytes] : op.at_end) t.at_end.push_back({tag, bytes});
    const Links& l = links[static_cast<std::size_t>(op.stage)];
    switch (op.kind) {
      case OpKind::compute:
        t.kind = sim::TaskKind::work;
        t.work_seconds = compute_seconds(op, c, p.compute_dtype);
        break;
      case OpKind::collective:
      case OpKind::p2p: {
        const GroupPlacement gp = op.kind == OpKind::p2p ? GroupPlacement{2, group_placement(p.mesh, GroupKind::pp, gpn).ranks_per_node}
                                                         : group_placement(p.mesh, op.group, gpn);
        if (gp.n_ranks <= 1) {
          t.kind = sim::TaskKind::work;  // a group of one moves nothing
          break;
        }
        const CollectiveOp cop = op.kind == OpKind::p2p ? CollectiveOp::send_recv : op.collective;
        const CollectiveEstimate est = estimate_collective(c, cop, op.bytes, gp);
        t.kind = sim::TaskKind::flow;
        t.latency_seconds = est.latency_seconds;
        t.bytes = est.bus_bytes;
        t.max_rate_bytes_per_s = est.bus_bandwidth_bytes_per_s;
        t.links = {est.crosses_nodes ? l.nic : l.nvlink};
        if (t.bytes <= 0 || t.max_rate_bytes_per_s <= 0) {
          t.kind = sim::TaskKind::work;
          t.work_seconds = est.seconds;
        }
        comm_bytes[std::string(to_string(op.category))] += op.bytes;
        break;
      }
      case OpKind::host_copy:
        t.kind = sim::TaskKind::flow;
        t.bytes = op.bytes;
        t.links = {op.host_to_device ? l.h2d : l.d2h};
        break;
    }
    engine.add_task(std::move(t));
  }

  const sim::RunResult run = engine.run();
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
  double model_flops = 0, hardware_flops = 0;
  for (const Op& op : prog.ops) {
    model_flops += op.model_flops;
    hardware_flops += op.hardware_flops;
  }
  r.hfu = model_flops > 0 ? r.mfu * hardware_flops / model_flops : 0;
  r.comm_bytes = comm_bytes;

  // Breakdown: walk the compute stream of the stage that finishes last. Busy time goes to the op's
  // category; each idle gap goes to whatever the next compute op was waiting for.
  for (const char* k : kBreakdownKeys) r.breakdown_s[k] = 0;
  std::vector<double> compute_end(static_cast<std::size_t>(prog.n_stages), 0.0);
  for (std::size_t i = 0; i < prog.ops.size(); ++i)
    if (prog.ops[i].stream == StreamKind::compute)
      compute_end[static_cast<std::size_t>(prog.ops[i].stage)] =
          std::max(compute_end[static_cast<std::size_t>(prog.ops[i].stage)], run.timings[i].end_seconds);
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
      if (gate < 0) break;
      const Op& g = prog.ops[static_cast<std::size_t>(gate)];
      const bool other_stage = g.stage != prog.ops[waiting_op].stage;
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
  std::size_t last_compute = 0;
  bool any = false;
  for (std::size_t i = 0; i < prog.ops.size(); ++i) {
    const Op& op = prog.ops[i];
    if (op.stage != r.critical_stage || op.stream != StreamKind::compute) continue;
    const auto& tm = run.timings[i];
    if (tm.start_seconds > cursor) charge_wait(i, cursor);
    const double busy = tm.end_seconds - tm.start_seconds;
    const char* key = op.category == OpCategory::recompute ? "recompute"
                      : op.category == OpCategory::optimizer ? "optimizer"
                                                             : "compute";
    r.breakdown_s[key] += busy;
    cursor = tm.end_seconds;
    last_compute = i;
    any = true;
  }
  if (any && r.step_time_s > cursor) {
    // Communication still draining after the critical stage's last compute op.
    double tail = r.step_time_s - cursor;
    OpCategory cat = OpCategory::compute;
    double latest = -1;
    for (std::size_t i = 0; i < prog.ops.size(); ++i)
      if (run.timings[i].end_seconds > latest) {
        latest = run.timings[i].end_seconds;
        cat = prog.ops[i].category;
      }
    if (is_communication(cat)) {
      r.breakdown_s["exposed_comm"] += tail;
      r.exposed_comm_s[std::string(to_string(cat))] += tail;
    } else {
      r.breakdown_s["other"] += tail;
    }
  }
  (void)last_compute;

  // Memory along the timeline: static state from the closed form, transients from the events.
  const MemoryEstimate est = estimate_memory(m, p, j, c);
  for (int s = 0; s < prog.n_stages; ++s) {
    StageTimeline tl;
    tl.stage = s;
    const MemoryBreakdown& eb = est.stages[static_cast<std::size_t>(s)].breakdown;
    std::map<std::string, double> live;
    double transient = 0, best = 0, best_t = 0;
    std::map<std::string, double> at_best;
    for (const auto& ev : run.memory) {
      if (ev.owner != s) continue;
      live[ev.tag] += ev.delta_bytes;
      transient += ev.delta_bytes;
      if (transient > best) {
        best = transient;
        best_t = ev.time_seconds;
        at_best = live;
      }
    }
    MemoryBreakdown b;
    b.params = eb.params;
    b.optimizer = eb.optimizer;
    b.grads = eb.grads;
    b.unsharded_params = at_best["unsharded_params"];
    b.reduce_buffers = at_best["reduce_buffers"];
    b.activations = at_best["activations"];
    b.recompute = at_best["recompute"];
    b.comm_buffers = eb.comm_buffers;
    const double allocated = b.params + b.grads + b.optimizer + b.unsharded_params + b.reduce_buffers +
                             b.activations + b.recompute;
    b.framework = c.framework.cuda_context_bytes + c.framework.allocator_reserve_fraction * allocated;
    tl.breakdown = b;
    tl.allocated_peak_bytes = allocated;
    tl.peak_bytes = b.total();
    tl.peak_time_seconds = best_t;
    for (std::size_t i = 0; i < prog.ops.size(); ++i)
      if (prog.ops[i].stage == s && prog.ops[i].stream == StreamKind::compute)
        tl.compute_busy_seconds += run.timings[i].end_seconds - run.timings[i].start_seconds;
    r.stages.push_back(tl);
  }

  if (options.keep_timeline) {
    out.program = std::move(prog);
    out.timings = run.timings;
  }
  return out;
}

}  // namespace meshplan

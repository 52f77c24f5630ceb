// The step simulator: physical invariants and hand-checkable schedules.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>

#include "report/chrome_trace.hpp"
#include "sim/step_simulator.hpp"
#include "spec/cluster_loader.hpp"
#include "spec/error.hpp"
#include "spec/model_loader.hpp"
#include "workload/memory_estimate.hpp"
#include "workload/step_program.hpp"

using namespace meshplan;

namespace {

Plan fsdp_plan(int dp_shard) {
  Plan p;
  p.runtime = Runtime::torchtitan_fsdp2;
  p.mesh.dp_shard = dp_shard;
  p.sharding = Sharding::zero3;
  return p;
}

double breakdown_sum(const StepResult& r) {
  double s = 0;
  for (const auto& [k, v] : r.breakdown_s) s += v;
  return s;
}

ClusterSpec scaled_links(ClusterSpec c, double factor) {
  c.node.nvlink_bandwidth_bytes_per_s *= factor;
  c.node.nic_bandwidth_bytes_per_s *= factor;
  c.node.host_h2d_bytes_per_s *= factor;
  c.node.host_d2h_bytes_per_s *= factor;
  return c;
}

}  // namespace

TEST_CASE("breakdown adds up to the step time (FSDP, TP+SP, PP interleaved, CP, offload)") {
  const auto c = load_cluster("h100-sxm-80gb");
  const auto m = load_model("llama3.1-8b");
  std::vector<std::pair<Plan, Job>> cases;
  {
    Plan p = fsdp_plan(8);
    cases.push_back({p, Job{8192, 16, 1, 2}});
  }
  {
    Plan p = fsdp_plan(4);
    p.mesh.tp = 2;
    p.sequence_parallel = true;
    p.ac = AcMode::full;
    cases.push_back({p, Job{8192, 8, 1, 2}});
  }
  {
    Plan p;
    p.runtime = Runtime::megatron;
    p.sharding = Sharding::zero1;
    p.mesh.pp = 4;
    p.mesh.vpp = 2;
    p.mesh.tp = 2;
    p.mesh.dp_replicate = 2;
    p.mesh.dp_shard = 1;
    p.schedule = PipelineSchedule::interleaved_1f1b;
    p.sequence_parallel = true;
    cases.push_back({p, Job{4096, 16, 1, 8}});
  }
  {
    Plan p = fsdp_plan(2);
    p.mesh.cp = 4;
    cases.push_back({p, Job{32768, 2, 1, 1}});
  }
  {
    Plan p = fsdp_plan(8);
    p.act_offload = true;
    cases.push_back({p, Job{4096, 8, 1, 1}});
  }
  for (const auto& [p, j] : cases) {
    const auto r = simulate_step(m, p, j, c).result;
    CHECK(r.step_time_s > 0);
    CHECK(breakdown_sum(r) == doctest::Approx(r.step_time_s).epsilon(0.001));
    CHECK(r.tokens_per_s == doctest::Approx(static_cast<double>(j.global_batch * j.seq_len) / r.step_time_s));
    CHECK(r.mfu > 0.05);
    CHECK(r.mfu < 1.0);
  }
}

TEST_CASE("more link bandwidth never slows a step") {
  const auto c = load_cluster("a100-80gb");
  const auto m = load_model("llama2-7b");
  Plan p = fsdp_plan(64);
  Job j{4096, 64, 1, 1};
  double previous = 1e30;
  for (double f : {0.25, 0.5, 1.0, 2.0, 4.0}) {
    const double t = simulate_step(m, p, j, scaled_links(c, f)).result.step_time_s;
    CHECK(t <= previous * (1 + 1e-9));
    previous = t;
  }
}

TEST_CASE("with free communication and a free host the step is the compute sum") {
  auto c = load_cluster("h100-sxm-80gb");
  c.gpu.comm_interference_factor = 0;
  c.host.op_seconds = 0;
  const auto m = load_model("llama3.1-8b");
  // One GPU: no collectives at all; the step is exactly the compute stream's busy time.
  Plan p = fsdp_plan(1);
  p.sharding = Sharding::none;
  const auto r = simulate_step(m, p, Job{4096, 2, 1, 2}, c).result;
  CHECK(r.step_time_s == doctest::Approx(r.stages[0].compute_busy_seconds).epsilon(1e-9));
  CHECK(r.breakdown_s.at("exposed_comm") == doctest::Approx(0).epsilon(1e-12));
}

TEST_CASE("a pipeline bubble appears with few micro-batches and shrinks with more") {
  const auto c = load_cluster("h100-sxm-80gb");
  const auto m = load_model("llama3.1-8b");
  Plan p;
  p.runtime = Runtime::megatron;
  p.sharding = Sharding::none;
  p.mesh.pp = 4;
  p.mesh.dp_shard = 1;
  const auto few = simulate_step(m, p, Job{4096, 1, 1, 1}, c).result;
  const auto many = simulate_step(m, p, Job{4096, 32, 1, 32}, c).result;
  // 1F1B bubble fraction is (pp-1)/(m+pp-1): 3/4 with one micro-batch. With 32 the (pp-1) fill
  // and drain shrink to 3/35, but the last stage also runs the 128k-vocab head and loss, so
  // the other stages wait on it every micro-batch: the bubble shrinks, but not to 3/35.
  const double few_fraction = few.breakdown_s.at("bubble") / few.step_time_s;
  const double many_fraction = many.breakdown_s.at("bubble") / many.step_time_s;
  CHECK(few_fraction == doctest::Approx(0.75).epsilon(0.1));
  CHECK(many_fraction < few_fraction / 2);
  CHECK(many.tokens_per_s_per_gpu > 2 * few.tokens_per_s_per_gpu);
}

TEST_CASE("activation checkpointing lowers the simulated activation peak and adds recompute") {
  const auto c = load_cluster("h100-sxm-80gb");
  const auto m = load_model("llama3.1-8b");
  Plan none = fsdp_plan(8);
  Plan full = none;
  full.ac = AcMode::full;
  Job j{8192, 16, 2, 1};
  const auto rn = simulate_step(m, none, j, c).result;
  const auto rf = simulate_step(m, full, j, c).result;
  CHECK(rf.stages[0].breakdown.activations < rn.stages[0].breakdown.activations);
  CHECK(rf.breakdown_s.at("recompute") > 0);
  CHECK(rn.breakdown_s.at("recompute") == 0);
  CHECK(rf.step_time_s > rn.step_time_s);
  CHECK(rf.hfu > rf.mfu);
}

TEST_CASE("the trace is valid, tracks do not overlap, and it spans the step") {
  const auto c = load_cluster("h100-sxm-80gb");
  const auto m = load_model("llama3.1-8b");
  Plan p = fsdp_plan(8);
  SimOptions so;
  so.keep_timeline = true;
  const auto step = simulate_step(m, p, Job{4096, 8, 1, 1}, c, so);
  const nlohmann::json trace = nlohmann::json::parse(chrome_trace(step.program, step.timings).dump());
  // What --trace writes, event by event, is the same text as the whole tree's dump, host track included.
  CHECK(chrome_trace_text(step.program, step.timings, step.host_timings) ==
        chrome_trace(step.program, step.timings, step.host_timings).dump() + "\n");
  CHECK(chrome_trace_text(step.program, step.timings) == chrome_trace(step.program, step.timings).dump() + "\n");
  REQUIRE_FALSE(step.host_timings.empty());
  std::map<std::pair<int, int>, std::vector<std::pair<double, double>>> tracks;
  double end_us = 0;
  for (const auto& e : trace.at("traceEvents")) {
    if (e.at("ph") != "X") continue;
    const double ts = e.at("ts"), dur = e.at("dur");
    tracks[{e.at("pid"), e.at("tid")}].push_back({ts, ts + dur});
    end_us = std::max(end_us, ts + dur);
  }
  for (auto& [k, v] : tracks) {
    std::sort(v.begin(), v.end());
    for (std::size_t i = 1; i < v.size(); ++i) CHECK(v[i].first >= v[i - 1].second - 1e-6);
  }
  CHECK(end_us == doctest::Approx(step.result.step_time_s * 1e6).epsilon(1e-9));
}

TEST_CASE("same inputs, same result") {
  const auto c = load_cluster("a100-80gb");
  const auto m = load_model("llama2-13b");
  Plan p = fsdp_plan(16);
  p.ac = AcMode::selective_op;
  const auto a = simulate_step(m, p, Job{4096, 32, 2, 1}, c).result;
  const auto b = simulate_step(m, p, Job{4096, 32, 2, 1}, c).result;
  CHECK(a.step_time_s == b.step_time_s);
  CHECK(a.breakdown_s == b.breakdown_s);
}

TEST_CASE("keeping the timeline (op names, timings) does not change the result") {
  const auto c = load_cluster("h100-sxm-80gb");
  const auto m = load_model("llama3.1-8b");
  Plan p = fsdp_plan(4);
  p.mesh.tp = 2;
  p.sequence_parallel = true;
  p.ac = AcMode::full;
  const Job j{4096, 16, 2, 2};
  const SimulatedStep lean = simulate_step(m, p, j, c);
  const SimulatedStep kept = simulate_step(m, p, j, c, SimOptions{.keep_timeline = true});
  CHECK(lean.result.step_time_s == kept.result.step_time_s);
  CHECK(lean.result.breakdown_s == kept.result.breakdown_s);
  CHECK(lean.result.exposed_comm_s == kept.result.exposed_comm_s);
  REQUIRE(kept.program.ops.size() == kept.timings.size());
  for (const Op& o : kept.program.expanded()) CHECK_FALSE(o.name.empty());
}

TEST_CASE("group placement follows TP-innermost rank order") {
  Mesh mesh;
  mesh.tp = 8;
  mesh.dp_shard = 16;
  CHECK(group_placement(mesh, GroupKind::tp, 8).ranks_per_node == 8);
  CHECK(group_placement(mesh, GroupKind::fsdp, 8).ranks_per_node == 1);
  CHECK(group_placement(mesh, GroupKind::fsdp, 8).n_nodes() == 16);
  mesh.tp = 2;
  mesh.dp_shard = 32;
  CHECK(group_placement(mesh, GroupKind::fsdp, 8).ranks_per_node == 4);
  CHECK(group_placement(mesh, GroupKind::tp, 8).n_ranks == 2);
}

TEST_CASE("--full (every rank) agrees with the symmetric mode within 1%") {
  const auto c = load_cluster("h100-sxm-80gb");
  const auto m = load_model("llama3.1-8b");
  std::vector<std::pair<Plan, Job>> cases;
  {
    Plan p = fsdp_plan(16);  // two nodes: FSDP over the NICs
    cases.push_back({p, Job{4096, 16, 1, 1}});
  }
  {
    Plan p = fsdp_plan(4);
    p.mesh.tp = 2;
    p.sequence_parallel = true;
    p.ac = AcMode::full;
    cases.push_back({p, Job{4096, 8, 1, 2}});
  }
  {
    Plan p;
    p.runtime = Runtime::megatron;
    p.sharding = Sharding::zero1;
    p.mesh.pp = 2;
    p.mesh.tp = 2;
    p.mesh.dp_replicate = 4;
    p.mesh.dp_shard = 1;
    p.sequence_parallel = true;
    cases.push_back({p, Job{4096, 16, 1, 4}});
  }
  {
    Plan p = fsdp_plan(2);
    p.mesh.dp_replicate = 2;  // HSDP
    p.mesh.cp = 2;
    cases.push_back({p, Job{16384, 4, 1, 1}});
  }
  for (const auto& [p, j] : cases) {
    SimOptions full;
    full.full = true;
    const auto sym = simulate_step(m, p, j, c).result;
    const auto all = simulate_step(m, p, j, c, full).result;
    CHECK(all.n_tasks == sym.n_tasks);
    CHECK(all.step_time_s == doctest::Approx(sym.step_time_s).epsilon(0.01));
    CHECK(all.stages[0].peak_bytes == doctest::Approx(sym.stages[0].peak_bytes).epsilon(0.01));
  }
}

TEST_CASE("FP8 linears make a GEMM-bound H100 step faster, but by less than the 2x peak ratio") {
  const auto c = load_cluster("h100-sxm-80gb");
  const auto m = load_model("llama3.1-70b");
  Plan p = fsdp_plan(8);
  p.mesh.tp = 8;
  p.mesh.dp_shard = 1;
  p.sharding = Sharding::none;
  p.runtime = Runtime::megatron;
  p.sequence_parallel = true;
  const Job j{4096, 8, 1, 8};
  const double bf16 = simulate_step(m, p, j, c).result.step_time_s;
  p.fp8 = Fp8Recipe::te_delayed;
  const double fp8 = simulate_step(m, p, j, c).result.step_time_s;
  CHECK(fp8 < bf16);
  // The FP8 sweep reaches 0.61-0.70 of a 2x higher peak against bf16's 0.80 (Azure ND H100 v5
  // cuBLASLt; zzc0721/torch-performance-test-data#79), and attention, norms and the quantize
  // kernels do not speed up.
  CHECK(bf16 / fp8 < 1.7);
  CHECK(bf16 / fp8 > 1.1);
  // An A100 has no FP8 tensor cores: the estimate says so instead of pricing it.
  CHECK_THROWS_AS(simulate_step(m, p, j, load_cluster("a100-80gb")), InputError);
}

TEST_CASE("async TP: each all-gather runs beside the GEMM that consumes it, each reduce-scatter beside its producer") {
  const auto c = load_cluster("h100-sxm-80gb");
  const auto m = load_model("llama3.1-70b");
  Plan p;
  p.runtime = Runtime::megatron;
  p.sharding = Sharding::none;
  p.mesh.tp = 8;
  p.sequence_parallel = true;
  const Job j{4096, 2, 1, 2};
  const StepResult serial = simulate_step(m, p, j, c).result;
  p.async_tp = true;
  const SimulatedStep overlapped = simulate_step(m, p, j, c, SimOptions{.keep_timeline = true});
  CHECK(overlapped.result.step_time_s < serial.step_time_s);
  CHECK(overlapped.result.exposed_comm_s.at("tp") < 0.5 * serial.exposed_comm_s.at("tp"));
  auto timing = [&](const std::string& name) {
    for (std::size_t i = 0; i < overlapped.program.ops.size(); ++i)
      if (overlapped.program.name(i) == name) return overlapped.timings[i];
    FAIL("no op " << name);
    return sim::TaskTiming{};
  };
  // Forward of layer 3: the SP all-gather starts with the QKV GEMM, the reduce-scatter with the
  // output projection, and the MLP (which reads the reduced output) waits for the reduce-scatter.
  CHECK(timing("fwd.L3.mb1.tp_ag_attn").start_seconds == doctest::Approx(timing("fwd.L3.mb1.qkv").start_seconds));
  CHECK(timing("fwd.L3.mb1.tp_attn_out").start_seconds == doctest::Approx(timing("fwd.L3.mb1.proj").start_seconds));
  CHECK(timing("fwd.L3.mb1.mlp").start_seconds >= timing("fwd.L3.mb1.tp_attn_out").end_seconds - 1e-12);
  // The next layer starts only after this layer's last reduce-scatter.
  CHECK(timing("fwd.L4.mb1.qkv").start_seconds >= timing("fwd.L3.mb1.tp_mlp_out").end_seconds - 1e-12);
}

TEST_CASE("the timeline's allocated peak equals the closed form where that is exact (autocast FSDP, PP stage 0)") {
  const auto c = load_cluster("a100-80gb");
  const auto m = load_model("llama2-7b");
  // fp32 weights under autocast with FSDP1 and full AC: the peak is the end of the forward,
  // with autocast's cached bf16 weights (dlrover's setup).
  Plan a;
  a.runtime = Runtime::generic;
  a.mesh.dp_shard = 8;
  a.param_dtype = a.reduce_dtype = Dtype::fp32;
  a.ac = AcMode::full;
  const Job ja{4096, 32, 4, 1};
  // A DeepSpeed-style pipeline (not Megatron): stage 0 keeps its outputs per micro-batch in flight.
  Plan b;
  b.runtime = Runtime::generic;
  b.mesh.pp = 2;
  b.mesh.dp_replicate = 4;
  b.sharding = Sharding::zero1;
  b.param_dtype = b.compute_dtype = b.reduce_dtype = Dtype::fp16;
  b.ac = AcMode::full;
  const Job jb{4096, 256, 8, 8};
  for (const auto& [p, j] : {std::pair{a, ja}, std::pair{b, jb}}) {
    const double closed = estimate_memory(m, p, j, c).stages.front().allocated_peak_bytes;
    const double timeline = simulate_step(m, p, j, c).result.stages.front().allocated_peak_bytes;
    CHECK(timeline == doctest::Approx(closed).epsilon(1e-6));
  }
}

TEST_CASE("a group spanning trays of one NVLink domain (GB200 NVL72) moves over NVLink, not the NICs") {
  // 8 GPUs of a 72-GPU NVLink domain, as two 4-GPU trays or one 8-GPU tray: the collective model
  // prices them the same (one NVLink island), so the simulated step must not depend on the tray
  // size. Before, a group crossing trays was put on the trays' NICs (50 GB/s per GPU).
  const auto trays = load_cluster("gb200");
  REQUIRE(trays.node.gpus_per_node == 4);
  REQUIRE(trays.node.nvlink_domain_gpus == 72);
  auto one_tray = trays;
  one_tray.node.gpus_per_node = 8;
  one_tray.node.nics_per_node = 2 * trays.node.nics_per_node;  // same NIC rate per GPU
  const auto m = load_model("llama3.1-8b");
  const Plan p = fsdp_plan(8);
  const Job j{4096, 8, 1, 1};
  const auto a = simulate_step(m, p, j, trays).result;
  const auto b = simulate_step(m, p, j, one_tray).result;
  CHECK(a.comm_bytes.at("fsdp_all_gather") > 0);
  CHECK(a.step_time_s == doctest::Approx(b.step_time_s).epsilon(1e-9));
  CHECK(a.exposed_comm_s == b.exposed_comm_s);
  // The same group on H100 nodes of 4 GPUs does cross the network and is slower.
  auto h100 = load_cluster("h100-sxm-80gb");
  auto h100_4 = h100;
  h100_4.node.gpus_per_node = 4;
  h100_4.node.nvlink_domain_gpus = 4;
  h100_4.node.nics_per_node = h100.node.nics_per_node / 2;
  CHECK(simulate_step(m, p, j, h100_4).result.step_time_s > simulate_step(m, p, j, h100).result.step_time_s);
}

namespace {

Plan fsdp1_plan() {
  Plan p;
  p.runtime = Runtime::composer_fsdp1;
  p.mesh.dp_shard = 8;
  p.sharding = Sharding::zero3;
  p.backward_prefetch = BackwardPrefetch::backward_post;
  p.root_unsharded = true;
  return p;
}

// From the first start to the last end of the ops whose names start with `prefix`.
double op_seconds(const SimulatedStep& s, const std::string& prefix) {
  double from = 1e300, to = -1;
  for (std::size_t i = 0; i < s.program.ops.size(); ++i)
    if (s.program.name(i).rfind(prefix, 0) == 0) {
      from = std::min(from, s.timings[i].start_seconds);
      to = std::max(to, s.timings[i].end_seconds);
    }
  if (to < 0) FAIL("no op " << prefix);
  return to - from;
}

std::size_t op_index(const SimulatedStep& s, const std::string& prefix) {
  for (std::size_t i = 0; i < s.program.ops.size(); ++i)
    if (s.program.name(i).rfind(prefix, 0) == 0) return i;
  FAIL("no op " << prefix);
  return 0;
}

}  // namespace

TEST_CASE("FSDP1 limit_all_gathers: two units gathered with the rate limiter, as many as run ahead without") {
  // Llama-2 7B on one 8-GPU A100 node: a block's all-gather (A) is shorter than its forward (C),
  // and the host issues faster than both. Hand trace without the limiter: the gathers run back to
  // back, unit i in [iA, (i+1)A]; unit i's forward ends at A + (i+1)C and frees it. When the last
  // gather starts, at (L-1)A, the L - floor((L-2)A/C) units whose forward has not ended are all
  // gathered. With the limiter a gather waits for the unit two back to be freed: two at a time.
  const auto c = load_cluster("a100-80gb");
  const auto m = load_model("llama2-7b");
  const Job j{2048, 64, 1, 8};
  Plan limited = fsdp1_plan();
  Plan free = limited;
  free.limit_all_gathers = false;
  SimOptions keep;
  keep.keep_timeline = true;
  const SimulatedStep a = simulate_step(m, limited, j, c, keep);
  const SimulatedStep b = simulate_step(m, free, j, c, keep);
  const double unit = fsdp_unit_gathered_bytes(m, limited);
  const double A = op_seconds(b, "fsdp_ag.fwd.L1.mb0");
  const double C = op_seconds(b, "fwd.L1.mb0.");
  REQUIRE(A < C);
  const int L = m.n_layers;
  const int hand_units = L - static_cast<int>(std::floor((L - 2) * A / C));
  const double root = a.result.stages[0].term_peaks.unsharded_params - 2 * unit;
  INFO("A " << A << " s, C " << C << " s, hand " << hand_units << " units");
  CHECK(root >= 0);
  CHECK(b.result.stages[0].term_peaks.unsharded_params / unit - root / unit ==
        doctest::Approx(hand_units).epsilon(1.5 / hand_units));
  CHECK(hand_units > 4);
  // The gathers were never what the forward waited for here: the step is the same within 1 %.
  CHECK(b.result.step_time_s == doctest::Approx(a.result.step_time_s).epsilon(0.01));
}

TEST_CASE("FSDP1 forward_prefetch: the next unit's all-gather is issued before this unit's kernels") {
  auto c = load_cluster("a100-80gb");
  const auto m = load_model("llama2-7b");
  const Job j{2048, 64, 1, 8};
  SimOptions keep;
  keep.keep_timeline = true;
  Plan base = fsdp1_plan();
  Plan pre = base;
  pre.forward_prefetch = true;
  // Program order is the host's issue order: with forward_prefetch, unit 2's gather comes before
  // unit 1's forward; without, after it.
  const SimulatedStep s0 = simulate_step(m, base, j, c, keep);
  const SimulatedStep s1 = simulate_step(m, pre, j, c, keep);
  CHECK(op_index(s0, "fsdp_ag.fwd.L2.mb0") > op_index(s0, "fwd.L1.mb0."));
  CHECK(op_index(s1, "fsdp_ag.fwd.L2.mb0") < op_index(s1, "fwd.L1.mb0."));
  // Hand trace: the gather of unit i+1 is needed when unit i+1's first kernel is issued. Without
  // prefetch it leaves the host just before that kernel, whose own issue (the attention block's
  // launches) takes longer than the gather runs, so it is done in time either way; with the host
  // ahead of the GPU it was issued long before. The step and its peak do not move, whatever the
  // host's speed, for this shape.
  for (double host_factor : {1.0, 10.0, 25.0}) {
    ClusterSpec slow = c;
    slow.host.op_seconds *= host_factor;
    const auto r0 = simulate_step(m, base, j, slow).result;
    const auto r1 = simulate_step(m, pre, j, slow).result;
    CAPTURE(host_factor);
    CHECK(r1.step_time_s == doctest::Approx(r0.step_time_s).epsilon(1e-3));
    CHECK(r1.stages[0].peak_bytes == doctest::Approx(r0.stages[0].peak_bytes).epsilon(1e-9));
  }
  // Without the rate limiter forward_prefetch_limit units are issued ahead: with 3, unit 4's gather
  // precedes unit 1's forward.
  Plan ahead = pre;
  ahead.limit_all_gathers = false;
  ahead.forward_prefetch_limit = 3;
  const SimulatedStep s2 = simulate_step(m, ahead, j, c, keep);
  CHECK(op_index(s2, "fsdp_ag.fwd.L4.mb0") < op_index(s2, "fwd.L1.mb0."));
  CHECK(op_index(s2, "fsdp_ag.fwd.L5.mb0") > op_index(s2, "fwd.L1.mb0."));
}

// Explaining the gap between a simulated and an observed run (diagnose.hpp).
#include "report/diagnose.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <optional>

#include "sim/step_simulator.hpp"
#include "spec/error.hpp"
#include "import/import_megatron.hpp"
#include "spec/model_loader.hpp"
#include "spec/runtimes.hpp"
#include "spec/units.hpp"

namespace meshplan {

namespace {

// Plausible degradations, not worst cases: GEMMs 20% below the profiled curve (clocks under power
// or thermal limits, shapes the profile did not cover), and half the modeled network bandwidth
// (congestion, a bad link or NIC, NCCL falling back to a slower algorithm or protocol).
constexpr double kPlausibleComputeFactor = 0.8;
constexpr double kPlausibleNetworkFactor = 0.5;
// A host twice as slow per op as profiled: the spread between a Sapphire Rapids Xeon and a Grace
// core for the same PyTorch call is 2.5-2.75x (docs/host.md), so 2x is within what CPUs differ by.
constexpr double kPlausibleHostFactor = 2.0;

double step_with(const RunConfig& rc, const ClusterSpec& c) { return simulate_step(rc.model, rc.plan, rc.job, c).result.step_time_s; }

ClusterSpec slower_compute(ClusterSpec c, double k) {
  for (auto& [d, f] : c.gpu.peak_flops_per_s) f *= k;
  for (auto& a : c.gpu.attention_curves)
    for (auto& f : a.flops_per_s) f *= k;
  return c;
}

ClusterSpec slower_network(ClusterSpec c, double k) {
  c.node.nvlink_bandwidth_bytes_per_s *= k;
  c.node.nic_bandwidth_bytes_per_s *= k;
  return c;
}

// The factor (in [lo, 1]) at which the simulated step reaches `target` seconds, by bisection on a
// step time that falls monotonically as the factor rises; nullopt when even `lo` is not enough.
template <typename F>
std::optional<double> factor_for(F&& step_at, double target, double lo) {
  if (step_at(lo) < target) return std::nullopt;
  double a = lo, b = 1.0;
  for (int i = 0; i < 14; ++i) {
    const double mid = 0.5 * (a + b);
    (step_at(mid) >= target ? a : b) = mid;
  }
  return 0.5 * (a + b);
}

std::vector<Settings> candidate_edits(const RunConfig& rc, const ConfigDocument& doc, std::int64_t gpn) {
  std::vector<Settings> out;
  const Plan& p = rc.plan;
  const std::int64_t mb = rc.job.micro_batch;
  switch (doc.format) {
    case ConfigFormat::megatron_args:
      // Larger micro-batches (fewer in the schedule), less recompute, CUDA graphs.
      out.push_back({{"--micro-batch-size", std::to_string(mb * 2)}});
      if (p.ac == AcMode::full) out.push_back({{"--recompute-granularity", "selective"}});
      if (!p.cuda_graphs) out.push_back({{"--enable-cuda-graph", "true"}});
      break;
    case ConfigFormat::llm_foundry_yaml: {
      const std::int64_t device = rc.job.global_batch / std::max<std::int64_t>(1, rc.n_gpus);
      if (mb * 2 <= device) out.push_back({{"device_train_microbatch_size", std::to_string(mb * 2)}});
      if (mb * 4 <= device) out.push_back({{"device_train_microbatch_size", std::to_string(mb * 4)}});
      if (runtime_info(p).traits.fsdp1_prefetch_knobs && p.sharding != Sharding::none) {
        if (p.backward_prefetch != BackwardPrefetch::backward_pre)
          out.push_back({{"fsdp_config.backward_prefetch", "BACKWARD_PRE"}});
        if (!p.forward_prefetch) out.push_back({{"fsdp_config.forward_prefetch", "true"}});
        if (p.sharding == Sharding::zero3) out.push_back({{"fsdp_config.sharding_strategy", "SHARD_GRAD_OP"}});
        // HSDP: shard within a node, replicate across nodes.
        if (rc.n_gpus > gpn && rc.n_gpus % gpn == 0 && p.mesh.dp_replicate == 1 && p.mesh.tp == 1)
          out.push_back({{"fsdp_config.sharding_strategy", "HYBRID_SHARD"},
                         {"fsdp_config.data_parallel_replicate_degree", std::to_string(rc.n_gpus / gpn)},
                         {"fsdp_config.data_parallel_shard_degree", std::to_string(gpn)}});
      }
      if (p.reduce_dtype == Dtype::fp32 && p.sharding != Sharding::none)
        out.push_back({{"fsdp_config.mixed_precision", "PURE"}});
      if (p.ac != AcMode::none) {
        out.push_back({{"fsdp_config.activation_checkpointing", "false"}});
        if (p.ac_reentrant) out.push_back({{"fsdp_config.activation_checkpointing_reentrant", "false"}});
        if (mb * 2 <= device)
          out.push_back({{"fsdp_config.activation_checkpointing", "false"}, {"device_train_microbatch_size", std::to_string(mb * 2)}});
      }
      break;
    }
    case ConfigFormat::torchtitan_toml: {
      out.push_back({{"training.local_batch_size", std::to_string(mb * 2)}});
      if (p.ac != AcMode::none) out.push_back({{"activation_checkpoint.mode", "none"}});
      if (p.ac == AcMode::full) out.push_back({{"activation_checkpoint.mode", "selective"}, {"activation_checkpoint.selective_ac_option", "op"}});
      if (!p.compile) out.push_back({{"compile.enable", "true"}});
      break;
    }
    case ConfigFormat::meshplan_plan:
      out.push_back({{"batch.micro_batch", std::to_string(mb * 2)}});
      if (!p.cuda_graphs && runtime_traits(p).offers_cuda_graphs) out.push_back({{"runtime.cuda_graphs", "true"}});
      break;
  }
  return out;
}

// What the observation implies: its step time, the gap to the prediction and its utilization,
// with a note where the utilization is impossible or the prediction is slower.
Diagnosis compare_to_prediction(const RunConfig& rc, const ClusterSpec& c, const StepResult& predicted, double observed) {
  if (!(observed > 0)) throw InputError("", "--observed-tokens-per-s", "must be positive");
  Diagnosis d;
  d.observed_tokens_per_s_per_gpu = observed;
  d.predicted_tokens_per_s_per_gpu = predicted.tokens_per_s_per_gpu;
  d.predicted_step_s = predicted.step_time_s;
  d.observed_step_s = static_cast<double>(rc.job.tokens_per_step()) / (observed * static_cast<double>(rc.n_gpus));
  d.gap_s = d.observed_step_s - d.predicted_step_s;
  // MFU and HFU scale with tokens/s at fixed FLOPs per token, so the observation's utilization
  // follows from the prediction's.
  const double speedup = predicted.tokens_per_s_per_gpu > 0 ? observed / predicted.tokens_per_s_per_gpu : 0;
  d.observed_mfu = predicted.mfu * speedup;
  d.observed_hfu = predicted.hfu * speedup;
  d.physically_possible = d.observed_mfu <= 1 && d.observed_hfu <= 1;
  if (!d.physically_possible)
    d.notes.push_back(fmt::format("the observation implies {:.0f}% MFU and {:.0f}% HFU of the {} dense peak: the "
                                  "GPUs cannot execute the step's FLOPs that fast, so this is a measurement or "
                                  "accounting error (check the tokens counted per step: global batch, sequence "
                                  "length, packing; and what the timer covers), not a profile to calibrate",
                                  100 * d.observed_mfu, 100 * d.observed_hfu, c.name));
  else if (d.gap_s <= 0)
    d.notes.push_back(fmt::format("the observation is {:.1f}% faster than predicted: the profile for {} is pessimistic "
                                  "for this run (run `meshplan calibrate` on the machine)",
                                  100 * (d.predicted_step_s / d.observed_step_s - 1), c.name));
  return d;
}

// A cause and the part of the gap it explains: what its plausible perturbation adds to the step,
// at most the gap.
void add_cause(Diagnosis& d, double gap, std::string cause, double plausible_step, std::string detail, std::string fix) {
  const double delta = std::max(0.0, plausible_step - d.predicted_step_s);
  d.causes.push_back({std::move(cause), std::min(gap, delta), std::move(detail), std::move(fix)});
}

// 1. GEMMs slower than the profile.
void cause_slower_compute(Diagnosis& d, double gap, const RunConfig& rc, const ClusterSpec& c) {
  const double at = step_with(rc, slower_compute(c, kPlausibleComputeFactor));
  const auto need = gap > 0 ? factor_for([&](double k) { return step_with(rc, slower_compute(c, k)); },
                                         d.observed_step_s, 0.05)
                            : std::optional<double>{};
  add_cause(d, gap, "lower achieved GEMM/attention efficiency", at,
            fmt::format("at {:.0f}% of the profiled efficiency the step takes {:.2f} s (+{:.2f} s); {}",
                        100 * kPlausibleComputeFactor, at, at - d.predicted_step_s,
                        need ? fmt::format("the whole gap needs {:.0f}% of it", 100 * *need)
                             : std::string("compute alone cannot explain the whole gap")),
            "check clocks and power capping (nvidia-smi -q -d PERFORMANCE), and that FlashAttention and fused kernels are "
            "in use; `meshplan calibrate` measures the real curve");
}

// 2. Slower network.
void cause_slower_network(Diagnosis& d, double gap, const RunConfig& rc, const ClusterSpec& c, const StepResult& predicted) {
  const double at = step_with(rc, slower_network(c, kPlausibleNetworkFactor));
  const auto need = gap > 0 ? factor_for([&](double k) { return step_with(rc, slower_network(c, k)); },
                                         d.observed_step_s, 0.02)
                            : std::optional<double>{};
  double comm_bytes = 0;
  for (const auto& [k, b] : predicted.comm_bytes) comm_bytes += b;
  add_cause(d, gap, "slower network than modeled", at,
            fmt::format("{:.1f} GB per GPU per step; at {:.0f}% of the modeled NVLink/NIC bandwidth the step takes {:.2f} s "
                        "(+{:.2f} s); {}",
                        comm_bytes / 1e9, 100 * kPlausibleNetworkFactor, at, at - d.predicted_step_s,
                        need ? fmt::format("the whole gap needs {:.0f}% of the bandwidth", 100 * *need)
                             : std::string("the network alone cannot explain the whole gap")),
            "run nccl-tests (all_gather_perf, reduce_scatter_perf) across the same nodes; check NCCL_IB_HCA / "
            "NCCL_SOCKET_IFNAME and that GPUDirect RDMA is used");
}

// 3. Communication overlap lost (prefetch not happening, CPU-bound launch, rate limiter stalls).
void cause_lost_overlap(Diagnosis& d, double gap, const RunConfig& rc, const ClusterSpec& c, const StepResult& predicted) {
  if (rc.plan.sharding == Sharding::none) return;
  RunConfig no_overlap = rc;
  no_overlap.plan.backward_prefetch = BackwardPrefetch::none;
  no_overlap.plan.forward_prefetch = false;
  const double at = step_with(no_overlap, c);
  const double exposed_now = predicted.breakdown_s.count("exposed_comm") ? predicted.breakdown_s.at("exposed_comm") : 0.0;
  add_cause(d, gap, "FSDP all-gathers not overlapped with compute", at,
            fmt::format("{:.2f} s of communication is already exposed in the prediction; without prefetch overlap the step "
                        "takes {:.2f} s (+{:.2f} s)",
                        exposed_now, at, at - d.predicted_step_s),
            runtime_info(rc.plan).framework == Framework::llm_foundry && runtime_info(rc.plan).traits.fsdp1_prefetch_knobs
                ? "set fsdp_config.forward_prefetch: true and backward_prefetch: BACKWARD_PRE; a CPU-bound Python loop "
                  "(many small FSDP units) also delays the all-gather launches"
                : "check with a profiler that all-gathers run on their own stream ahead of the compute that needs them");
}

// 4. A slower host thread: kernels issued later than the GPU could run them.
void cause_slower_host(Diagnosis& d, double gap, const RunConfig& rc, const ClusterSpec& c, const StepResult& predicted) {
  ClusterSpec slow = c;
  slow.host.op_seconds *= kPlausibleHostFactor;
  const double at = step_with(rc, slow);
  add_cause(d, gap, "host-bound: the CPU issues kernels slower than the GPU runs them", at,
            fmt::format("the host thread is busy {:.3f} s of the {:.3f} s step and the GPU waits {:.3f} s on it{}; at {:.0f}x "
                        "the profiled per-op host cost the step takes {:.3f} s (+{:.3f} s)",
                        predicted.host_busy_s, predicted.step_time_s,
                        predicted.breakdown_s.count("host_wait") ? predicted.breakdown_s.at("host_wait") : 0.0,
                        predicted.host_bound ? " (host-bound already)" : "", kPlausibleHostFactor, at,
                        at - d.predicted_step_s),
            "issue fewer ops per token: a larger micro-batch or fewer micro-batches, CUDA graphs (Megatron "
            "--enable-cuda-graph), torch.compile; check the CPU governor and that no other process shares the cores");
}

// 5. What no perturbation explains: a per-step constant.
void cause_residual(Diagnosis& d, double gap, const RunConfig& rc) {
  double best = 0;
  for (const auto& x : d.causes) best = std::max(best, x.explains_s);
  const double rest = std::max(0.0, gap - best);
  const double per_mb = rest / static_cast<double>(std::max<std::int64_t>(1, rc.job.grad_accum));
  d.causes.push_back(
      {"unexplained (data loading, logging, evaluation or host overhead?)", rest,
       fmt::format("{:.2f} s per step beyond the largest simulated cause ({:.0f} ms per micro-batch): no simulated "
                   "cause accounts for it, and the simulator has no data loading, logging or evaluation",
                   rest, 1000 * per_mb),
       "check dataloader workers and that the throughput window excludes warm-up, evaluation and checkpointing; "
       "profile one step (torch.profiler) for CPU gaps between kernels",
       true});
}

// Memory pressure: not simulated, but it makes the caching allocator retry.
void note_memory_pressure(Diagnosis& d, const ClusterSpec& c, const StepResult& predicted) {
  double peak = 0;
  for (const auto& s : predicted.stages) peak = std::max(peak, s.peak_bytes);
  if (peak > 0.9 * c.gpu.device_memory_bytes())
    d.notes.push_back(fmt::format("the simulated peak {:.1f} GiB is within 10% of the GPU's {:.1f} GiB: allocator "
                                  "retries (num_alloc_retries in torch.cuda.memory_stats) can slow every step",
                                  peak / kGiB, c.gpu.device_memory_bytes() / kGiB));
}

// Config changes that raise the simulated throughput, simulated as edits of the same file; the
// five best.
void suggest_edits(Diagnosis& d, const RunSource& src, const RunConfig& rc, const ClusterSpec& c,
                   const StepResult& predicted) {
  try {
    ImportOptions opts;
    if (!src.model.empty()) opts.model = load_model(src.model);
    const ConfigDocument doc = read_config_document(src.config, opts);
    const std::int64_t fallback = rc.n_gpus;
    for (const auto& s : candidate_edits(rc, doc, c.node.gpus_per_node)) {
      ConfigDocument e = doc;
      for (const auto& [k, v] : s) e = with_value(e, k, v);
      RunSource fixed = src;
      if (fixed.gpus <= 0) fixed.gpus = rc.n_gpus;  // the same machines
      if (fixed.cluster.empty()) fixed.cluster = c.name;
      const Variant v = evaluate_document(e, fixed, fallback, s);
      if (!v.ok() || !v.fits) continue;
      const double gain = v.result.tokens_per_s_per_gpu / predicted.tokens_per_s_per_gpu;
      if (gain < 1.01) continue;
      d.suggestions.push_back({s, v.result.tokens_per_s_per_gpu, v.peak_bytes, v.fits, gain});
    }
  } catch (const InputError& e) {
    d.notes.push_back(fmt::format("no config suggestions: {}", e.what()));
  }
  std::stable_sort(d.suggestions.begin(), d.suggestions.end(),
                   [](const GapSuggestion& a, const GapSuggestion& b) { return a.tokens_per_s_per_gpu > b.tokens_per_s_per_gpu; });
  if (d.suggestions.size() > 5) d.suggestions.resize(5);
}

}  // namespace

Diagnosis diagnose_gap(const RunSource& src, const RunConfig& rc, const ClusterSpec& c, const StepResult& predicted,
                       double observed) {
  Diagnosis d = compare_to_prediction(rc, c, predicted, observed);
  const double gap = std::max(0.0, d.gap_s);
  cause_slower_compute(d, gap, rc, c);
  cause_slower_network(d, gap, rc, c, predicted);
  cause_lost_overlap(d, gap, rc, c, predicted);
  cause_slower_host(d, gap, rc, c, predicted);
  cause_residual(d, gap, rc);
  // Causes that explain part of the gap first, by how much; the remainder last whatever its size.
  std::stable_sort(d.causes.begin(), d.causes.end(), [](const GapCause& a, const GapCause& b) {
    if (a.unexplained != b.unexplained) return b.unexplained;
    return a.explains_s > b.explains_s;
  });
  note_memory_pressure(d, c, predicted);
  suggest_edits(d, src, rc, c, predicted);
  return d;
}

std::string diagnosis_text(const Diagnosis& d) {
  std::string out = "\nobserved vs predicted\n";
  out += fmt::format("  observed    {:.1f} tokens/s/GPU = {:.3f} s per step\n", d.observed_tokens_per_s_per_gpu,
                     d.observed_step_s);
  out += fmt::format("  predicted   {:.1f} tokens/s/GPU = {:.3f} s per step\n", d.predicted_tokens_per_s_per_gpu,
                     d.predicted_step_s);
  out += fmt::format("  gap         {:+.3f} s per step ({:.0f}% of the observed step)\n", d.gap_s,
                     d.observed_step_s > 0 ? 100 * d.gap_s / d.observed_step_s : 0.0);
  if (d.gap_s > 0) {
    out += "\nplausible causes, by how much of the gap each explains (what none of them explains last)\n";
    for (std::size_t i = 0; i < d.causes.size(); ++i) {
      const auto& c = d.causes[i];
      out += fmt::format("  {}. {}: {:.2f} s of the {:.2f} s gap. {}\n     try: {}\n", i + 1, c.cause, c.explains_s,
                         d.gap_s, c.detail, c.fix);
    }
  }
  if (!d.suggestions.empty()) {
    out += "\nconfig changes that raise the simulated throughput (meshplan whatif --vary ...)\n";
    for (const auto& s : d.suggestions) {
      std::string set;
      for (const auto& [k, v] : s.settings) set += (set.empty() ? "" : " ") + k + "=" + v;
      // An observation called a measurement error above is no base to project from.
      const std::string projected =
          d.physically_possible
              ? fmt::format("; observed would be ~{:.0f} if the gap scales", d.observed_tokens_per_s_per_gpu * s.gain)
              : std::string();
      out += fmt::format("  {:<70} {:>8.1f} tokens/s/GPU ({:+.0f}%), peak {:.1f} GiB{}\n", set, s.tokens_per_s_per_gpu,
                         100 * (s.gain - 1), s.peak_bytes / kGiB, projected);
    }
  }
  for (const auto& n : d.notes) out += "note: " + n + "\n";
  return out;
}

nlohmann::json diagnosis_json(const Diagnosis& d) {
  nlohmann::json j;
  j["observed_tokens_per_s_per_gpu"] = d.observed_tokens_per_s_per_gpu;
  j["predicted_tokens_per_s_per_gpu"] = d.predicted_tokens_per_s_per_gpu;
  j["observed_step_s"] = d.observed_step_s;
  j["predicted_step_s"] = d.predicted_step_s;
  j["gap_s"] = d.gap_s;
  j["observed_mfu"] = d.observed_mfu;
  j["observed_hfu"] = d.observed_hfu;
  j["physically_possible"] = d.physically_possible;
  j["causes"] = nlohmann::json::array();
  for (const auto& c : d.causes)
    j["causes"].push_back({{"cause", c.cause},
                           {"explains_s", c.explains_s},
                           {"detail", c.detail},
                           {"fix", c.fix},
                           {"unexplained", c.unexplained}});
  j["suggestions"] = nlohmann::json::array();
  for (const auto& s : d.suggestions) {
    nlohmann::json set = nlohmann::json::object();
    for (const auto& [k, v] : s.settings) set[k] = v;
    j["suggestions"].push_back({{"settings", set},
                                {"tokens_per_s_per_gpu", s.tokens_per_s_per_gpu},
                                {"peak_bytes", static_cast<std::int64_t>(std::llround(s.peak_bytes))},
                                {"fits", s.fits},
                                {"gain", s.gain},
                                {"projected_observed_tokens_per_s_per_gpu",
                                 d.physically_possible ? nlohmann::json(d.observed_tokens_per_s_per_gpu * s.gain)
                                                       : nlohmann::json(nullptr)}});
  }
  j["notes"] = d.notes;
  return j;
}

}  // namespace meshplan

#include "report/simulate_report.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <vector>

#include "report/memory_report.hpp"
#include "spec/runtime_traits.hpp"
#include "spec/pipeline_split.hpp"
#include "spec/validated_mfu.hpp"
#include "workload/device_fit.hpp"

namespace meshplan {

namespace {
std::string pct(double part, double whole) { return whole > 0 ? fmt::format("{:5.1f}%", 100 * part / whole) : "  -  "; }

// Decoder layers on each pipeline rank, all its chunks (chunk k * pp + r is rank r's k-th); empty
// where the plan's split does not place them (the simulation refuses such a plan before this).
std::vector<int> layers_per_rank(const RunConfig& rc) {
  const int pp = std::max(1, rc.plan.mesh.pp);
  const int vpp = std::max(1, rc.plan.mesh.vpp);
  const auto chunks = split_pipeline(rc.model.n_layers, pp, vpp, rc.plan.pipeline_split);
  if (!chunks) return {};
  std::vector<int> out(static_cast<std::size_t>(pp), 0);
  for (std::size_t c = 0; c < chunks->size(); ++c) out[c % static_cast<std::size_t>(pp)] += (*chunks)[c];
  return out;
}
}  // namespace

SimulatedFit simulated_fit(const ClusterSpec& c, const StepResult& r) {
  const DeviceFit d = device_fit_of(r.stages, c.framework.cuda_context_bytes, c.gpu.device_memory_bytes());
  SimulatedFit f;
  f.fits = d.fits();
  f.tight = d.tight();
  f.stage = d.stage;
  f.needed_bytes = d.needed_bytes;
  f.peak_bytes = d.reserve_peak_bytes;
  f.gpu_memory_bytes = d.device_bytes;
  return f;
}

std::string simulate_text(const RunConfig& rc, const ClusterSpec& c, const StepResult& r) {
  const Plan& p = rc.plan;
  std::string out;
  out += fmt::format("meshplan simulate: {} on {} x {}{}\n", rc.model.name, rc.n_gpus, c.name, assumed_gpus_note(rc));
  // ep (and the experts' own TP degree where it differs) only where there are experts to split:
  // the degree borrows data-parallel ranks, so it is not a factor of the product above.
  std::string experts;
  if (rc.model.moe.enabled() || p.mesh.ep > 1) {
    experts = fmt::format(", ep {}", p.mesh.ep);
    if (p.mesh.expert_tp() != p.mesh.tp) experts += fmt::format(" x etp {}", p.mesh.expert_tp());
  }
  out += fmt::format("  layout      pp {} x dp_replicate {} x dp_shard {} x cp {} x tp {}{}; {} {}\n", p.mesh.pp,
                     p.mesh.dp_replicate, p.mesh.dp_shard, p.mesh.cp, p.mesh.tp, experts, to_string(p.runtime),
                     to_string(p.sharding));
  // Uneven pipelines (a layout, first/last stage counts, torchtitan's weighted split) say where the
  // layers are: the stages' memory and time differ by them.
  if (const std::vector<int> per_rank = layers_per_rank(rc);
      per_rank.size() > 1 && std::adjacent_find(per_rank.begin(), per_rank.end(), std::not_equal_to<>()) != per_rank.end())
    out += fmt::format("  stages      {} decoder layers on pipeline ranks 0..{}\n", fmt::join(per_rank, ", "),
                       per_rank.size() - 1);
  out += fmt::format("  batch       {} sequences x {} tokens per step, micro-batch {}, {} micro-batches\n",
                     rc.job.global_batch, rc.job.seq_len, rc.job.micro_batch, rc.job.grad_accum);
  if (r.folded_periods > 0) {
    const std::int64_t third = rc.job.grad_accum - r.folded_periods * r.folded_period_microbatches;
    const std::string simulated =
        r.folded_period_in_timeline
            ? fmt::format("{} and {} micro-batches simulated (the longer one's timeline repeats each period)",
                          third - r.folded_period_microbatches, third)
            : fmt::format("{}, {} and {} micro-batches simulated", third - 2 * r.folded_period_microbatches,
                          third - r.folded_period_microbatches, third);
    out += fmt::format("  folded      at the periodic steady state: {}, {} periods of {} extrapolated (--exact "
                       "simulates every one)\n",
                       simulated, r.folded_periods, r.folded_period_microbatches);
  }
  out += fmt::format("\nstep time     {:.4f} s\n", r.step_time_s);
  out += fmt::format("tokens/s      {:.0f} total, {:.1f} per GPU\n", r.tokens_per_s, r.tokens_per_s_per_gpu);
  out += fmt::format("MFU           {:.1f}%   HFU {:.1f}%   ({} FLOP/token: {})\n", 100 * r.mfu, 100 * r.hfu,
                     fmt::format("{:.3g}", r.model_flops_per_token), r.flops_formula);
  if (const auto v = validated_mfu_of(rc.plan, c.gpu.arch, rc.model.moe.enabled(), rc.job.seq_len))
    if (const std::string n = beyond_validated_note(r.mfu, *v); !n.empty()) out += "              " + n + "\n";
  out += "\nwhere the step goes (critical stage " + std::to_string(r.critical_stage) + ")\n";
  for (const char* k : kBreakdownKeys) {
    const double v = r.breakdown_s.count(k) ? r.breakdown_s.at(k) : 0.0;
    out += fmt::format("  {:<15} {:>10.4f} s  {}\n", k, v, pct(v, r.step_time_s));
    if (std::string(k) == "exposed_comm")
      for (const auto& [kind, s] : r.exposed_comm_s) out += fmt::format("    {:<21} {:>8.4f} s\n", kind, s);
  }
  // Megatron-Core's MoE layer has launches of its own to take away (docs/host.md).
  std::string moe_hint;
  if (rc.model.moe.enabled() && runtime_traits(p).moe_layer_op_by_op) {
    if (!p.moe_grouped_gemm) moe_hint += ", --moe-grouped-gemm";
    if (!p.moe_permute_fusion) moe_hint += ", --moe-permute-fusion";
    if (!p.moe_router_fusion) moe_hint += ", --moe-router-fusion";
  }
  out += fmt::format("host thread   {:.4f} s busy issuing ops{}\n", r.host_busy_s,
                     r.host_bound ? fmt::format("; HOST-BOUND: the GPU waits on the CPU (larger micro-batch, CUDA "
                                                "graphs{} or compile issue fewer ops per token)",
                                                moe_hint)
                                  : "");
  if (!r.comm_bytes.empty()) {
    out += "\nbytes communicated per rank per step\n";
    for (const auto& [kind, b] : r.comm_bytes) out += fmt::format("  {:<21} {:>10.2f} GB\n", kind, b / 1e9);
  }
  out += "\npeak memory per stage (from the simulated timeline)\n";
  for (const auto& s : r.stages)
    out += fmt::format("  stage {:<3} {:>12}  at t = {:.3f} s  (activations {}, gathered params {})\n", s.stage,
                       format_gib(s.peak_bytes), s.peak_time_seconds, format_gib(s.breakdown.activations),
                       format_gib(s.breakdown.unsharded_params));
  // Only a step that does not fit, or fits only tightly, gets a line: out of memory the runtime
  // stops, so the step time above is what the layout would reach with a larger device.
  if (const SimulatedFit f = simulated_fit(c, r); !f.fits)
    out += fmt::format("fits: NO, stage {} peaks at {} allocated with the CUDA context and NCCL buffers, over by {} "
                       "on a {} GPU: the run stops out of memory\n",
                       f.stage, format_gib(f.needed_bytes), format_gib(f.needed_bytes - f.gpu_memory_bytes),
                       format_gib(f.gpu_memory_bytes));
  else if (f.tight)
    out += fit_tight_line(f.needed_bytes, f.peak_bytes, f.gpu_memory_bytes);
  for (const auto& w : rc.warnings) out += fmt::format("warning: {}\n", w);
  for (const auto& w : c.warnings) out += fmt::format("warning: {}\n", w);
  return out;
}

nlohmann::json simulate_json(const RunConfig& rc, const ClusterSpec& c, const StepResult& r) {
  nlohmann::json j;
  j["step_time_s"] = r.step_time_s;
  j["tokens_per_s"] = r.tokens_per_s;
  j["tokens_per_s_per_gpu"] = r.tokens_per_s_per_gpu;
  j["mfu"] = r.mfu;
  j["hfu"] = r.hfu;
  // The highest MFU a published run of the same runtime, GPU, model kind and recipe reached
  // (spec/validated_mfu.hpp): null where none was validated.
  const auto validated = validated_mfu_of(rc.plan, c.gpu.arch, rc.model.moe.enabled(), rc.job.seq_len);
  j["validated_mfu_max"] = validated ? nlohmann::json(validated->mfu) : nlohmann::json();
  j["beyond_validated_mfu"] = validated && r.mfu > validated->mfu;
  j["model_flops_per_token"] = r.model_flops_per_token;
  j["flops_formula"] = r.flops_formula;
  j["breakdown_s"] = r.breakdown_s;
  j["host_busy_s"] = r.host_busy_s;
  j["host_bound"] = r.host_bound;
  j["exposed_comm_s"] = nlohmann::json::object();
  for (const auto& [k, v] : r.exposed_comm_s) j["exposed_comm_s"][k] = v;
  j["comm_bytes"] = nlohmann::json::object();
  for (const auto& [k, v] : r.comm_bytes) j["comm_bytes"][k] = v;
  // The same quantity under whatif's name for it, so one script reads both.
  j["comm_bytes_per_step"] = j["comm_bytes"];
  j["critical_stage"] = r.critical_stage;
  const SimulatedFit f = simulated_fit(c, r);
  j["fits"] = f.fits;
  j["tight"] = f.tight;
  j["needed_bytes"] = static_cast<std::int64_t>(std::llround(f.needed_bytes));
  j["gpu_memory_bytes"] = f.gpu_memory_bytes;
  j["peak_bytes"] = static_cast<std::int64_t>(std::llround(f.peak_bytes));
  j["stages"] = nlohmann::json::array();
  const std::vector<int> per_rank = layers_per_rank(rc);
  for (const auto& s : r.stages) {
    nlohmann::json st;
    st["stage"] = s.stage;
    if (s.stage >= 0 && static_cast<std::size_t>(s.stage) < per_rank.size())
      st["layers"] = per_rank[static_cast<std::size_t>(s.stage)];
    st["peak_bytes"] = static_cast<std::int64_t>(std::llround(s.peak_bytes));
    st["allocated_peak_bytes"] = static_cast<std::int64_t>(std::llround(s.allocated_peak_bytes));
    st["host_bytes"] = static_cast<std::int64_t>(std::llround(s.host_bytes));
    st["peak_time_s"] = s.peak_time_seconds;
    st["compute_busy_s"] = s.compute_busy_seconds;
    const MemoryBreakdown& b = s.breakdown;
    st["breakdown"] = {{"params", b.params},           {"grads", b.grads},
                       {"optimizer", b.optimizer},     {"unsharded_params", b.unsharded_params},
                       {"reduce_buffers", b.reduce_buffers}, {"activations", b.activations},
                       {"recompute", b.recompute},     {"comm_buffers", b.comm_buffers},
                       {"framework", b.framework}};
    j["stages"].push_back(st);
  }
  j["model"] = rc.model.name;
  j["cluster"] = c.name;
  j["n_gpus"] = rc.n_gpus;
  j["n_gpus_assumed"] = rc.n_gpus_assumed;
  nlohmann::json warnings = nlohmann::json::array();
  for (const auto& w : rc.warnings) warnings.push_back(w);
  for (const auto& w : c.warnings) warnings.push_back(w);
  j["warnings"] = warnings;
  j["unmodelled_settings"] = rc.unmodelled_settings;
  // Every setting resolved from a default rather than stated by the input (RunConfig::assumptions).
  j["assumptions"] = rc.assumptions;
  j["n_tasks"] = r.n_tasks;
  // The periodic steady-state fold (sim/periodic_fold.hpp): null when every micro-batch was simulated.
  j["folded"] = r.folded_periods > 0 ? nlohmann::json{{"period_microbatches", r.folded_period_microbatches},
                                                      {"periods_extrapolated", r.folded_periods},
                                                      {"period_shown_in_timeline", r.folded_period_in_timeline}}
                                     : nlohmann::json();
  return j;
}

}  // namespace meshplan

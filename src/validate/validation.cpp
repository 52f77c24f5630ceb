// meshplan validate: every row simulated and compared with its published measurement.
// No result is adjusted here: the numbers are the simulator's and the memory model's as they are.
#include "validate/validation.hpp"

#include "spec/printable.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <deque>
#include <atomic>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <set>
#include <system_error>
#include <thread>
#include <utility>

#include "cost/collective_cost.hpp"
#include "sim/step_simulator.hpp"
#include "validate/cluster_search.hpp"
#include "spec/cluster_loader.hpp"
#include "spec/error.hpp"
#include "workload/memory_estimate.hpp"
#include "workload/runtime_choices.hpp"
#include "spec/digest128.hpp"
#include "spec/units.hpp"

namespace meshplan {

namespace {

constexpr double kA100PeakFlops = 312e12;       // A100 dense bf16/fp16, as the sources use it
constexpr double kH100PeakFlops = 989e12;       // H100 SXM dense bf16, as the sources use it

// The 44 columns of dev.csv (README "Columns"); memory.csv adds five more, all optional here.
const std::vector<std::string> kRequiredColumns = {
    "id", "source", "model", "n_params", "n_layers", "d_model", "n_heads", "n_kv_heads", "ffn_hidden", "vocab",
    "seq_len", "mlp", "tied_embeddings", "pos_emb", "gpu", "n_gpus", "gpus_per_node", "dp_replicate", "dp_shard",
    "tp", "pp", "vpp", "cp", "ep", "sequence_parallel", "sharding", "micro_batch", "global_batch", "grad_accum",
    "activation_ckpt", "ac_option", "param_dtype", "reduce_dtype", "fp8", "cpu_offload", "framework", "compile",
    "async_tp", "measured_tokens_per_s_per_gpu", "tokens_derived_from", "measured_tflops_per_gpu",
    "measured_mfu_pct", "measured_peak_mem_gib", "notes"};

// Sources whose memory figure is rank 0's, not the maximum over ranks (README: dlrover prints
// max_memory_allocated on rank 0 only; for pipeline rows that is the first stage).
const std::set<std::string, std::less<>> kRank0MemorySources = {"dlrover-atorch-llama2"};

double pct_error(double predicted, double measured) { return (predicted - measured) / measured * 100.0; }

// Megatron's FLOPs per token (Narayanan et al. 2021), with the recompute forward.
double megatron_flops_recompute(const ModelSpec& m, double s) {
  const double l = m.n_layers, h = static_cast<double>(m.d_model), v = static_cast<double>(m.vocab);
  return 96.0 * l * h * h * (1.0 + s / (6.0 * h) + v / (16.0 * l * h));
}
// The same count without recompute (Korthikanti et al. 2022, Eq. 7).
double megatron_flops_model(const ModelSpec& m, double s) {
  const double l = m.n_layers, h = static_cast<double>(m.d_model), v = static_cast<double>(m.vocab);
  return 72.0 * l * h * h * (1.0 + s / (6.0 * h) + v / (12.0 * l * h));
}
// Megatron-Core r0.8 num_floating_point_operations / (batch x seq): GQA and gated MLPs included.
double megatron_core_flops(const ModelSpec& m, double s) {
  const double l = m.n_layers, h = static_cast<double>(m.d_model), v = static_cast<double>(m.vocab);
  const double q_ratio = static_cast<double>(m.head_dim) * m.n_heads / h;
  const double kv_ratio = static_cast<double>(m.n_kv_heads) / m.n_heads;
  const double gated = m.mlp == MlpKind::swiglu ? 1.5 : 1.0;
  return 12.0 * l * h * h *
         ((1.0 + kv_ratio + s / h) * q_ratio + static_cast<double>(m.ffn_hidden) / h * gated + v / (2.0 * l * h));
}

// Megatron-LM num_floating_point_operations (megatron/training/training.py, 2025-26) per token,
// no recompute: every GEMM 3 times (forward, wgrad, dgrad) at 2 FLOPs per multiply-add. MLPs:
// ffn_hidden on the dense layers, top_k routed experts and the shared experts on the MoE layers
// (x 3/2 gated); attention: GQA projections and causal-halved core attention, or MLA's down and up
// projections and core attention over d_nope + d_rope (QK) and d_v (PV); the logits; the MTP
// modules' projections and extra blocks. The router GEMM is not counted.
double megatron_moe_flops(const ModelSpec& m, double s) {
  const double h = static_cast<double>(m.d_model), v = static_cast<double>(m.vocab);
  const double n = m.n_heads;
  const double mtp = m.n_mtp_layers;
  const double layers = m.n_layers + mtp;
  const double moe_layers = m.moe.enabled() ? (m.n_layers - m.moe.n_dense_layers) + mtp : 0.0;
  const double dense_layers = layers - moe_layers;
  const double gated = m.mlp == MlpKind::swiglu ? 1.5 : 1.0;
  const double expert = static_cast<double>(m.moe.expert_ffn);
  const double mlp = 12.0 * h * gated *
                     (static_cast<double>(m.ffn_hidden) * dense_layers +
                      (expert * m.moe.top_k + expert * m.moe.n_shared_experts) * moe_layers);
  double attention = 0;
  if (m.attention == AttentionKind::mla) {
    const double qk = static_cast<double>(m.head_dim), rope = static_cast<double>(m.mla.rope_head_dim);
    const double vh = static_cast<double>(m.mla.v_head_dim);
    const double ql = static_cast<double>(m.mla.q_lora_rank), kvl = static_cast<double>(m.mla.kv_lora_rank);
    const double q_term = ql > 0 ? ql * (h + n * (qk + rope) + 1) : h * n * (qk + rope);
    attention = 6.0 * layers *
                (q_term + kvl * (h + n * (qk + vh) + 1) + h * rope + n * vh * h + s * n * (qk + rope) / 2 + s * n * vh / 2);
  } else {
    const double q_ratio = static_cast<double>(m.head_dim) * n / h;
    attention = 12.0 * layers * h * h * (1.0 + static_cast<double>(m.n_kv_heads) / n + s / h / 2) * q_ratio;
  }
  const double mtp_extra = 6.0 * mtp * (3 * h + 2 * h * h);
  const double logits = 6.0 * h * v * (mtp + 1);
  return mlp + attention + mtp_extra + logits;
}

std::string fmt_opt(const std::optional<double>& v, const char* spec = "{:.1f}") {
  return v ? fmt::format(fmt::runtime(spec), *v) : std::string("-");
}

nlohmann::json opt_json(const std::optional<double>& v) { return v ? nlohmann::json(*v) : nlohmann::json(nullptr); }
nlohmann::json str_or_null(const std::string& s) { return s.empty() ? nlohmann::json(nullptr) : nlohmann::json(s); }

void fill_ape_stats(const std::vector<double>& signed_errors, ValidationSummary& s) {
  s.n = static_cast<int>(signed_errors.size());
  if (signed_errors.empty()) return;
  std::vector<double> ape;
  double sum_abs = 0, sum = 0;
  for (double e : signed_errors) {
    ape.push_back(std::fabs(e));
    sum_abs += std::fabs(e);
    sum += e;
  }
  s.mape_pct = sum_abs / static_cast<double>(ape.size());
  s.mean_error_pct = sum / static_cast<double>(ape.size());
  s.median_ape_pct = percentile(ape, 0.5);
  s.p90_ape_pct = percentile(ape, 0.9);
  s.max_ape_pct = *std::max_element(ape.begin(), ape.end());
}


std::string dominant_memory_term(const MemoryBreakdown& b) {
  const std::pair<const char*, double> terms[] = {
      {"params", b.params},           {"grads", b.grads},
      {"optimizer", b.optimizer},     {"unsharded_params", b.unsharded_params},
      {"reduce_buffers", b.reduce_buffers}, {"activations", b.activations},
      {"recompute", b.recompute},     {"comm_buffers", b.comm_buffers},
      {"framework", b.framework}};
  const auto* best = std::max_element(std::begin(terms), std::end(terms),
                                      [](const auto& a, const auto& c) { return a.second < c.second; });
  return best->first;
}

// Indices of the rows to run: all of them, or those whose id is listed (in the table's order).
std::vector<std::size_t> selected_rows(const CsvTable& table, const std::vector<std::string>& ids) {
  std::vector<std::size_t> out;
  std::set<std::string> found;
  for (std::size_t i = 0; i < table.rows.size(); ++i) {
    const std::string& id = CsvRow(table, i).get("id");
    if (ids.empty() || std::find(ids.begin(), ids.end(), id) != ids.end()) {
      out.push_back(i);
      found.insert(id);
    }
  }
  for (const std::string& id : ids)
    if (found.count(id) == 0) throw InputError(table.file, "--row " + id, "no row with this id");
  return out;
}

// Loads each (profile, node size) once: profiles are TOML files and rows share a handful.
class ClusterCache {
public:
  ClusterCache(std::vector<std::filesystem::path> dirs, ParameterValues parameters, std::string nccl_version)
      : dirs_(std::move(dirs)), parameters_(std::move(parameters)), nccl_version_(std::move(nccl_version)) {}
  const ClusterSpec& get(const std::string& name, std::optional<int> gpus_per_node,
                         const std::optional<StatedNetwork>& network = std::nullopt) {
    const std::string key = name + "#" + std::to_string(gpus_per_node.value_or(0)) +
                            (network ? fmt::format("#{}x{}", network->nics_per_node, network->nic_gbit_per_s) : "");
    auto it = cache_.find(key);
    if (it != cache_.end()) return it->second;
    ClusterSpec c = load_cluster_search(name, dirs_);
    apply_parameters(c, parameters_);
    override_nccl_version(c, nccl_version_);
    if (gpus_per_node && *gpus_per_node != c.node.gpus_per_node) {
      // A node of another size: the NVLink domain is the node unless the profile spans nodes (NVL72).
      if (c.node.nvlink_domain_gpus == c.node.gpus_per_node) c.node.nvlink_domain_gpus = *gpus_per_node;
      c.node.gpus_per_node = *gpus_per_node;
    }
    if (network) {
      c.node.nics_per_node = network->nics_per_node;
      c.node.nic_bandwidth_bytes_per_s = network->nic_gbit_per_s * 1e9 / 8;
    }
    return cache_.emplace(key, std::move(c)).first->second;
  }

private:
  std::vector<std::filesystem::path> dirs_;
  ParameterValues parameters_;
  std::string nccl_version_;
  std::map<std::string, ClusterSpec> cache_;
};

// The row's identity, what it assumed and what it measured, before anything is simulated.
ValidationRowResult row_result(const ValidationCase& vc) {
  ValidationRowResult out;
  out.id = vc.id;
  out.source = vc.source;
  out.framework = vc.framework;
  out.model = vc.model_label;
  out.gpu = vc.gpu;
  out.cluster = vc.cluster;
  out.run = run_key(vc.id);
  out.assumptions = vc.assumptions;
  out.measured_tokens_per_s_per_gpu = vc.measured.tokens_per_s_per_gpu;
  out.measured_peak_gib = vc.measured.peak_mem_gib;
  out.skipped = vc.skipped;
  return out;
}

// The simulated throughput, its dominant term, and the comparison on the row's own metric: tokens/s,
// else TFLOP/s or MFU by the source's FLOP convention.
void compare_throughput(const ValidationCase& vc, const StepResult& sr, bool has_throughput, ValidationRowResult& out) {
  const Measured& ms = vc.measured;
  out.predicted_tokens_per_s_per_gpu = sr.tokens_per_s_per_gpu;
  out.step_time_s = sr.step_time_s;
  double top = -1;
  for (const auto& [k, v] : sr.breakdown_s)
    if (v > top) {
      top = v;
      out.dominant_term = k;
    }
  out.dominant_share = sr.step_time_s > 0 ? top / sr.step_time_s : 0;

  if (has_throughput && !vc.throughput_not_modeled.empty()) {
    out.throughput_skipped = vc.throughput_not_modeled;
  } else if (ms.tokens_per_s_per_gpu) {
    out.metric = "tokens_per_s_per_gpu";
    out.predicted_metric = sr.tokens_per_s_per_gpu;
    out.measured_metric = *ms.tokens_per_s_per_gpu;
  } else if (ms.tflops_per_gpu || ms.mfu_pct) {
    // Prefer TFLOP/s when both exist: it carries more digits than the rounded MFU, and the
    // sources that publish both define MFU as TFLOP/s over one stated peak.
    const bool use_mfu = !ms.tflops_per_gpu;
    const auto conv = source_flop_convention(vc, use_mfu);
    const bool measured_for_conv =
        conv && (conv->metric == "mfu_pct" ? ms.mfu_pct.has_value() : ms.tflops_per_gpu.has_value());
    if (!conv || !measured_for_conv) {
      out.throughput_skipped = fmt::format("no tokens/s, and source '{}' documents no FLOP convention for its {}",
                                           vc.source, use_mfu ? "MFU" : "TFLOP/s");
    } else {
      out.metric = conv->metric;
      out.metric_definition = conv->definition;
      const double flops = conv->flops_per_token * sr.tokens_per_s_per_gpu;
      if (conv->metric == "mfu_pct") {
        out.predicted_metric = flops / conv->peak_flops_per_s * 100.0;
        out.measured_metric = *ms.mfu_pct;
      } else {
        out.predicted_metric = flops / 1e12;
        out.measured_metric = *ms.tflops_per_gpu;
      }
    }
  }
  if (out.predicted_metric && out.measured_metric && *out.measured_metric > 0)
    out.error_pct = pct_error(*out.predicted_metric, *out.measured_metric);
}

// The memory comparison on the row's own metric (allocated, reserved or device), at the stage the
// source measured (rank 0) or the largest; for rows that measured a peak.
void compare_memory(const ValidationCase& vc, const MemoryEstimate& est, const StepResult& sr,
                    ValidationRowResult& out) {
  const Measured& ms = vc.measured;
  const bool rank0 = kRank0MemorySources.count(vc.source) != 0;
  const MemoryMetric metric = ms.memory_metric_given ? ms.memory_metric : MemoryMetric::unknown;
  auto value = [&](const StageMemory& s) {
    switch (metric) {
      case MemoryMetric::allocated: return s.allocated_peak_bytes;
      case MemoryMetric::nvidia_smi: return s.peak_bytes;
      case MemoryMetric::reserved:
      case MemoryMetric::unknown: return s.reserved_peak_bytes;
    }
    return s.reserved_peak_bytes;
  };
  out.memory_metric = metric == MemoryMetric::allocated    ? "allocated"
                      : metric == MemoryMetric::nvidia_smi ? "device (nvidia-smi: + context, NCCL)"
                      : metric == MemoryMetric::reserved   ? "reserved"
                                                           : "allocated..reserved (metric unknown)";
  if (!est.stages.empty()) {
    std::size_t pick = 0;
    if (!rank0)
      for (std::size_t i = 1; i < est.stages.size(); ++i)
        if (value(est.stages[i]) > value(est.stages[pick])) pick = i;
    const StageMemory& st = est.stages[pick];
    out.memory_stage = rank0 ? "0 (rank 0)" : fmt::format("{} (max)", st.stage);
    out.predicted_peak_gib = value(st) / kGiB;
    // A source that does not say which allocator statistic it printed measured one of them:
    // every value between the predicted peak allocated and peak reserved agrees with it, so
    // the prediction is the point of that interval nearest the measurement.
    if (metric == MemoryMetric::unknown && *ms.peak_mem_gib > 0)
      out.predicted_peak_gib = std::clamp(*ms.peak_mem_gib, st.allocated_peak_bytes / kGiB, st.reserved_peak_bytes / kGiB);
    out.dominant_memory_term = dominant_memory_term(st.breakdown);
    for (const auto& tl : sr.stages)
      if (tl.stage == st.stage)
        out.timeline_peak_gib = (metric == MemoryMetric::allocated ? tl.allocated_peak_bytes : tl.peak_bytes) / kGiB;
    if (*ms.peak_mem_gib > 0) out.memory_error_pct = pct_error(*out.predicted_peak_gib, *ms.peak_mem_gib);
  }
}

// One row, pure: reads only its case and its (already loaded) cluster, so rows run in parallel.
ValidationRowResult run_row(const ValidationCase& vc, const ClusterSpec* cluster_or_null,
                            const std::string& cluster_error) {
  const auto t0 = std::chrono::steady_clock::now();
  ValidationRowResult out = row_result(vc);
  auto finish = [&] {
    out.sim_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    // Everything a row echoes came from the CSV (or quotes it): printed as printable text.
    for (std::string* t : {&out.id, &out.source, &out.framework, &out.gpu, &out.cluster, &out.run, &out.metric_definition,
                           &out.skipped, &out.throughput_skipped, &out.dominant_term, &out.dominant_memory_term})
      *t = printable(*t);
    for (auto& a : out.assumptions) a = printable(a);
    return out;
  };
  if (!out.skipped.empty()) return finish();

  const Measured& ms = vc.measured;
  const bool has_throughput = ms.tokens_per_s_per_gpu || ms.tflops_per_gpu || ms.mfu_pct;
  const bool has_memory = ms.peak_mem_gib.has_value();
  try {
    if (cluster_or_null == nullptr) throw InputError("", "gpu", cluster_error);
    const ClusterSpec& cluster = *cluster_or_null;
    // Settings the row does not publish: resolved as a tuned run would (workload/runtime_choices).
    RunConfig resolved = vc.run;
    const RuntimeChoices choices = resolve_runtime_choices(resolved, cluster);
    out.assumptions.insert(out.assumptions.end(), choices.assumptions.begin(), choices.assumptions.end());
    if (!choices.no_fit.empty()) {
      out.skipped = choices.no_fit;
      return finish();
    }
    const RunConfig& rc = resolved;

    const SimulatedStep step = simulate_step(rc.model, rc.plan, rc.job, cluster);
    const StepResult& sr = step.result;
    compare_throughput(vc, sr, has_throughput, out);
    out.runtime = std::string(to_string(rc.plan.runtime));
    out.gpu_arch = cluster.gpu.arch;
    out.fp8 = std::string(to_string(rc.plan.fp8));
    out.seq_len = rc.job.seq_len;
    out.moe = rc.model.moe.enabled();
    out.predicted_mfu = sr.mfu;
    // The row's own metric (tokens/s, or TFLOP/s or MFU in the source's FLOP convention) moves with
    // throughput, so measured over predicted carries the step's MFU to the run's.
    if (out.predicted_metric && out.measured_metric && *out.predicted_metric > 0)
      out.measured_mfu = sr.mfu * *out.measured_metric / *out.predicted_metric;

    // The run happened: what the model says it needed of the device. The allocator's cache is
    // left out: it is released and retried before an allocation fails.
    const MemoryEstimate fit = estimate_memory(rc.model, rc.plan, rc.job, cluster);
    if (fit.gpu_memory_bytes > 0) out.predicted_device_fraction = fit.needed_bytes / fit.gpu_memory_bytes;

    if (has_memory) compare_memory(vc, fit, sr, out);
    if (!out.error_pct && !out.memory_error_pct && !out.throughput_skipped.empty()) {
      out.skipped = out.throughput_skipped;  // nothing at all could be compared
    } else if (!out.error_pct && !out.memory_error_pct && !has_throughput && !has_memory) {
      out.skipped = "no measurement to compare";
    }
  } catch (const InputError& e) {
    out.skipped = fmt::format("cannot simulate: {}", e.what());
  } catch (const std::exception& e) {
    out.skipped = fmt::format("simulator error: {}", e.what());
  }
  if (!out.skipped.empty()) {
    out.error_pct.reset();
    out.memory_error_pct.reset();
  }
  return finish();
}

}  // namespace

std::string_view to_string(GroupBy g) {
  switch (g) {
    case GroupBy::source: return "source";
    case GroupBy::framework: return "framework";
    case GroupBy::gpu: return "gpu";
    case GroupBy::model: return "model";
  }
  return "source";
}

std::optional<GroupBy> parse_group_by(std::string_view s) {
  if (s == "source") return GroupBy::source;
  if (s == "framework") return GroupBy::framework;
  if (s == "gpu") return GroupBy::gpu;
  if (s == "model") return GroupBy::model;
  return std::nullopt;
}

std::string group_key(const ValidationRowResult& r, GroupBy by) {
  switch (by) {
    case GroupBy::source: return r.source;
    case GroupBy::framework: return r.framework;
    case GroupBy::gpu: return r.gpu.empty() ? std::string("(empty)") : r.gpu;
    case GroupBy::model: return r.model;
  }
  return r.source;
}

std::optional<FlopConvention> source_flop_convention(const ValidationCase& vc, bool prefer_mfu) {
  const ModelSpec& m = vc.run.model;
  const double s = static_cast<double>(vc.run.job.seq_len);
  FlopConvention c;
  const std::string& src = vc.source;
  if (src == "llm-foundry") {
    const double n = static_cast<double>(m.n_params_published.value_or(n_params(m)));
    c.flops_per_token = 6.0 * n + 12.0 * m.n_layers * static_cast<double>(m.d_model) * s;
    c.peak_flops_per_s = kA100PeakFlops;
    c.metric = prefer_mfu ? "mfu_pct" : "tflops_per_gpu";
    c.definition = "llm-foundry: (6N + 12*L*d*s) per token, N incl. embeddings and position table (n_params), "
                   "no causal discount; MFU over 312 TFLOP/s";
    return c;
  }
  if (src == "megatron-sc21" || src == "bloom-176b") {
    c.flops_per_token = megatron_flops_recompute(m, s);
    c.peak_flops_per_s = kA100PeakFlops;
    c.metric = prefer_mfu && src == "megatron-sc21" ? "mfu_pct" : "tflops_per_gpu";
    c.definition = "Megatron formula incl. recompute: 96*l*h^2*(1 + s/(6h) + V/(16*l*h)) per token"
                   "; % of peak over 312 TFLOP/s";
    return c;
  }
  if (src == "megatron-lm-h100") {
    c.flops_per_token = megatron_core_flops(m, s);
    c.peak_flops_per_s = kH100PeakFlops;
    c.metric = prefer_mfu ? "mfu_pct" : "tflops_per_gpu";
    c.definition = "Megatron-Core r0.8 num_floating_point_operations (no recompute; = 72*l*h^2*(1 + s/(6h) + "
                   "V/(12*l*h)) for GELU MHA); MFU over 989 TFLOP/s";
    return c;
  }
  if (m.moe.enabled() && (vc.framework == "megatron" || vc.framework == "nemo")) {
    // Megatron-Core MoE runs print the training loop's own count (README, section dev-moe.csv).
    if (prefer_mfu) return std::nullopt;
    c.flops_per_token = megatron_moe_flops(m, s);
    c.peak_flops_per_s = kH100PeakFlops;
    c.metric = "tflops_per_gpu";
    c.definition = "Megatron-LM num_floating_point_operations per token (no recompute): routed top-k and shared "
                   "experts, dense layers, GQA or MLA attention (causal half), logits, MTP";
    return c;
  }
  if (src == "korthikanti2022") {
    c.flops_per_token = megatron_flops_model(m, s);
    c.peak_flops_per_s = kA100PeakFlops;
    c.metric = "mfu_pct";
    c.definition = "Korthikanti et al. Eq. 7: 72*l*h^2*(1 + s/(6h) + V/(12*h*l)) per token, no recompute; "
                   "MFU over 312 TFLOP/s";
    return c;
  }
  if (src == "torchtitan-pr165") {
    const ParamCounts pc = param_counts(m);
    const double n = static_cast<double>(n_params(m) - pc.embedding);
    c.flops_per_token = 6.0 * n + 12.0 * m.n_layers * static_cast<double>(m.n_heads) * static_cast<double>(m.head_dim) * s;
    c.peak_flops_per_s = kH100PeakFlops;
    if (!prefer_mfu) return std::nullopt;  // torchtitan logs MFU, not TFLOP/s
    c.metric = "mfu_pct";
    c.definition = "torchtitan: 6N + 12*L*H*Q*T per token, N without the embedding table; MFU over 989 TFLOP/s";
    return c;
  }
  return std::nullopt;
}

double percentile(std::vector<double> values, double q) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const double pos = std::clamp(q, 0.0, 1.0) * static_cast<double>(values.size() - 1);
  const auto lo = static_cast<std::size_t>(std::floor(pos));
  const std::size_t hi = std::min(lo + 1, values.size() - 1);
  return values[lo] + (values[hi] - values[lo]) * (pos - static_cast<double>(lo));
}

void ValidationTotals::Group::add(const ValidationRowResult& r) {
  ++rows;
  if (!r.skipped.empty()) ++skipped;
  if (!r.throughput_skipped.empty() && r.skipped.empty()) ++throughput_skipped;
  if (r.error_pct) errors.push_back(*r.error_pct);
  if (r.skipped.empty() && r.predicted_device_fraction && *r.predicted_device_fraction > 1.0) ++predicted_out_of_memory;
  if (r.memory_error_pct) {
    const double ape = std::fabs(*r.memory_error_pct);
    auto& run = run_apes[r.run];
    run.first += ape;
    ++run.second;
    memory_ape_sum += ape;
    memory_ape_max = std::max(memory_ape_max, ape);
    ++memory_rows;
    memory_min_error_pct = std::min(memory_min_error_pct.value_or(*r.memory_error_pct), *r.memory_error_pct);
  }
}

ValidationSummary ValidationTotals::Group::summary(const std::string& group) const {
  ValidationSummary s;
  s.group = group;
  s.rows = rows;
  s.skipped = skipped;
  s.throughput_skipped = throughput_skipped;
  s.predicted_out_of_memory = predicted_out_of_memory;
  fill_ape_stats(errors, s);
  s.memory_rows = memory_rows;
  s.memory_runs = static_cast<int>(run_apes.size());
  s.memory_min_error_pct = memory_min_error_pct;
  if (!run_apes.empty()) {
    // One weight per run: a run published as peak allocated and peak reserved is one measurement
    // of the model, so its two rows share one vote (their mean APE).
    double sum = 0;
    for (const auto& [run, apes] : run_apes) sum += apes.first / static_cast<double>(apes.second);
    s.memory_mape_pct = sum / static_cast<double>(run_apes.size());
    s.memory_row_mape_pct = memory_ape_sum / static_cast<double>(memory_rows);
    s.memory_max_ape_pct = memory_ape_max;
  }
  return s;
}

void ValidationTotals::add(const ValidationRowResult& r) {
  ++rows_;
  all_.add(r);
  groups_[group_key(r, by_)].add(r);
  if (!r.metric_definition.empty()) definitions_[r.source] = r.metric_definition;
  // The three slowest rows, so a regression in simulation time points at its cause.
  const auto slower = [](const auto& a, const auto& b) { return a.second > b.second; };
  if (slowest_.size() < 3 || r.sim_ms > slowest_.back().second) {
    slowest_.insert(std::upper_bound(slowest_.begin(), slowest_.end(), std::pair{r.id, r.sim_ms}, slower),
                    std::pair{r.id, r.sim_ms});
    if (slowest_.size() > 3) slowest_.pop_back();
  }
}

void ValidationTotals::finish(ValidationReport& rep) const {
  rep.by = by_;
  rep.row_count = rows_;
  rep.summary = all_.summary("");
  rep.groups.clear();
  for (const auto& [g, sums] : groups_) rep.groups.push_back(sums.summary(g));
  rep.definitions = definitions_;
  rep.slowest = slowest_;
}

ValidationSummary summarize(const std::vector<const ValidationRowResult*>& rows, const std::string& group) {
  ValidationTotals::Group g;
  for (const auto* r : rows) g.add(*r);
  return g.summary(group);
}

namespace {

// The profile names a user's --cluster-dir folders define (NAME.toml), in folder then name order.
std::vector<std::string> profile_names_in(const std::vector<std::filesystem::path>& dirs) {
  std::vector<std::string> names;
  for (const auto& d : dirs) {
    std::error_code ec;
    std::vector<std::string> here;
    for (const auto& e : std::filesystem::directory_iterator(d, ec))
      if (e.path().extension() == ".toml") here.push_back(e.path().stem().string());
    std::sort(here.begin(), here.end());
    names.insert(names.end(), here.begin(), here.end());
  }
  return names;
}

}  // namespace

namespace {

void check_required_columns(const std::vector<std::string>& header, const std::string& file) {
  for (const auto& col : kRequiredColumns)
    if (std::find(header.begin(), header.end(), col) == header.end())
      throw InputError(file, col, "required column missing from the header (README 'Columns')");
}

unsigned worker_threads(const ValidationOptions& options) {
  const unsigned hw = std::max(1u, std::thread::hardware_concurrency());
  return options.threads > 0 ? static_cast<unsigned>(options.threads) : hw;
}

// A digest of a row's cells other than its id (spec/digest128.hpp, every cell with its length):
// equal digests mean equal cells, so the row maps and simulates to the same result.
using RowKey = std::array<std::uint64_t, 2>;

RowKey row_key(const std::vector<std::string>& fields, std::size_t id_column) {
  Digest128 d;
  for (std::size_t i = 0; i < fields.size(); ++i)
    if (i != id_column) d.text(fields[i]);
  return d.h;
}

// Results of rows already simulated, by row key: files that repeat a configuration under new ids
// (sweeps, the same run listed twice) simulate it once. Bounded: the oldest entry goes first.
class RowCache {
public:
  const ValidationRowResult* find(const RowKey& k) const {
    const auto it = results_.find(k);
    return it == results_.end() ? nullptr : &it->second;
  }
  void insert(const RowKey& k, const ValidationRowResult& r) {
    if (!results_.emplace(k, r).second) return;
    order_.push_back(k);
    if (order_.size() > kMaxEntries) {
      results_.erase(order_.front());
      order_.pop_front();
    }
  }

private:
  static constexpr std::size_t kMaxEntries = 4096;
  std::map<RowKey, ValidationRowResult> results_;
  std::deque<RowKey> order_;
};

// A row that may reuse an equal row's result: its key, and its own id. Only rows with an id and a
// model label qualify (an empty model label names the model after the id).
struct ReuseKey {
  RowKey key;
  std::string id;
};

// Simulates `cases` over `n_threads` (results in the order of `cases`). Profile loading is serial
// (cheap, and the cache is not shared-safe); simulation is per-row pure work, spread over the
// cores because the largest pipelines (thousands of micro-batch x stage tasks) take seconds each.
// With `reuse`, a row whose key is cached or equals an earlier row's in `cases` copies that
// result (with its own id and a sim_ms of 0: it was not simulated), and the rows simulated
// without being skipped are cached.
std::vector<ValidationRowResult> run_cases(const std::vector<ValidationCase>& cases, ClusterCache& clusters,
                                           unsigned n_threads, const std::vector<std::optional<ReuseKey>>* reuse = nullptr,
                                           RowCache* cache = nullptr) {
  std::vector<const ClusterSpec*> specs(cases.size(), nullptr);
  std::vector<std::string> cluster_errors(cases.size());
  // same[i]: the earlier row of this batch whose result row i copies; i itself when simulated.
  std::vector<std::size_t> same(cases.size());
  std::map<RowKey, std::size_t> first_with_key;
  std::vector<ValidationRowResult> out(cases.size());
  std::vector<bool> from_cache(cases.size(), false);
  std::vector<std::size_t> to_run;
  for (std::size_t i = 0; i < cases.size(); ++i) {
    same[i] = i;
    if (reuse != nullptr && (*reuse)[i]) {
      const RowKey& k = (*reuse)[i]->key;
      if (const ValidationRowResult* hit = cache->find(k)) {
        out[i] = *hit;
        from_cache[i] = true;
        continue;
      }
      const auto [it, fresh] = first_with_key.emplace(k, i);
      if (!fresh) {
        same[i] = it->second;
        continue;
      }
    }
    to_run.push_back(i);
    if (!cases[i].skipped.empty()) continue;
    try {
      specs[i] = &clusters.get(cases[i].cluster, cases[i].gpus_per_node, cases[i].network);
    } catch (const InputError& e) {
      cluster_errors[i] = e.what();
    }
  }
  std::atomic<std::size_t> next{0};
  auto worker = [&] {
    for (std::size_t k = next++; k < to_run.size(); k = next++) {
      const std::size_t i = to_run[k];
      out[i] = run_row(cases[i], specs[i], cluster_errors[i]);
    }
  };
  std::vector<std::thread> pool;
  for (unsigned t = 1; t < std::min<std::size_t>(n_threads, to_run.size()); ++t) pool.emplace_back(worker);
  worker();
  for (auto& t : pool) t.join();
  if (reuse == nullptr) return out;
  for (std::size_t i = 0; i < cases.size(); ++i) {
    if (!(*reuse)[i]) continue;
    if (same[i] != i) out[i] = out[same[i]];
    if (same[i] != i || from_cache[i]) {
      out[i].id = printable((*reuse)[i]->id);
      out[i].run = printable(run_key((*reuse)[i]->id));
      out[i].sim_ms = 0;
    } else if (out[i].skipped.empty()) {
      cache->insert((*reuse)[i]->key, out[i]);
    }
  }
  return out;
}

}  // namespace

ValidationReport run_validation(const CsvTable& table, const ValidationOptions& options) {
  check_required_columns(table.header, table.file);
  const std::vector<std::string> user_gpus = profile_names_in(options.cluster_dirs);
  std::vector<ValidationCase> cases;
  for (std::size_t i : selected_rows(table, options.only_ids)) cases.push_back(map_validation_row(table, i, user_gpus));
  return run_validation_cases(std::move(cases), table.file, options);
}

ValidationReport run_validation_cases(std::vector<ValidationCase> cases, const std::string& file,
                                      const ValidationOptions& options) {
  const auto t0 = std::chrono::steady_clock::now();
  ValidationReport rep;
  rep.file = file;
  ClusterCache clusters(options.cluster_dirs, options.parameters, options.nccl_version);
  rep.rows = run_cases(cases, clusters, worker_threads(options));
  ValidationTotals totals(options.by);
  for (const auto& r : rep.rows) totals.add(r);
  totals.finish(rep);
  rep.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return rep;
}

namespace {

// The first pass of a streamed run: the file's shape (header, row widths, required columns) and
// the --row ids, checked before anything is simulated, as run_validation checks them. Returns
// the number of rows that will run.
std::size_t check_stream(const std::string& path, const std::vector<std::string>& only_ids) {
  CsvRowStream in(path);
  const auto& h = in.header();
  const auto id_it = std::find(h.begin(), h.end(), "id");
  const std::size_t id_col = static_cast<std::size_t>(id_it - h.begin());
  std::size_t selected = 0;
  std::set<std::string> found;
  while (in.next()) {
    if (only_ids.empty()) {
      ++selected;
      continue;
    }
    const std::string& id = id_col < h.size() ? in.current().rows.front()[id_col] : std::string();
    if (std::find(only_ids.begin(), only_ids.end(), id) != only_ids.end()) {
      ++selected;
      found.insert(id);
    }
  }
  check_required_columns(h, path);
  for (const std::string& id : only_ids)
    if (found.count(id) == 0) throw InputError(path, "--row " + id, "no row with this id");
  return selected;
}

}  // namespace

ValidationReport run_validation_stream(const std::string& path, const ValidationOptions& options,
                                       const std::function<void(const ValidationRowResult&)>& on_row,
                                       const std::function<void(std::size_t, std::size_t)>& progress) {
  const auto t0 = std::chrono::steady_clock::now();
  const std::size_t total = check_stream(path, options.only_ids);
  CsvRowStream in(path);
  const auto& h = in.header();
  const auto column = [&](const char* name) { return static_cast<std::size_t>(std::find(h.begin(), h.end(), name) - h.begin()); };
  const std::size_t id_col = column("id"), model_col = column("model");
  const std::vector<std::string> user_gpus = profile_names_in(options.cluster_dirs);
  ClusterCache clusters(options.cluster_dirs, options.parameters, options.nccl_version);
  RowCache cache;
  ValidationTotals totals(options.by);
  const unsigned n_threads = worker_threads(options);
  // Enough rows per batch to keep every thread busy past one slow row, few enough that the batch
  // (about 9 KB per mapped row) stays small.
  const std::size_t batch_rows = 32 * static_cast<std::size_t>(n_threads);
  std::vector<ValidationCase> cases;
  std::vector<std::optional<ReuseKey>> reuse;
  std::size_t done = 0;
  auto flush = [&] {
    for (const ValidationRowResult& r : run_cases(cases, clusters, n_threads, &reuse, &cache)) {
      totals.add(r);
      on_row(r);
    }
    done += cases.size();
    cases.clear();
    reuse.clear();
    if (progress) progress(done, total);
  };
  while (in.next()) {
    const std::vector<std::string>& fields = in.current().rows.front();
    const std::string& id = fields[id_col];
    if (!options.only_ids.empty() && std::find(options.only_ids.begin(), options.only_ids.end(), id) == options.only_ids.end())
      continue;
    cases.push_back(map_validation_row(in.current(), 0, user_gpus));
    reuse.emplace_back();
    if (!id.empty() && !fields[model_col].empty() && cases.back().skipped.empty()) reuse.back() = ReuseKey{row_key(fields, id_col), id};
    if (cases.size() == batch_rows) flush();
  }
  if (!cases.empty()) flush();
  ValidationReport rep;
  rep.file = path;
  totals.finish(rep);
  rep.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return rep;
}

ValidationRowRun validation_row_run(const CsvTable& table, const std::string& id, const ValidationOptions& options) {
  const std::size_t i = selected_rows(table, {id}).front();
  ValidationRowRun out{map_validation_row(table, i, profile_names_in(options.cluster_dirs)), {}};
  if (!out.vc.skipped.empty()) throw InputError(table.file, "row " + id, "skipped: " + out.vc.skipped);
  ClusterCache clusters(options.cluster_dirs, options.parameters, options.nccl_version);
  out.cluster = clusters.get(out.vc.cluster, out.vc.gpus_per_node, out.vc.network);
  const RuntimeChoices choices = resolve_runtime_choices(out.vc.run, out.cluster);
  if (!choices.no_fit.empty()) throw InputError(table.file, "row " + id, "skipped: " + choices.no_fit);
  out.vc.assumptions.insert(out.vc.assumptions.end(), choices.assumptions.begin(), choices.assumptions.end());
  return out;
}

ValidationReport run_validation_file(const std::string& path, const ValidationOptions& options) {
  return run_validation(read_csv_table(path), options);
}

namespace {

nlohmann::json summary_json(const ValidationSummary& s) {
  nlohmann::json j;
  if (!s.group.empty()) j["group"] = s.group;
  j["rows"] = s.rows;
  j["n"] = s.n;
  j["skipped"] = s.skipped;
  j["throughput_skipped"] = s.throughput_skipped;
  j["mape_pct"] = opt_json(s.mape_pct);
  j["median_ape_pct"] = opt_json(s.median_ape_pct);
  j["p90_ape_pct"] = opt_json(s.p90_ape_pct);
  j["max_ape_pct"] = opt_json(s.max_ape_pct);
  j["mean_error_pct"] = opt_json(s.mean_error_pct);
  j["memory_rows"] = s.memory_rows;
  j["memory_runs"] = s.memory_runs;
  j["memory_mape_pct"] = opt_json(s.memory_mape_pct);
  j["memory_row_mape_pct"] = opt_json(s.memory_row_mape_pct);
  j["memory_max_ape_pct"] = opt_json(s.memory_max_ape_pct);
  j["memory_min_error_pct"] = opt_json(s.memory_min_error_pct);
  j["predicted_out_of_memory"] = s.predicted_out_of_memory;
  return j;
}

}  // namespace

nlohmann::json validation_row_json(const ValidationRowResult& x) {
  nlohmann::json j;
  j["id"] = x.id;
  j["source"] = x.source;
  j["framework"] = x.framework;
  j["gpu"] = x.gpu;
  j["cluster"] = x.cluster;
  j["run"] = x.run;
  j["predicted_tokens_per_s_per_gpu"] = opt_json(x.predicted_tokens_per_s_per_gpu);
  j["measured_tokens_per_s_per_gpu"] = opt_json(x.measured_tokens_per_s_per_gpu);
  j["predicted_mfu"] = opt_json(x.predicted_mfu);
  j["measured_mfu"] = opt_json(x.measured_mfu);
  j["runtime"] = str_or_null(x.runtime);
  j["gpu_arch"] = str_or_null(x.gpu_arch);
  j["fp8"] = str_or_null(x.fp8);
  j["seq_len"] = x.seq_len > 0 ? nlohmann::json(x.seq_len) : nlohmann::json();
  j["moe"] = x.moe;
  j["metric"] = str_or_null(x.metric);
  j["metric_definition"] = str_or_null(x.metric_definition);
  j["predicted_metric"] = opt_json(x.predicted_metric);
  j["measured_metric"] = opt_json(x.measured_metric);
  j["error_pct"] = opt_json(x.error_pct);
  j["step_time_s"] = opt_json(x.step_time_s);
  j["dominant_term"] = str_or_null(x.dominant_term);
  j["dominant_share"] = x.dominant_term.empty() ? nlohmann::json(nullptr) : nlohmann::json(x.dominant_share);
  j["predicted_peak_gib"] = opt_json(x.predicted_peak_gib);
  j["measured_peak_gib"] = opt_json(x.measured_peak_gib);
  j["memory_error_pct"] = opt_json(x.memory_error_pct);
  j["memory_metric"] = str_or_null(x.memory_metric);
  j["memory_stage"] = str_or_null(x.memory_stage);
  j["dominant_memory_term"] = str_or_null(x.dominant_memory_term);
  j["timeline_peak_gib"] = opt_json(x.timeline_peak_gib);
  j["predicted_device_fraction"] = opt_json(x.predicted_device_fraction);
  j["skipped"] = str_or_null(x.skipped);
  j["throughput_skipped"] = str_or_null(x.throughput_skipped);
  j["assumptions"] = x.assumptions;
  j["sim_ms"] = x.sim_ms;
  return j;
}

nlohmann::json validation_json(const ValidationReport& r) {
  nlohmann::json rows = nlohmann::json::array();
  for (const auto& x : r.rows) rows.push_back(validation_row_json(x));
  nlohmann::json out;
  out["file"] = r.file;
  out["rows"] = std::move(rows);
  out["summary"] = summary_json(r.summary);
  out["summary"]["memory_weighting"] =
      "memory_mape_pct weights runs, not rows: -alloc/-resv rows of one run share one vote (their mean APE); "
      "memory_row_mape_pct weights rows";
  nlohmann::json groups = nlohmann::json::array();
  for (const auto& g : r.groups) groups.push_back(summary_json(g));
  out["groups"] = {{"by", std::string(to_string(r.by))}, {"summaries", std::move(groups)}};
  out["definitions"] = r.definitions;
  out["wall_s"] = r.wall_s;
  return out;
}

std::string validation_group_table(const ValidationReport& r) {
  std::string o;
  o += fmt::format("{:<26} {:>4} {:>4} {:>5} {:>7} {:>7} {:>7} {:>7} {:>8}   {:>4} {:>4} {:>8} {:>8}\n",
                   to_string(r.by), "rows", "n", "skip", "MAPE%", "med%", "p90%", "max%", "bias%", "memN", "runs",
                   "memMAPE%", "worst-%");
  auto line = [&](const ValidationSummary& s, const std::string& name) {
    o += fmt::format("{:<26} {:>4} {:>4} {:>5} {:>7} {:>7} {:>7} {:>7} {:>8}   {:>4} {:>4} {:>8} {:>8}\n", name, s.rows,
                     s.n, s.skipped + s.throughput_skipped, fmt_opt(s.mape_pct), fmt_opt(s.median_ape_pct),
                     fmt_opt(s.p90_ape_pct), fmt_opt(s.max_ape_pct), fmt_opt(s.mean_error_pct, "{:+.1f}"),
                     s.memory_rows, s.memory_runs, fmt_opt(s.memory_mape_pct), fmt_opt(s.memory_min_error_pct, "{:+.1f}"));
  };
  for (const auto& g : r.groups) line(g, g.group);
  line(r.summary, "overall");
  return o;
}

std::string validation_text_head(const ValidationReport& r) {
  std::string o = fmt::format("meshplan validate: {} ({} rows, {:.2f} s)\n\n", r.file, r.row_count, r.wall_s);
  o += fmt::format("{:<44} {:<10} {:>10} {:>10} {:>7}  {:>7} {:>7} {:>7}  {:<18} {}\n", "id", "metric", "predicted",
                   "measured", "err%", "memP", "memM", "mem%", "dominant", "note");
  return o;
}

std::string validation_row_text(const ValidationRowResult& x) {
  std::string metric = x.metric == "tokens_per_s_per_gpu" ? "tok/s/gpu"
                       : x.metric == "tflops_per_gpu"     ? "TFLOP/s"
                       : x.metric == "mfu_pct"            ? "MFU%"
                                                          : "-";
  std::string note = !x.skipped.empty() ? "SKIPPED: " + x.skipped
                     : !x.throughput_skipped.empty() ? "throughput not compared: " + x.throughput_skipped
                                                     : "";
  if (x.skipped.empty() && x.predicted_device_fraction && *x.predicted_device_fraction > 1.0)
    note += fmt::format("{}predicted not to fit: {:.0f}% of the device", note.empty() ? "" : "; ",
                        *x.predicted_device_fraction * 100);
  std::string dom = x.dominant_term.empty() ? "-" : fmt::format("{} {:.0f}%", x.dominant_term, x.dominant_share * 100);
  return fmt::format("{:<44} {:<10} {:>10} {:>10} {:>7}  {:>7} {:>7} {:>7}  {:<18} {}\n", x.id, metric,
                     fmt_opt(x.predicted_metric, "{:.4g}"), fmt_opt(x.measured_metric, "{:.4g}"),
                     fmt_opt(x.error_pct, "{:+.1f}"), fmt_opt(x.predicted_peak_gib, "{:.2f}"),
                     fmt_opt(x.measured_peak_gib, "{:.2f}"), fmt_opt(x.memory_error_pct, "{:+.1f}"), dom, note);
}

std::string validation_text_tail(const ValidationReport& r) {
  std::string o = "\nsummary (MAPE etc. over rows compared on throughput; skip = skipped rows + throughput figures not "
                  "compared;\nmemMAPE weights runs: the -alloc/-resv rows of one run count once; worst- = most negative "
                  "memory error)\n";
  o += validation_group_table(r);
  if (!r.definitions.empty()) {
    o += "\nthroughput compared on the source's own definition where no tokens/s is published:\n";
    for (const auto& [src, def] : r.definitions) o += fmt::format("  {:<22} {}\n", src, def);
  }
  o += fmt::format("\nruns the memory model says could not have run (allocated + CUDA context + NCCL > device): {} of {}\n",
                   r.summary.predicted_out_of_memory, r.summary.rows - r.summary.skipped);
  o += "\nmemory compared on each row's memory_metric: allocated = max_memory_allocated; reserved = "
       "max_memory_reserved;\nunknown = the point of [allocated, reserved] nearest the measurement; "
       "nvidia-smi = device peak incl. CUDA context and NCCL buffers.\n";
  // The slowest rows, so a regression in simulation time points at its cause.
  o += "\nslowest rows:";
  for (const auto& [id, ms] : r.slowest) o += fmt::format(" {} {:.0f} ms;", id, ms);
  o += "\n";
  return o;
}

std::string validation_text(const ValidationReport& r) {
  std::string o = validation_text_head(r);
  for (const auto& x : r.rows) o += validation_row_text(x);
  return o + validation_text_tail(r);
}

// ---- collectives -----------------------------------------------------------------------------

namespace {

// One nccl-tests row priced by estimate_collective and compared on the figure it gives; a row that
// cannot be read comes back skipped with its line and key, never as an exception.
CollectiveRowResult collective_row(const CsvTable& table, std::size_t i, const ClusterSpec& cluster, bool has_time,
                                   bool has_bw) {
  const CsvRow row(table, i);
  CollectiveRowResult x;
  x.line = table.row_lines[i];
  x.op = row.get("op");
  auto num = [&](const char* col) -> std::optional<double> {
    const std::string& s = row.get(col);
    if (s.empty()) return std::nullopt;
    char* end = nullptr;
    const double d = std::strtod(s.c_str(), &end);
    if (end != s.c_str() + s.size() || !std::isfinite(d)) throw InputError(table.file, col, "'" + s + "' is not a number");
    return d;
  };
  try {
    CollectiveOp op{};
    if (!parse_collective_op(x.op, op)) throw InputError(table.file, "op", "unknown collective '" + x.op + "'");
    const auto gpus = num("gpus");
    const auto gpn = num("gpus_per_node");
    const auto size = num("size_bytes");
    if (!gpus || *gpus < 1 || std::floor(*gpus) != *gpus) throw InputError(table.file, "gpus", "must be a positive integer");
    if (!size || *size <= 0) throw InputError(table.file, "size_bytes", "must be positive");
    x.gpus = static_cast<int>(*gpus);
    x.size_bytes = *size;
    x.gpus_per_node = gpn ? static_cast<int>(*gpn) : std::min(x.gpus, cluster.node.gpus_per_node);
    if (x.gpus_per_node < 1 || x.gpus_per_node > cluster.node.gpus_per_node)
      throw InputError(table.file, "gpus_per_node",
                       fmt::format("{} is outside 1..{} ({} node)", x.gpus_per_node, cluster.node.gpus_per_node, cluster.name));
    if (x.gpus % x.gpus_per_node != 0)
      throw InputError(table.file, "gpus", fmt::format("{} GPUs do not fill nodes of {}", x.gpus, x.gpus_per_node));
    if (has_time) x.measured_time_us = num("time_us");
    if (has_bw) x.measured_busbw_gbps = num("busbw_gbps");
    const CollectiveEstimate e = estimate_collective(cluster, op, x.size_bytes, GroupPlacement{x.gpus, x.gpus_per_node});
    x.predicted_time_us = e.seconds * 1e6;
    x.predicted_busbw_gbps = e.seconds > 0 ? x.size_bytes / e.seconds * bus_bandwidth_factor(op, x.gpus) / 1e9 : 0;
    x.algorithm = e.algorithm;
    x.protocol = e.protocol;
    if (x.measured_time_us && *x.measured_time_us > 0) {
      x.compared = "time_us";
      x.error_pct = pct_error(x.predicted_time_us, *x.measured_time_us);
    } else if (x.measured_busbw_gbps && *x.measured_busbw_gbps > 0) {
      x.compared = "busbw_gbps";
      x.error_pct = pct_error(x.predicted_busbw_gbps, *x.measured_busbw_gbps);
    } else {
      x.skipped = "neither time_us nor busbw_gbps is given";
    }
  } catch (const InputError& e) {
    x.skipped = fmt::format("line {}: {}: {}", x.line, e.key(), e.reason());
  }
  return x;
}

}  // namespace

CollectiveValidation run_collective_validation(const CsvTable& table, const ClusterSpec& cluster) {
  for (const char* col : {"op", "gpus", "size_bytes"})
    if (std::find(table.header.begin(), table.header.end(), col) == table.header.end())
      throw InputError(table.file, col, "required column missing (op, gpus, gpus_per_node, size_bytes, and time_us "
                                        "or busbw_gbps)");
  const bool has_time = std::find(table.header.begin(), table.header.end(), "time_us") != table.header.end();
  const bool has_bw = std::find(table.header.begin(), table.header.end(), "busbw_gbps") != table.header.end();
  if (!has_time && !has_bw) throw InputError(table.file, "time_us", "needs a time_us or a busbw_gbps column");
  CollectiveValidation v;
  v.file = table.file;
  v.cluster = cluster.name;
  std::map<std::string, std::vector<double>> group_errors;
  std::map<std::string, int> group_rows;
  std::vector<double> errors;
  for (std::size_t i = 0; i < table.rows.size(); ++i) {
    CollectiveRowResult x = collective_row(table, i, cluster, has_time, has_bw);
    const std::string key = fmt::format("{} x{}", x.op, x.gpus);
    ++group_rows[key];
    if (x.error_pct) {
      errors.push_back(*x.error_pct);
      group_errors[key].push_back(*x.error_pct);
    } else {
      group_errors[key];
    }
    v.rows.push_back(std::move(x));
  }
  v.summary.rows = static_cast<int>(v.rows.size());
  fill_ape_stats(errors, v.summary);
  v.summary.skipped = v.summary.rows - v.summary.n;
  for (const auto& [k, errs] : group_errors) {
    ValidationSummary s;
    s.group = k;
    s.rows = group_rows[k];
    fill_ape_stats(errs, s);
    s.skipped = s.rows - s.n;
    v.groups.push_back(std::move(s));
  }
  return v;
}

nlohmann::json collective_validation_json(const CollectiveValidation& v) {
  nlohmann::json rows = nlohmann::json::array();
  for (const auto& x : v.rows) {
    rows.push_back({{"line", x.line},
                    {"op", x.op},
                    {"gpus", x.gpus},
                    {"gpus_per_node", x.gpus_per_node},
                    {"size_bytes", x.size_bytes},
                    {"measured_time_us", opt_json(x.measured_time_us)},
                    {"measured_busbw_gbps", opt_json(x.measured_busbw_gbps)},
                    {"predicted_time_us", x.skipped.empty() ? nlohmann::json(x.predicted_time_us) : nlohmann::json(nullptr)},
                    {"predicted_busbw_gbps",
                     x.skipped.empty() ? nlohmann::json(x.predicted_busbw_gbps) : nlohmann::json(nullptr)},
                    {"compared", str_or_null(x.compared)},
                    {"error_pct", opt_json(x.error_pct)},
                    {"algorithm", str_or_null(x.algorithm)},
                    {"protocol", str_or_null(x.protocol)},
                    {"skipped", str_or_null(x.skipped)}});
  }
  nlohmann::json groups = nlohmann::json::array();
  for (const auto& g : v.groups)
    groups.push_back({{"group", g.group}, {"rows", g.rows}, {"n", g.n}, {"skipped", g.skipped},
                      {"mape_pct", opt_json(g.mape_pct)}, {"median_ape_pct", opt_json(g.median_ape_pct)},
                      {"p90_ape_pct", opt_json(g.p90_ape_pct)}, {"max_ape_pct", opt_json(g.max_ape_pct)}});
  const auto& s = v.summary;
  return {{"file", v.file},
          {"cluster", v.cluster},
          {"rows", std::move(rows)},
          {"summary",
           {{"n", s.n}, {"skipped", s.skipped}, {"mape_pct", opt_json(s.mape_pct)},
            {"median_ape_pct", opt_json(s.median_ape_pct)}, {"p90_ape_pct", opt_json(s.p90_ape_pct)},
            {"max_ape_pct", opt_json(s.max_ape_pct)}, {"mean_error_pct", opt_json(s.mean_error_pct)}}},
          {"groups", std::move(groups)}};
}

std::string collective_validation_text(const CollectiveValidation& v) {
  std::string o = fmt::format("meshplan validate --collectives: {} on {}\n\n", v.file, v.cluster);
  o += fmt::format("{:<15} {:>5} {:>4} {:>14} {:>12} {:>12} {:>10} {:>10} {:>8}  {}\n", "op", "gpus", "gpn", "size_bytes",
                   "time_us", "pred_us", "busbw", "pred_bw", "err%", "algo/proto");
  for (const auto& x : v.rows) {
    if (!x.skipped.empty()) {
      o += fmt::format("{:<15} {:>5} {:>4} {:>14.0f}  SKIPPED: {}\n", x.op, x.gpus, x.gpus_per_node, x.size_bytes, x.skipped);
      continue;
    }
    o += fmt::format("{:<15} {:>5} {:>4} {:>14.0f} {:>12} {:>12.2f} {:>10} {:>10.2f} {:>8}  {}/{} ({})\n", x.op, x.gpus,
                     x.gpus_per_node, x.size_bytes, fmt_opt(x.measured_time_us, "{:.2f}"), x.predicted_time_us,
                     fmt_opt(x.measured_busbw_gbps, "{:.2f}"), x.predicted_busbw_gbps, fmt_opt(x.error_pct, "{:+.1f}"),
                     x.algorithm, x.protocol, x.compared);
  }
  o += fmt::format("\n{:<20} {:>4} {:>4} {:>7} {:>7} {:>7} {:>7}\n", "op x gpus", "rows", "n", "MAPE%", "med%", "p90%", "max%");
  auto line = [&](const ValidationSummary& s, const std::string& name) {
    o += fmt::format("{:<20} {:>4} {:>4} {:>7} {:>7} {:>7} {:>7}\n", name, s.rows, s.n, fmt_opt(s.mape_pct),
                     fmt_opt(s.median_ape_pct), fmt_opt(s.p90_ape_pct), fmt_opt(s.max_ape_pct));
  };
  for (const auto& g : v.groups) line(g, g.group);
  line(v.summary, "overall");
  return o;
}

}  // namespace meshplan

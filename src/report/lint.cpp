// meshplan lint (lint.hpp). Facts behind the checks: Composer composer/utils/parallelism.py and
// llm-foundry llmfoundry/utils/config_utils.py (defaults, batch arithmetic), PyTorch
// torch/distributed/fsdp/ (scheduling, gradient dtypes) and torch/utils/checkpoint.py (reentrant AC).
#include "report/lint.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "spec/error.hpp"
#include "import/import_megatron.hpp"
#include "spec/model_loader.hpp"
#include "spec/numerics.hpp"
#include "spec/runtimes.hpp"
#include "spec/units.hpp"

namespace meshplan {

namespace {

std::string severity_of_importer_warning(const std::string& msg) {
  // Whatever the runtime refuses at start-up is an error, even where meshplan can still model
  // the run the user meant.
  if (msg.find(" raises ") != std::string::npos || msg.find(" rejects ") != std::string::npos)
    return "error";
  if (msg.find("no effect") != std::string::npos || msg.find("dropped by") != std::string::npos ||
      msg.find("modeled") != std::string::npos)
    return "info";
  return "warning";
}

LintFinding from_warning(const std::string& w) {
  // Importer warnings read "section.key: why".
  const auto colon = w.find(": ");
  if (colon != std::string::npos && w.substr(0, colon).find(' ') == std::string::npos)
    return {w.substr(0, colon), severity_of_importer_warning(w), w.substr(colon + 2)};
  return {"", severity_of_importer_warning(w), w};
}

// Names of a concept in each input format.
struct Keys {
  std::string reduce, micro, prefetch, limit, sharding, ac, ac_option;
};
Keys keys_for(ConfigFormat f) {
  switch (f) {
    case ConfigFormat::megatron_args:
      return {"--grad-reduce-in-bf16", "--micro-batch-size", "", "", "--use-distributed-optimizer",
              "--recompute-granularity", "--recompute-modules"};
    case ConfigFormat::llm_foundry_yaml:
      return {"fsdp_config.mixed_precision", "device_train_microbatch_size", "fsdp_config.backward_prefetch",
              "fsdp_config.limit_all_gathers", "fsdp_config.sharding_strategy", "fsdp_config.activation_checkpointing",
              ""};
    case ConfigFormat::torchtitan_toml:
      return {"training.mixed_precision_reduce", "training.local_batch_size", "", "", "parallelism.fsdp_reshard_after_forward",
              "activation_checkpoint.mode", "activation_checkpoint.selective_ac_option"};
    case ConfigFormat::meshplan_plan:
      break;
  }
  return {"precision.reduce_dtype", "batch.micro_batch", "sharding.backward_prefetch", "sharding.limit_all_gathers",
          "sharding.strategy", "activation_checkpoint.mode", ""};
}

// "a → b" and what follows it, or "unchanged at a" where the two print alike: a figure that did
// not move is not quoted as a change.
std::string moved(const std::string& a, const std::string& b, const std::string& after = "") {
  return a == b ? "unchanged at " + a : a + " → " + b + after;
}

// "simulated: tokens/s/GPU a → b (+x%), peak p → q GiB" for the same config with KEY=VALUE.
std::string quantify(const ConfigDocument& doc, const RunSource& src, std::int64_t fallback, const Variant& base,
                     const std::string& key, const std::string& value) {
  if (key.empty() || !base.ok()) return "";
  Variant alt;
  try {
    alt = evaluate_document(with_value(doc, key, value), src, fallback, {{key, value}});
  } catch (const InputError&) {
    return "";
  }
  if (!alt.ok()) return "";
  // A setting the model does not read cannot move its numbers: quoting them would claim a result.
  for (const RunConfig* rc : {&base.run, static_cast<const RunConfig*>(&alt.run)})
    if (std::find(rc->unmodelled_settings.begin(), rc->unmodelled_settings.end(), key) != rc->unmodelled_settings.end())
      return "; not modelled, so not simulated.";
  const double a = base.result.tokens_per_s_per_gpu, b = alt.result.tokens_per_s_per_gpu;
  return fmt::format("; simulated with {}={}: tokens/s/GPU {}, peak {} GiB.", key, value,
                     moved(fmt::format("{:.1f}", a), fmt::format("{:.1f}", b),
                           fmt::format(" ({:+.1f}%)", a > 0 ? 100 * (b / a - 1) : 0.0)),
                     moved(fmt::format("{:.2f}", base.peak_bytes / kGiB), fmt::format("{:.2f}", alt.peak_bytes / kGiB)));
}

// What every check reads: the document, its evaluation and the plan the checks look at (the
// evaluated one, or the imported one when the layout could not be evaluated).
// Composer on torch FSDP1: fsdp_config's FSDP1 knobs (prefetch, rate limiter, NO_SHARD) apply.
bool composer_fsdp1(const Plan& p) {
  const RuntimeInfo& r = runtime_info(p);
  return r.framework == Framework::llm_foundry && r.traits.fsdp1_prefetch_knobs;
}

struct LintInputs {
  const ConfigDocument& doc;
  const RunSource& src;
  std::int64_t fallback;
  const Variant& base;
  Keys keys;
  const Plan& p;
  bool composer1;
  // The same config with KEY=VALUE simulated beside it ("" when it cannot be).
  std::string simulated_with(const std::string& key, const std::string& value) const {
    return quantify(doc, src, fallback, base, key, value);
  }
};

// Findings that need the simulated run: the batch split, bf16 reduction, fit and headroom.
void check_simulated_run(std::vector<LintFinding>& f, const LintInputs& in) {
  const Variant& base = in.base;
  const Plan& p = in.p;
  const Keys& keys = in.keys;
  const RunConfig& rc = base.run;
  const Mesh& m = rc.plan.mesh;
  // Micro-batches that do not divide the per-rank batch (Composer: device batch = global / world).
  if (runtime_traits(p).device_batch_over_world) {
    const std::int64_t device = rc.job.global_batch / std::max<std::int64_t>(1, rc.n_gpus);
    if (rc.job.micro_batch > 0 && device % rc.job.micro_batch != 0)
      f.push_back({keys.micro, "warning",
                   fmt::format("{} does not divide the per-rank batch {} (global {} / {} GPUs): {} micro-batches, the "
                               "last with {} sequences; each one still pays full FSDP all-gathers and a reduce-scatter",
                               rc.job.micro_batch, device, rc.job.global_batch, rc.n_gpus, rc.job.grad_accum,
                               device % rc.job.micro_batch)});
  }
  // bf16 gradient reduction over a large group.
  const std::int64_t reduce_group = gradient_reduce_ranks(m);
  if (low_precision_reduce_is_risky(p))
    f.push_back({keys.reduce, "warning",
                 fmt::format("gradients are summed in {} over {} data-parallel ranks: an 8-bit mantissa loses low "
                             "bits as the sum grows with the group; fp32 reduction (DEFAULT) is safer at 2x the "
                             "reduce-scatter bytes ({} per step now)",
                             to_string(p.reduce_dtype), reduce_group,
                             format_gb(base.result.comm_bytes.count("fsdp_reduce_scatter")
                                           ? base.result.comm_bytes.at("fsdp_reduce_scatter")
                                           : 0.0)) +
                     in.simulated_with(in.doc.format == ConfigFormat::llm_foundry_yaml ? keys.reduce : "", "DEFAULT")});
  // Fit and headroom.
  if (!base.fits) {
    // The terms that are largest at the peak, by size: two fixed names printed 0.00 GiB for
    // activations at an optimizer-step peak.
    const MemoryBreakdown& b = base.peak_breakdown;
    std::vector<std::pair<double, const char*>> terms = {
        {b.params, "params"},           {b.grads, "grads"},         {b.optimizer, "optimizer"},
        {b.unsharded_params, "gathered params"}, {b.reduce_buffers, "reduce buffers"},
        {b.activations, "activations"}, {b.recompute, "recompute"}, {b.comm_buffers, "comm buffers"},
        {b.framework, "framework"}};
    std::stable_sort(terms.begin(), terms.end(), [](const auto& x, const auto& y) { return x.first > y.first; });
    std::string largest;
    for (std::size_t i = 0; i < 3 && terms[i].first > 0; ++i)
      largest += fmt::format("{}{} {:.2f} GiB", i ? ", " : "", terms[i].second, terms[i].first / kGiB);
    f.push_back({"", "error",
                 fmt::format("does not fit: {:.2f} GiB per GPU allocated at the simulated peak with the CUDA "
                             "context and NCCL buffers exceeds the {:.2f} GiB of {} (largest terms: {})",
                             base.needed_bytes / kGiB, base.gpu_memory_bytes / kGiB, base.cluster_name, largest)});
  } else if (base.tight) {
    f.push_back({"", "warning",
                 fmt::format("fits only without the caching allocator's usual reserve: {:.2f} GiB allocated with the "
                             "CUDA context and NCCL buffers, {:.2f} GiB with the reserve, on the {:.2f} GiB GPU: "
                             "expect cudaMalloc retries (slower steps), and fragmentation can still fail an "
                             "allocation (PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True reduces it)",
                             base.needed_bytes / kGiB, base.peak_bytes / kGiB, base.gpu_memory_bytes / kGiB)});
  } else if (base.peak_bytes > 0.9 * base.gpu_memory_bytes)
    f.push_back({"", "warning",
                 fmt::format("simulated peak {:.2f} GiB is within 10% of the {:.2f} GiB GPU: allocator fragmentation "
                             "can trigger cudaMalloc retries or OOM",
                             base.peak_bytes / kGiB, base.gpu_memory_bytes / kGiB)});
  if (in.composer1 && m.tp > 1)
    f.push_back({"tp_config.strategy", "info",
                 "llm-foundry's ffn strategy makes only the MLP tensor-parallel: attention and embeddings stay "
                 "replicated over the TP ranks, and each TP rank still brings its own micro-batch"});
}

// FSDP1 scheduling knobs (Composer).
void check_fsdp1_knobs(std::vector<LintFinding>& f, const LintInputs& in) {
  const Plan& p = in.p;
  const Keys& keys = in.keys;
  if (!p.limit_all_gathers)
    f.push_back({keys.limit, "warning",
                 "false lets the CPU run ahead and allocate many units' unsharded parameters at once (memory spikes, "
                 "fragmentation); the rate limiter's CPU waits do not delay GPU kernels (FSDP1 docstring)" +
                     in.simulated_with(keys.limit, "true")});
  if (p.backward_prefetch == BackwardPrefetch::backward_post)
    f.push_back({keys.prefetch, "info",
                 "BACKWARD_POST (Composer's default) issues the next unit's all-gather after the current gradient "
                 "computation; BACKWARD_PRE (torch's default) overlaps it with that computation at the cost of one "
                 "more gathered unit" + in.simulated_with(keys.prefetch, "BACKWARD_PRE")});
  if (p.backward_prefetch == BackwardPrefetch::none)
    f.push_back({keys.prefetch, "warning",
                 "NONE: backward all-gathers are not overlapped with gradient computation" +
                     in.simulated_with(keys.prefetch, "BACKWARD_PRE")});
  if (p.sharding == Sharding::zero2)
    f.push_back({keys.sharding, "info",
                 "SHARD_GRAD_OP does not save memory over FULL_SHARD: unsharded parameters stay alive from forward "
                 "to backward (the whole model's bf16 copy); it saves the backward all-gather" +
                     in.simulated_with(keys.sharding, "FULL_SHARD")});
  if (p.keep_low_precision_grads)
    f.push_back({"fsdp_config.keep_low_precision_grads", "info",
                 "does not halve gradient memory: sharded gradients are still accumulated in fp32 and only cast "
                 "down just before the optimizer step"});
}

// A Megatron MoE run with its experts spread (ep > 1) that leaves Megatron-Core's expert
// all-to-all overlap off where Megatron-Core would accept it (docs/models.md).
void check_expert_overlap(std::vector<LintFinding>& f, const LintInputs& in) {
  const Plan& p = in.p;
  const RunConfig& rc = in.base.run;
  if (!in.base.ok() || p.moe_a2a_overlap || !expert_a2a_overlap_refusal(p, rc.model.moe.enabled()).empty()) return;
  const double exposed = in.base.result.exposed_comm_s.count("ep") ? in.base.result.exposed_comm_s.at("ep") : 0.0;
  if (!(exposed > 0)) return;
  const std::string key = in.doc.format == ConfigFormat::megatron_args   ? "--overlap-moe-expert-parallel-comm"
                          : in.doc.format == ConfigFormat::meshplan_plan ? "runtime.moe_a2a_overlap"
                                                                         : "";
  f.push_back({key, "info",
               fmt::format("{:.2f} s per step of expert all-to-all is exposed; Megatron-Core's "
                           "--overlap-moe-expert-parallel-comm runs each steady-state forward and backward merged, "
                           "layer by layer, so that one's all-to-alls run under the other's compute (one more "
                           "warm-up forward under interleaved 1F1B)",
                           exposed) +
                   in.simulated_with(key, "true")});
}

// A host-bound Megatron MoE run that launches its MoE layers op by op without Megatron-Core's
// fused permute and router kernels (docs/host.md, "Megatron-Core's MoE layer").
void check_moe_fusion(std::vector<LintFinding>& f, const LintInputs& in) {
  const Plan& p = in.p;
  const RunConfig& rc = in.base.run;
  if (!in.base.ok() || !in.base.result.host_bound || !rc.model.moe.enabled() || !runtime_traits(p).moe_layer_op_by_op ||
      (p.moe_permute_fusion && p.moe_router_fusion))
    return;
  const bool args = in.doc.format == ConfigFormat::megatron_args;
  const bool plan = in.doc.format == ConfigFormat::meshplan_plan;
  const std::string permute = args ? "--moe-permute-fusion" : plan ? "runtime.moe_permute_fusion" : "";
  const std::string router = args ? "--moe-router-fusion" : plan ? "runtime.moe_router_fusion" : "";
  const double wait = in.base.result.breakdown_s.count("host_wait") ? in.base.result.breakdown_s.at("host_wait") : 0.0;
  const std::string& key = p.moe_permute_fusion ? router : permute;
  f.push_back({key, "info",
               fmt::format("the GPU waits {:.2f} s per step on the host, which issues each MoE layer's router, token "
                           "bookkeeping and permutation op by op; {} and {} fuse them into a few kernels (a larger "
                           "micro-batch or CUDA graphs scoped to moe_router / moe_preprocess also issue fewer launches "
                           "per token)",
                           wait, permute.empty() ? "--moe-permute-fusion" : permute,
                           router.empty() ? "--moe-router-fusion" : router) +
                   in.simulated_with(key, "true")});
}

// A Megatron MoE run without --moe-grouped-gemm: SequentialMLP launches every local expert's
// GEMMs one after another, each filling a fraction of the GPU.
void check_grouped_experts(std::vector<LintFinding>& f, const LintInputs& in) {
  const Plan& p = in.p;
  const RunConfig& rc = in.base.run;
  if (!in.base.ok() || p.moe_grouped_gemm || !rc.model.moe.enabled() || !runtime_traits(p).moe_layer_op_by_op) return;
  const bool args = in.doc.format == ConfigFormat::megatron_args;
  const std::string key = args ? "--moe-grouped-gemm" : in.doc.format == ConfigFormat::meshplan_plan ? "runtime.moe_grouped_gemm" : "";
  const int local = std::max(1, rc.model.moe.n_experts / std::max(1, p.mesh.ep));
  f.push_back({key, "info",
               fmt::format("the {} local experts run one after another (Megatron's SequentialMLP): each expert's GEMMs "
                           "are launches of their own over a few hundred rows; --moe-grouped-gemm runs them as "
                           "Transformer Engine's grouped GEMMs",
                           local) +
                   in.simulated_with(key, "true")});
}

// Recompute, replication and offload settings whose cost is not what their name suggests.
void check_recompute_and_offload(std::vector<LintFinding>& f, const LintInputs& in) {
  const Plan& p = in.p;
  if (in.composer1 && p.ac != AcMode::none && p.ac_reentrant) {
    // The importer already explains the reentrant default; add what switching costs or saves.
    const std::string q = in.simulated_with("fsdp_config.activation_checkpointing_reentrant", "false");
    for (auto& x : f)
      if (x.key == "fsdp_config.activation_checkpointing_reentrant") x.message += q;
  }
  if (in.composer1 && p.sharding == Sharding::none && in.base.ok() && in.base.run.n_gpus > 1)
    f.push_back({in.keys.sharding, "info",
                 "NO_SHARD replicates the whole fp32 model state (params, grads, optimizer) on every GPU and all-reduces "
                 "fp32 gradients; FULL_SHARD divides that state by the group size"});
  if (p.act_offload && p.ac != AcMode::none)
    f.push_back({"fsdp_config.activation_cpu_offload", "info",
                 "with checkpointing on, only the checkpointed blocks' inputs go to host memory; the forward copies "
                 "are blocking (save_on_cpu), so the saving is small and the stall is not hidden"});
  if (in.doc.format == ConfigFormat::torchtitan_toml && p.ac == AcMode::selective_layer &&
      value_of(in.doc, "activation_checkpoint.selective_ac_option").empty())
    f.push_back({"activation_checkpoint.selective_ac_option", "info",
                 fmt::format("not set: torchtitan's code default is \"2\" (every second block), not per-op \"op\"{}",
                             in.simulated_with(in.keys.ac_option, "op"))});
}

}  // namespace

LintReport lint_config(const RunSource& src) {
  LintReport r;
  r.config = src.config;
  auto& f = r.findings;
  auto error_finding = [&](const InputError& e) { f.push_back({e.key(), "error", e.reason()}); };

  ConfigDocument doc;
  RunConfig imported;
  try {
    ImportOptions opts;
    if (!src.model.empty()) opts.model = load_model(src.model);
    doc = read_config_document(src.config, opts);
    imported = import_document(doc, opts);
  } catch (const InputError& e) {
    error_finding(e);
    return r;
  }
  for (const auto& w : imported.warnings) f.push_back(from_warning(w));

  std::vector<std::string> notes;
  std::int64_t fallback = 0;
  try {
    fallback = fallback_gpu_count(src, imported, notes);
  } catch (const InputError& e) {
    error_finding(e);
    return r;
  }
  for (const auto& n : notes) f.push_back({"", "info", n + " (pass --gpus to lint the real layout)"});
  r.assumed_gpus = fallback;
  const Variant base = evaluate_document(doc, src, fallback);
  if (!base.ok()) {
    // Layout errors (divisibility, degrees): the run would not start.
    f.push_back({base.error_key, "error", base.error_reason.empty() ? base.error : base.error_reason});
  } else {
    for (const auto& w : base.run.warnings)
      if (std::find(imported.warnings.begin(), imported.warnings.end(), w) == imported.warnings.end())
        f.push_back(from_warning(w));
  }

  const Plan& p = base.ok() ? base.run.plan : imported.plan;
  const LintInputs in{doc, src, fallback, base, keys_for(doc.format), p, composer_fsdp1(p)};
  if (base.ok()) check_simulated_run(f, in);
  if (in.composer1 && p.sharding != Sharding::none) check_fsdp1_knobs(f, in);
  check_recompute_and_offload(f, in);
  check_expert_overlap(f, in);
  check_moe_fusion(f, in);
  check_grouped_experts(f, in);

  std::stable_sort(f.begin(), f.end(), [](const LintFinding& a, const LintFinding& b) {
    auto rank = [](const std::string& s) { return s == "error" ? 0 : s == "warning" ? 1 : 2; };
    return rank(a.severity) < rank(b.severity);
  });
  return r;
}

std::string lint_text(const LintReport& r) {
  std::string out = fmt::format("meshplan lint: {}{}\n", r.config,
                                r.assumed_gpus > 0
                                    ? fmt::format(" -- {} GPUs ASSUMED: no GPU count in the config or --gpus", r.assumed_gpus)
                                    : std::string());
  if (r.findings.empty()) return out + "no findings\n";
  for (const auto& x : r.findings)
    out += fmt::format("{:<7} {}{}\n", x.severity, x.key.empty() ? "" : x.key + ": ", x.message);
  std::size_t e = 0, w = 0, i = 0;
  for (const auto& x : r.findings) (x.severity == "error" ? e : x.severity == "warning" ? w : i) += 1;
  out += fmt::format("{} error(s), {} warning(s), {} info\n", e, w, i);
  return out;
}

nlohmann::json lint_json(const LintReport& r) {
  nlohmann::json j;
  j["config"] = r.config;
  j["assumed_gpus"] = r.assumed_gpus > 0 ? nlohmann::json(r.assumed_gpus) : nlohmann::json(nullptr);
  j["findings"] = nlohmann::json::array();
  for (const auto& x : r.findings) j["findings"].push_back({{"key", x.key}, {"severity", x.severity}, {"message", x.message}});
  return j;
}

}  // namespace meshplan

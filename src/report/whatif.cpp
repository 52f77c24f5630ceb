// meshplan whatif (whatif.hpp).
#include "report/whatif.hpp"
#include "spec/units.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <set>
#include <stdexcept>

#include "report/memory_report.hpp"
#include "report/simulate_report.hpp"
#include "sim/step_simulator.hpp"
#include "spec/cluster_loader.hpp"
#include "import/config_loader.hpp"
#include "spec/error.hpp"
#include "spec/model_loader.hpp"
#include "workload/runtime_choices.hpp"

namespace meshplan {

namespace {

bool mesh_is_explicit(const Mesh& m) { return m.pp > 0 && m.dp_replicate > 0 && m.dp_shard > 0 && m.cp > 0 && m.tp > 0; }

std::string cluster_name_for(const RunSource& src, const RunConfig& rc) {
  if (!src.cluster.empty()) return src.cluster;
  if (!rc.cluster.empty()) return rc.cluster;
  return src.default_cluster;
}

ImportOptions import_options(const RunSource& src) {
  ImportOptions o;
  if (!src.model.empty()) o.model = load_model(src.model);
  return o;
}

std::string settings_label(const Settings& s) {
  std::string out;
  for (const auto& [k, v] : s) out += (out.empty() ? "" : ", ") + k + "=" + v;
  return out;
}

double signed_pct(double from, double to) { return from != 0 ? 100.0 * (to - from) / from : 0.0; }

std::string gib(double bytes) { return fmt::format("{:.2f} GiB", bytes / (1024.0 * 1024.0 * 1024.0)); }

// The plan and job fields that differ, in words; empty when both import to the same run.
std::vector<std::string> plan_changes(const RunConfig& a, const RunConfig& b) {
  std::vector<std::string> out;
  const Plan& p = a.plan;
  const Plan& q = b.plan;
  auto num = [&](const char* what, auto x, auto y) {
    if (x != y) out.push_back(fmt::format("{} {} → {}", what, x, y));
  };
  auto str = [&](const char* what, std::string_view x, std::string_view y) {
    if (x != y) out.push_back(fmt::format("{} {} → {}", what, x, y));
  };
  num("pp", p.mesh.pp, q.mesh.pp);
  num("dp_replicate", p.mesh.dp_replicate, q.mesh.dp_replicate);
  num("dp_shard", p.mesh.dp_shard, q.mesh.dp_shard);
  num("cp", p.mesh.cp, q.mesh.cp);
  num("tp", p.mesh.tp, q.mesh.tp);
  num("ep", p.mesh.ep, q.mesh.ep);
  num("expert tp", p.mesh.expert_tp(), q.mesh.expert_tp());
  num("vpp", p.mesh.vpp, q.mesh.vpp);
  str("pipeline schedule", to_string(p.schedule), to_string(q.schedule));
  str("sharding", to_string(p.sharding), to_string(q.sharding));
  str("all-gather dtype", to_string(p.param_dtype), to_string(q.param_dtype));
  str("gradient reduce dtype", to_string(p.reduce_dtype), to_string(q.reduce_dtype));
  str("compute dtype", to_string(p.compute_dtype), to_string(q.compute_dtype));
  str("fp8", to_string(p.fp8), to_string(q.fp8));
  str("FP8 all-gather", p.fp8_all_gather ? "on" : "off", q.fp8_all_gather ? "on" : "off");
  str("FP8 attention", p.fp8_attention ? "on" : "off", q.fp8_attention ? "on" : "off");
  str("activation checkpointing", to_string(p.ac), to_string(q.ac));
  if (p.ac == q.ac && p.ac == AcMode::selective_layer) num("AC every n blocks", p.ac_every_n, q.ac_every_n);
  if (p.ac != AcMode::none || q.ac != AcMode::none)
    str("AC implementation", p.ac_reentrant ? "reentrant" : "non-reentrant", q.ac_reentrant ? "reentrant" : "non-reentrant");
  str("activation offload", p.act_offload ? "on" : "off", q.act_offload ? "on" : "off");
  str("backward prefetch", to_string(p.backward_prefetch), to_string(q.backward_prefetch));
  str("forward prefetch", p.forward_prefetch ? "on" : "off", q.forward_prefetch ? "on" : "off");
  str("limit_all_gathers", p.limit_all_gathers ? "on" : "off", q.limit_all_gathers ? "on" : "off");
  str("compile", p.compile ? "on" : "off", q.compile ? "on" : "off");
  str("TP style", to_string(p.tp_style), to_string(q.tp_style));
  str("sequence parallel", p.sequence_parallel ? "on" : "off", q.sequence_parallel ? "on" : "off");
  num("micro-batch", a.job.micro_batch, b.job.micro_batch);
  num("micro-batches per step", a.job.grad_accum, b.job.grad_accum);
  num("global batch", a.job.global_batch, b.job.global_batch);
  num("sequence length", a.job.seq_len, b.job.seq_len);
  num("GPUs", a.n_gpus, b.n_gpus);
  return out;
}

// Why the numbers move, for the changes whose mechanism is known (PyTorch
// torch/distributed/fsdp/api.py and _runtime_utils.py, torch/utils/checkpoint.py and
// checkpoint_wrapper.py; Composer trainer.py for accumulation without no_sync).
std::vector<std::string> mechanisms(const Variant& x, const Variant& y) {
  std::vector<std::string> out;
  const Plan& p = x.run.plan;
  const Plan& q = y.run.plan;
  const MemoryBreakdown& a = x.peak_breakdown;
  const MemoryBreakdown& b = y.peak_breakdown;
  if (p.reduce_dtype != q.reduce_dtype && p.sharding != Sharding::none) {
    const bool same_grads = std::abs(a.grads - b.grads) <= 1e-6 * std::max(1.0, a.grads);
    out.push_back(fmt::format(
        "gradients are reduced in {} instead of {}{}", to_string(q.reduce_dtype), to_string(p.reduce_dtype),
        same_grads ? fmt::format("; stored gradients stay {} ({}), so only transient reduce buffers change memory",
                                 gib(a.grads), to_string(p.state_dtype))
                   : ""));
  }
  if ((p.ac != AcMode::none && q.ac != AcMode::none) && p.ac_reentrant != q.ac_reentrant)
    out.push_back(fmt::format(
        "{} checkpointing {} (recompute working set {} → {}, peak {} → {})",
        q.ac_reentrant ? "reentrant" : "non-reentrant",
        q.ac_reentrant ? "reruns each whole block and holds all of its activations during that block's backward"
                       : "frees recomputed tensors as soon as backward uses them and stops recomputing early",
        gib(a.recompute), gib(b.recompute), gib(x.peak_bytes), gib(y.peak_bytes)));
  if ((p.ac == AcMode::none) != (q.ac == AcMode::none)) {
    const Variant& on = q.ac != AcMode::none ? y : x;
    const Variant& off = q.ac != AcMode::none ? x : y;
    const double rc = on.result.breakdown_s.count("recompute") ? on.result.breakdown_s.at("recompute") : 0.0;
    out.push_back(fmt::format(
        "checkpointing keeps only block inputs: saved activations {} with it vs {} without, for {:.2f} s of "
        "recompute ({:.0f}% of its step)",
        gib(on.peak_breakdown.activations), gib(off.peak_breakdown.activations), rc,
        on.result.step_time_s > 0 ? 100 * rc / on.result.step_time_s : 0.0));
  }
  if (p.act_offload != q.act_offload) {
    const Variant& on = q.act_offload ? y : x;
    const double st = on.result.breakdown_s.count("offload_stall") ? on.result.breakdown_s.at("offload_stall") : 0.0;
    out.push_back(fmt::format("offload moves saved activations to pinned host memory (activations on the GPU {} → {}, "
                              "host memory {} → {} per rank) at {:.2f} s of copy stalls per step",
                              gib(a.activations), gib(b.activations), gib(x.host_bytes), gib(y.host_bytes), st));
  }
  if (p.sharding != q.sharding && (p.sharding == Sharding::zero2 || q.sharding == Sharding::zero2) &&
      (p.sharding == Sharding::zero3 || q.sharding == Sharding::zero3))
    out.push_back(fmt::format("SHARD_GRAD_OP (zero2) keeps every unit's gathered params from forward to backward "
                              "(gathered params at the peak {} → {}) and skips the backward all-gather",
                              gib(a.unsharded_params), gib(b.unsharded_params)));
  if (x.run.job.micro_batch != y.run.job.micro_batch && p.grad_sync_every_microbatch && p.sharding != Sharding::none)
    out.push_back(fmt::format("{} micro-batches of {} instead of {} of {}: the runtime all-gathers and reduce-scatters "
                              "once per micro-batch, and activations scale with the micro-batch ({} → {})",
                              y.run.job.grad_accum, y.run.job.micro_batch, x.run.job.grad_accum, x.run.job.micro_batch,
                              gib(a.activations), gib(b.activations)));
  if (p.backward_prefetch != q.backward_prefetch)
    out.push_back(fmt::format("{} issues the next unit's all-gather {}", to_string(q.backward_prefetch),
                              q.backward_prefetch == BackwardPrefetch::backward_pre
                                  ? "before the current gradient computation (more overlap, one more unit gathered)"
                              : q.backward_prefetch == BackwardPrefetch::backward_post
                                  ? "after the current gradient computation (less overlap)"
                                  : "only when it is needed (no backward overlap)"));
  return out;
}

}  // namespace

std::string format_gb(double bytes) { return fmt::format("{:.2f} GB", bytes / 1e9); }

Variation parse_variation(std::string_view arg) {
  const auto eq = arg.find('=');
  if (eq == std::string_view::npos || eq == 0 || eq + 1 >= arg.size())
    throw InputError("", "--vary", fmt::format("'{}' is not KEY=V1,V2,... (e.g. fsdp_config.mixed_precision=DEFAULT,PURE)",
                                               std::string(arg)));
  Variation v;
  v.key = std::string(arg.substr(0, eq));
  std::string cur;
  const std::string rest(arg.substr(eq + 1));
  for (std::size_t i = 0; i <= rest.size(); ++i) {
    if (i == rest.size() || rest[i] == ',') {
      if (cur.empty()) throw InputError("", "--vary", fmt::format("'{}': empty value", std::string(arg)));
      if (std::find(v.values.begin(), v.values.end(), cur) != v.values.end())
        throw InputError("", "--vary", fmt::format("'{}': value '{}' repeats", std::string(arg), cur));
      v.values.push_back(cur);
      cur.clear();
    } else {
      cur += rest[i];
    }
  }
  return v;
}

std::int64_t fallback_gpu_count(const RunSource& src, const RunConfig& base, std::vector<std::string>& notes) {
  if (src.gpus > 0 || base.n_gpus > 0 || mesh_is_explicit(base.plan.mesh)) return 0;
  const ClusterSpec c = load_cluster(cluster_name_for(src, base));
  notes.push_back(fmt::format("no GPU count in {} or --gpus; assuming one node of {} GPUs", src.config,
                              c.node.gpus_per_node));
  return c.node.gpus_per_node;
}

Variant evaluate_document(const ConfigDocument& doc, const RunSource& src, std::int64_t fallback_gpus,
                          Settings settings) {
  Variant v;
  v.settings = std::move(settings);
  try {
    v.run = import_document(doc, import_options(src));
    if (!src.model.empty()) v.run.warnings.push_back(fmt::format("model replaced by --model {}", src.model));
    std::optional<std::int64_t> gpus;
    if (src.gpus > 0) gpus = src.gpus;
    else if (v.run.n_gpus <= 0 && mesh_is_explicit(v.run.plan.mesh)) gpus = v.run.plan.mesh.world();
    else if (v.run.n_gpus <= 0 && fallback_gpus > 0) {
      gpus = fallback_gpus;
      v.run.n_gpus_assumed = true;
    }
    resolve_layout(v.run, gpus);
    ClusterSpec c = load_cluster(cluster_name_for(src, v.run));
    override_nccl_version(c, src.nccl_version);
    // Knobs the config leaves to the runtime ('auto' micro-batch): settled as simulate does.
    const RuntimeChoices choices = resolve_runtime_choices(v.run, c);
    for (const auto& a : choices.assumptions) v.run.warnings.push_back(a);
    if (!choices.no_fit.empty()) v.run.warnings.push_back(choices.no_fit + "; modeled with the whole device batch");
    v.cluster_name = c.name;
    v.gpu_memory_bytes = c.gpu.device_memory_bytes();
    v.result = simulate_step(v.run.model, v.run.plan, v.run.job, c).result;
    for (const auto& s : v.result.stages) v.host_bytes = std::max(v.host_bytes, s.host_bytes);
    for (const auto& s : v.result.stages)
      if (s.peak_bytes > v.peak_bytes) {
        v.peak_bytes = s.peak_bytes;
        v.peak_breakdown = s.breakdown;
        v.term_peaks = s.term_peaks;
        v.peak_time_s = s.peak_time_seconds;
      }
    const SimulatedFit fit = simulated_fit(c, v.result);
    v.needed_bytes = fit.needed_bytes;
    v.fits = fit.fits;
    v.tight = fit.tight;
  } catch (const InputError& e) {
    v.error = e.what();
    v.error_key = e.key();
    v.error_reason = e.reason();
  } catch (const std::exception& e) {
    // A layout the simulator cannot run is this variant's problem, not the whole table's.
    v.error = fmt::format("{}: cannot simulate: {}", doc.path, e.what());
    v.error_reason = fmt::format("cannot simulate: {}", e.what());
  }
  return v;
}

namespace {

// Like for like: a layout change must not change the work per step. torchtitan's
// local_batch_size is per data-parallel rank, so more TP or PP shrinks the global batch; when the
// file leaves training.global_batch_size unset the variant gets the first variant's global batch
// there (the extra micro-batches become gradient accumulation). Where that cannot be done the
// report says so: step times are then not comparable, tokens/s still is.
void keep_global_batch(WhatIfReport& r, const ConfigDocument& base, const RunSource& src, std::int64_t fallback,
                       const Settings& settings, Variant& v) {
  if (r.variants.empty() || !r.variants.front().ok() || !v.ok()) return;
  const std::int64_t want = r.variants.front().run.job.global_batch;
  if (v.run.job.global_batch == want) return;
  const bool batch_varied = std::any_of(settings.begin(), settings.end(), [](const auto& kv) {
    return kv.first.find("batch") != std::string::npos || kv.first.find("seq_len") != std::string::npos ||
           kv.first.find("max_seq_len") != std::string::npos;
  });
  if (batch_varied) return;
  const std::size_t number = r.variants.size() + 1;
  if (base.format == ConfigFormat::torchtitan_toml) {
    // More data parallelism: fewer sequences per rank; less: the rest as gradient accumulation.
    const std::int64_t dp = static_cast<std::int64_t>(v.run.plan.mesh.dp_replicate) * v.run.plan.mesh.dp_shard;
    std::vector<std::pair<std::string, std::string>> fixes = {{"training.global_batch_size", std::to_string(want)}};
    if (dp > 0 && want % dp == 0) fixes.push_back({"training.local_batch_size", std::to_string(want / dp)});
    for (const auto& [key, value] : fixes) {
      ConfigDocument doc = base;
      for (const auto& [k, val] : settings) doc = with_value(doc, k, val, false);
      doc = with_value(doc, key, value, false);
      Variant kept = evaluate_document(doc, src, fallback, settings);
      if (kept.ok() && kept.run.job.global_batch == want) {
        r.notes.push_back(fmt::format("variant #{}: {} = {} keeps the global batch of variant #1 at {} sequences ({} "
                                      "without it: torchtitan's local_batch_size is per data-parallel rank)",
                                      number, key, value, want, v.run.job.global_batch));
        v = std::move(kept);
        return;
      }
    }
  }
  r.notes.push_back(fmt::format("variant #{} runs {} sequences per step instead of variant #1's {}: its step time is not "
                                "comparable; compare tokens/s",
                                number, v.run.job.global_batch, want));
}

// Whether either variant's import named `key` as accepted but not modelled: then its numbers
// cannot show what the setting does, and no difference between them is one.
bool unmodelled_in(const Variant& x, const Variant& y, const std::string& key) {
  auto named = [&](const Variant& v) {
    const auto& u = v.run.unmodelled_settings;
    return std::find(u.begin(), u.end(), key) != u.end();
  };
  return named(x) || named(y);
}

std::string not_modelled_explanation(const Variant& x, const Variant& y, const std::string& key,
                                     const std::string& what) {
  std::string why;
  for (const Variant* v : {&x, &y})
    for (const auto& w : v->run.warnings)
      if (why.empty() && w.rfind(key + ":", 0) == 0) why = " (" + w + ")";
  return fmt::format("{}: not quantified, the model does not read {}{}", what, key, why);
}

}  // namespace

WhatIfReport run_whatif(const RunSource& src, const std::vector<Variation>& vary) {
  if (vary.empty()) throw InputError("", "--vary", "give at least one --vary KEY=V1,V2");
  std::set<std::string> seen;
  for (const auto& v : vary)
    if (!seen.insert(v.key).second) throw InputError("", "--vary", fmt::format("key '{}' is varied twice", v.key));
  WhatIfReport r;
  r.config = src.config;
  r.variations = vary;
  const ConfigDocument base = read_config_document(src.config, import_options(src));
  const std::int64_t fallback = fallback_gpu_count(src, import_document(base, import_options(src)), r.notes);

  std::size_t total = 1;
  for (const auto& v : vary) total *= v.values.size();
  for (std::size_t i = 0; i < total; ++i) {
    // Mixed radix, first --vary outermost.
    std::size_t rest = i;
    std::vector<std::size_t> idx(vary.size());
    for (std::size_t k = vary.size(); k-- > 0;) {
      idx[k] = rest % vary[k].values.size();
      rest /= vary[k].values.size();
    }
    Settings settings;
    for (std::size_t k = 0; k < vary.size(); ++k) settings.emplace_back(vary[k].key, vary[k].values[idx[k]]);
    auto edit = [&](bool as_string) {
      ConfigDocument doc = base;
      for (const auto& [key, value] : settings) doc = with_value(doc, key, value, as_string);
      return doc;
    };
    Variant v;
    try {
      v = evaluate_document(edit(false), src, fallback, settings);
      // A TOML key that is absent from the file gets the type its text parses as; torchtitan
      // takes some numbers as strings (selective_ac_option = "2"), so retry those as strings.
      if (!v.ok() && base.format != ConfigFormat::llm_foundry_yaml &&
          std::any_of(settings.begin(), settings.end(), [&](const auto& kv) { return v.error.find(kv.first) != std::string::npos; })) {
        Variant s = evaluate_document(edit(true), src, fallback, settings);
        if (s.ok()) v = std::move(s);
      }
    } catch (const InputError& e) {
      v.settings = settings;
      v.error = e.what();
    }
    keep_global_batch(r, base, src, fallback, settings, v);
    r.variants.push_back(std::move(v));
  }

  // One explanation per pair that differs in exactly one setting: each non-first value of a key
  // against the first, with the other keys at every combination.
  for (std::size_t k = 0; k < vary.size(); ++k) {
    std::size_t stride = 1;
    for (std::size_t j = k + 1; j < vary.size(); ++j) stride *= vary[j].values.size();
    for (std::size_t i = 0; i < total; ++i) {
      const std::size_t vi = (i / stride) % vary[k].values.size();
      if (vi == 0) continue;
      const std::size_t base_i = i - vi * stride;
      std::string what = fmt::format("{} {} → {}", vary[k].key, vary[k].values[0], vary[k].values[vi]);
      std::string others;
      for (std::size_t j = 0; j < vary.size(); ++j)
        if (j != k) others += (others.empty() ? "" : ", ") + r.variants[i].settings[j].first + "=" + r.variants[i].settings[j].second;
      if (!others.empty()) what += " (with " + others + ")";
      r.explanations.push_back(unmodelled_in(r.variants[base_i], r.variants[i], vary[k].key)
                                   ? not_modelled_explanation(r.variants[base_i], r.variants[i], vary[k].key, what)
                                   : explain_difference(r.variants[base_i], r.variants[i], what));
    }
  }
  return r;
}

namespace {
// How the fit moved between two variants (docs/memory.md "Fits"): into or out of the device, or
// into or out of needing the caching allocator's reserve; "" when it did not.
std::string fit_change(const Variant& x, const Variant& y) {
  const std::string device = gib(y.gpu_memory_bytes);
  if (x.fits != y.fits)
    return y.fits ? fmt::format("now fits in {}{}", device, y.tight ? ", tightly" : "")
                  : fmt::format("no longer fits in {}", device);
  if (!y.fits || x.tight == y.tight) return "";
  return y.tight ? fmt::format("now fits in {} only without the caching allocator's usual reserve", device)
                 : fmt::format("now fits in {} with the caching allocator's usual reserve", device);
}
}  // namespace

// Long by its parts, not its logic: one paragraph per kind of difference (the step-time breakdown,
// communication volume by kind, the memory peak and its terms) in the order the report prints them,
// all reading the same two variants.
std::string explain_difference(const Variant& x, const Variant& y, const std::string& what) {
  if (!x.ok() || !y.ok()) return fmt::format("{}: not comparable: {}", what, !x.ok() ? x.error : y.error);
  const auto changes = plan_changes(x.run, y.run);
  // "No effect" is a claim about the numbers, not only about the fields compared above: a setting
  // that changes something this list does not name still shows its effect.
  const bool same_numbers = x.result.step_time_s == y.result.step_time_s && x.peak_bytes == y.peak_bytes &&
                            x.result.comm_bytes == y.result.comm_bytes;
  if (changes.empty() && same_numbers) {
    std::string why;
    for (const auto& w : y.run.warnings)
      if (std::find(x.run.warnings.begin(), x.run.warnings.end(), w) == x.run.warnings.end()) why = w;
    for (const auto& w : x.run.warnings)
      if (why.empty() && std::find(y.run.warnings.begin(), y.run.warnings.end(), w) == y.run.warnings.end()) why = w;
    return fmt::format("{}: no effect, both import to the same plan and give the same {:.1f} tokens/s/GPU{}", what,
                       y.result.tokens_per_s_per_gpu, why.empty() ? "" : " (" + why + ")");
  }
  std::vector<std::string> parts;
  const StepResult& a = x.result;
  const StepResult& b = y.result;
  parts.push_back(fmt::format("tokens/s/GPU {:.1f} → {:.1f} ({:+.1f}%), MFU {:.1f}% → {:.1f}%", a.tokens_per_s_per_gpu,
                              b.tokens_per_s_per_gpu, signed_pct(a.tokens_per_s_per_gpu, b.tokens_per_s_per_gpu),
                              100 * a.mfu, 100 * b.mfu));
  // Where the step time moved: the two largest changes of the breakdown.
  std::vector<std::pair<double, std::string>> moves;
  std::set<std::string> cats;
  for (const auto& [k, v] : a.breakdown_s) cats.insert(k);
  for (const auto& [k, v] : b.breakdown_s) cats.insert(k);
  for (const auto& k : cats) {
    const double va = a.breakdown_s.count(k) ? a.breakdown_s.at(k) : 0.0;
    const double vb = b.breakdown_s.count(k) ? b.breakdown_s.at(k) : 0.0;
    if (std::abs(vb - va) > std::max(1e-3, 0.005 * a.step_time_s))
      moves.emplace_back(-std::abs(vb - va), fmt::format("{} {:.2f} → {:.2f} s", k, va, vb));
  }
  std::sort(moves.begin(), moves.end());
  if (moves.size() > 2) moves.resize(2);
  if (!moves.empty()) {
    std::string m;
    for (const auto& [d, s] : moves) m += (m.empty() ? "" : ", ") + s;
    parts.push_back(fmt::format("step {:.2f} → {:.2f} s ({})", a.step_time_s, b.step_time_s, m));
  }
  // Communication volume by kind.
  std::set<std::string> kinds;
  for (const auto& [k, v] : a.comm_bytes) kinds.insert(k);
  for (const auto& [k, v] : b.comm_bytes) kinds.insert(k);
  for (const auto& k : kinds) {
    const double va = a.comm_bytes.count(k) ? a.comm_bytes.at(k) : 0.0;
    const double vb = b.comm_bytes.count(k) ? b.comm_bytes.at(k) : 0.0;
    if (std::abs(vb - va) <= 1e-3 * std::max(va, vb)) continue;
    const double ratio = va > 0 ? vb / va : 0.0;
    const std::string verb = va <= 0                          ? "appears"
                             : vb <= 0                        ? "disappears"
                             : std::abs(ratio - 0.5) < 1e-9   ? "halves"
                             : std::abs(ratio - 2.0) < 1e-9   ? "doubles"
                             : ratio < 1                      ? fmt::format("falls ×{:.2f}", ratio)
                                                              : fmt::format("grows ×{:.2f}", ratio);
    parts.push_back(fmt::format("{} bytes {}, {} → {} per step", k, verb, format_gb(va), format_gb(vb)));
  }
  // Memory: the peak and the terms that moved it. A term is credited with the change of its own
  // size (its largest value over the step), not with its value at the moment of the peak: when a
  // setting moves the peak to another moment (PURE shrinks the backward's reduce buffers, so the
  // peak moves to the end of forward where more activations are live), the activations did not
  // change, only when the peak is. The framework reserve follows the allocated peak.
  {
    const MemoryBreakdown& ma = x.peak_breakdown;
    const MemoryBreakdown& mb = y.peak_breakdown;
    const MemoryBreakdown& sa = x.term_peaks;
    const MemoryBreakdown& sb = y.term_peaks;
    const std::vector<std::pair<const char*, std::pair<double, double>>> terms = {
        {"params", {sa.params, sb.params}},
        {"grads", {sa.grads, sb.grads}},
        {"optimizer", {sa.optimizer, sb.optimizer}},
        {"gathered params", {sa.unsharded_params, sb.unsharded_params}},
        {"reduce buffers", {sa.reduce_buffers, sb.reduce_buffers}},
        {"activations", {sa.activations, sb.activations}},
        {"recompute", {sa.recompute, sb.recompute}},
        {"comm buffers", {sa.comm_buffers, sb.comm_buffers}},
        {"framework", {ma.framework, mb.framework}}};
    const double when_a = x.result.step_time_s > 0 ? x.peak_time_s / x.result.step_time_s : 0;
    const double when_b = y.result.step_time_s > 0 ? y.peak_time_s / y.result.step_time_s : 0;
    const std::string moved = std::abs(when_b - when_a) > 0.05
                                  ? fmt::format("; the peak moves from {:.0f}% to {:.0f}% of the step", 100 * when_a,
                                                100 * when_b)
                                  : std::string();
    double sized = 0;  // the part of the change the terms' sizes account for
    for (const auto& [name, v] : terms) sized += v.second - v.first;
    const double timing = (y.peak_bytes - x.peak_bytes) - sized;
    const std::string rest =
        std::abs(timing) > 0.1 * kGiB
            ? fmt::format("; {:+.2f} GiB from what else is live at the peak's moment", timing / kGiB)
            : std::string();
    std::vector<std::pair<double, std::string>> mm;
    for (const auto& [name, v] : terms)
      if (std::abs(v.second - v.first) > 0.01 * 1024.0 * 1024.0 * 1024.0)
        mm.emplace_back(-std::abs(v.second - v.first), fmt::format("{} {:+.2f} GiB", name, (v.second - v.first) / (1024.0 * 1024.0 * 1024.0)));
    std::sort(mm.begin(), mm.end());
    if (mm.size() > 3) mm.resize(3);
    std::string terms_s;
    for (const auto& [d, s] : mm) terms_s += (terms_s.empty() ? "" : ", ") + s;
    if (std::abs(y.peak_bytes - x.peak_bytes) < 0.005 * 1024.0 * 1024.0 * 1024.0)
      parts.push_back(fmt::format(
          "peak memory unchanged at {}{}", gib(y.peak_bytes),
          ma.reduce_buffers + mb.reduce_buffers + ma.recompute + mb.recompute == 0
              ? fmt::format(" (the peak comes at t = {:.2f} s of the {:.2f} s step, when no gradient-reduce or "
                            "recompute buffer is live)",
                            y.peak_time_s, y.result.step_time_s)
              : std::string()));
    else
      parts.push_back(fmt::format("peak memory {} → {} ({:+.2f} GiB{}{})", gib(x.peak_bytes), gib(y.peak_bytes),
                                  (y.peak_bytes - x.peak_bytes) / (1024.0 * 1024.0 * 1024.0),
                                  terms_s.empty() ? "" : ": " + terms_s, rest + moved));
    if (std::string f = fit_change(x, y); !f.empty()) parts.push_back(std::move(f));
  }
  std::string out = what + ": ";
  for (const auto& m : mechanisms(x, y)) out += m + "; ";
  for (std::size_t i = 0; i < parts.size(); ++i) out += (i ? "; " : "") + parts[i];
  return out + ".";
}

namespace {

// Rows of the side-by-side table: metric name, then one cell per variant.
std::vector<std::pair<std::string, std::vector<std::string>>> table_rows(const WhatIfReport& r) {
  std::vector<std::pair<std::string, std::vector<std::string>>> rows;
  auto row = [&](const std::string& name, auto cell) {
    std::vector<std::string> cells;
    for (const auto& v : r.variants) cells.push_back(v.ok() ? cell(v) : std::string("error"));
    rows.emplace_back(name, std::move(cells));
  };
  for (std::size_t k = 0; k < r.variations.size(); ++k) {
    std::vector<std::string> cells;
    for (const auto& v : r.variants) cells.push_back(v.settings[k].second);
    rows.emplace_back(r.variations[k].key, std::move(cells));
  }
  row("tokens/s/GPU", [](const Variant& v) { return fmt::format("{:.1f}", v.result.tokens_per_s_per_gpu); });
  row("MFU", [](const Variant& v) { return fmt::format("{:.1f}%", 100 * v.result.mfu); });
  row("step time", [](const Variant& v) { return fmt::format("{:.3f} s", v.result.step_time_s); });
  std::set<std::string> cats, kinds, exposed;
  for (const auto& v : r.variants) {
    for (const auto& [k, x] : v.result.breakdown_s) cats.insert(k);
    for (const auto& [k, x] : v.result.comm_bytes) kinds.insert(k);
    for (const auto& [k, x] : v.result.exposed_comm_s) exposed.insert(k);
  }
  for (const char* k : kBreakdownKeys) {
    if (!cats.count(k)) continue;
    row(fmt::format("  {}", k), [k](const Variant& v) {
      return fmt::format("{:.3f} s", v.result.breakdown_s.count(k) ? v.result.breakdown_s.at(k) : 0.0);
    });
    if (std::string(k) == "exposed_comm")
      for (const auto& e : exposed)
        row(fmt::format("    {}", e), [e](const Variant& v) {
          return fmt::format("{:.3f} s", v.result.exposed_comm_s.count(e) ? v.result.exposed_comm_s.at(e) : 0.0);
        });
  }
  row("peak memory", [](const Variant& v) { return format_gib(v.peak_bytes); });
  row("  activations", [](const Variant& v) { return format_gib(v.peak_breakdown.activations); });
  row("  grads", [](const Variant& v) { return format_gib(v.peak_breakdown.grads); });
  row("  gathered+reduce", [](const Variant& v) {
    return format_gib(v.peak_breakdown.unsharded_params + v.peak_breakdown.reduce_buffers + v.peak_breakdown.recompute);
  });
  row("host memory", [](const Variant& v) { return format_gib(v.host_bytes); });
  row("fits", [](const Variant& v) { return std::string(v.tight ? "tight" : v.fits ? "yes" : "NO"); });
  for (const auto& k : kinds)
    row(fmt::format("{} / step", k), [k](const Variant& v) {
      return format_gb(v.result.comm_bytes.count(k) ? v.result.comm_bytes.at(k) : 0.0);
    });
  return rows;
}

std::string header_line(const WhatIfReport& r) {
  std::string cfg = r.config;
  std::string gpus, cluster;
  for (const auto& v : r.variants)
    if (v.ok()) {
      gpus = std::to_string(v.run.n_gpus);
      cluster = v.cluster_name;
      return fmt::format("meshplan whatif: {} ({}) on {} x {}{}", cfg, v.run.model.name, gpus, cluster,
                         assumed_gpus_note(v.run));
    }
  return fmt::format("meshplan whatif: {}", cfg);
}

}  // namespace

std::string whatif_text(const WhatIfReport& r) {
  const auto rows = table_rows(r);
  std::size_t w0 = 0;
  for (const auto& [name, cells] : rows) w0 = std::max(w0, name.size());
  std::vector<std::size_t> w(r.variants.size(), 0);
  for (const auto& [name, cells] : rows)
    for (std::size_t i = 0; i < cells.size(); ++i) w[i] = std::max({w[i], cells[i].size(), std::size_t{6}});
  std::string out = header_line(r) + "\n\n";
  out += fmt::format("{:<{}}", "", w0);
  for (std::size_t i = 0; i < w.size(); ++i) out += fmt::format("  {:>{}}", fmt::format("#{}", i + 1), w[i]);
  out += "\n";
  for (const auto& [name, cells] : rows) {
    out += fmt::format("{:<{}}", name, w0);
    for (std::size_t i = 0; i < cells.size(); ++i) out += fmt::format("  {:>{}}", cells[i], w[i]);
    out += "\n";
  }
  for (std::size_t i = 0; i < r.variants.size(); ++i)
    if (!r.variants[i].ok()) out += fmt::format("\n#{} error: {}", i + 1, r.variants[i].error);
  out += "\nwhat changes and why\n";
  for (const auto& e : r.explanations) out += "  - " + e + "\n";
  for (const auto& n : r.notes) out += "note: " + n + "\n";
  // Warnings every variant shares are printed once; the differences show in the explanations.
  std::set<std::string> shown;
  for (const auto& v : r.variants)
    for (const auto& w : v.run.warnings)
      if (shown.insert(w).second) out += fmt::format("warning: {}{}\n", w,
                                                    std::all_of(r.variants.begin(), r.variants.end(), [&](const Variant& o) {
                                                      return std::find(o.run.warnings.begin(), o.run.warnings.end(), w) != o.run.warnings.end();
                                                    }) ? "" : " (with " + settings_label(v.settings) + ")");
  return out;
}

std::string whatif_markdown(const WhatIfReport& r) {
  const auto rows = table_rows(r);
  std::string out = "| |";
  for (std::size_t i = 0; i < r.variants.size(); ++i) out += fmt::format(" #{} |", i + 1);
  out += "\n|---|";
  for (std::size_t i = 0; i < r.variants.size(); ++i) out += "---:|";
  out += "\n";
  for (const auto& [name, cells] : rows) {
    std::string n = name;
    const auto first = n.find_first_not_of(' ');
    const std::size_t indent = first == std::string::npos ? 0 : first;
    std::string pad;
    for (std::size_t d = 0; d < indent / 2; ++d) pad += "&nbsp;&nbsp;";
    n = pad + n.substr(indent);
    out += "| " + n + " |";
    for (const auto& c : cells) out += " " + c + " |";
    out += "\n";
  }
  out += "\n";
  for (std::size_t i = 0; i < r.variants.size(); ++i)
    if (!r.variants[i].ok()) out += fmt::format("- #{} error: {}\n", i + 1, r.variants[i].error);
  for (const auto& e : r.explanations) out += "- " + e + "\n";
  for (const auto& n : r.notes) out += "- note: " + n + "\n";
  return out;
}

nlohmann::json whatif_json(const WhatIfReport& r) {
  nlohmann::json j;
  j["config"] = r.config;
  j["variants"] = nlohmann::json::array();
  for (const auto& v : r.variants) {
    nlohmann::json x;
    x["settings"] = nlohmann::json::object();
    for (const auto& [k, val] : v.settings) x["settings"][k] = val;
    if (!v.ok()) {
      x["error"] = v.error;
      x["tokens_per_s_per_gpu"] = nullptr;
      x["step_time_s"] = nullptr;
      x["peak_bytes"] = nullptr;
      x["fits"] = false;
      x["comm_bytes_per_step"] = nlohmann::json::object();
      x["comm_bytes"] = nlohmann::json::object();
      x["breakdown_s"] = nlohmann::json::object();
      j["variants"].push_back(x);
      continue;
    }
    const StepResult& s = v.result;
    x["tokens_per_s_per_gpu"] = s.tokens_per_s_per_gpu;
    x["tokens_per_s"] = s.tokens_per_s;
    x["step_time_s"] = s.step_time_s;
    x["mfu"] = s.mfu;
    x["peak_bytes"] = static_cast<std::int64_t>(std::llround(v.peak_bytes));
    x["gpu_memory_bytes"] = static_cast<std::int64_t>(std::llround(v.gpu_memory_bytes));
    x["host_bytes"] = static_cast<std::int64_t>(std::llround(v.host_bytes));
    x["fits"] = v.fits;
    x["tight"] = v.tight;
    x["comm_bytes_per_step"] = nlohmann::json::object();
    for (const auto& [k, b] : s.comm_bytes) x["comm_bytes_per_step"][k] = static_cast<std::int64_t>(std::llround(b));
    x["comm_bytes"] = x["comm_bytes_per_step"];  // simulate's name for the same quantity
    x["breakdown_s"] = s.breakdown_s;
    x["exposed_comm_s"] = nlohmann::json::object();
    for (const auto& [k, t] : s.exposed_comm_s) x["exposed_comm_s"][k] = t;
    const MemoryBreakdown& b = v.peak_breakdown;
    x["peak_breakdown"] = {{"params", b.params},           {"grads", b.grads},
                           {"optimizer", b.optimizer},     {"unsharded_params", b.unsharded_params},
                           {"reduce_buffers", b.reduce_buffers}, {"activations", b.activations},
                           {"recompute", b.recompute},     {"comm_buffers", b.comm_buffers},
                           {"framework", b.framework}};
    x["n_gpus"] = v.run.n_gpus;
    x["cluster"] = v.cluster_name;
    x["micro_batch"] = v.run.job.micro_batch;
    x["grad_accum"] = v.run.job.grad_accum;
    x["warnings"] = v.run.warnings;
    j["variants"].push_back(x);
  }
  j["explanations"] = r.explanations;
  j["notes"] = r.notes;
  return j;
}

}  // namespace meshplan

#include "report/memory_report.hpp"
#include "spec/offload_modules.hpp"
#include "spec/units.hpp"

#include <fmt/format.h>

#include <array>
#include <cmath>
#include <utility>

namespace meshplan {

namespace {

std::int64_t whole_bytes(double b) { return static_cast<std::int64_t>(std::llround(b)); }

// The breakdown terms in report order, with the JSON name and a one-line meaning.
struct Term {
  const char* key;
  double MemoryBreakdown::*field;
  const char* meaning;
};
constexpr std::array<Term, 9> kTerms{{
    {"params", &MemoryBreakdown::params, "stored parameters"},
    {"grads", &MemoryBreakdown::grads, "stored gradients"},
    {"optimizer", &MemoryBreakdown::optimizer, "optimizer state (+ step temporaries)"},
    {"unsharded_params", &MemoryBreakdown::unsharded_params, "gathered params (current/prefetched units, root)"},
    {"reduce_buffers", &MemoryBreakdown::reduce_buffers, "unsharded grad + reduce-scatter input"},
    {"activations", &MemoryBreakdown::activations, "saved for backward (+ loss)"},
    {"recompute", &MemoryBreakdown::recompute, "checkpoint recompute working set"},
    {"comm_buffers", &MemoryBreakdown::comm_buffers, "NCCL buffers"},
    {"framework", &MemoryBreakdown::framework, "CUDA context + allocator reserve"},
}};

// "layers 0-9, 40-49" for a rank's chunks, then what else it holds; the embedding or the loss in
// a chunk of its own (Megatron's split rules) says so.
std::string layer_ranges(const StageMemory& s) {
  std::string out;
  bool embedding_alone = false, loss_alone = false;
  for (std::size_t i = 0; i < s.chunks.size(); ++i) {
    const LayerRange& r = s.chunks[i];
    if (r.n_layers == 0) {
      (i == 0 && s.holds_embedding ? embedding_alone : loss_alone) = true;
      continue;
    }
    out += (out.empty() ? "" : ", ") + (r.n_layers == 1 ? fmt::format("{}", r.first_layer)
                                                        : fmt::format("{}-{}", r.first_layer, r.first_layer + r.n_layers - 1));
  }
  if (s.chunks.empty()) out = fmt::format("{}-{}", s.first_layer, s.first_layer + s.n_layers - 1);
  std::string held = fmt::format("{} {}", s.n_layers == 1 ? "layer" : "layers", out.empty() ? "none" : out);
  if (s.holds_embedding) held += embedding_alone ? " + embedding (a chunk of its own)" : " + embedding";
  if (s.mtp_layers > 0) held += s.mtp_layers == 1 ? " + MTP module" : fmt::format(" + {} MTP modules", s.mtp_layers);
  if (s.holds_loss) held += loss_alone ? " + head and loss (a chunk of their own)" : " + head and loss";
  return held;
}

// The ranks one parameter is sharded over: ZeRO-3 / FSDP full sharding over the shard and
// context-parallel ranks; the other stages keep whole parameters on every rank.
std::int64_t parameter_shards(const Plan& p) {
  return p.sharding == Sharding::zero3 ? std::max<std::int64_t>(1, static_cast<std::int64_t>(p.mesh.dp_shard) * p.mesh.cp)
                                       : 1;
}

std::string layout_line(const Plan& p) {
  const Mesh& m = p.mesh;
  return fmt::format("pp {} x dp_replicate {} x dp_shard {} x cp {} x tp {}{}", m.pp, m.dp_replicate,
                     m.dp_shard, m.cp, m.tp, m.vpp > 1 ? fmt::format(" (vpp {})", m.vpp) : "");
}
}  // namespace

std::string format_gib(double bytes) { return fmt::format("{:.2f} GiB", bytes / kGiB); }

std::string fit_tight_line(double needed_bytes, double reserve_peak_bytes, double device_bytes) {
  return fmt::format("fits: yes, but tight: {} allocated with the CUDA context and NCCL buffers, {} with the caching "
                     "allocator's usual reserve, on a {} GPU: the allocator frees its cached blocks and retries when "
                     "an allocation fails (slower steps), and fragmentation can still fail one "
                     "(PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True reduces it)\n",
                     format_gib(needed_bytes), format_gib(reserve_peak_bytes), format_gib(device_bytes));
}

std::string assumed_gpus_note(const RunConfig& rc) {
  return rc.n_gpus_assumed ? fmt::format(" -- {} GPUs ASSUMED: no GPU count in the config or --gpus", rc.n_gpus)
                           : std::string();
}

std::string memory_text(const RunConfig& rc, const ClusterSpec& c, const MemoryEstimate& e) {
  const Plan& p = rc.plan;
  std::string out;
  out += fmt::format("meshplan memory: {} on {} x {} ({}){}\n", rc.model.name, rc.n_gpus, c.name,
                     format_gib(e.gpu_memory_bytes), assumed_gpus_note(rc));
  out += fmt::format("  layout     {}\n", layout_line(p));
  out += fmt::format("  runtime    {}, sharding {}, precision param {} / reduce {} / state {}{}\n",
                     to_string(p.runtime), to_string(p.sharding), to_string(p.param_dtype),
                     to_string(p.reduce_dtype), to_string(p.state_dtype),
                     p.mixed_precision_name.empty() ? "" : fmt::format(" ({})", p.mixed_precision_name));
  out += fmt::format("  batch      seq {} x micro-batch {} x grad-accum {} (global {} sequences)\n",
                     rc.job.seq_len, rc.job.micro_batch, rc.job.grad_accum, rc.job.global_batch);
  out += fmt::format("  AC         {}{}{}{}\n", to_string(p.ac), p.ac_reentrant ? " (reentrant)" : "",
                     !p.act_offload ? ""
                     : p.offload_modules.any() ? fmt::format(", activation offload of {}", offload_modules_text(p.offload_modules))
                                               : ", activation offload",
                     p.param_offload ? ", CPU offload" : "");
  const std::int64_t shards = parameter_shards(p);
  for (const auto& s : e.stages) {
    const std::string params =
        shards > 1 ? fmt::format("{:.3g} B params before sharding, {:.3g} B stored per rank (1/{})",
                                 s.params_per_rank / 1e9, s.params_per_rank / 1e9 / static_cast<double>(shards), shards)
                   : fmt::format("{:.3g} B params per rank", s.params_per_rank / 1e9);
    out += fmt::format("\nstage {} ({}; {} layer{}, {}, {:.3g} micro-batches in flight)\n", s.stage, layer_ranges(s),
                       s.n_layers, s.n_layers == 1 ? "" : "s", params, s.microbatches_in_flight);
    for (const auto& t : kTerms) {
      const double v = s.breakdown.*(t.field);
      out += fmt::format("  {:<17} {:>12}  {:>5.1f}%  {}\n", t.key, format_gib(v),
                         s.peak_bytes > 0 ? 100.0 * v / s.peak_bytes : 0.0, t.meaning);
    }
    out += fmt::format("  {:<17} {:>12}  at {}{}\n", "peak", format_gib(s.peak_bytes), s.peak_phase,
                       s.peak_moment.empty() || s.peak_moment == s.peak_phase ? "" : fmt::format(" ({})", s.peak_moment));
    out += fmt::format("  {:<17} {:>12}  (torch max_memory_allocated)\n", "allocated", format_gib(s.allocated_peak_bytes));
    out += fmt::format("  {:<17} {:>12}  (torch max_memory_reserved)\n", "reserved", format_gib(s.reserved_peak_bytes));
    if (s.host_bytes > 0) out += fmt::format("  {:<17} {:>12}  pinned host memory per rank\n", "host", format_gib(s.host_bytes));
  }
  out += "\n";
  if (e.tight) {
    out += fit_tight_line(e.needed_bytes, e.gpu_memory_bytes - e.headroom_bytes, e.gpu_memory_bytes);
  } else if (e.fits) {
    out += fmt::format("fits: yes, {} free of {} ({:.1f}% headroom)\n", format_gib(e.headroom_bytes),
                       format_gib(e.gpu_memory_bytes), 100.0 * e.headroom_bytes / e.gpu_memory_bytes);
  } else {
    out += fmt::format("fits: NO, over by {} on a {} GPU ({} allocated with the CUDA context and NCCL buffers)\n",
                       format_gib(e.needed_bytes - e.gpu_memory_bytes), format_gib(e.gpu_memory_bytes),
                       format_gib(e.needed_bytes));
  }
  for (const auto& n : e.notes) out += fmt::format("note: {}\n", n);
  for (const auto& w : rc.warnings) out += fmt::format("warning: {}\n", w);
  for (const auto& w : c.warnings) out += fmt::format("warning: {}\n", w);
  return out;
}

nlohmann::json memory_json(const RunConfig& rc, const ClusterSpec& c, const MemoryEstimate& e) {
  nlohmann::json j;
  j["gpu_memory_bytes"] = whole_bytes(e.gpu_memory_bytes);
  j["fits"] = e.fits;
  j["tight"] = e.tight;
  j["needed_bytes"] = whole_bytes(e.needed_bytes);
  j["headroom_bytes"] = whole_bytes(e.headroom_bytes);
  nlohmann::json warnings = nlohmann::json::array();
  for (const auto& w : rc.warnings) warnings.push_back(w);
  for (const auto& w : c.warnings) warnings.push_back(w);
  j["warnings"] = warnings;
  j["notes"] = e.notes;
  j["config"] = rc.source_file;
  j["model"] = rc.model.name;
  j["cluster"] = c.name;
  j["n_gpus"] = rc.n_gpus;
  j["n_gpus_assumed"] = rc.n_gpus_assumed;
  j["stages"] = nlohmann::json::array();
  for (const auto& s : e.stages) {
    nlohmann::json st;
    st["stage"] = s.stage;
    st["first_layer"] = s.first_layer;
    st["n_layers"] = s.n_layers;
    nlohmann::json chunks = nlohmann::json::array();
    for (const LayerRange& r : s.chunks) chunks.push_back({{"first_layer", r.first_layer}, {"n_layers", r.n_layers}});
    st["chunks"] = std::move(chunks);
    st["holds_embedding"] = s.holds_embedding;
    st["holds_loss"] = s.holds_loss;
    if (s.mtp_layers > 0) st["mtp_layers"] = s.mtp_layers;
    nlohmann::json br;
    std::int64_t sum = 0;
    for (const auto& t : kTerms) {
      const std::int64_t v = whole_bytes(s.breakdown.*(t.field));
      br[t.key] = v;
      sum += v;
    }
    // peak_bytes is the sum of the rounded terms, so the contract "breakdown adds up" is exact.
    st["peak_bytes"] = sum;
    st["breakdown"] = br;
    st["peak_phase"] = s.peak_phase;
    st["peak_moment"] = s.peak_moment;
    st["allocated_peak_bytes"] = whole_bytes(s.allocated_peak_bytes);
    st["reserved_peak_bytes"] = whole_bytes(s.reserved_peak_bytes);
    st["host_bytes"] = whole_bytes(s.host_bytes);
    st["params_per_rank"] = whole_bytes(s.params_per_rank);
    st["params_stored_per_rank"] = whole_bytes(s.params_per_rank / static_cast<double>(parameter_shards(rc.plan)));
    st["microbatches_in_flight"] = s.microbatches_in_flight;
    j["stages"].push_back(st);
  }
  return j;
}

}  // namespace meshplan

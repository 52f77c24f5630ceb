#include "emit/bundle.hpp"

#include <fmt/format.h>
#include <fstream>

#include "emit/foundry_emitter.hpp"
#include "spec/atomic_file.hpp"
#include "emit/launch_emitter.hpp"
#include "emit/megatron_emitter.hpp"
#include "emit/torchtitan_emitter.hpp"

namespace meshplan {

namespace {

std::string args_file(const std::vector<std::string>& args) {
  // One flag and its value per line: readable, and `xargs` / `mapfile` can rebuild the list.
  std::string out;
  for (const auto& a : args) {
    // Appends piece by piece: GCC 12 warns (-Wrestrict, a false positive) on " " + string.
    if (a.rfind("--", 0) == 0) {
      if (!out.empty()) out += '\n';
      out += a;
    } else {
      out += ' ';
      out += shell_word(a);
    }
  }
  return out + "\n";
}

std::string gib(double bytes) { return fmt::format("{:.1f} GiB", bytes / (1024.0 * 1024.0 * 1024.0)); }

std::string runtime_title(EmitRuntime r, TorchtitanVersion v) {
  switch (r) {
    case EmitRuntime::torchtitan:
      switch (v) {
        case TorchtitanVersion::mid_2025: return "torchtitan @ 8570415c3 (mid-2025 TOML layout)";
        case TorchtitanVersion::early_2026: return "torchtitan @ 238fa9953e4a (early-2026 TOML layout)";
        case TorchtitanVersion::registry: return "torchtitan, Python-registry era (after 9810191bb)";
      }
      break;
    case EmitRuntime::llm_foundry: return "llm-foundry / Composer";
    case EmitRuntime::megatron: return "Megatron-LM (core_v0.15.0 argument names)";
  }
  return "";
}

std::string ac_text(const Plan& p) {
  if (p.ac == AcMode::selective_layer) return fmt::format("selective-layer (every {} blocks)", p.ac_every_n);
  return std::string(to_string(p.ac));
}

std::string plan_md(const RunConfig& rc, const ClusterSpec& c, EmitRuntime rt, TorchtitanVersion v,
                    const PlanSummary& s, const NodeLayout& n, const std::vector<BundleFile>& files) {
  const Plan& p = rc.plan;
  const Mesh& m = p.mesh;
  const Job& j = rc.job;
  std::string md = fmt::format("# {} on {} x {}\n\n", rc.model.name, rc.n_gpus, c.name);
  md += fmt::format("Runtime: {}. {} node{} x {} GPUs.\n\n", runtime_title(rt, v), n.nodes, n.nodes == 1 ? "" : "s",
                    n.gpus_per_node);
  md += "## Prediction (meshplan simulate)\n\n| | |\n|---|---|\n";
  md += fmt::format("| tokens/s per GPU | {:.0f} |\n", s.tokens_per_s_per_gpu);
  md += fmt::format("| tokens/s, whole run | {:.0f} |\n", s.tokens_per_s_per_gpu * static_cast<double>(rc.n_gpus));
  md += fmt::format("| step time | {:.3f} s |\n", s.step_time_s);
  md += fmt::format("| tokens per step | {} |\n", j.tokens_per_step());
  const double hbm = c.gpu.device_memory_bytes();
  md += fmt::format("| peak memory per GPU | {}{} |\n\n", gib(static_cast<double>(s.peak_bytes)),
                    hbm > 0 ? fmt::format(" of {} ({:.0f} %)", gib(hbm), 100.0 * static_cast<double>(s.peak_bytes) / hbm) : "");
  md += "## Layout\n\n| | |\n|---|---|\n";
  md += fmt::format("| mesh | pp {} x dp_replicate {} x dp_shard {} x cp {} x tp {} (ep {}) |\n", m.pp, m.dp_replicate,
                    m.dp_shard, m.cp, m.tp, m.ep);
  if (m.pp > 1) md += fmt::format("| pipeline | {}, {} stage(s) per rank |\n", to_string(p.schedule), m.vpp);
  md += fmt::format("| sharding | {}{} |\n", to_string(p.sharding),
                    p.sharding == Sharding::zero3 && !p.reshard_after_forward ? " (no reshard after forward)" : "");
  md += fmt::format("| tensor parallel | {}{}{} |\n", m.tp > 1 ? to_string(p.tp_style) : "off",
                    m.tp > 1 && p.sequence_parallel ? ", sequence parallel" : "", p.async_tp ? ", async" : "");
  md += fmt::format("| precision | params {}, reduce {}, state {}, compute {}{} |\n", to_string(p.param_dtype),
                    to_string(p.reduce_dtype), to_string(p.state_dtype), to_string(p.compute_dtype),
                    p.fp8 != Fp8Recipe::none ? fmt::format(", fp8 {}", to_string(p.fp8)) : "");
  md += fmt::format("| activation checkpointing | {}{} |\n", ac_text(p), p.act_offload ? ", activations offloaded" : "");
  if (p.param_offload) md += "| offload | parameters and optimizer on the host |\n";
  md += fmt::format("| batch | global {} x seq {}; micro-batch {} x {} accumulation per data-parallel rank |\n\n",
                    j.global_batch, j.seq_len, j.micro_batch, j.grad_accum);
  if (!s.breakdown.empty()) {
    md += "## Step-time breakdown\n\n";
    for (const auto& l : s.breakdown) md += "- " + l + "\n";
    md += "\n";
  }
  md += "## Assumptions\n\n";
  for (const auto& l : s.assumptions) md += "- " + l + "\n";
  md += fmt::format("- The files are pinned to {}; other versions may reject or reinterpret keys.\n", runtime_title(rt, v));
  if (rt == EmitRuntime::torchtitan && v == TorchtitanVersion::registry)
    md += "- Registry era: only the parallelism degrees and the batch are overridden; activation checkpointing, "
          "compile, float8 and precision are assumed to be the preset's (the torchtitan 238fa995 llama3 preset values).\n";
  md += "- Hyper-parameters (learning rate, warm-up, steps) and the dataset are the runtime's preset values; they do not "
        "change time or memory.\n\n";
  md += "## Files\n\n";
  for (const auto& f : files) md += fmt::format("- `{}`\n", f.name);
  md += "- `plan.md` (this file)\n\n## Launch\n\n";
  const std::string var = rt == EmitRuntime::torchtitan    ? "TORCHTITAN_DIR"
                          : rt == EmitRuntime::llm_foundry ? "LLM_FOUNDRY_DIR"
                                                           : "MEGATRON_DIR";
  md += fmt::format("The scripts run inside a checkout of the runtime (the version above); {} names it. From this "
                    "folder:\n\n",
                    var);
  md += n.nodes > 1 ? fmt::format("    {}=/path/to/checkout sbatch sbatch.slurm\n\nor, without Slurm, "
                                  "`{}=/path/to/checkout NODE_RANK=i MASTER_ADDR=node0 bash launch.sh` on every node.\n",
                                  var, var)
                    : fmt::format("    {}=/path/to/checkout bash launch.sh\n\n(extra arguments are passed to the "
                                  "trainer).\n",
                                  var);
  if (rt == EmitRuntime::torchtitan)
    md += "Paths in the TOML (`hf_assets_path`, `tokenizer_path`) are relative to the checkout, where torchtitan's "
          "`scripts/download_hf_assets.py` (or `download_tokenizer.py`) puts them.\n";
  return md;
}

}  // namespace

std::vector<BundleFile> render_bundle(const RunConfig& rc, const ClusterSpec& cluster, EmitRuntime runtime,
                                      TorchtitanVersion version, const PlanSummary& summary) {
  std::vector<BundleFile> files;
  LaunchSpec spec;
  spec.runtime = runtime;
  spec.torchtitan_version = version;
  switch (runtime) {
    case EmitRuntime::torchtitan:
      if (version == TorchtitanVersion::registry) {
        spec.train_args = emit_torchtitan_registry_args(rc);
        files.push_back({"torchtitan_args.txt", args_file(spec.train_args), false});
      } else {
        spec.config_file = rc.model.name + ".toml";
        files.push_back({spec.config_file, emit_torchtitan_toml(rc, version), false});
      }
      break;
    case EmitRuntime::llm_foundry:
      // The YAML is named after the model: llm-foundry's importer names inline MPT shapes by file.
      spec.config_file = rc.model.name + ".yaml";
      spec.fsdp2_env = foundry_uses_fsdp2(rc);
      files.push_back({spec.config_file, emit_foundry_yaml(rc), false});
      break;
    case EmitRuntime::megatron:
      spec.train_args = emit_megatron_args(rc);
      files.push_back({"megatron_args.txt", args_file(spec.train_args), false});
      break;
  }
  const NodeLayout n = node_layout(rc, cluster);
  const LaunchScripts ls = emit_launch(rc, cluster, spec);
  files.push_back({"launch.sh", ls.launch_sh, true});
  if (!ls.sbatch.empty()) files.push_back({"sbatch.slurm", ls.sbatch, true});
  files.push_back({"plan.md", plan_md(rc, cluster, runtime, version, summary, n, files), false});
  return files;
}

std::vector<std::filesystem::path> write_bundle(const std::filesystem::path& dir, const RunConfig& rc,
                                                const ClusterSpec& cluster, EmitRuntime runtime,
                                                TorchtitanVersion version, const PlanSummary& summary) {
  // Render everything first: an inexpressible plan must not leave a half-written bundle.
  const std::vector<BundleFile> files = render_bundle(rc, cluster, runtime, version, summary);
  namespace fs = std::filesystem;
  std::error_code ec;
  const bool existed = fs::exists(dir, ec);
  if (existed && !fs::is_directory(dir, ec))
    throw InputError(dir.string(), "--out", "exists and is not a folder");
  fs::create_directories(dir, ec);
  if (ec) throw InputError(dir.string(), "--out", "cannot create the bundle folder: " + ec.message());
  // Each file is written atomically; when one fails, the files this call created are removed
  // again (and the folder, when this call created it), so a failure leaves no partial bundle.
  std::vector<fs::path> written, created;
  try {
    for (const auto& f : files) {
      const auto path = dir / f.name;
      if (!fs::exists(path, ec)) created.push_back(path);
      write_file_atomic(path.string(), f.content, "--out", AtomicWriteOptions{.executable = f.executable, .check = {}});
      written.push_back(path);
    }
  } catch (const InputError& e) {
    for (const auto& p : created) fs::remove(p, ec);
    if (!existed) fs::remove(dir, ec);
    throw InputError(e.file(), "--out", e.reason());
  }
  return written;
}

}  // namespace meshplan

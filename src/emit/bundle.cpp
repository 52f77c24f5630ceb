#include "emit/bundle.hpp"

#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fmt/format.h>
#include <optional>
#include <set>

#include "emit/foundry_emitter.hpp"
#include "spec/atomic_file.hpp"
#include "spec/error.hpp"
#include "spec/input_file.hpp"
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

namespace {

namespace fs = std::filesystem;

// The names a previous bundle's plan.md lists under "## Files" ("- `launch.sh`"); nullopt when
// the folder holds no plan.md that meshplan wrote.
std::optional<std::set<std::string>> bundle_listing(const fs::path& dir) {
  std::string md;
  try {
    md = read_input_file((dir / "plan.md").string(), InputKind::run_config);
  } catch (const InputError&) {
    return std::nullopt;
  }
  const auto files = md.find("\n## Files\n");
  if (md.rfind("# ", 0) != 0 || md.find("\n## Prediction (meshplan simulate)\n") == std::string::npos ||
      files == std::string::npos)
    return std::nullopt;
  std::set<std::string> names;
  for (std::size_t at = md.find("\n- `", files); at != std::string::npos && md.compare(at, 4, "\n- `") == 0;
       at = md.find('\n', at + 1)) {
    const auto close = md.find('`', at + 4);
    if (close == std::string::npos) break;
    names.insert(md.substr(at + 4, close - at - 4));
  }
  return names;
}

// "" when `dir` may be replaced by a new bundle: an empty folder, or a bundle meshplan wrote
// (every entry a regular file its plan.md lists, or a hidden temporary file of an interrupted
// write). Anything else is the user's, and replacing the folder would delete it.
std::string replace_refusal(const fs::path& dir) {
  std::error_code ec;
  fs::directory_iterator it(dir, ec);
  if (ec) return "cannot read the folder: " + ec.message();
  std::optional<std::optional<std::set<std::string>>> listing;
  for (; it != fs::directory_iterator(); it.increment(ec)) {
    if (ec) return "cannot read the folder: " + ec.message();
    const std::string name = it->path().filename().string();
    if (name.size() > 1 && name[0] == '.' && name.find(".tmp-") != std::string::npos) continue;
    if (!listing) listing = bundle_listing(dir);
    if (!*listing && fs::exists(fs::symlink_status(dir / "plan.md", ec)) && !fs::is_regular_file(dir / "plan.md", ec))
      return fmt::format("holds 'plan.md', which is {}, not the plan.md of a meshplan bundle; the folder is not "
                         "replaced (give a new or empty folder, or move it away)",
                         describe_non_regular((dir / "plan.md").string()).empty()
                             ? std::string("a symbolic link")
                             : describe_non_regular((dir / "plan.md").string()));
    if (!*listing)
      return fmt::format("is a folder that is not a meshplan bundle (it holds '{}' and no plan.md meshplan wrote); "
                         "give a new or empty folder",
                         name);
    if (!it->is_regular_file(ec) || !(*listing)->contains(name))
      return fmt::format("holds '{}', which is not a file of the meshplan bundle there; give a new or empty folder, "
                         "or move it away",
                         name);
  }
  return "";
}

void sync_dir(const fs::path& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  (void)::fsync(fd);
  ::close(fd);
}

// Moves the freshly written folder `tmp` to `dir` (both in `parent`): one rename when `dir` is new,
// else an atomic exchange, else the old bundle aside as a backup first. Throws InputError(shown,
// --out); `tmp`, when still there, is the caller's to remove.
void move_into_place(const fs::path& tmp, const fs::path& dir, const fs::path& parent, bool existed,
                     const std::string& shown) {
  auto fail = [&](const std::string& reason) { throw InputError(shown, "--out", reason); };
  if (!existed && ::rename(tmp.c_str(), dir.c_str()) == 0) {
    sync_dir(parent);
    return;
  }
  // The target exists (or appeared meanwhile): exchange the two folders in one step, so that a
  // concurrent reader or writer always finds a whole bundle there, then drop the old one.
  if (::renameat2(AT_FDCWD, tmp.c_str(), AT_FDCWD, dir.c_str(), RENAME_EXCHANGE) == 0) {
    std::error_code ignore;
    fs::remove_all(tmp, ignore);  // `tmp` now holds the old bundle
    sync_dir(parent);
    return;
  }
  if (errno != EINVAL && errno != ENOSYS)
    fail(fmt::format("cannot move the bundle into place: {}", std::strerror(errno)));
  // No atomic exchange on this filesystem: the old bundle moves aside as a backup, the new one
  // takes its name, and the backup is restored should that fail.
  std::string bak = (parent / ("." + dir.filename().string() + ".old.tmp-XXXXXX")).string();
  if (::mkdtemp(bak.data()) == nullptr || ::rename(dir.c_str(), bak.c_str()) != 0)
    fail(fmt::format("cannot move the old bundle aside: {}", std::strerror(errno)));
  if (::rename(tmp.c_str(), dir.c_str()) != 0) {
    const int err = errno;
    (void)::rename(bak.c_str(), dir.c_str());
    fail(fmt::format("cannot move the bundle into place: {}", std::strerror(err)));
  }
  std::error_code ec;
  fs::remove_all(bak, ec);
  sync_dir(parent);
}

}  // namespace

std::vector<std::filesystem::path> write_bundle(const std::filesystem::path& dir_in, const RunConfig& rc,
                                                const ClusterSpec& cluster, EmitRuntime runtime,
                                                TorchtitanVersion version, const PlanSummary& summary) {
  // Render everything first: an inexpressible plan must not touch the folder.
  const std::vector<BundleFile> files = render_bundle(rc, cluster, runtime, version, summary);
  std::error_code ec;
  fs::path dir = dir_in.filename().empty() ? dir_in.parent_path() : dir_in;  // "bdl/" is "bdl"
  const std::string shown = dir_in.string();
  auto fail = [&](const std::string& reason) { throw InputError(shown, "--out", reason); };
  // A link to a folder: the bundle replaces the folder it points to, and the link stays.
  if (fs::is_symlink(fs::symlink_status(dir, ec))) {
    const fs::path target = fs::canonical(dir, ec);
    if (ec) fail("is a symbolic link to a missing folder");
    dir = target;
  }
  const fs::file_status st = fs::status(dir, ec);
  const bool existed = fs::exists(st);
  if (existed && !fs::is_directory(st)) fail("exists and is not a folder");
  if (existed)
    if (const std::string why = replace_refusal(dir); !why.empty()) fail(why);
  const fs::path parent = dir.has_parent_path() ? dir.parent_path() : fs::path(".");
  fs::create_directories(parent, ec);
  if (ec) fail("cannot create the bundle folder: " + ec.message());

  // The bundle is written whole into a fresh folder beside the target (same filesystem), then
  // swapped in by one rename: a failure at any point leaves the old bundle as it was and no
  // mixture of old and new files (issue 36 finding 3).
  std::string tmpl = (parent / ("." + dir.filename().string() + ".tmp-XXXXXX")).string();
  if (::mkdtemp(tmpl.data()) == nullptr)
    fail(fmt::format("cannot create a folder in '{}': {}", parent.string(), std::strerror(errno)));
  const fs::path tmp = tmpl;
  auto cleanup = [&] {
    std::error_code ignore;
    fs::remove_all(tmp, ignore);
  };
  const mode_t umask_now = ::umask(0);
  ::umask(umask_now);
  const mode_t mode = existed ? static_cast<mode_t>(st.permissions()) : (0777 & ~umask_now);
  std::vector<fs::path> written;
  try {
    if (::chmod(tmp.c_str(), mode) != 0) fail(fmt::format("cannot set the folder's mode: {}", std::strerror(errno)));
    for (const auto& f : files) {
      write_file_atomic((tmp / f.name).string(), f.content, "--out",
                        AtomicWriteOptions{.executable = f.executable, .check = {}});
      written.push_back(dir / f.name);
    }
    sync_dir(tmp);
    move_into_place(tmp, dir, parent, existed, shown);
    return written;
  } catch (const InputError& e) {
    cleanup();
    // A file's own error names the temporary folder; the user gave `dir`.
    std::string reason = e.reason();
    if (e.file() != shown) reason = fmt::format("{}: {}", fs::path(e.file()).filename().string(), reason);
    for (auto at = reason.find(tmp.string()); at != std::string::npos; at = reason.find(tmp.string(), at))
      reason.replace(at, tmp.string().size(), dir.string());
    throw InputError(shown, "--out", reason);
  }
}

}  // namespace meshplan

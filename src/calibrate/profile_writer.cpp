// Calibrated profile = base profile TOML, edited in place through toml++ (so every key the base
// has and this code does not know about survives), with fitted values swapped in.
#include "calibrate/profile_writer.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <vector>
#include <set>
#include <sstream>
#include <string>
#include <string_view>

#include <toml++/toml.h>

#include "spec/error.hpp"
#include "spec/input_file.hpp"

namespace meshplan::calibrate {
namespace {

// Unit spellings the loader accepts for a time / a bandwidth (docs/hardware_profiles.md "Units").
const std::vector<std::string_view> kTimeSpellings = {"seconds", "ms", "us", "ns"};
const std::vector<std::string_view> kBandwidthSpellings = {"bytes_per_s", "gb_per_s", "tb_per_s", "gbit_per_s"};
const std::vector<std::string_view> kNoSpellings = {};

toml::table& child_table(toml::table& parent, std::string_view key, const std::string& file) {
  toml::node* n = parent.get(key);
  if (n == nullptr) {
    parent.insert(key, toml::table{});
    n = parent.get(key);
  }
  toml::table* t = n->as_table();
  if (t == nullptr) throw InputError(file, std::string(key), "must be a table");
  return *t;
}

// Sets `stem_{unit}` = value (removing every other spelling of the same quantity) or a plain
// key when `spellings` is empty, and points its key_src entry at `tag`.
template <typename T>
void set_sourced(toml::table& t, std::string_view stem, const std::vector<std::string_view>& spellings,
                 std::string_view unit, T value, const std::string& tag, const std::string& file) {
  toml::table& key_src = child_table(t, "key_src", file);
  key_src.is_inline(true);
  std::string key(stem);
  if (!spellings.empty()) {
    for (std::string_view u : spellings) {
      const std::string k = std::string(stem) + "_" + std::string(u);
      t.erase(k);
      key_src.erase(k);
    }
    key.append("_").append(unit);
  }
  t.insert_or_assign(key, value);
  key_src.insert_or_assign(key, tag);
}

toml::array number_array(const std::vector<double>& v, double scale, bool integral) {
  toml::array a;
  for (double x : v) {
    if (integral) a.push_back(static_cast<std::int64_t>(std::llround(x * scale)));
    else a.push_back(x * scale);
  }
  return a;
}

// Tags a value outside [sources] and [collectives] refers to, through `src` or `key_src`.
void collect_tags(const toml::node& n, std::set<std::string>& tags) {
  if (const toml::table* t = n.as_table()) {
    for (auto&& [k, v] : *t) {
      if (k.str() == "src" && v.is_string()) tags.insert(v.as_string()->get());
      else if (k.str() == "key_src" && v.is_table()) {
        for (auto&& [kk, vv] : *v.as_table())
          if (vv.is_string()) tags.insert(vv.as_string()->get());
      } else collect_tags(v, tags);
    }
  } else if (const toml::array* a = n.as_array()) {
    for (const toml::node& e : *a) collect_tags(e, tags);
  }
}

std::string version_or(const std::string& v, std::string_view fallback) {
  return v.empty() ? std::string(fallback) : v;
}

std::string provenance_ref(const ProfileFit& f) {
  const DeviceInfo& d = f.device;
  return fmt::format(
      "meshplan calibrate --fit {}: {} (sm {}, {} SMs, max SM clock {:.0f} MHz, memory clock {:.0f} MHz; driver {}, "
      "CUDA runtime {}, cuBLAS {}, NCCL {}; {} GPU(s) per node x {} node(s)); measurements made {} by `{}` ({} mode); "
      "fit: docs/calibration.md",
      f.measurements_file, d.name, version_or(d.compute_capability, "?"), d.sm_count, d.sm_clock_mhz,
      d.memory_clock_mhz, version_or(d.driver_version, "?"), version_or(d.cuda_runtime_version, "?"),
      version_or(d.cublas_version, "?"), version_or(d.nccl_version, "not loaded"), d.gpus_per_node, d.nodes,
      version_or(f.created_utc, "(date not recorded)"), f.generator, f.mode);
}

toml::table parse_base(const std::string& base_path) {
  const std::string text = read_input_file(base_path, InputKind::hardware_profile);
  try {
    return toml::parse(text, base_path);
  } catch (const toml::parse_error& e) {
    throw InputError(base_path, "", "TOML syntax error at line " + std::to_string(e.source().begin.line) + ": " +
                                        std::string(e.description()));
  }
}

// Declares this run's source in [sources] and returns its tag. A profile calibrated twice keeps
// the earlier run's tag for values the new run did not measure.
std::string add_calibrated_source(toml::table& root, const ProfileFit& fit, const std::string& file) {
  toml::table& sources = child_table(root, "sources", file);
  std::string tag = "calibrated";
  for (int i = 2; sources.contains(tag); ++i) tag = fmt::format("calibrated_{}", i);
  toml::table src_entry{{"kind", "calibrated"}, {"ref", provenance_ref(fit)}};
  src_entry.is_inline(true);
  sources.insert(tag, std::move(src_entry));
  return tag;
}

void rename_profile(toml::table& root, const ProfileFit& fit, const std::string& profile_name) {
  const std::string base_name = root["name"].value_or(std::string("?"));
  root.insert_or_assign("name", profile_name);
  root.insert_or_assign("description", root["description"].value_or(std::string()) + "; calibrated on " +
                                           fit.device.name + " (" + fit.measurements_file + ", base " + base_name + ")");
}

// The array of tables `gpu.KEY`, created empty when the base has none.
toml::array& curve_array(toml::table& gpu, std::string_view key, const std::string& file) {
  if (gpu.get(key) == nullptr) gpu.insert(key, toml::array{});
  toml::array* curves = gpu.get(key)->as_array();
  if (curves == nullptr) throw InputError(file, "gpu." + std::string(key), "must be an array of tables");
  return *curves;
}

// Replaces the base's curve for the same dtype, or appends one.
void write_gemm_curves(toml::table& gpu, const ProfileFit& fit, const std::string& tag, const std::string& file) {
  if (fit.gemm.empty()) return;
  toml::array& curves = curve_array(gpu, "gemm_curve", file);
  for (const GemmCurveFit& g : fit.gemm) {
    std::vector<double> x, y;
    for (const GemmEfficiencyPoint& p : g.curve.points) {
      x.push_back(p.cube_dim);
      y.push_back(p.efficiency);
    }
    toml::table entry{{"dtype", std::string(to_string(g.curve.dtype))},
                      {"cube_dim", number_array(x, 1.0, false)},
                      {"efficiency", number_array(y, 1.0, false)},
                      {"src", tag}};
    bool replaced = false;
    for (toml::node& n : curves) {
      toml::table* t = n.as_table();
      if (t != nullptr && (*t)["dtype"].value_or(std::string()) == to_string(g.curve.dtype)) {
        *t = entry;
        replaced = true;
        break;
      }
    }
    if (!replaced) curves.push_back(std::move(entry));
  }
}

// Replaces the base's curve for the same kernel, pass, head size and masking, or inserts one.
void write_attention_curves(toml::table& gpu, const ProfileFit& fit, const std::string& tag, const std::string& file) {
  if (fit.attention.empty()) return;
  toml::array& curves = curve_array(gpu, "attention_curve", file);
  std::size_t fused_at = 0;
  for (const AttentionCurveFit& a : fit.attention) {
    const bool whole = std::all_of(a.curve.seq_len.begin(), a.curve.seq_len.end(),
                                   [](double s) { return s == std::round(s); });
    toml::table entry{{"kernel", a.curve.kernel},
                      {"pass", a.curve.pass},
                      {"head_dim", a.curve.head_dim},
                      {"causal", a.curve.causal},
                      {"seq_len", number_array(a.curve.seq_len, 1.0, whole)},
                      {"tflops", number_array(a.curve.flops_per_s, 1e-12, false)},
                      {"src", tag}};
    bool replaced = false;
    for (toml::node& n : curves) {
      toml::table* t = n.as_table();
      if (t != nullptr && (*t)["kernel"].value_or(std::string()) == a.curve.kernel &&
          (*t)["pass"].value_or(std::string()) == a.curve.pass &&
          (*t)["head_dim"].value_or(std::int64_t{0}) == a.curve.head_dim &&
          (*t)["causal"].value_or(!a.curve.causal) == a.curve.causal) {
        *t = entry;
        replaced = true;
        break;
      }
    }
    if (replaced) continue;
    // The compute model times attention with the first-listed kernel family. A fused kernel
    // measured here is what training runs, so it goes first; the unfused proxy is recorded after
    // the base's fused-kernel curves, which it must not displace (it is several times slower).
    if (a.fused) curves.insert(curves.begin() + static_cast<std::ptrdiff_t>(fused_at++), std::move(entry));
    else curves.push_back(std::move(entry));
  }
}

// The fitted scalars of [gpu] and [node] and the GEMM and attention curves.
void write_device_values(toml::table& root, const ProfileFit& fit, const std::string& tag, const std::string& file) {
  toml::table& gpu = child_table(root, "gpu", file);
  if (fit.hbm_efficiency) set_sourced(gpu, "hbm_efficiency", kNoSpellings, "", *fit.hbm_efficiency, tag, file);
  if (fit.kernel_launch_seconds)
    set_sourced(gpu, "kernel_launch", kTimeSpellings, "us", *fit.kernel_launch_seconds * 1e6, tag, file);
  if (fit.comm_interference) set_sourced(gpu, "comm_interference", kNoSpellings, "", *fit.comm_interference, tag, file);
  write_gemm_curves(gpu, fit, tag, file);
  write_attention_curves(gpu, fit, tag, file);
  toml::table& node = child_table(root, "node", file);
  if (fit.host_h2d_bytes_per_s)
    set_sourced(node, "host_h2d", kBandwidthSpellings, "gb_per_s", *fit.host_h2d_bytes_per_s / 1e9, tag, file);
  if (fit.host_d2h_bytes_per_s)
    set_sourced(node, "host_d2h", kBandwidthSpellings, "gb_per_s", *fit.host_d2h_bytes_per_s / 1e9, tag, file);
  for (toml::table* t : {&gpu, &node}) {
    if (const toml::table* ks = (*t)["key_src"].as_table(); ks != nullptr && ks->empty()) t->erase("key_src");
  }
}

// [collectives].fit: one fitted line per measured op, scope and size of group.
void write_collective_fits(toml::table& root, const ProfileFit& fit, const std::string& tag, const std::string& file) {
  if (fit.collectives.empty()) return;
  toml::table& coll = child_table(root, "collectives", file);
  toml::array fits;
  for (const CollectiveFit& c : fit.collectives) {
    fits.push_back(toml::table{
        {"op", std::string(to_string(c.op))},
        {"scope", c.scope},
        {"ranks", c.ranks},
        {"nodes", c.nodes},
        {"latency_us", c.line.latency_seconds * 1e6},
        {"algbw_gb_per_s", c.line.bandwidth_bytes_per_s() / 1e9},
        {"busbw_gb_per_s", c.bus_bandwidth_bytes_per_s / 1e9},
        {"min_bytes", static_cast<std::int64_t>(std::llround(c.min_bytes))},
        {"max_bytes", static_cast<std::int64_t>(std::llround(c.max_bytes))},
        {"rms_relative_residual", c.line.rms_relative_residual},
        {"max_relative_residual", c.line.max_relative_residual},
        {"latency_resolved", c.line.latency_resolved},
        {"src", tag},
    });
  }
  coll.insert_or_assign("fit", std::move(fits));
}

// The tags the profile's values refer to, outside [sources] and [collectives].
std::set<std::string> used_tags(const toml::table& root) {
  std::set<std::string> used;
  for (auto&& [k, v] : root)
    if (k.str() != "sources" && k.str() != "collectives") collect_tags(v, used);
  return used;
}

// Drop tags whose only users were replaced: the loader rejects declared-but-unused sources.
void drop_unused_sources(toml::table& root, const std::set<std::string>& used, const std::string& file) {
  toml::table& sources = child_table(root, "sources", file);
  std::vector<std::string> unused;
  for (auto&& [k, v] : sources)
    if (used.count(std::string(k.str())) == 0) unused.push_back(std::string(k.str()));
  for (const std::string& k : unused) sources.erase(k);
}

}  // namespace

std::string calibrated_profile_toml(const ProfileFit& fit, const std::string& base_path,
                                    const std::string& profile_name) {
  toml::table root = parse_base(base_path);
  const std::string& file = base_path;
  const std::string tag = add_calibrated_source(root, fit, file);
  rename_profile(root, fit, profile_name);
  write_device_values(root, fit, tag, file);
  const std::set<std::string> used = used_tags(root);
  if (used.count(tag) == 0)
    throw InputError(fit.measurements_file, "",
                     "nothing outside [collectives] was fitted; a profile needs at least one calibrated GPU or host "
                     "value (GEMM, HBM, launch, host copies or interference)");
  write_collective_fits(root, fit, tag, file);
  drop_unused_sources(root, used, file);

  std::ostringstream out;
  out << "# Calibrated hardware profile written by `meshplan calibrate --fit` (docs/calibration.md).\n"
      << "# Base: " << base_path << "; measurements: " << fit.measurements_file << ".\n"
      << "# Values whose source is `" << tag << "` were fitted from the measurements; all others are the base\n"
      << "# profile's, with its sources. The base's comments are not carried over: [sources] holds the provenance.\n"
      << toml::toml_formatter{root, toml::format_flags::relaxed_float_precision | toml::format_flags::allow_unicode_strings} << "\n";
  return out.str();
}

}  // namespace meshplan::calibrate

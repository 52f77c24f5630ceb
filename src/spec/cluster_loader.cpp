// Hardware profile loader: hardware_profiles/NAME.toml (or a path) -> ClusterSpec in SI units.
//
// The format is ours, so the reader is strict: every key must be known, every value must have
// the right type and a physically meaningful range, and every value must resolve to a source
// tag declared in [sources]. Errors are InputError(file, dotted.toml.key, reason) so the CLI
// can print one line that points at the offending key. Schema: docs/hardware_profiles.md.
#include "spec/cluster_loader.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <map>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <toml++/toml.h>

#include "spec/attention_kernel.hpp"
#include "spec/data_root.hpp"
#include "spec/error.hpp"
#include "spec/import_common.hpp"
#include "spec/input_file.hpp"
#include "spec/nccl_table.hpp"

namespace meshplan {
namespace {

namespace fs = std::filesystem;

constexpr std::int64_t kSchemaVersion = 1;
constexpr std::string_view kProfileDir = "hardware_profiles";
// Not a profile: maps names such as "a100-unknown" onto profiles.
constexpr std::string_view kAliasFile = "aliases";

// Unit spellings accepted in key names. A key template holds "{}" where the unit goes, so
// "hbm_{}" accepts hbm_bytes, hbm_gb, hbm_gib, ... and the loader scales to SI.
struct UnitChoice {
  std::string_view token;
  double to_si;
};
constexpr UnitChoice kByteUnits[] = {
    {"bytes", 1.0},  {"kib", 1024.0}, {"mib", 1048576.0}, {"gib", 1073741824.0},
    {"kb", 1e3},     {"mb", 1e6},     {"gb", 1e9},        {"tb", 1e12},
};
constexpr UnitChoice kBandwidthUnits[] = {
    {"bytes_per_s", 1.0}, {"gb_per_s", 1e9}, {"tb_per_s", 1e12}, {"gbit_per_s", 1e9 / 8.0},
};
constexpr UnitChoice kTimeUnits[] = {
    {"seconds", 1.0}, {"ms", 1e-3}, {"us", 1e-6}, {"ns", 1e-9},
};
constexpr double kTflops = 1e12;

enum class Range {
  positive,     // > 0: sizes, bandwidths, latencies
  efficiency,   // (0, 1]: achieved / peak can never exceed the peak
  fraction,     // [0, 1): slack fractions
  at_least_one, // >= 1: oversubscription ratios (1 = non-blocking)
  non_negative, // >= 0: failure rates (0 = never fails)
};

std::string line_suffix(const toml::node* n) {
  if (n == nullptr || n->source().begin.line == 0) return {};
  return " (line " + std::to_string(n->source().begin.line) + ")";
}

std::string_view type_name(const toml::node& n) {
  switch (n.type()) {
    case toml::node_type::table: return "a table";
    case toml::node_type::array: return "an array";
    case toml::node_type::string: return "a string";
    case toml::node_type::integer: return "an integer";
    case toml::node_type::floating_point: return "a float";
    case toml::node_type::boolean: return "a boolean";
    case toml::node_type::date: return "a date";
    case toml::node_type::time: return "a time";
    case toml::node_type::date_time: return "a date-time";
    case toml::node_type::none: return "nothing";
  }
  return "an unknown type";
}

std::string fmt_double(double v) {
  // Enough digits to identify the offending value without trailing noise.
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.6g", v);
  return buf;
}

// Source registry of one profile plus the bookkeeping to reject unused or undefined tags.
struct Context {
  std::string file;
  ClusterSpec* spec = nullptr;
  std::map<std::string, std::string> tag_kinds;  // tag -> kind
  // Fitted sources: the bounds a fit may move the value within (what a fitting command searches).
  std::map<std::string, std::pair<double, double>> fitted_bounds;
  std::set<std::string> used_tags;

  [[noreturn]] void fail(const std::string& key, const std::string& reason,
                         const toml::node* at = nullptr) const {
    throw InputError(file, key, reason + line_suffix(at));
  }
};

std::string join(const std::vector<std::string>& v, std::string_view sep) {
  std::string s;
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (i > 0) s += sep;
    s += v[i];
  }
  return s;
}

// Reads one TOML table: tracks which keys were consumed (the rest are errors), resolves the
// source of each value from `key_src` or the table-wide `src`, and records it under the
// ClusterSpec field path.
class TableReader {
public:
  TableReader(Context& ctx, const toml::table& table, std::string toml_path,
              std::string spec_path, bool src_required_for_all = false)
      : ctx_(ctx), table_(table), toml_path_(std::move(toml_path)),
        spec_path_(std::move(spec_path)) {
    if (const toml::node* s = table_.get("src")) {
      table_src_ = tag_value(*s, key("src"));
    } else if (src_required_for_all) {
      ctx_.fail(toml_path_, "missing required key `src` (the source tag of this entry)",
                &table_);
    }
    if (const toml::node* ks = table_.get("key_src")) {
      const toml::table* kt = ks->as_table();
      if (kt == nullptr)
        ctx_.fail(key("key_src"), std::string("must be a table of key = \"tag\", got ") +
                                      std::string(type_name(*ks)),
                  ks);
      for (auto&& [k, v] : *kt) {
        const std::string name(k.str());
        if (name == "src" || name == "key_src")
          ctx_.fail(key("key_src." + name), "cannot carry a source of its own", &v);
        key_src_[name] = {tag_value(v, key("key_src." + name)), &v};
      }
    }
  }

  std::string key(std::string_view k) const {
    return toml_path_.empty() ? std::string(k) : toml_path_ + "." + std::string(k);
  }
  const std::string& toml_path() const { return toml_path_; }
  const toml::table& table() const { return table_; }

  const toml::node* find(std::string_view k) {
    const toml::node* n = table_.get(k);
    if (n != nullptr) consumed_.insert(std::string(k));
    return n;
  }
  const toml::node& require(std::string_view k) {
    const toml::node* n = find(k);
    if (n == nullptr) ctx_.fail(key(k), "missing required key", &table_);
    return *n;
  }

  // A value with a unit in its name: exactly one spelling of the template may be present.
  double quantity(std::string_view tmpl, std::span<const UnitChoice> units,
                  const std::string& spec_field, Range range) {
    std::vector<std::pair<std::string, double>> present;
    std::vector<std::string> spellings;
    for (const UnitChoice& u : units) {
      std::string k(tmpl);
      k.replace(k.find("{}"), 2, u.token);
      spellings.push_back(k);
      if (table_.get(k) != nullptr) present.emplace_back(k, u.to_si);
    }
    if (present.empty())
      ctx_.fail(key(spellings.front()),
                "missing required key (any one of: " + join(spellings, ", ") + ")", &table_);
    // Blame the later spelling: the earlier one is what the author most likely meant to keep.
    std::stable_sort(present.begin(), present.end(), [&](const auto& a, const auto& b) {
      return table_.get(a.first)->source().begin.line < table_.get(b.first)->source().begin.line;
    });
    if (present.size() > 1)
      ctx_.fail(key(present[1].first),
                "given twice, also as `" + present[0].first + "`; keep one", table_.get(present[1].first));
    const auto& [k, scale] = present.front();
    return number(k, spec_field, range, scale);
  }

  // A plain number (ratio, or a value whose key already says its SI unit).
  double number(std::string_view k, const std::string& spec_field, Range range,
                double scale = 1.0) {
    const toml::node& n = require(k);
    if (!n.is_integer() && !n.is_floating_point())
      ctx_.fail(key(k), "must be a number, got " + std::string(type_name(n)), &n);
    const double v = n.value<double>().value_or(0.0);
    check_range(key(k), v, range, &n);
    const std::string tag = record(k, spec_field);
    if (auto b = ctx_.fitted_bounds.find(tag); b != ctx_.fitted_bounds.end() &&
                                               (v < b->second.first || v > b->second.second))
      ctx_.fail(key(k), "fitted value " + fmt_double(v) + " is outside its source's bounds [" +
                            fmt_double(b->second.first) + ", " + fmt_double(b->second.second) + "] (sources." +
                            tag + ".bounds)",
                &n);
    return v * scale;
  }

  // A quantity a profile may leave out (no spelling of the template present): the caller's
  // default stands and needs no source.
  double optional_quantity(std::string_view tmpl, std::span<const UnitChoice> units, const std::string& spec_field,
                           Range range, double dflt) {
    for (const UnitChoice& u : units) {
      std::string k(tmpl);
      k.replace(k.find("{}"), 2, u.token);
      if (table_.get(k) != nullptr) return quantity(tmpl, units, spec_field, range);
    }
    return dflt;
  }

  // A number a profile may leave out; absent, the caller's default stands and needs no source.
  double optional_number(std::string_view k, const std::string& spec_field, Range range, double dflt) {
    return table_.get(k) == nullptr ? dflt : number(k, spec_field, range);
  }

  int integer(std::string_view k, const std::string& spec_field, std::int64_t min_value) {
    const toml::node& n = require(k);
    if (!n.is_integer())
      ctx_.fail(key(k), "must be an integer, got " + std::string(type_name(n)), &n);
    const std::int64_t v = n.as_integer()->get();
    if (v < min_value || v > 1'000'000'000)
      ctx_.fail(key(k), "must be an integer >= " + std::to_string(min_value) + ", got " +
                            std::to_string(v),
                &n);
    record(k, spec_field);
    return static_cast<int>(v);
  }

  bool flag(std::string_view k, const std::string& spec_field) {
    const toml::node& n = require(k);
    if (!n.is_boolean())
      ctx_.fail(key(k), "must be true or false, got " + std::string(type_name(n)), &n);
    record(k, spec_field);
    return n.as_boolean()->get();
  }

  // Strings are descriptive or closed vocabularies; `spec_field` empty = no source needed
  // (names and prose), otherwise the choice is a fact and needs a source like a number.
  std::string text(std::string_view k, const std::string& spec_field,
                   const std::vector<std::string>& allowed = {}) {
    const toml::node& n = require(k);
    if (!n.is_string())
      ctx_.fail(key(k), "must be a string, got " + std::string(type_name(n)), &n);
    std::string v = n.as_string()->get();
    if (v.empty()) ctx_.fail(key(k), "must not be empty", &n);
    if (!allowed.empty() && std::find(allowed.begin(), allowed.end(), v) == allowed.end())
      ctx_.fail(key(k), "unknown value \"" + v + "\" (expected one of: " + join(allowed, ", ") +
                            ")",
                &n);
    if (!spec_field.empty()) record(k, spec_field);
    return v;
  }

  std::vector<double> numbers(std::string_view k, Range range, double scale = 1.0) {
    const toml::node& n = require(k);
    const toml::array* a = n.as_array();
    if (a == nullptr)
      ctx_.fail(key(k), "must be an array of numbers, got " + std::string(type_name(n)), &n);
    std::vector<double> out;
    for (std::size_t i = 0; i < a->size(); ++i) {
      const toml::node& e = (*a)[i];
      const std::string ek = key(k) + "[" + std::to_string(i) + "]";
      if (!e.is_integer() && !e.is_floating_point())
        ctx_.fail(ek, "must be a number, got " + std::string(type_name(e)), &e);
      const double v = e.value<double>().value_or(0.0);
      check_range(ek, v, range, &e);
      out.push_back(v * scale);
    }
    return out;
  }

  // Records the source of a value that is not a scalar key (a whole curve, say).
  std::string record(std::string_view k, const std::string& spec_field) {
    std::string tag;
    if (auto it = key_src_.find(std::string(k)); it != key_src_.end()) {
      tag = it->second.first;
    } else if (table_src_) {
      tag = *table_src_;
    } else {
      ctx_.fail(key(k),
                "no source: give the table a `src` tag or add `" + std::string(k) +
                    "` to its `key_src`",
                table_.get(k));
    }
    ctx_.used_tags.insert(tag);
    ctx_.spec->sources[spec_path_.empty() ? spec_field : spec_path_ + "." + spec_field] = tag;
    sourced_.insert(std::string(k));
    return tag;
  }

  // Unknown keys and key_src entries that point at nothing are errors: a typo must not
  // silently fall back to a default.
  void finish() {
    for (auto&& [k, v] : table_) {
      const std::string name(k.str());
      if (name == "src" || name == "key_src" || consumed_.count(name) > 0) continue;
      ctx_.fail(key(name), "unknown key", &v);
    }
    for (const auto& [name, entry] : key_src_) {
      if (sourced_.count(name) == 0)
        ctx_.fail(key("key_src." + name),
                  "names a key that is not a sourced value of this table", entry.second);
    }
    if (table_src_ && sourced_.size() == 0)
      ctx_.fail(key("src"), "table has no values that need a source", table_.get("src"));
  }

private:
  std::string tag_value(const toml::node& n, const std::string& k) {
    if (!n.is_string())
      ctx_.fail(k, "must be a source tag (string), got " + std::string(type_name(n)), &n);
    std::string tag = n.as_string()->get();
    if (ctx_.tag_kinds.count(tag) == 0)
      ctx_.fail(k, "unknown source tag \"" + tag + "\" (not declared in [sources])", &n);
    return tag;
  }

  void check_range(const std::string& k, double v, Range range, const toml::node* n) const {
    if (!std::isfinite(v)) ctx_.fail(k, "must be finite", n);
    switch (range) {
      case Range::positive:
        if (!(v > 0)) ctx_.fail(k, "must be > 0, got " + fmt_double(v), n);
        break;
      case Range::efficiency:
        if (!(v > 0 && v <= 1))
          ctx_.fail(k, "efficiency must be in (0, 1], got " + fmt_double(v), n);
        break;
      case Range::fraction:
        if (!(v >= 0 && v < 1)) ctx_.fail(k, "must be in [0, 1), got " + fmt_double(v), n);
        break;
      case Range::at_least_one:
        if (!(v >= 1)) ctx_.fail(k, "must be >= 1 (1 = non-blocking), got " + fmt_double(v), n);
        break;
      case Range::non_negative:
        if (!(v >= 0)) ctx_.fail(k, "must be >= 0, got " + fmt_double(v), n);
        break;

    }
  }

  Context& ctx_;
  const toml::table& table_;
  std::string toml_path_;
  std::string spec_path_;
  std::optional<std::string> table_src_;
  std::map<std::string, std::pair<std::string, const toml::node*>> key_src_;
  std::set<std::string> consumed_;
  std::set<std::string> sourced_;
};

const toml::table& require_table(Context& ctx, TableReader& parent, std::string_view k) {
  const toml::node& n = parent.require(k);
  const toml::table* t = n.as_table();
  if (t == nullptr)
    ctx.fail(parent.key(k), "must be a table, got " + std::string(type_name(n)), &n);
  return *t;
}

void read_sources(Context& ctx, const toml::table& root) {
  const toml::node* n = root.get("sources");
  if (n == nullptr) ctx.fail("sources", "missing required table [sources]", &root);
  const toml::table* t = n->as_table();
  if (t == nullptr) ctx.fail("sources", "must be a table, got " + std::string(type_name(*n)), n);
  // fitted: set by a fit to whole runs (not a measurement of the quantity itself); it must give the
  // bounds a fit may move it within and how it is fitted (docs/validation.md "Fitted parameters").
  static const std::vector<std::string> kinds = {"spec", "measured", "model", "derived",
                                                 "estimate", "calibrated", "fitted"};
  for (auto&& [k, v] : *t) {
    const std::string tag(k.str());
    const std::string key = "sources." + tag;
    const toml::table* e = v.as_table();
    if (e == nullptr)
      ctx.fail(key, "must be a table { kind = ..., ref = ... }, got " + std::string(type_name(v)),
               &v);
    std::string kind, ref, fit;
    std::optional<std::pair<double, double>> bounds;
    for (auto&& [ek, ev] : *e) {
      const std::string f(ek.str());
      if (f == "bounds") {
        const toml::array* a = ev.as_array();
        if (a == nullptr || a->size() != 2 || !(*a)[0].is_number() || !(*a)[1].is_number())
          ctx.fail(key + ".bounds", "must be [low, high], two numbers", &ev);
        const double lo = (*a)[0].value<double>().value_or(0), hi = (*a)[1].value<double>().value_or(0);
        if (!std::isfinite(lo) || !std::isfinite(hi) || !(lo <= hi))
          ctx.fail(key + ".bounds", "must be finite with low <= high", &ev);
        bounds = std::pair{lo, hi};
        continue;
      }
      if (f != "kind" && f != "ref" && f != "fit") ctx.fail(key + "." + f, "unknown key", &ev);
      if (!ev.is_string())
        ctx.fail(key + "." + f, "must be a string, got " + std::string(type_name(ev)), &ev);
      (f == "kind" ? kind : f == "ref" ? ref : fit) = ev.as_string()->get();
    }
    if (kind == "fitted") {
      if (!bounds) ctx.fail(key + ".bounds", "a fitted source must give the bounds its fit searches", e);
      if (fit.empty()) ctx.fail(key + ".fit", "a fitted source must say how it is fitted (the command, or the scan)", e);
      ctx.fitted_bounds[tag] = *bounds;
      ctx.spec->fitted_bounds[tag] = *bounds;
    } else if (bounds || !fit.empty()) {
      ctx.fail(key + (bounds ? ".bounds" : ".fit"), "only a fitted source has bounds and a fit", e);
    }
    if (kind.empty()) ctx.fail(key + ".kind", "missing required key", e);
    if (ref.empty()) ctx.fail(key + ".ref", "missing required key (must say where the value comes from)", e);
    if (std::find(kinds.begin(), kinds.end(), kind) == kinds.end())
      ctx.fail(key + ".kind", "unknown kind \"" + kind + "\" (expected one of: " +
                                  join(kinds, ", ") + ")",
               e->get("kind"));
    ctx.tag_kinds[tag] = kind;
    ctx.spec->source_refs[tag] = kind + ": " + ref;
  }
}

// Dense tensor-core peaks, TFLOP/s, one key per dtype.
void read_peak_tflops(Context& ctx, TableReader& gpu, GpuSpec& g) {
  const toml::table& pt = require_table(ctx, gpu, "peak_tflops");
  TableReader p(ctx, pt, "gpu.peak_tflops", "gpu.peak_flops_per_s");
  for (auto&& [k, v] : pt) {
    const std::string name(k.str());
    if (name == "src" || name == "key_src") continue;
    auto d = parse_dtype(name);
    if (!d || to_string(*d) != name)
      ctx.fail(p.key(name), "unknown key (expected a dtype: fp32, tf32, bf16, fp16, fp8, fp8_block, mxfp8, fp4)",
               &v);
    g.peak_flops_per_s[*d] = p.number(name, name, Range::positive, kTflops);
  }
  if (g.peak_flops_per_s.count(Dtype::bf16) == 0)
    ctx.fail("gpu.peak_tflops.bf16", "missing required key (every profile needs a bf16 peak)",
             &pt);
  p.finish();
}

// The array of tables gpu.KEY, when the profile has one.
const toml::array* curve_tables(Context& ctx, TableReader& gpu, std::string_view key) {
  const toml::node* n = gpu.find(key);
  if (n == nullptr) return nullptr;
  const toml::array* a = n->as_array();
  if (a == nullptr || !a->is_array_of_tables())
    ctx.fail("gpu." + std::string(key), "must be an array of tables ([[gpu." + std::string(key) + "]])", n);
  return a;
}

GemmCurve read_gemm_curve(Context& ctx, const toml::table& t, std::size_t i) {
  const std::string tp = "gpu.gemm_curve[" + std::to_string(i) + "]";
  const std::string sp = "gpu.gemm_curves[" + std::to_string(i) + "]";
  TableReader c(ctx, t, tp, "", true);
  GemmCurve curve;
  const std::string dt = c.text("dtype", "");
  auto d = parse_dtype(dt);
  if (!d) ctx.fail(c.key("dtype"), "unknown dtype \"" + dt + "\"", c.table().get("dtype"));
  curve.dtype = *d;
  const auto dims = c.numbers("cube_dim", Range::positive);
  const auto effs = c.numbers("efficiency", Range::efficiency);
  if (dims.size() < 2) ctx.fail(c.key("cube_dim"), "a curve needs at least 2 points", c.table().get("cube_dim"));
  if (effs.size() != dims.size())
    ctx.fail(c.key("efficiency"), "has " + std::to_string(effs.size()) + " values but cube_dim has " +
                                      std::to_string(dims.size()),
             c.table().get("efficiency"));
  for (std::size_t j = 0; j < dims.size(); ++j) {
    if (j > 0 && dims[j] <= dims[j - 1])
      ctx.fail(c.key("cube_dim"), "must be strictly increasing", c.table().get("cube_dim"));
    curve.points.push_back({dims[j], effs[j]});
  }
  c.record("src", sp);  // the whole curve has one source
  curve.source = ctx.spec->sources[sp];
  c.finish();
  return curve;
}

// What identifies an attention curve: kernel, dtype, pass, library version, head size, masking.
void read_attention_key(Context& ctx, TableReader& c, AttentionCurve& curve) {
  // Free text: calibration records what it measured; fa2, fa3, fa4 and cudnn (or the
  // flash-attn-N spellings) are the families the runtimes' attention APIs select.
  curve.kernel = c.text("kernel", "");
  if (c.table().get("dtype") != nullptr) {
    const std::string dt = c.text("dtype", "", {"bf16", "fp16", "fp8", "mxfp8"});
    curve.dtype = *parse_dtype(dt);
  }
  curve.pass = c.text("pass", "", {"fwd+bwd", "fwd", "bwd"});
  if (c.table().get("version") != nullptr) {
    const std::string v = c.text("version", "");
    const std::optional<int> parsed = parse_library_version(v);
    if (!parsed)
      ctx.fail(c.key("version"), "must be the library release measured, MAJOR.MINOR like \"9.22\", got \"" + v + "\"",
               c.table().get("version"));
    curve.version = *parsed;
  }
  const toml::node& hd = c.require("head_dim");
  if (!hd.is_integer() || hd.as_integer()->get() < 1 || hd.as_integer()->get() > 4096)
    ctx.fail(c.key("head_dim"), "must be a positive integer", &hd);
  curve.head_dim = static_cast<int>(hd.as_integer()->get());
  const toml::node& cz = c.require("causal");
  if (!cz.is_boolean()) ctx.fail(c.key("causal"), "must be true or false, got " + std::string(type_name(cz)), &cz);
  curve.causal = cz.as_boolean()->get();
}

AttentionCurve read_attention_curve(Context& ctx, const toml::table& t, std::size_t i) {
  const std::string tp = "gpu.attention_curve[" + std::to_string(i) + "]";
  const std::string sp = "gpu.attention_curves[" + std::to_string(i) + "]";
  TableReader c(ctx, t, tp, "", true);
  AttentionCurve curve;
  read_attention_key(ctx, c, curve);
  curve.seq_len = c.numbers("seq_len", Range::positive);
  curve.flops_per_s = c.numbers("tflops", Range::positive, kTflops);
  if (curve.seq_len.size() < 2)
    ctx.fail(c.key("seq_len"), "a curve needs at least 2 points", c.table().get("seq_len"));
  if (curve.flops_per_s.size() != curve.seq_len.size())
    ctx.fail(c.key("tflops"), "has " + std::to_string(curve.flops_per_s.size()) +
                                  " values but seq_len has " + std::to_string(curve.seq_len.size()),
             c.table().get("tflops"));
  for (std::size_t j = 1; j < curve.seq_len.size(); ++j)
    if (curve.seq_len[j] <= curve.seq_len[j - 1])
      ctx.fail(c.key("seq_len"), "must be strictly increasing", c.table().get("seq_len"));
  c.record("src", sp);
  curve.source = ctx.spec->sources[sp];
  c.finish();
  return curve;
}

// The scalars of [gpu]: identity, memory, HBM, clocks, launch and interference.
void read_gpu_scalars(Context& ctx, const toml::table& t, TableReader& r, GpuSpec& g) {
  g.model = r.text("model", "model");
  g.arch = r.text("arch", "arch");
  if (g.arch.size() < 3 || g.arch.rfind("sm", 0) != 0 ||
      !std::all_of(g.arch.begin() + 2, g.arch.end(), [](char c) { return c >= '0' && c <= '9'; }))
    ctx.fail("gpu.arch", "must look like sm80 / sm90 / sm100, got \"" + g.arch + "\"",
             t.get("arch"));
  g.sm_count = r.integer("sm_count", "sm_count", 1);
  g.hbm_bytes = r.quantity("hbm_{}", kByteUnits, "hbm_bytes", Range::positive);
  g.usable_memory_bytes = r.quantity("usable_memory_{}", kByteUnits, "usable_memory_bytes", Range::positive);
  if (g.usable_memory_bytes > g.hbm_bytes * 1.1)
    ctx.fail("gpu.usable_memory", "is more than 10 % above the marketed hbm size; CUDA never exposes more than is fitted",
             t.get("usable_memory_mib"));
  g.hbm_bandwidth_bytes_per_s =
      r.quantity("hbm_bandwidth_{}", kBandwidthUnits, "hbm_bandwidth_bytes_per_s", Range::positive);
  g.hbm_efficiency = r.number("hbm_efficiency", "hbm_efficiency", Range::efficiency);
  g.elementwise_efficiency =
      r.optional_number("elementwise_efficiency", "elementwise_efficiency", Range::efficiency, g.hbm_efficiency);
  g.sustained_clock_fraction =
      r.optional_number("sustained_clock_fraction", "sustained_clock_fraction", Range::efficiency, 1.0);
  g.attention_sustained_clock_fraction = r.optional_number(
      "attention_sustained_clock_fraction", "attention_sustained_clock_fraction", Range::efficiency, 0.0);
  g.low_precision_sustained_clock_fraction =
      r.optional_number("low_precision_sustained_clock_fraction", "low_precision_sustained_clock_fraction",
                        Range::efficiency, 0.0);
  g.gemm_tile_overhead_k =
      r.optional_number("gemm_tile_overhead_k", "gemm_tile_overhead_k", Range::non_negative, 128.0);
  // A tile's fixed cost is a few K blocks (two on Hopper); thousands would mean a unit mix-up.
  if (g.gemm_tile_overhead_k > 4096)
    ctx.fail("gpu.gemm_tile_overhead_k",
             "is in units of K (128 = two 64-deep K blocks), got " + fmt_double(g.gemm_tile_overhead_k) +
                 "; must be <= 4096",
             t.get("gemm_tile_overhead_k"));
  g.gemm_stream_k_min_saving = r.optional_number("gemm_stream_k_min_saving", "gemm_stream_k_min_saving",
                                                 Range::fraction, g.gemm_stream_k_min_saving);
  g.kernel_launch_seconds =
      r.quantity("kernel_launch_{}", kTimeUnits, "kernel_launch_seconds", Range::positive);
  g.comm_interference_factor =
      r.number("comm_interference", "comm_interference_factor", Range::fraction);
}

void read_gpu(Context& ctx, const toml::table& t) {
  GpuSpec& g = ctx.spec->gpu;
  TableReader r(ctx, t, "gpu", "gpu");
  read_gpu_scalars(ctx, t, r, g);
  read_peak_tflops(ctx, r, g);
  if (const toml::array* a = curve_tables(ctx, r, "gemm_curve"))
    for (std::size_t i = 0; i < a->size(); ++i) g.gemm_curves.push_back(read_gemm_curve(ctx, *(*a)[i].as_table(), i));
  if (const toml::array* a = curve_tables(ctx, r, "attention_curve"))
    for (std::size_t i = 0; i < a->size(); ++i)
      g.attention_curves.push_back(read_attention_curve(ctx, *(*a)[i].as_table(), i));
  r.finish();
}

void read_node(Context& ctx, const toml::table& t) {
  NodeSpec& n = ctx.spec->node;
  TableReader r(ctx, t, "node", "node");
  n.gpus_per_node = r.integer("gpus_per_node", "gpus_per_node", 1);
  n.scaleup_kind = r.text("scaleup_kind", "scaleup_kind", {"nvswitch", "nvlink-mesh", "pcie"});
  n.nvlink_domain_gpus = r.integer("nvlink_domain_gpus", "nvlink_domain_gpus", 1);
  if (n.nvlink_domain_gpus < n.gpus_per_node || n.nvlink_domain_gpus % n.gpus_per_node != 0)
    ctx.fail("node.nvlink_domain_gpus",
             "must be a whole multiple of gpus_per_node (" + std::to_string(n.gpus_per_node) +
                 "), got " + std::to_string(n.nvlink_domain_gpus),
             t.get("nvlink_domain_gpus"));
  n.nvlink_bandwidth_bytes_per_s = r.quantity("nvlink_bandwidth_{}", kBandwidthUnits,
                                              "nvlink_bandwidth_bytes_per_s", Range::positive);
  n.nvlink_efficiency = r.number("nvlink_efficiency", "nvlink_efficiency", Range::efficiency);
  n.nvlink_latency_seconds =
      r.quantity("nvlink_latency_{}", kTimeUnits, "nvlink_latency_seconds", Range::positive);
  n.nvls = r.flag("nvls", "nvls");
  if (n.nvls && n.scaleup_kind != "nvswitch")
    ctx.fail("node.nvls", "NVLS needs NVSwitch, but scaleup_kind is \"" + n.scaleup_kind + "\"",
             t.get("nvls"));
  n.host_link_kind = r.text("host_link_kind", "host_link_kind",
                            {"pcie4x16", "pcie5x16", "pcie6x16", "nvlink-c2c"});
  n.host_h2d_bytes_per_s =
      r.quantity("host_h2d_{}", kBandwidthUnits, "host_h2d_bytes_per_s", Range::positive);
  n.host_d2h_bytes_per_s =
      r.quantity("host_d2h_{}", kBandwidthUnits, "host_d2h_bytes_per_s", Range::positive);
  n.host_memory_bytes = r.quantity("host_memory_{}", kByteUnits, "host_memory_bytes", Range::positive);
  n.nics_per_node = r.integer("nics_per_node", "nics_per_node", 1);
  n.nic_bandwidth_bytes_per_s =
      r.quantity("nic_{}", kBandwidthUnits, "nic_bandwidth_bytes_per_s", Range::positive);
  n.nic_efficiency = r.number("nic_efficiency", "nic_efficiency", Range::efficiency);
  r.finish();
}

void read_fabric(Context& ctx, const toml::table& t) {
  FabricSpec& f = ctx.spec->fabric;
  TableReader r(ctx, t, "fabric", "fabric");
  f.kind = r.text("kind", "kind", {"fat_tree", "nvl_domain"});
  f.transport = r.text("transport", "transport", {"infiniband", "roce", "efa", "omnipath"});
  f.rail_optimized = r.flag("rail_optimized", "rail_optimized");
  f.nodes_per_leaf = r.integer("nodes_per_leaf", "nodes_per_leaf", 1);
  f.leaf_oversubscription =
      r.number("leaf_oversubscription", "leaf_oversubscription", Range::at_least_one);
  f.spine_oversubscription =
      r.number("spine_oversubscription", "spine_oversubscription", Range::at_least_one);
  f.nic_latency_seconds =
      r.quantity("nic_latency_{}", kTimeUnits, "nic_latency_seconds", Range::positive);
  f.switch_hop_latency_seconds = r.quantity("switch_hop_latency_{}", kTimeUnits,
                                            "switch_hop_latency_seconds", Range::positive);
  f.transport_latency_seconds = r.optional_quantity("transport_latency_{}", kTimeUnits, "transport_latency_seconds",
                                                    Range::non_negative, 0.0);
  r.finish();
}

void read_framework(Context& ctx, const toml::table& t) {
  FrameworkOverheads& f = ctx.spec->framework;
  TableReader r(ctx, t, "framework", "framework");
  f.cuda_context_bytes =
      r.quantity("cuda_context_{}", kByteUnits, "cuda_context_bytes", Range::positive);
  f.nccl_buffer_bytes_per_group = r.quantity("nccl_buffer_{}_per_group", kByteUnits,
                                             "nccl_buffer_bytes_per_group", Range::positive);
  f.allocator_reserve_fraction =
      r.number("allocator_reserve_fraction", "allocator_reserve_fraction", Range::fraction);
  f.moe_router_load_cv = r.optional_number("moe_router_load_cv", "moe_router_load_cv", Range::non_negative, 0.0);
  r.finish();
}

// Eager per-op host cost when a profile has no [host] table (profiles written before it existed):
// an x86 server's, docs/host.md.
constexpr double kDefaultX86OpSeconds = 8e-6;

void read_host(Context& ctx, const toml::table* t) {
  HostSpec& h = ctx.spec->host;
  if (t == nullptr) {
    h.cpu = "x86";
    h.op_seconds = kDefaultX86OpSeconds;
    ctx.spec->sources["host.op_seconds"] = "default";
    return;
  }
  TableReader r(ctx, *t, "host", "host");
  h.cpu = r.text("cpu", "cpu", {"x86", "grace"});
  h.op_seconds = r.quantity("op_dispatch_{}", kTimeUnits, "op_seconds", Range::positive);
  h.megatron_deepspeed_op_factor = r.optional_number("megatron_deepspeed_op_factor", "megatron_deepspeed_op_factor",
                                                     Range::at_least_one, 1.0);
  r.finish();
}

// Rates are capped at one interruption per unit-day: beyond that a unit is broken, not unreliable,
// and a typo (a count where a rate belongs) should not pass.
void read_reliability(Context& ctx, const toml::table& t) {
  ReliabilitySpec& x = ctx.spec->reliability;
  TableReader r(ctx, t, "reliability", "reliability");
  auto rate = [&](std::string_view k) {
    const double v = r.number(k, std::string(k), Range::non_negative);
    if (v > 365.25) ctx.fail(r.key(k), "must be <= 365.25 per unit-year (one a day), got " + fmt_double(v), t.get(k));
    return v;
  };
  x.gpu_failures_per_gpu_year = rate("gpu_failures_per_gpu_year");
  x.hbm_failures_per_gpu_year = rate("hbm_failures_per_gpu_year");
  x.nic_failures_per_nic_year = rate("nic_failures_per_nic_year");
  x.switch_failures_per_gpu_year = rate("switch_failures_per_gpu_year");
  x.host_failures_per_node_year = rate("host_failures_per_node_year");
  x.software_failures_per_gpu_year = rate("software_failures_per_gpu_year");
  x.planned_interruptions_per_gpu_year = rate("planned_interruptions_per_gpu_year");
  x.storage_write_bytes_per_s =
      r.quantity("storage_write_{}", kBandwidthUnits, "storage_write_bytes_per_s", Range::positive);
  x.storage_read_bytes_per_s =
      r.quantity("storage_read_{}", kBandwidthUnits, "storage_read_bytes_per_s", Range::positive);
  x.relaunch_seconds = r.quantity("relaunch_{}", kTimeUnits, "relaunch_seconds", Range::positive);
  x.warmup_seconds = r.quantity("warmup_{}", kTimeUnits, "warmup_seconds", Range::positive);
  x.present = true;
  r.finish();
}

toml::table parse_toml(const std::string& file) {
  const std::string text = read_input_file(file, InputKind::hardware_profile);
  try {
    return toml::parse(text, file);
  } catch (const toml::parse_error& e) {
    const auto& b = e.source().begin;
    throw InputError(file, "",
                     "TOML syntax error at line " + std::to_string(b.line) + ", column " +
                         std::to_string(b.column) + ": " + importer::one_line(e.description()));
  }
}

// The optional top-level `nccl_version`: a version with a table in hardware_profiles/nccl/, or a
// .toml path (relative to the profile's folder). A software choice, not a measured fact, so it
// needs no source tag. Absent: the shipped default table.
void read_nccl_version(ClusterSpec& spec, TableReader& r, const std::string& file) {
  spec.nccl_version = std::string(kDefaultNcclVersion);
  if (r.find("nccl_version") == nullptr) return;
  spec.nccl_version = r.text("nccl_version", "");
  std::string table = spec.nccl_version;
  if (table.ends_with(".toml") && fs::path(table).is_relative())
    table = (fs::path(file).parent_path() / table).string();
  spec.nccl = shared_nccl_table(table, file, "nccl_version");
}

}  // namespace

void override_nccl_version(ClusterSpec& c, const std::string& version_or_path) {
  if (version_or_path.empty()) return;
  c.nccl = shared_nccl_table(version_or_path, "", "--nccl-version");
  c.nccl_version = version_or_path;
}

namespace {

fs::path profile_dir();
bool is_profile_name(const std::string& s);

// Fills what `over` leaves out from `under`: tables merge key by key, and anything `over` gives
// (a number, a string, an array, an array of tables) stands as it is. `over`'s nodes keep their
// lines for error messages; the copies from `under` come from a profile that loads on its own.
void underlay(toml::table& over, const toml::table& under) {
  for (auto&& [k, v] : under) {
    toml::node* o = over.get(k.str());
    if (o == nullptr) {
      over.insert(k, v);
    } else if (o->is_table() && v.is_table()) {
      underlay(*o->as_table(), *v.as_table());
    }
  }
}

// A profile may name a shipped profile as its `base`: it then holds what differs from it (AWS's
// network under the B200 node), and the base gives the rest. One level: a base names no base.
// Returns the tags the file itself declares in [sources] (a base's tags that the file's values
// replace are no longer used, and that is no error).
std::set<std::string> apply_base(toml::table& root, const std::string& file) {
  std::set<std::string> own_tags;
  if (const toml::table* src = root.get_as<toml::table>("sources"))
    for (auto&& [k, v] : *src) own_tags.insert(std::string(k.str()));
  const toml::node* b = root.get("base");
  if (b == nullptr) return own_tags;
  if (!b->is_string() || !is_profile_name(b->as_string()->get()))
    throw InputError(file, "base", "must name a shipped hardware profile" + line_suffix(b));
  const std::string name = b->as_string()->get();
  const std::string base_file = (profile_dir() / (name + ".toml")).string();
  std::error_code ec;
  if (!fs::is_regular_file(base_file, ec))
    throw InputError(file, "base", "\"" + name + "\" is not a shipped hardware profile" + line_suffix(b));
  const toml::table under = parse_toml(base_file);
  if (under.get("base") != nullptr)
    throw InputError(file, "base", "\"" + name + "\" names a base of its own: one level only" + line_suffix(b));
  underlay(root, under);
  return own_tags;
}

ClusterSpec read_profile(const std::string& file, const std::string& expected_name) {
  toml::table root = parse_toml(file);
  const bool derived = root.get("base") != nullptr;
  const std::set<std::string> own_tags = apply_base(root, file);

  ClusterSpec spec;
  spec.source_file = file;
  Context ctx{file, &spec, {}, {}, {}};
  read_sources(ctx, root);

  TableReader r(ctx, root, "", "");
  const toml::node& sv = r.require("schema_version");
  if (!sv.is_integer() || sv.as_integer()->get() != kSchemaVersion)
    ctx.fail("schema_version", "must be " + std::to_string(kSchemaVersion) + " (this loader's schema)", &sv);
  spec.name = r.text("name", "");
  if (!expected_name.empty() && spec.name != expected_name)
    ctx.fail("name", "is \"" + spec.name + "\" but the file is " + expected_name + ".toml",
             root.get("name"));
  spec.description = r.text("description", "");
  if (derived) spec.base_profile = r.text("base", "");
  read_nccl_version(spec, r, file);
  r.find("sources");  // read above, before anything can reference a tag
  read_gpu(ctx, require_table(ctx, r, "gpu"));
  read_node(ctx, require_table(ctx, r, "node"));
  read_fabric(ctx, require_table(ctx, r, "fabric"));
  read_framework(ctx, require_table(ctx, r, "framework"));
  if (const toml::node* h = r.find("host")) {
    if (!h->is_table()) ctx.fail("host", "must be a table, got " + std::string(type_name(*h)), h);
    read_host(ctx, h->as_table());
  } else {
    read_host(ctx, nullptr);
  }
  if (const toml::node* rel = r.find("reliability")) {
    if (!rel->is_table())
      ctx.fail("reliability", "must be a table, got " + std::string(type_name(*rel)), rel);
    read_reliability(ctx, *rel->as_table());
  }
  // Reserved for NCCL algorithm constants and calibrated collective curves (a later schema
  // revision); accepted so profiles can carry them, but nothing reads them yet.
  if (const toml::node* c = r.find("collectives")) {
    if (!c->is_table())
      ctx.fail("collectives", "must be a table, got " + std::string(type_name(*c)), c);
    spec.warnings.push_back(spec.name + ": [collectives] is reserved and not interpreted yet");
  }
  r.finish();

  for (const auto& [tag, kind] : ctx.tag_kinds) {
    if (ctx.used_tags.count(tag) == 0 && own_tags.count(tag) != 0)
      ctx.fail("sources." + tag, "declared but no value uses it", root.get("sources"));
  }
  return spec;
}

fs::path profile_dir() { return data_root() / std::string(kProfileDir); }

bool is_profile_name(const std::string& s) {
  if (s.empty() || s.front() == '.' || s.front() == '-') return false;
  return std::all_of(s.begin(), s.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '_' || c == '.';
  });
}

struct Alias {
  std::string profile;
  std::string reason;
};

// hardware_profiles/aliases.toml: [aliases] NAME = { profile = "...", reason = "..." }.
std::optional<Alias> find_alias(const std::string& name) {
  const std::string file = (profile_dir() / (std::string(kAliasFile) + ".toml")).string();
  std::error_code ec;
  if (!fs::is_regular_file(file, ec)) return std::nullopt;
  const toml::table root = parse_toml(file);
  for (auto&& [k, v] : root) {
    const std::string key(k.str());
    if (key == "schema_version") {
      if (!v.is_integer() || v.as_integer()->get() != kSchemaVersion)
        throw InputError(file, key, "must be " + std::to_string(kSchemaVersion));
    } else if (key != "aliases") {
      throw InputError(file, key, "unknown key" + line_suffix(&v));
    }
  }
  const toml::table* aliases = root.get_as<toml::table>("aliases");
  if (aliases == nullptr) throw InputError(file, "aliases", "missing required table");
  const toml::node* n = aliases->get(name);
  if (n == nullptr) return std::nullopt;
  const std::string key = "aliases." + name;
  const toml::table* t = n->as_table();
  if (t == nullptr) throw InputError(file, key, "must be a table { profile = ..., reason = ... }");
  Alias a;
  for (auto&& [ek, ev] : *t) {
    const std::string f(ek.str());
    if (f != "profile" && f != "reason") throw InputError(file, key + "." + f, "unknown key" + line_suffix(&ev));
    if (!ev.is_string() || ev.as_string()->get().empty())
      throw InputError(file, key + "." + f, "must be a non-empty string" + line_suffix(&ev));
    (f == "profile" ? a.profile : a.reason) = ev.as_string()->get();
  }
  if (a.profile.empty()) throw InputError(file, key + ".profile", "missing required key");
  if (a.reason.empty()) throw InputError(file, key + ".reason", "missing required key");
  if (!is_profile_name(a.profile) ||
      !fs::is_regular_file(profile_dir() / (a.profile + ".toml"), ec))
    throw InputError(file, key + ".profile", "\"" + a.profile + "\" is not a shipped profile");
  return a;
}

}  // namespace

ClusterSpec load_cluster(const std::string& name_or_path) {
  const bool is_path = name_or_path.find('/') != std::string::npos ||
                       name_or_path.find('\\') != std::string::npos ||
                       (name_or_path.size() > 5 &&
                        name_or_path.compare(name_or_path.size() - 5, 5, ".toml") == 0);
  if (is_path) return read_profile(name_or_path, "");

  const std::string file = (profile_dir() / (name_or_path + ".toml")).string();
  if (!is_profile_name(name_or_path) || name_or_path == kAliasFile)
    throw InputError(file, "", "\"" + name_or_path + "\" is not a hardware profile name");
  std::error_code ec;
  if (fs::is_regular_file(file, ec)) return read_profile(file, name_or_path);
  if (auto alias = find_alias(name_or_path)) {
    const std::string target = (profile_dir() / (alias->profile + ".toml")).string();
    ClusterSpec spec = read_profile(target, alias->profile);
    spec.warnings.insert(spec.warnings.begin(),
                         name_or_path + ": " + alias->reason + "; using " + alias->profile);
    return spec;
  }
  const std::vector<std::string> known = list_clusters();
  throw InputError(file, "", "no such hardware profile (known: " + join(known, ", ") + ")");
}

std::vector<std::string> list_clusters() {
  std::vector<std::string> names;
  std::error_code ec;
  for (fs::directory_iterator it(profile_dir(), ec), end; !ec && it != end; it.increment(ec)) {
    const fs::path& p = it->path();
    if (p.extension() != ".toml" || !it->is_regular_file(ec)) continue;
    const std::string stem = p.stem().string();
    if (stem != kAliasFile && is_profile_name(stem)) names.push_back(stem);
  }
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace meshplan

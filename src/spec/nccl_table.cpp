// Loader of NCCL tuning constants: hardware_profiles/nccl/nccl-VERSION.toml -> NcclTable (SI).
//
// Strict like the hardware-profile loader: every key must be known, every value must have the
// right type and range, every table must name a source declared in [sources] (table-wide `src`,
// per-key `key_src`), and every declared source must be used. Errors are
// InputError(file, dotted.key, reason).
#include "spec/nccl_table.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <span>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <utility>

#include <fmt/format.h>
#include <toml++/toml.h>

#include "spec/data_root.hpp"
#include "spec/error.hpp"
#include "spec/import_common.hpp"
#include "spec/input_file.hpp"

namespace meshplan {
namespace {

namespace fs = std::filesystem;

constexpr std::int64_t kSchemaVersion = 1;
constexpr double kUs = 1e-6;
constexpr double kGB = 1e9;

constexpr std::array<std::string_view, kNcclAlgoCount> kAlgoKeys = {
    "tree", "ring", "collnet_direct", "collnet_chain", "nvls", "nvlstree", "pat"};
constexpr std::array<std::string_view, kNcclLinkCount> kLinkKeys = {"nvlink", "pci", "net"};
constexpr std::array<std::string_view, kNcclProtoCount> kProtoKeys = {"ll", "ll128", "simple"};

std::string line_of(const toml::node* n) {
  if (n == nullptr || n->source().begin.line == 0) return {};
  return " (line " + std::to_string(n->source().begin.line) + ")";
}

struct Context {
  std::string file;
  NcclTable* out = nullptr;
  std::map<std::string, std::string> tags;  // tag -> kind
  std::set<std::string> used;

  [[noreturn]] void fail(const std::string& key, const std::string& reason,
                         const toml::node* at = nullptr) const {
    throw InputError(file, key, reason + line_of(at));
  }
};

// One TOML table: consumed keys are tracked so leftovers are errors; each value's source is the
// table's `src` unless `key_src` names another tag.
class Reader {
public:
  Reader(Context& ctx, const toml::table& t, std::string path) : ctx_(ctx), t_(t), path_(std::move(path)) {
    consumed_.insert("src");
    consumed_.insert("key_src");
    if (const toml::node* s = t_.get("src")) {
      if (!s->is_string()) ctx_.fail(key("src"), "must be a string naming a [sources] tag", s);
      src_ = check_tag(s->as_string()->get(), key("src"), s);
    }
    if (const toml::node* ks = t_.get("key_src")) {
      const toml::table* kt = ks->as_table();
      if (kt == nullptr) ctx_.fail(key("key_src"), "must be an inline table key = \"tag\"", ks);
      for (const auto& [k, v] : *kt) {
        const std::string name(k.str());
        if (!v.is_string()) ctx_.fail(key("key_src." + name), "must be a string naming a [sources] tag", &v);
        if (t_.get(name) == nullptr) ctx_.fail(key("key_src." + name), "names a key this table does not have", &v);
        key_src_[name] = check_tag(v.as_string()->get(), key("key_src." + name), &v);
      }
    }
  }

  std::string key(std::string_view k) const { return path_.empty() ? std::string(k) : path_ + "." + std::string(k); }

  const toml::node& node(std::string_view k) {
    const toml::node* n = t_.get(k);
    if (n == nullptr) ctx_.fail(key(k), "missing");
    consumed_.insert(std::string(k));
    record(k);
    return *n;
  }

  double number(std::string_view k, double lo, double hi, bool lo_inclusive = true) {
    const toml::node& n = node(k);
    const double v = to_number(n, key(k), lo, hi, lo_inclusive);
    const auto b = ctx_.out->fitted_bounds.find(ctx_.out->sources.at(key(k)));  // node() recorded its tag
    if (b != ctx_.out->fitted_bounds.end() && (v < b->second.first || v > b->second.second))
      ctx_.fail(key(k), fmt::format("fitted value {} is outside its source's bounds [{}, {}]", v, b->second.first,
                                    b->second.second), &n);
    return v;
  }

  int integer(std::string_view k, std::int64_t lo, std::int64_t hi) {
    const toml::node& n = node(k);
    if (!n.is_integer()) ctx_.fail(key(k), "must be an integer", &n);
    const std::int64_t v = n.as_integer()->get();
    if (v < lo || v > hi)
      ctx_.fail(key(k), "must be in [" + std::to_string(lo) + ", " + std::to_string(hi) + "], got " + std::to_string(v), &n);
    return static_cast<int>(v);
  }

  // A fixed-length array of numbers; `allow_zero` for entries NCCL leaves undefined.
  template <std::size_t N>
  std::array<double, N> numbers(std::string_view k, double scale, double hi, bool allow_zero) {
    const toml::node& n = node(k);
    const toml::array* a = n.as_array();
    if (a == nullptr) ctx_.fail(key(k), "must be an array of " + std::to_string(N) + " numbers", &n);
    if (a->size() != N)
      ctx_.fail(key(k), "must have " + std::to_string(N) + " entries, has " + std::to_string(a->size()), &n);
    std::array<double, N> out{};
    for (std::size_t i = 0; i < N; ++i)
      out[i] = to_number(*a->get(i), key(k) + "[" + std::to_string(i) + "]", 0.0, hi, allow_zero) * scale;
    return out;
  }

  // A non-empty, strictly decreasing list of positive numbers (a speed ladder).
  std::vector<double> ladder(std::string_view k, double scale) {
    const toml::node& n = node(k);
    const toml::array* a = n.as_array();
    if (a == nullptr || a->empty()) ctx_.fail(key(k), "must be a non-empty array of numbers", &n);
    std::vector<double> out;
    for (std::size_t i = 0; i < a->size(); ++i) {
      const double v = to_number(*a->get(i), key(k) + "[" + std::to_string(i) + "]", 0.0, 1e6, false);
      if (!out.empty() && v >= out.back() / scale)
        ctx_.fail(key(k), "must be strictly decreasing (highest speed first)", a->get(i));
      out.push_back(v * scale);
    }
    return out;
  }

  std::string string(std::string_view k) {
    const toml::node& n = node(k);
    if (!n.is_string()) ctx_.fail(key(k), "must be a string", &n);
    return n.as_string()->get();
  }

  const toml::table& subtable(std::string_view k) {
    const toml::node& n = node(k);
    const toml::table* t = n.as_table();
    if (t == nullptr) ctx_.fail(key(k), "must be a table", &n);
    return *t;
  }

  // Keys of a table whose children are themselves tables (no own values, no src).
  void finish() const {
    for (const auto& [k, v] : t_)
      if (!consumed_.contains(std::string(k.str()))) ctx_.fail(key(k.str()), "unknown key", &v);
  }

private:
  std::string check_tag(const std::string& tag, const std::string& where, const toml::node* at) {
    if (!ctx_.tags.contains(tag)) ctx_.fail(where, "source tag '" + tag + "' is not declared in [sources]", at);
    return tag;
  }

  void record(std::string_view k) {
    auto it = key_src_.find(std::string(k));
    const std::string& tag = it != key_src_.end() ? it->second : src_;
    if (tag.empty()) ctx_.fail(key(k), "has no source: give the table a `src` or the key a `key_src` entry");
    ctx_.used.insert(tag);
    ctx_.out->sources[key(k)] = tag;
  }

  double to_number(const toml::node& n, const std::string& where, double lo, double hi, bool lo_inclusive) const {
    double v = 0;
    if (n.is_floating_point()) v = n.as_floating_point()->get();
    else if (n.is_integer()) v = static_cast<double>(n.as_integer()->get());
    else ctx_.fail(where, "must be a number", &n);
    const bool lo_ok = lo_inclusive ? v >= lo : v > lo;
    if (!lo_ok || v > hi || !std::isfinite(v))
      ctx_.fail(where, "must be in " + std::string(lo_inclusive ? "[" : "(") + std::to_string(lo) + ", " +
                           std::to_string(hi) + "], got " + std::to_string(v), &n);
    return v;
  }

  Context& ctx_;
  const toml::table& t_;
  std::string path_;
  std::string src_;
  std::map<std::string, std::string> key_src_;
  std::set<std::string> consumed_;
};

// A table that only groups sub-tables (e.g. [hw_latency_us]): no values of its own.
const toml::table& group(Context& ctx, const toml::table& root, std::string_view k,
                         std::span<const std::string_view> children) {
  const toml::node* n = root.get(k);
  if (n == nullptr) ctx.fail(std::string(k), "missing");
  const toml::table* t = n->as_table();
  if (t == nullptr) ctx.fail(std::string(k), "must be a table", n);
  for (const auto& [ck, cv] : *t)
    if (std::find(children.begin(), children.end(), ck.str()) == children.end())
      ctx.fail(std::string(k) + "." + std::string(ck.str()), "unknown key", &cv);
  return *t;
}

const toml::table& child(Context& ctx, const toml::table& parent, const std::string& path, std::string_view k) {
  const toml::node* n = parent.get(k);
  if (n == nullptr) ctx.fail(path + "." + std::string(k), "missing");
  const toml::table* t = n->as_table();
  if (t == nullptr) ctx.fail(path + "." + std::string(k), "must be a table", n);
  return *t;
}

void read_sources(Context& ctx, const toml::table& root) {
  const toml::node* n = root.get("sources");
  if (n == nullptr || !n->is_table()) ctx.fail("sources", "missing table [sources]", n);
  for (const auto& [k, v] : *n->as_table()) {
    const std::string tag(k.str());
    const std::string where = "sources." + tag;
    const toml::table* t = v.as_table();
    if (t == nullptr) ctx.fail(where, "must be { kind = \"...\", ref = \"...\" }", &v);
    std::string kind, ref, fit;
    const toml::array* bounds = nullptr;
    for (const auto& [fk, fv] : *t) {
      if (fk.str() == "bounds") {
        bounds = fv.as_array();
        if (bounds == nullptr || bounds->size() != 2 || !(*bounds)[0].is_number() || !(*bounds)[1].is_number())
          ctx.fail(where + ".bounds", "must be [low, high], two numbers", &fv);
        continue;
      }
      if (!fv.is_string()) ctx.fail(where + "." + std::string(fk.str()), "must be a string", &fv);
      if (fk.str() == "kind") kind = fv.as_string()->get();
      else if (fk.str() == "ref") ref = fv.as_string()->get();
      else if (fk.str() == "fit") fit = fv.as_string()->get();
      else ctx.fail(where + "." + std::string(fk.str()), "unknown key (expected kind, ref, and for a fitted source bounds and fit)", &fv);
    }
    static const std::set<std::string> kinds = {"model", "spec", "measured", "derived", "estimate", "fitted"};
    if (!kinds.contains(kind))
      ctx.fail(where + ".kind", "must be one of model, spec, measured, derived, estimate, fitted", &v);
    if (ref.empty()) ctx.fail(where + ".ref", "missing or empty", &v);
    if (kind == "fitted") {
      // A fitted constant says within what it may move and which committed command moves it.
      if (bounds == nullptr) ctx.fail(where + ".bounds", "a fitted source must give the bounds its fit searches", &v);
      if (fit.empty()) ctx.fail(where + ".fit", "a fitted source must say how it is fitted (the command)", &v);
      const double lo = (*bounds)[0].value_or(0.0), hi = (*bounds)[1].value_or(0.0);
      if (!(lo < hi) || !std::isfinite(lo) || !std::isfinite(hi))
        ctx.fail(where + ".bounds", "must be [low, high] with low < high", &v);
      ctx.out->fitted_bounds[tag] = {lo, hi};
      ctx.out->fit_commands[tag] = fit;
    } else if (bounds != nullptr || !fit.empty()) {
      ctx.fail(where + (bounds != nullptr ? ".bounds" : ".fit"), "only a fitted source has bounds and a fit", &v);
    }
    ctx.tags[tag] = kind;
    ctx.out->source_refs[tag] = kind + ": " + ref;
  }
}

void read_algo_table(Reader& r, std::array<ProtoValues, kNcclAlgoCount>& out) {
  for (std::size_t a = 0; a < kAlgoKeys.size(); ++a) out[a] = r.numbers<kNcclProtoCount>(kAlgoKeys[a], kUs, 1e4, true);
}

NcclArchTable read_arch(Context& ctx, const toml::table& caps_root, const toml::table* ladder_root,
                        std::string_view arch_key) {
  NcclArchTable t;
  t.sm = parse_sm(arch_key);
  if (t.sm <= 0) ctx.fail("caps_gb_per_s." + std::string(arch_key), "architecture keys must look like sm90");
  Reader r(ctx, child(ctx, caps_root, "caps_gb_per_s", arch_key), "caps_gb_per_s." + std::string(arch_key));
  t.ll_max_bytes_per_s = r.numbers<3>("ll_max", kGB, 1e5, false);
  t.ring_ll128_per_channel_bytes_per_s = r.numbers<3>("ring_ll128", kGB, 1e5, false);
  t.tree_ll128_per_channel_bytes_per_s = r.numbers<3>("tree_ll128", kGB, 1e5, false);
  t.tree_per_channel_bytes_per_s = r.numbers<3>("tree", kGB, 1e5, false);
  t.nvlstree_per_channel_bytes_per_s = r.numbers<3>("nvlstree", kGB, 1e5, true);
  r.finish();
  if (ladder_root != nullptr) {
    if (const toml::node* ln = ladder_root->get(arch_key)) {
      if (!ln->is_table()) ctx.fail("speed_ladder_gb_per_s." + std::string(arch_key), "must be a table", ln);
      Reader lr(ctx, *ln->as_table(), "speed_ladder_gb_per_s." + std::string(arch_key));
      t.intra_ladder_bytes_per_s = lr.ladder("intra", kGB);
      t.inter_ladder_bytes_per_s = lr.ladder("inter", kGB);
      lr.finish();
    }
  }
  return t;
}

toml::table parse_root(const Context& ctx, const fs::path& path) {
  const std::string text = read_input_file(path.string(), InputKind::nccl_table);
  try {
    return toml::parse(text, path.string());
  } catch (const toml::parse_error& e) {
    ctx.fail("", std::string("TOML syntax error: ") + importer::one_line(e.description()) + " (line " +
                     std::to_string(e.source().begin.line) + ")");
  }
}

// Every top-level key known, the schema this reader reads, and the NCCL release the file describes.
void read_header(Context& ctx, const toml::table& root, NcclTable& out) {
  static constexpr std::array<std::string_view, 19> kTop = {
      "schema_version", "nccl_version", "sources", "base_latency_us", "hw_latency_us", "latency",
      "protocol_efficiency", "nvls_efficiency", "nvls_switch_reduction_gb_per_s", "tree_correction_factor", "caps_gb_per_s",
      "ll_max_multi_node_gb_per_s", "speed_ladder_gb_per_s", "channels", "buffers",
      "thread_threshold_bytes", "max_threads", "host_launch_us", "pipeline_ramp"};
  for (const auto& [k, v] : root)
    if (std::find(kTop.begin(), kTop.end(), k.str()) == kTop.end())
      ctx.fail(std::string(k.str()), "unknown key", &v);
  const toml::node* sv = root.get("schema_version");
  if (sv == nullptr || !sv->is_integer()) ctx.fail("schema_version", "missing or not an integer", sv);
  if (sv->as_integer()->get() != kSchemaVersion)
    ctx.fail("schema_version", "unsupported (this meshplan reads " + std::to_string(kSchemaVersion) + ")", sv);
  const toml::node* ver = root.get("nccl_version");
  if (ver == nullptr || !ver->is_string()) ctx.fail("nccl_version", "missing or not a string", ver);
  out.version = ver->as_string()->get();
}

// [base_latency_us], [hw_latency_us.LINK] and [latency]: the per-algorithm, per-link and host terms.
void read_latencies(Context& ctx, const toml::table& root, NcclTable& out) {
  {
    Reader r(ctx, child(ctx, root, "", "base_latency_us"), "base_latency_us");
    read_algo_table(r, out.base_latency_seconds);
    r.finish();
  }
  const toml::table& hw = group(ctx, root, "hw_latency_us", kLinkKeys);
  for (int l = 0; l < kNcclLinkCount; ++l) {
    const std::string_view lk = kLinkKeys[static_cast<std::size_t>(l)];
    Reader r(ctx, child(ctx, hw, "hw_latency_us", lk), "hw_latency_us." + std::string(lk));
    read_algo_table(r, out.hw_latency_seconds[static_cast<std::size_t>(l)]);
    r.finish();
  }
  Reader r(ctx, child(ctx, root, "", "latency"), "latency");
  out.net_overhead_intel_seconds = r.number("net_overhead_intel_us", 0, 1e3) * kUs;
  out.net_overhead_amd_seconds = r.number("net_overhead_amd_us", 0, 1e3) * kUs;
  out.simple_net_overhead_factor = r.number("simple_net_overhead_factor", 1, 100);
  out.pat_inter_divisor = r.number("pat_inter_divisor", 0, 100, false);
  out.pat_per_rank_seconds = r.number("pat_per_rank_us", 0, 1e3) * kUs;
  out.collnet_direct_per_local_rank_seconds = r.number("collnet_direct_per_local_rank_us", 0, 1e3) * kUs;
  out.ring_simple_plateau_factor_sm80 = r.number("ring_simple_plateau_factor_sm80", 1, 100);
  out.ring_simple_plateau_factor_older = r.number("ring_simple_plateau_factor_older", 1, 100);
  out.ring_simple_plateau_min_bytes = r.number("ring_simple_plateau_min_bytes", 0, 1e9);
  r.finish();
}

// [protocol_efficiency], [nvls_efficiency], [nvls_switch_reduction_gb_per_s] and
// [tree_correction_factor]: what each algorithm and protocol achieves of the raw bandwidth.
void read_efficiencies(Context& ctx, const toml::table& root, NcclTable& out) {
  {
    Reader r(ctx, child(ctx, root, "", "protocol_efficiency"), "protocol_efficiency");
    out.ring_ll_efficiency = r.number("ring_ll", 0, 1, false);
    out.ring_ll128_efficiency = r.number("ring_ll128", 0, 1, false);
    out.tree_efficiency = r.number("tree", 0, 1, false);
    out.tree_ll_divisor = r.number("tree_ll_divisor", 1, 100);
    out.tree_ll128_single_node_efficiency = r.number("tree_ll128_single_node", 0, 1, false);
    out.tree_ll128_multi_node_efficiency = r.number("tree_ll128_multi_node", 0, 1, false);
    out.pat_efficiency = r.number("pat", 0, 1, false);
    out.collnet_direct_sm90_efficiency = r.number("collnet_direct_sm90", 0, 1, false);
    r.finish();
  }
  {
    Reader r(ctx, child(ctx, root, "", "nvls_efficiency"), "nvls_efficiency");
    out.nvls_efficiency_sm90 = r.number("sm90", 0, 1, false);
    out.nvls_efficiency_sm100 = r.number("sm100", 0, 1, false);
    r.finish();
  }
  {
    Reader r(ctx, child(ctx, root, "", "nvls_switch_reduction_gb_per_s"), "nvls_switch_reduction_gb_per_s");
    out.nvls_switch_reduction_sm90_bytes_per_s = r.number("sm90", 0, 1e5) * kGB;
    out.nvls_switch_reduction_sm100_bytes_per_s = r.number("sm100", 0, 1e5) * kGB;
    r.finish();
  }
  Reader r(ctx, child(ctx, root, "", "tree_correction_factor"), "tree_correction_factor");
  for (int p = 0; p < kNcclProtoCount; ++p) {
    const auto v = r.numbers<kTreeCorrectionEntries>(kProtoKeys[static_cast<std::size_t>(p)], 1.0, 1.0, false);
    out.tree_correction[static_cast<std::size_t>(p)] = v;
  }
  r.finish();
}

// [caps_gb_per_s.smNN] with their optional [speed_ladder_gb_per_s.smNN], then
// [ll_max_multi_node_gb_per_s]: the bandwidth ceilings by GPU generation.
void read_caps(Context& ctx, const toml::table& root, NcclTable& out) {
  const toml::node* cn = root.get("caps_gb_per_s");
  if (cn == nullptr || !cn->is_table() || cn->as_table()->empty())
    ctx.fail("caps_gb_per_s", "missing: one sub-table per GPU generation, e.g. [caps_gb_per_s.sm90]", cn);
  const toml::node* ln = root.get("speed_ladder_gb_per_s");
  if (ln != nullptr && !ln->is_table()) ctx.fail("speed_ladder_gb_per_s", "must be a table", ln);
  const toml::table* ladders = ln != nullptr ? ln->as_table() : nullptr;
  for (const auto& [k, v] : *cn->as_table()) out.arch.push_back(read_arch(ctx, *cn->as_table(), ladders, k.str()));
  if (ladders != nullptr)
    for (const auto& [k, v] : *ladders)
      if (!cn->as_table()->contains(k.str()))
        ctx.fail("speed_ladder_gb_per_s." + std::string(k.str()), "no matching [caps_gb_per_s] generation", &v);
  std::sort(out.arch.begin(), out.arch.end(), [](const auto& a, const auto& b) { return a.sm < b.sm; });
  Reader r(ctx, child(ctx, root, "", "ll_max_multi_node_gb_per_s"), "ll_max_multi_node_gb_per_s");
  out.ll_max_multi_node_intel_bytes_per_s = r.numbers<2>("intel", kGB, 1e5, false);
  out.ll_max_multi_node_amd_bytes_per_s = r.numbers<2>("amd", kGB, 1e5, false);
  r.finish();
}

// [channels], [buffers], [thread_threshold_bytes] and [max_threads]: how NCCL sizes its channels,
// buffers and thread blocks.
void read_resources(Context& ctx, const toml::table& root, NcclTable& out) {
  {
    Reader r(ctx, child(ctx, root, "", "channels"), "channels");
    out.max_channels = r.integer("max_channels", 1, 1024);
    out.nvls_channels_sm90 = r.integer("nvls_sm90", 2, 1024);
    out.nvls_channels_sm100_single_domain = r.integer("nvls_sm100_single_domain", 2, 1024);
    out.nvls_channels_sm100_multi_node = r.integer("nvls_sm100_multi_node", 2, 1024);
    r.finish();
  }
  {
    Reader r(ctx, child(ctx, root, "", "buffers"), "buffers");
    out.ll_buffer_bytes = r.number("ll_bytes", 0, 1e12, false);
    out.ll128_buffer_bytes = r.number("ll128_bytes", 0, 1e12, false);
    out.simple_buffer_bytes = r.number("simple_bytes", 0, 1e12, false);
    out.steps = r.integer("steps", 1, 1024);
    r.finish();
  }
  {
    Reader r(ctx, child(ctx, root, "", "thread_threshold_bytes"), "thread_threshold_bytes");
    out.thread_threshold_bytes = {r.number("ll", 0, 1e6, false), r.number("ll128", 0, 1e6, false),
                                  r.number("simple", 0, 1e6, false)};
    r.finish();
  }
  Reader r(ctx, child(ctx, root, "", "max_threads"), "max_threads");
  out.max_threads = {r.integer("ll", 32, 4096), r.integer("ll128", 32, 4096), r.integer("simple", 32, 4096)};
  r.finish();
}

// [host_launch_us] and [pipeline_ramp]: the host's launch cost and how small messages ramp up.
void read_host_and_ramp(Context& ctx, const toml::table& root, NcclTable& out) {
  {
    Reader r(ctx, child(ctx, root, "", "host_launch_us"), "host_launch_us");
    out.host_launch_intel_seconds = r.number("intel", 0, 1e3) * kUs;
    out.host_launch_amd_seconds = r.number("amd", 0, 1e3) * kUs;
    r.finish();
  }
  Reader r(ctx, child(ctx, root, "", "pipeline_ramp"), "pipeline_ramp");
  out.pipeline_small_message_efficiency = r.number("small_message_efficiency", 0, 1, false);
  out.pipeline_half_ramp_bytes = r.number("half_ramp_bytes", 0, 1e15, false);
  out.pipeline_half_ramp_ranks = r.integer("half_ramp_ranks", 1, 1 << 20);
  r.finish();
}

NcclTable read_table(const fs::path& path) {
  NcclTable out;
  out.source_file = path.string();
  Context ctx{path.string(), &out, {}, {}};
  const toml::table root = parse_root(ctx, path);
  read_sources(ctx, root);
  read_header(ctx, root, out);
  read_latencies(ctx, root, out);
  read_efficiencies(ctx, root, out);
  read_caps(ctx, root, out);
  read_resources(ctx, root, out);
  read_host_and_ramp(ctx, root, out);
  for (const auto& [tag, kind] : ctx.tags)
    if (!ctx.used.contains(tag)) ctx.fail("sources." + tag, "declared but never used");
  return out;
}

}  // namespace

std::string_view to_string(NcclAlgo a) {
  switch (a) {
    case NcclAlgo::tree: return "tree";
    case NcclAlgo::ring: return "ring";
    case NcclAlgo::collnet_direct: return "collnet_direct";
    case NcclAlgo::collnet_chain: return "collnet_chain";
    case NcclAlgo::nvls: return "nvls";
    case NcclAlgo::nvlstree: return "nvlstree";
    case NcclAlgo::pat: return "pat";
  }
  return "?";
}

std::string_view to_string(NcclProto p) {
  switch (p) {
    case NcclProto::ll: return "LL";
    case NcclProto::ll128: return "LL128";
    case NcclProto::simple: return "Simple";
  }
  return "?";
}

int parse_sm(std::string_view arch) {
  if (arch.size() < 3 || arch.substr(0, 2) != "sm") return 0;
  int v = 0;
  const char* first = arch.data() + 2;
  const char* last = arch.data() + arch.size();
  auto [p, ec] = std::from_chars(first, last, v);
  if (ec != std::errc() || p != last || v <= 0) return 0;
  return v;
}

const NcclArchTable& NcclTable::arch_table(int sm) const {
  // arch is non-empty (the loader requires at least one generation) and sorted by sm.
  const NcclArchTable* best = &arch.front();
  for (const auto& t : arch)
    if (t.sm <= sm) best = &t;
  return *best;
}

NcclTable load_nccl_table(const std::string& version_or_path, const std::string& origin_file,
                          const std::string& origin_key) {
  if (version_or_path.ends_with(".toml")) return read_table(fs::path(version_or_path));
  const auto unknown = [&](const std::string& what) {
    std::string avail;
    for (const std::string& v : available_nccl_versions()) avail += (avail.empty() ? "" : ", ") + v;
    return InputError(origin_file, origin_key,
                      what + " (available: " + (avail.empty() ? "none" : avail) + ", or a .toml path)");
  };
  if (version_or_path.empty() || version_or_path.find('/') != std::string::npos)
    throw unknown("'" + version_or_path + "' is neither an NCCL version nor a .toml path");
  const fs::path file = data_root() / "hardware_profiles" / "nccl" / ("nccl-" + version_or_path + ".toml");
  std::error_code ec;
  if (!fs::is_regular_file(file, ec)) throw unknown("unknown NCCL version '" + version_or_path + "'");
  return read_table(file);
}

std::vector<std::string> available_nccl_versions() {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(data_root() / "hardware_profiles" / "nccl", ec)) {
    const std::string name = e.path().filename().string();
    if (name.starts_with("nccl-") && name.ends_with(".toml") && name.size() > 10)
      out.push_back(name.substr(5, name.size() - 10));
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::shared_ptr<const NcclTable> shared_nccl_table(const std::string& version_or_path,
                                                   const std::string& origin_file,
                                                   const std::string& origin_key) {
  static std::mutex mutex;
  static std::map<std::string, std::shared_ptr<const NcclTable>> tables;
  const std::lock_guard lock(mutex);
  auto it = tables.find(version_or_path);
  if (it != tables.end()) return it->second;
  auto table = std::make_shared<const NcclTable>(load_nccl_table(version_or_path, origin_file, origin_key));
  return tables.emplace(version_or_path, std::move(table)).first->second;
}

const NcclTable& default_nccl_table() {
  static const NcclTable table = load_nccl_table(std::string(kDefaultNcclVersion));
  return table;
}

}  // namespace meshplan

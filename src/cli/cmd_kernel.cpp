// `meshplan kernel --cluster C (--gemm MxNxK | --attention k=v,... | --memory-bytes N)`: the time
// the compute cost model predicts for one kernel, so its numbers can be checked against a
// measurement by hand. Model: docs/compute.md.
#include <fmt/format.h>

#include <charconv>
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "cli/command.hpp"
#include "cli/flag_ranges.hpp"
#include "cli/quantity.hpp"
#include "spec/limits.hpp"
#include "cli/run_inputs.hpp"
#include "cost/compute_cost.hpp"
#include "spec/cluster_loader.hpp"
#include "spec/error.hpp"
#include "spec/plan.hpp"
#include "spec/runtime_traits.hpp"

namespace meshplan::cli {
namespace {

using nlohmann::json;

// Kernel dimensions up to 2^24 each: padding to tiles and the FLOP products stay exact.
std::int64_t parse_count(std::string_view text, const std::string& option, std::string_view what) {
  return parse_positive_count(text, option, what, limits::kMaxKernelDim);
}

std::vector<std::string_view> split(std::string_view s, char sep) {
  std::vector<std::string_view> parts;
  for (std::size_t start = 0;;) {
    const std::size_t at = s.find(sep, start);
    parts.push_back(s.substr(start, at == std::string_view::npos ? std::string_view::npos : at - start));
    if (at == std::string_view::npos) return parts;
    start = at + 1;
  }
}

// "MxNxK" or "BxMxNxK" (batched).
GemmShape parse_gemm(const std::string& text) {
  const auto dims = split(text, 'x');
  if (dims.size() != 3 && dims.size() != 4)
    throw InputError("", "--gemm", fmt::format("expected MxNxK or BATCHxMxNxK, got '{}'", text));
  GemmShape g;
  std::size_t i = 0;
  if (dims.size() == 4) g.batch = parse_count(dims[i++], "--gemm", "batch");
  g.m = parse_count(dims[i++], "--gemm", "M");
  g.n = parse_count(dims[i++], "--gemm", "N");
  g.k = parse_count(dims[i++], "--gemm", "K");
  return g;
}

// "b=1,heads=32,seq=8192,head_dim=128,causal=1" plus optional kv_heads, seq_q, seq_kv.
// --grouped-gemm ROWS,ROWS,...xNxK: one grouped GEMM (MoE experts), each group's own rows.
struct GroupedGemm {
  std::vector<std::int64_t> rows;
  std::int64_t n = 0, k = 0;
};
GroupedGemm parse_grouped_gemm(const std::string& text) {
  const auto dims = split(text, 'x');
  if (dims.size() != 3)
    throw InputError("", "--grouped-gemm", fmt::format("expected ROWS,ROWS,...xNxK, got '{}'", text));
  GroupedGemm g;
  for (const std::string_view r : split(dims[0], ',')) g.rows.push_back(parse_count(r, "--grouped-gemm", "group rows"));
  g.n = parse_count(dims[1], "--grouped-gemm", "N");
  g.k = parse_count(dims[2], "--grouped-gemm", "K");
  return g;
}

AttentionShape parse_attention(const std::string& text) {
  AttentionShape a;
  a.seq_q = a.seq_kv = 0;
  bool kv_heads_set = false, heads_set = false;
  for (std::string_view item : split(text, ',')) {
    const std::size_t eq = item.find('=');
    if (eq == std::string_view::npos)
      throw InputError("", "--attention", fmt::format("expected key=value, got '{}'", item));
    const std::string_view key = item.substr(0, eq);
    const std::string_view value = item.substr(eq + 1);
    const std::string what(key);
    if (key == "b" || key == "batch") a.batch = parse_count(value, "--attention", what);
    else if (key == "heads") { a.heads = parse_count(value, "--attention", what); heads_set = true; }
    else if (key == "kv_heads") { a.kv_heads = parse_count(value, "--attention", what); kv_heads_set = true; }
    else if (key == "seq") a.seq_q = a.seq_kv = parse_count(value, "--attention", what);
    else if (key == "seq_q") a.seq_q = parse_count(value, "--attention", what);
    else if (key == "seq_kv") a.seq_kv = parse_count(value, "--attention", what);
    else if (key == "head_dim") a.head_dim = parse_count(value, "--attention", what);
    // parse_count caps a count at limits::kMaxKernelDim (2^24), which 32 bits hold.
    else if (key == "window") a.window = static_cast<std::int32_t>(parse_count(value, "--attention", what));
    else if (key == "causal") {
      if (value != "0" && value != "1")
        throw InputError("", "--attention", fmt::format("causal must be 0 or 1, got '{}'", value));
      a.causal = value == "1";
    } else {
      throw InputError("", "--attention",
                       fmt::format("unknown key '{}' (b, heads, kv_heads, seq, seq_q, seq_kv, head_dim, causal, window)", key));
    }
  }
  if (!heads_set) throw InputError("", "--attention", "heads= is required");
  if (a.seq_q == 0 || a.seq_kv == 0) throw InputError("", "--attention", "seq= (or seq_q= and seq_kv=) is required");
  if (!kv_heads_set) a.kv_heads = a.heads;
  if (a.window > 0 && !a.causal) throw InputError("", "--attention", "window= is a causal sliding window: it needs causal=1");
  return a;
}

struct Described {
  KernelEstimate estimate;
  std::string kind;   // "gemm", "attention", "memory"
  std::string shape;  // as the user would write it
  int cudnn_version = 0;  // the release asked for (0: newest)
};

Described estimate(const ClusterSpec& c, const std::string& gemm, const std::string& grouped, const std::string& attention,
                   double memory_bytes, const std::string& pass, Dtype dtype, AttentionBackend backend,
                   AttentionKernel kernel, int cudnn_version) {
  if (!grouped.empty()) {
    const GroupedGemm g = parse_grouped_gemm(grouped);
    return {grouped_gemm_time(c, g.rows, g.n, g.k, dtype), "gemm", fmt::format("{} groups of {}", g.rows.size(), grouped)};
  }
  if (!gemm.empty()) {
    const GemmShape g = parse_gemm(gemm);
    return {gemm_time(c, g, dtype), "gemm",
            g.batch > 1 ? fmt::format("{}x{}x{}x{}", g.batch, g.m, g.n, g.k) : fmt::format("{}x{}x{}", g.m, g.n, g.k)};
  }
  if (!attention.empty()) {
    AttentionShape a = parse_attention(attention);
    a.backend = backend;
    a.kernel = kernel;
    a.cudnn_version = cudnn_version;
    const std::string shape =
        fmt::format("b={},heads={},kv_heads={},seq_q={},seq_kv={},head_dim={},causal={} {}", a.batch, a.heads,
                    a.kv_heads, a.seq_q, a.seq_kv, a.head_dim, a.causal ? 1 : 0, pass);
    if (pass == "fwd") return {attention_time(c, a, Pass::forward, dtype), "attention", shape, cudnn_version};
    if (pass == "bwd") return {attention_time(c, a, Pass::backward, dtype), "attention", shape, cudnn_version};
    // fwd+bwd: two kernels, as FlashAttention's own fwd+bwd benchmark times them.
    const KernelEstimate f = attention_time(c, a, Pass::forward, dtype);
    const KernelEstimate b = attention_time(c, a, Pass::backward, dtype);
    KernelEstimate s = f;
    s.seconds = f.seconds + b.seconds;
    s.flops = f.flops + b.flops;
    s.bytes = f.bytes + b.bytes;
    s.compute_seconds = f.compute_seconds + b.compute_seconds;
    s.memory_seconds = f.memory_seconds + b.memory_seconds;
    s.launch_seconds = f.launch_seconds + b.launch_seconds;
    s.efficiency = s.flops / (s.seconds * s.peak_flops_per_s);
    s.memory_bound = s.memory_seconds > s.compute_seconds;
    return {s, "attention", shape, cudnn_version};
  }
  if (!(memory_bytes > 0))
    throw InputError("", "--memory-bytes", fmt::format("must be a positive byte count, got {}", memory_bytes));
  return {memory_bound_time(c, memory_bytes), "memory", fmt::format("{:.0f} bytes", memory_bytes)};
}

std::string fallback_note(const Described& d, Dtype dtype) {
  if (!d.estimate.curve_fallback) return "";
  if (d.kind == "gemm")
    return fmt::format("no {} GEMM curve in the profile; used the {} curve as a fraction of the {} peak",
                       to_string(dtype), to_string(d.estimate.curve_dtype), to_string(dtype));
  if (d.cudnn_version > 0 && d.estimate.curve_version > 0 && d.estimate.curve_version != d.cudnn_version)
    return fmt::format("no curves of cuDNN {} in the profile; used release {}", library_version_text(d.cudnn_version),
                       library_version_text(d.estimate.curve_version));
  if (is_8bit_attention_dtype(dtype) && !is_8bit_attention_dtype(d.estimate.curve_dtype))
    return fmt::format("no {} attention curve for this kernel/pass; used the 16-bit curve at its own rate (nothing "
                       "measured says {} is faster)", to_string(dtype), to_string(dtype));
  return "no attention curve for this kernel/pass/dtype/mask/head_dim; used the nearest measured one (a fraction of "
         "its dtype's peak)";
}

struct KernelOptions {
  std::string cluster = kDefaultCluster;
  std::string gemm, grouped_gemm, attention, dtype = "bf16", pass = "fwd", runtime = "generic", attention_kernel = "framework";
  std::string cudnn_version;
  double memory_bytes = 0;
  bool json = false, burst = false;
};

void add_kernel_options(CLI::App& app, KernelOptions& o) {
  app.add_option("--cluster", o.cluster, "hardware profile name or TOML path")->capture_default_str();
  auto* gemm = app.add_option("--gemm", o.gemm, "GEMM shape MxNxK (or BATCHxMxNxK): C[M,N] = A[M,K] B[K,N]");
  auto* attention = app.add_option(
      "--attention", o.attention,
      "fused attention, e.g. b=1,heads=32,seq=8192,head_dim=128,causal=1 (also kv_heads, seq_q, seq_kv, and window=W: a causal sliding window of W keys)");
  auto* memory = app.add_option("--memory-bytes", o.memory_bytes, "bytes read + written by a memory-bound kernel")
                     ->check(in_range("kernel", "--memory-bytes"));
  auto* grouped = app.add_option("--grouped-gemm", o.grouped_gemm,
                                 "grouped GEMM (MoE experts in one launch): ROWS,ROWS,...xNxK, each group's rows");
  gemm->excludes(attention)->excludes(memory)->excludes(grouped);
  grouped->excludes(attention)->excludes(memory);
  attention->excludes(memory);
  app.add_option("--dtype", o.dtype, "compute dtype (fp32, tf32, bf16, fp16, fp8, fp8_block, mxfp8, fp4)")->capture_default_str();
  app.add_option("--pass", o.pass, "attention pass")->check(CLI::IsMember({"fwd", "bwd", "fwd+bwd"}))->capture_default_str();
  app.add_option("--runtime", o.runtime,
                 "whose attention API picks the kernel: megatron (Transformer Engine -> cuDNN from sm90), "
                 "torchtitan-fsdp2 (torch SDPA -> cuDNN from sm100, else flash), composer-*/generic (flash-attn 2)")
      ->capture_default_str();
  app.add_option("--attention-kernel", o.attention_kernel, "attention kernel family, overriding the runtime's pick")
      ->check(CLI::IsMember({"framework", "fa2", "fa3", "fa4", "cudnn"}))
      ->capture_default_str();
  app.add_option("--cudnn-version", o.cudnn_version,
                 "cuDNN release whose fused-attention curves to use, e.g. 9.17 (default: the newest the profile "
                 "measured; profiles without release-tagged curves ignore it)");
  app.add_flag("--burst", o.burst,
               "tensor cores at the rate of the (short) microbenchmarks behind the curves: the profile's "
               "sustained_clock_fraction is not applied");
  app.add_flag("--json", o.json, R"(machine-readable: {"time_us", "tflops", "efficiency", ...})");
}

// An estimate with what both outputs derive from it.
struct KernelReport {
  Described d;
  Dtype dtype;
  double tflops, achieved_bw, sustained;
  std::string bound, note;
};

void print_kernel_json(const KernelReport& k, const ClusterSpec& cluster) {
  const KernelEstimate& e = k.d.estimate;
  json j{{"time_us", e.seconds * 1e6},
         {"tflops", k.tflops},
         {"efficiency", e.efficiency},
         {"bound", k.bound},
         {"kind", k.d.kind},
         {"shape", k.d.shape},
         {"cluster", cluster.name},
         {"dtype", std::string(to_string(k.dtype))},
         {"flops", e.flops},
         {"bytes", e.bytes},
         {"compute_us", e.compute_seconds * 1e6},
         {"memory_us", e.memory_seconds * 1e6},
         {"launch_us", e.launch_seconds * 1e6},
         {"peak_tflops", e.peak_flops_per_s / 1e12},
         {"achieved_hbm_gb_per_s", k.achieved_bw / 1e9},
         {"curve_fallback", e.curve_fallback},
         {"sustained_clock_fraction", k.sustained},
         {"note", k.note.empty() ? json(nullptr) : json(k.note)}};
  if (k.d.kind == "attention") {
    j["kernel"] = std::string(to_string(e.attention_kernel));
    j["curve_source"] = std::string(e.curve_source);
    j["curve_pass"] = std::string(e.curve_pass);
    j["curve_dtype"] = std::string(to_string(e.curve_dtype));
    j["curve_version"] = e.curve_version > 0 ? json(library_version_text(e.curve_version)) : json(nullptr);
  } else if (k.d.kind == "gemm") {
    j["curve_source"] = std::string(e.curve_source);
    j["curve_dtype"] = std::string(to_string(e.curve_dtype));
    const bool scheduled = e.equivalent_square_dim == 0;
    j["schedule"] =
        scheduled ? (e.gemm_grouped ? "grouped" : e.gemm_stream_k ? "stream-k" : "data-parallel") : "equivalent-square";
    j["tiles"] = scheduled ? json(e.gemm_tiles) : json(nullptr);
    j["waves"] = scheduled ? json(e.gemm_waves) : json(nullptr);
    j["tile_efficiency"] = scheduled ? json(e.gemm_tile_efficiency) : json(nullptr);
    j["equivalent_square_dim"] = scheduled ? json(nullptr) : json(e.equivalent_square_dim);
    j["tile_overhead_k"] = e.gemm_tile_overhead_k;
  }
  fmt::print("{}\n", j.dump(2));
}

void print_kernel_text(const KernelReport& k, const ClusterSpec& cluster) {
  const Described& d = k.d;
  const KernelEstimate& e = d.estimate;
  fmt::print("{} ({}): {} {}{}\n", cluster.name, cluster.gpu.model, d.kind, d.shape,
             d.kind == "memory" ? "" : fmt::format(" {}", to_string(k.dtype)));
  fmt::print("  time        {:.2f} us\n", e.seconds * 1e6);
  if (d.kind != "memory")
    fmt::print("  throughput  {:.1f} TFLOP/s = efficiency {:.3f} of the {:.1f} TFLOP/s dense peak\n", k.tflops,
               e.efficiency, e.peak_flops_per_s / 1e12);
  fmt::print("  HBM         {:.1f} GB/s achieved ({:.3g} bytes)\n", k.achieved_bw / 1e9, e.bytes);
  fmt::print("  bound       {} (compute {:.2f} us, memory {:.2f} us, launch {:.2f} us)\n", k.bound,
             e.compute_seconds * 1e6, e.memory_seconds * 1e6, e.launch_seconds * 1e6);
  if (d.kind == "gemm" && e.flops > 0)
    fmt::print("{}", e.equivalent_square_dim > 0
                         ? fmt::format("  priced as   the {:.0f}^3 square of the same tile work ({} curve, source {}; "
                                       "each tile pays {:g} K beside its K loop)\n",
                                       e.equivalent_square_dim, to_string(e.curve_dtype), e.curve_source,
                                       e.gemm_tile_overhead_k)
                         : fmt::format("  schedule    {}: {:.0f} tiles, {:.2f} waves over {} SMs at {:.3f} per tile "
                                       "({} curve, source {}; each tile pays {:g} K beside its K loop)\n",
                                       e.gemm_grouped ? "grouped" : e.gemm_stream_k ? "stream-K" : "data-parallel", e.gemm_tiles, e.gemm_waves,
                                       cluster.gpu.sm_count, e.gemm_tile_efficiency, to_string(e.curve_dtype),
                                       e.curve_source, e.gemm_tile_overhead_k));
  if (d.kind == "attention")
    fmt::print("  kernel      {} ({} {} curve{}, source {})\n", to_string(e.attention_kernel), to_string(e.curve_dtype),
               e.curve_pass,
               e.curve_version > 0 ? fmt::format(" of release {}", library_version_text(e.curve_version)) : "",
               e.curve_source);
  if (d.kind != "memory" && k.sustained < 1)
    fmt::print("  clock       tensor cores at {:.2f} of the microbenchmarks' rate (sustained training load)\n",
               k.sustained);
  if (!k.note.empty()) fmt::print("  note        {}\n", k.note);
}

int run_kernel(const KernelOptions& o) {
  if (o.gemm.empty() && o.grouped_gemm.empty() && o.attention.empty() && o.memory_bytes == 0)
    throw InputError("", "kernel", "give one of --gemm, --grouped-gemm, --attention or --memory-bytes");
  const std::optional<Dtype> dtype = parse_dtype(o.dtype);
  if (!dtype) throw InputError("", "--dtype", fmt::format("unknown dtype '{}' (fp32, tf32, bf16, fp16, fp8, fp8_block, mxfp8, fp4)", o.dtype));
  const std::optional<Runtime> runtime = parse_runtime(o.runtime);
  if (!runtime)
    throw InputError("", "--runtime",
                     fmt::format("unknown runtime '{}' (generic, composer-fsdp1, composer-fsdp2, torchtitan-fsdp2, "
                                 "megatron)", o.runtime));
  int cudnn_version = 0;
  if (!o.cudnn_version.empty()) {
    const std::optional<int> v = parse_library_version(o.cudnn_version);
    if (!v) throw InputError("", "--cudnn-version", fmt::format("must be a release like 9.17, got '{}'", o.cudnn_version));
    cudnn_version = *v;
  }
  ClusterSpec cluster = load_cluster(o.cluster);
  if (o.burst)
    cluster.gpu.sustained_clock_fraction = cluster.gpu.attention_sustained_clock_fraction =
        cluster.gpu.low_precision_sustained_clock_fraction = 1;
  KernelReport k{estimate(cluster, o.gemm, o.grouped_gemm, o.attention, o.memory_bytes, o.pass, *dtype,
                          runtime_traits(*runtime, false).attention_backend,
                          *parse_attention_kernel(o.attention_kernel), cudnn_version),
                 *dtype, 0, 0, 0, "", ""};
  const KernelEstimate& e = k.d.estimate;
  k.tflops = e.seconds > 0 ? e.flops / e.seconds / 1e12 : 0.0;
  k.achieved_bw = e.seconds > 0 ? e.bytes / e.seconds : 0.0;
  k.bound = e.memory_bound ? "memory" : "compute";
  k.note = fallback_note(k.d, *dtype);
  k.sustained = k.d.kind == "attention" ? cluster.gpu.attention_sustained_fraction()
                                        : cluster.gpu.gemm_sustained_fraction(*dtype);
  if (o.json) print_kernel_json(k, cluster);
  else print_kernel_text(k, cluster);
  return 0;
}

}  // namespace

Command add_kernel_command(CLI::App& root) {
  auto o = std::make_shared<KernelOptions>();
  Command c;
  c.app = root.add_subcommand(
      "kernel",
      "Predicted time of one kernel on one GPU: max(FLOPs / (peak x measured efficiency), bytes / "
      "achieved HBM bandwidth) + launch. Formulas: docs/compute.md.");
  add_kernel_options(*c.app, *o);
  c.run = [o] { return run_kernel(*o); };
  return c;
}

}  // namespace meshplan::cli

// Compute cost model against published measurements (Azure cuBLASLt and BabelStream, torch.matmul
// sweeps, FlashAttention README figures): large GEMMs, skinny GEMMs, FlashAttention-2 and STREAM;
// plus the properties every estimate must have (monotone in work, never slower on a faster GPU, no
// allocation per estimate).
#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <new>
#include <optional>
#include <nlohmann/json.hpp>
#include <string>
#include <toml++/toml.h>
#include <utility>
#include <vector>

#include "cost/compute_cost.hpp"
#include "workload/layer_kernels.hpp"
#include "spec/cluster_loader.hpp"
#include "spec/error.hpp"
#include "spec/plan_toml.hpp"
#include "cost/csv_table.hpp"
#include "test_paths.hpp"

// Counts heap allocations so a test can assert that an estimate makes none. GCC cannot see that
// these replacements pair malloc with free, hence the pragma.
namespace {
std::atomic<long> g_allocations{0};
}
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
void* operator new(std::size_t n) {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(n == 0 ? 1 : n)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
// The nothrow forms too (std::stable_sort's temporary buffer uses them): left to the runtime, they
// would pair its allocation with the free above, which AddressSanitizer reports as a mismatch.
void* operator new(std::size_t n, const std::nothrow_t&) noexcept {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  return std::malloc(n == 0 ? 1 : n);
}
void operator delete(void* p, const std::nothrow_t&) noexcept { std::free(p); }
#pragma GCC diagnostic pop

using namespace meshplan;

namespace {

ClusterSpec profile(const std::string& name) {
  return load_cluster((test::data_root() / "hardware_profiles" / (name + ".toml")).string());
}

double tflops(const KernelEstimate& e) { return e.flops / e.seconds / 1e12; }

// The sweeps time kernels back to back, so the host launch cost is hidden behind the previous
// kernel: compare them with the device part of the estimate.
double device_tflops(const KernelEstimate& e) { return e.flops / (e.seconds - e.launch_seconds) / 1e12; }

double rel_err(double predicted, double measured) { return (predicted - measured) / measured; }

// Shipped profiles that carry at least a bf16 GEMM curve.
const std::vector<std::string> kProfiles = {"a100-40gb", "a100-80gb", "h100-sxm-80gb", "h100-sxm-96gb", "h100-pcie-80gb",
                                            "h200-141gb", "b200", "b300", "gb200", "gb300"};

}  // namespace

TEST_CASE("large square GEMMs land within 5% of the measured sweeps") {
  struct Row {
    const char* cluster;
    Dtype dtype;
    std::int64_t dim;
    double measured_tflops;
  };
  // The curves are these measurements divided by the peak, so the residual is the interpolation,
  // the running-max envelope and the 4 us launch; the 5% bound is the spread between two runs of
  // the same GEMM on the same GPU (H100 BF16 8192^3: torch 797.5 vs MAMF best shape 794.5).
  const Row rows[] = {
      {"h100-sxm-80gb", Dtype::bf16, 8192, 797.5}, {"h100-sxm-80gb", Dtype::bf16, 4096, 788.7},
      {"a100-80gb", Dtype::fp16, 8192, 253.7},     {"a100-80gb", Dtype::fp16, 16384, 256.5},
      {"h100-sxm-80gb", Dtype::fp8, 8192, 1290.1}, {"h100-sxm-80gb", Dtype::fp8, 16384, 1377.3},
      {"h200-141gb", Dtype::fp8, 8192, 1446.9},    {"gb300", Dtype::fp8, 8192, 3286.3},
  };
  // The sweeps are short runs at the burst clock: compared with sustained_clock_fraction 1. Each
  // point's time holds the fixed per-kernel latency once, as the estimate does (docs/compute.md).
  // Every GEMM runs its tiles at the best rate the curve's large squares imply, so the other
  // squares come out at most a few % fast (H100 BF16 8192^3: the 4096^3 point's tile rate).
  for (const Row& r : rows) {
    ClusterSpec c = profile(r.cluster);
    c.gpu.sustained_clock_fraction = 1;
    const KernelEstimate e = gemm_time(c, GemmShape{r.dim, r.dim, r.dim}, r.dtype);
    CAPTURE(r.cluster);
    CAPTURE(r.dim);
    CHECK(std::abs(rel_err(tflops(e), r.measured_tflops)) < 0.05);
    CHECK_FALSE(e.memory_bound);
    CHECK_FALSE(e.curve_fallback);
  }
  // Measured at the H200's 700 W limit: 663 of the 793.5 TFLOP/s burst (tests/calibrate/data).
  CHECK(profile("h100-sxm-80gb").gpu.sustained_clock_fraction == 0.836);
  CHECK(profile("a100-80gb").gpu.sustained_clock_fraction == 1.0);
  // Non-square but not skinny: 6144x12288x12288 (A100 FP16 250.8, H100 FP8 1351.4).
  CHECK(std::abs(rel_err(tflops(gemm_time(profile("a100-80gb"), {6144, 12288, 12288}, Dtype::fp16)), 250.8)) < 0.05);
  ClusterSpec h100_burst = profile("h100-sxm-80gb");
  h100_burst.gpu.sustained_clock_fraction = 1;
  CHECK(std::abs(rel_err(tflops(gemm_time(h100_burst, {6144, 12288, 12288}, Dtype::fp8)), 1351.4)) < 0.05);
}

TEST_CASE("the 10240^3 dip is not carried into large sizes: the tile rate is the best large square's") {
  const ClusterSpec h100 = profile("h100-sxm-80gb");
  const double sustained = h100.gpu.sustained_clock_fraction;
  const double at_8k = gemm_efficiency(h100, {8192, 8192, 8192}, Dtype::bf16) / sustained;
  const double at_10k = gemm_efficiency(h100, {10240, 10240, 10240}, Dtype::bf16) / sustained;
  // The torch.matmul sweep dips to 0.727 at 10240^3; the model keeps the tile rate of 4096^3
  // (0.797 of peak over 4 waves of 3.9 and the fixed latency: 0.868 per tile). 10240^3 runs its
  // 6400 128x128 tiles in 49 waves of 48.5 on 132 SMs (the 128x256 tile: 25 of 24.2), each tile
  // paying 2 x 128 K beside its K loop: 0.868 x 48.5 / 49 x 10240 / 10496 = 0.838.
  const KernelEstimate e = gemm_time(h100, {10240, 10240, 10240}, Dtype::bf16);
  CHECK(e.gemm_waves == 49);
  CHECK(e.gemm_tile_efficiency == doctest::Approx(0.868).epsilon(0.002));
  CHECK(at_10k == doctest::Approx(0.868 * 6400.0 / 132 / 49 * 10240 / 10496).epsilon(0.003));
  CHECK(at_10k > 0.7274);
  CHECK(at_8k > 0.80);
}

TEST_CASE("skinny GEMMs: tile padding and the HBM bound instead of a huge cube") {
  // Measured (Azure ND A100 v4 / ND H100 v5 cuBLASLt, back to back): A100 FP16 802816x192x768
  // 157.8 TFLOP/s, H100 FP8 802816x192x768 663.8. The schedule gives +3.6 % (59 waves of 128x256
  // tiles over 108 SMs) and +10.5 % (memory-bound at the sweep's clock: perfect overlap of the
  // operand stream with the tiles, which a real kernel on the roofline ridge does not get); 15 %
  // covers that plus the ~5 % run-to-run spread of the sweeps. Read off the curve at their cube
  // dim (4910) the same shapes come out 49-86 % high.
  struct Row {
    const char* cluster;
    Dtype dtype;
    GemmShape shape;
    double measured_tflops;
  };
  const Row rows[] = {
      {"a100-80gb", Dtype::fp16, {802816, 192, 768}, 157.8},
      {"h100-sxm-80gb", Dtype::fp8, {802816, 192, 768}, 663.8},
  };
  for (const Row& r : rows) {
    ClusterSpec c = profile(r.cluster);
    c.gpu.sustained_clock_fraction = 1;
    const KernelEstimate e = gemm_time(c, r.shape, r.dtype);
    const double cube_dim = std::cbrt(r.shape.flops() / 2);
    const double naive_tflops = gemm_curve_efficiency(c, r.dtype, cube_dim) * c.peak_flops_per_s(r.dtype) / 1e12;
    CAPTURE(r.cluster);
    CAPTURE(tflops(e));
    CAPTURE(naive_tflops);
    CHECK(std::abs(rel_err(tflops(e), r.measured_tflops)) < 0.15);
    CHECK(std::abs(rel_err(tflops(e), r.measured_tflops)) < std::abs(rel_err(naive_tflops, r.measured_tflops)));
  }
  // The H100 FP8 skinny GEMM is memory-bound at the sweep's clock: 0.93 GB at 2.9 TB/s (319 us)
  // against 48 waves of tiles 768 + 256 deep (299 us: FP8's K blocks are 128 deep, so the per-tile
  // fixed cost is 256 K, twice bf16's 128).
  ClusterSpec burst = profile("h100-sxm-80gb");
  burst.gpu.sustained_clock_fraction = burst.gpu.low_precision_sustained_clock_fraction = 1;
  const KernelEstimate ridge = gemm_time(burst, {802816, 192, 768}, Dtype::fp8);
  CHECK(ridge.memory_bound);
  CHECK(ridge.gemm_tile_overhead_k == 256);
  CHECK(ridge.gemm_waves == 48);  // 6272 x 1 tiles of 128x256 (N = 192 padded to 256) over 132 SMs
  // Not skinny, and not met: A100 FP16 1024x2145x1024, 132.8 TFLOP/s measured. Its 68 tiles fill
  // 0.63 of a wave, so the model takes stream-K (164.7, +24 %); whole-tile waves would give 126.7
  // (-4.6 %). No A100 GEMM was measured by shape, so whether its cuBLAS takes stream-K there is
  // open (docs/compute.md, "Not modelled").
  const KernelEstimate mid = gemm_time(profile("a100-80gb"), {1024, 2145, 1024}, Dtype::fp16);
  CHECK(mid.gemm_stream_k);
  CHECK(tflops(mid) == doctest::Approx(164.7).epsilon(0.01));
}

TEST_CASE("FlashAttention-2 fwd+bwd matches the H100 and A100 figures (FlashAttention README)") {
  struct Row {
    const char* cluster;
    bool causal;
    std::int64_t head_dim, seq;
    double measured_tflops;
  };
  // Bars read off the FA README figures: hidden 2048 (heads = 2048 / head_dim), batch 16k / seqlen.
  // Both passes run at the curve's rate, so their device times add up to the figure's.
  const Row rows[] = {
      {"h100-sxm-80gb", false, 64, 512, 215},   {"h100-sxm-80gb", false, 128, 2048, 320},
      {"h100-sxm-80gb", false, 128, 16384, 338}, {"h100-sxm-80gb", true, 64, 4096, 257},
      {"h100-sxm-80gb", true, 128, 512, 163},    {"h100-sxm-80gb", true, 128, 8192, 308},
      {"a100-80gb", true, 128, 1024, 133},       {"a100-80gb", false, 64, 8192, 175},
  };
  for (const Row& r : rows) {
    const ClusterSpec c = profile(r.cluster);
    AttentionShape a;
    a.batch = 16384 / r.seq;
    a.heads = a.kv_heads = 2048 / r.head_dim;
    a.seq_q = a.seq_kv = r.seq;
    a.head_dim = r.head_dim;
    a.causal = r.causal;
    const KernelEstimate f = attention_time(c, a, Pass::forward, Dtype::bf16);
    const KernelEstimate b = attention_time(c, a, Pass::backward, Dtype::bf16);
    const double fwd_bwd_tflops =
        (f.flops + b.flops) / (f.seconds - f.launch_seconds + b.seconds - b.launch_seconds) / 1e12;
    CAPTURE(r.cluster);
    CAPTURE(r.seq);
    // The figures are short benchmark runs: training runs them at the sustained clock fraction.
    CHECK(std::abs(rel_err(fwd_bwd_tflops / c.gpu.sustained_clock_fraction, r.measured_tflops)) < 0.02);
    CHECK_FALSE(f.curve_fallback);
    CHECK(b.seconds > f.seconds);
  }
  // Between measured sequence lengths and head dims the rate stays between its neighbours.
  const ClusterSpec h100 = profile("h100-sxm-80gb");
  AttentionShape mid;
  mid.batch = 2;
  mid.heads = mid.kv_heads = 16;
  mid.seq_q = mid.seq_kv = 6000;
  mid.head_dim = 96;
  const double rate = attention_flops(mid, Pass::forward) /
                      attention_time(h100, mid, Pass::forward, Dtype::bf16).compute_seconds / 1e12;
  // The forward runs at the forward-only curves (FA3 paper figures), the backward at what the
  // fwd+bwd figure leaves: causal hd64 and hd128 forward at 8k, at the sustained clock.
  const double sustained = h100.gpu.sustained_clock_fraction;
  CHECK(rate > sustained * 295.0);
  CHECK(rate < sustained * 333.0);
  // The backward's rate is the pair's time less the forward's: r / ((1 + r) / R_fb - 1 / R_f)
  // with r = 2.5 (causal hd128 at 8k: R_fb 308, R_f 333 -> 299.0 TFLOP/s).
  AttentionShape c8k;
  c8k.batch = 2;
  c8k.heads = c8k.kv_heads = 16;
  c8k.seq_q = c8k.seq_kv = 8192;
  c8k.head_dim = 128;
  c8k.causal = true;
  const double bwd_rate = attention_flops(c8k, Pass::backward) /
                          attention_time(h100, c8k, Pass::backward, Dtype::bf16).compute_seconds / 1e12;
  CHECK(bwd_rate == doctest::Approx(sustained * 2.5 / (3.5 / 308.0 - 1 / 333.0)).epsilon(1e-9));
}

TEST_CASE("a FlashAttention-1 class kernel runs at half the FA2 rate (FA2 paper: ~2x speedup)") {
  const ClusterSpec c = profile("a100-80gb");
  AttentionShape a;
  a.batch = 4;
  a.heads = a.kv_heads = 16;
  a.seq_q = a.seq_kv = 4096;
  a.head_dim = 128;
  AttentionShape v1 = a;
  v1.flash_version = 1;
  for (Pass pass : {Pass::forward, Pass::backward}) {
    const KernelEstimate k2 = attention_time(c, a, pass, Dtype::bf16);
    const KernelEstimate k1 = attention_time(c, v1, pass, Dtype::bf16);
    CHECK(k1.flops == k2.flops);
    CHECK(k1.compute_seconds == doctest::Approx(2.0 * k2.compute_seconds).epsilon(1e-12));
    // A100 causal hd128 at 4k: FA2 173 TFLOP/s fwd+bwd (FlashAttention README), so FA1 class 86.5.
    CHECK(k1.flops / k1.compute_seconds / 1e12 == doctest::Approx(86.5).epsilon(0.01));
  }
  v1.flash_version = 4;
  CHECK_THROWS_AS(attention_time(c, v1, Pass::forward, Dtype::bf16), InputError);
}

TEST_CASE("attention FLOP conventions: causal halves, backward is 2.5x, GQA changes bytes only") {
  AttentionShape a;
  a.batch = 2;
  a.heads = 32;
  a.kv_heads = 32;
  a.seq_q = a.seq_kv = 4096;
  a.head_dim = 128;
  a.causal = false;
  const double full = attention_flops(a, Pass::forward);
  CHECK(full == doctest::Approx(4.0 * 2 * 32 * 4096.0 * 4096 * 128));
  CHECK(attention_flops(a, Pass::backward) == doctest::Approx(2.5 * full));
  a.causal = true;
  CHECK(attention_flops(a, Pass::forward) == doctest::Approx(0.5 * full));
  AttentionShape gqa = a;
  gqa.kv_heads = 8;
  CHECK(attention_flops(gqa, Pass::forward) == attention_flops(a, Pass::forward));
  CHECK(attention_bytes(gqa, Pass::forward, Dtype::bf16) < attention_bytes(a, Pass::forward, Dtype::bf16));
  gqa.kv_heads = 5;  // 32 query heads cannot be grouped over 5 kv heads
  CHECK_THROWS_AS(attention_time(profile("h100-sxm-80gb"), gqa, Pass::forward, Dtype::bf16), InputError);
}

TEST_CASE("sliding-window attention: FLOPs of the window, rate of its masked blocks") {
  AttentionShape a{1, 1, 1, 4096, 4096, 64, true};  // one head of 64 over 4096 tokens, causal
  a.window = 128;
  // 128 x 129 / 2 pairs for the first 128 queries and 128 for each later one, s w - w^2 / 2 in
  // the continuous count the causal one uses: 4096 x 128 - 8192 = 516,096 pairs of 4 d FLOPs.
  CHECK(attention_flops(a, Pass::forward) == doctest::Approx(4.0 * 64 * 516096));
  CHECK(attention_flops(a, Pass::backward) == doctest::Approx(2.5 * 4.0 * 64 * 516096));
  AttentionShape wide = a;
  wide.window = 4096;  // a window as long as the sequence is the causal mask
  CHECK_FALSE(wide.windowed());
  AttentionShape causal = a;
  causal.window = 0;
  CHECK(attention_flops(wide, Pass::forward) == attention_flops(causal, Pass::forward));
  // A context-parallel rank's quarter of the queries does a quarter of the window's pairs.
  AttentionShape cp = a;
  cp.seq_q = 1024;
  CHECK(attention_flops(cp, Pass::forward) == doctest::Approx(attention_flops(a, Pass::forward) / 4));
  AttentionShape bidirectional = a;
  bidirectional.causal = false;
  CHECK_THROWS_AS(attention_time(profile("h100-sxm-80gb"), bidirectional, Pass::forward, Dtype::bf16), InputError);

  // cudnn-frontend's gpt-oss preset (head_dim 64, window 128, causal, bf16; NVIDIA/cudnn-frontend
  // @3929da2 sdpa_benchmark_training results, unmasked pairs counted) runs at 150-190 TFLOP/s on
  // GB200. Burst clocks, as the benchmark ran; batch 2 x 64 query heads over 8 kv heads, 8k tokens.
  ClusterSpec gb200 = profile("gb200");
  gb200.gpu.sustained_clock_fraction = 1.0;
  gb200.gpu.attention_sustained_clock_fraction = 0;
  AttentionShape oss{2, 64, 8, 8192, 8192, 64, true};
  oss.backend = AttentionBackend::transformer_engine;
  oss.window = 128;
  const KernelEstimate w = attention_time(gb200, oss, Pass::forward, Dtype::bf16);
  const double tflops = w.flops / w.seconds / 1e12;
  CHECK(tflops > 150);
  CHECK(tflops < 190);
  // The same kernel without the window runs the causal curve at 8k, over four times the rate.
  oss.window = 0;
  const KernelEstimate full = attention_time(gb200, oss, Pass::forward, Dtype::bf16);
  CHECK(full.flops / full.seconds / 1e12 > 4 * tflops);
}

TEST_CASE("memory-bound kernels run at 0.627 of the STREAM copy bandwidth (Azure BabelStream)") {
  // Eager element-wise kernels reach 0.627 of STREAM copy: the profiles' elementwise_efficiency,
  // the shipped joint fit of tests/regen_fits.sh over the dev sets (docs/validation.md).
  struct Row {
    const char* cluster;
    double stream_copy_bytes_per_s;
  };
  const Row rows[] = {{"a100-80gb", 1.61e12}, {"h100-sxm-80gb", 2.90e12}, {"h200-141gb", 4.01e12}};
  for (const Row& r : rows) {
    const ClusterSpec c = profile(r.cluster);
    const double bytes = 16e9;  // large enough that the launch is < 0.1%
    const KernelEstimate e = memory_bound_time(c, bytes);
    CAPTURE(r.cluster);
    CHECK(e.memory_bound);
    CHECK(bytes / e.seconds == doctest::Approx(0.627 * r.stream_copy_bytes_per_s).epsilon(0.01));
    // A tiny kernel costs its launch.
    CHECK(memory_bound_time(c, 1024).seconds == doctest::Approx(c.gpu.kernel_launch_seconds).epsilon(0.01));
  }
  // A GEMM's own HBM bound still streams at the STREAM rate: its operands are read in bulk.
  const ClusterSpec h100 = profile("h100-sxm-80gb");
  const KernelEstimate skinny = gemm_time(h100, {802816, 192, 768}, Dtype::fp8);
  CHECK(skinny.bytes / skinny.memory_seconds == doctest::Approx(2.90e12).epsilon(0.01));
  CHECK(memory_bound_time(profile("h100-sxm-80gb"), 0).seconds == 0.0);
  CHECK_THROWS_AS(memory_bound_time(profile("h100-sxm-80gb"), -1.0), InputError);
}

TEST_CASE("more work never takes less time, within one shape family") {
  const std::vector<std::int64_t> sizes = [] {
    std::vector<std::int64_t> v;
    for (double x = 1; x < 300000; x = std::ceil(x * 1.07) + 1) v.push_back(static_cast<std::int64_t>(x));
    return v;
  }();
  for (const std::string& name : kProfiles) {
    const ClusterSpec c = profile(name);
    for (const GemmCurve& curve : c.gpu.gemm_curves) {
      if (c.peak_flops_per_s(curve.dtype) <= 0) continue;
      CAPTURE(name);
      CAPTURE(to_string(curve.dtype));
      // Square, M-only, N-only and K-only sweeps (the LLM projection family varies M = tokens).
      const auto shapes = [](std::int64_t x) {
        return std::vector<GemmShape>{{x, x, x}, {x, 4096, 4096}, {8192, x, 1024}, {8192, 1024, x}};
      };
      std::vector<double> prev(4, 0.0);
      for (std::int64_t x : sizes) {
        const auto s = shapes(x);
        for (std::size_t i = 0; i < s.size(); ++i) {
          // cuBLAS's heuristic takes stream-K over whole-tile waves only when it saves more than
          // the margin, so a larger GEMM that crosses to stream-K may run that much faster, no more.
          const double t = gemm_time(c, s[i], curve.dtype).seconds;
          CHECK(t >= (1 - c.gpu.gemm_stream_k_min_saving) * prev[i]);
          prev[i] = t;
        }
      }
    }
    // Attention grows with sequence length, head dim and batch.
    double prev_attention = 0;
    for (std::int64_t seq = 128; seq <= 65536; seq += seq / 4) {
      AttentionShape a;
      a.heads = a.kv_heads = 16;
      a.seq_q = a.seq_kv = seq;
      const double t = attention_time(c, a, Pass::forward, Dtype::bf16).seconds;
      CHECK(t >= prev_attention);
      prev_attention = t;
    }
  }
}

TEST_CASE("a faster GPU is never slower") {
  // Each pair: the second has >= peak and >= HBM bandwidth in every dtype both support.
  // Equal hardware (H100 vs H200 compute) differs by its own sweeps: the FP8 tile rate of their
  // large squares is 0.713 (H100) and 0.707 (H200) of the same peak.
  constexpr double kTie = 1 + 0.01;
  const std::pair<const char*, const char*> pairs[] = {
      {"a100-80gb", "h100-sxm-80gb"}, {"h100-sxm-80gb", "h200-141gb"}, {"h100-sxm-80gb", "b200"},
      {"h200-141gb", "gb200"},        {"a100-40gb", "a100-80gb"},
  };
  const std::vector<GemmShape> gemms = {{1, 1, 1},         {256, 256, 256},     {1024, 1024, 1024},
                                        {4096, 4096, 4096}, {16384, 8192, 8192}, {802816, 192, 768},
                                        {8192, 28672, 4096}, {65536, 128, 128},  {300, 70000, 5000}};
  for (const auto& [slow_name, fast_name] : pairs) {
    const ClusterSpec slow = profile(slow_name), fast = profile(fast_name);
    const std::string slow_label(slow_name), fast_label(fast_name);  // CAPTURE cannot name a binding in clang 14
    CAPTURE(slow_label);
    CAPTURE(fast_label);
    for (Dtype d : {Dtype::bf16, Dtype::fp16, Dtype::fp8}) {
      if (slow.peak_flops_per_s(d) <= 0 || fast.peak_flops_per_s(d) <= 0) continue;
      for (const GemmShape& g : gemms) {
        // Blackwell GEMMs are still priced as the equivalent square of their sweep, whose points
        // below 2048^3 hold the sweep's fixed per-kernel latency that the launch adds again
        // (docs/compute.md, "Not modelled"): compared with scheduled GPUs from there up.
        if (fast.gpu.arch != slow.gpu.arch && fast.gpu.arch >= "sm100" && g.flops() < 2.0 * 2048 * 2048 * 2048)
          continue;
        CAPTURE(g.m);
        CHECK(gemm_time(fast, g, d).seconds <= gemm_time(slow, g, d).seconds * kTie);
      }
    }
    // From 2k up, where every GPU here has measured curves of both masks: below it B200's cuDNN
    // meets H100's (measured B200 / H100 causal forward 2.2x at 4k, 1.9x at 2k, 1.4x at 1k), and
    // B200's full-mask attention borrows its causal curves.
    for (std::int64_t seq : {2048, 3000, 8192, 32768}) {
      for (bool causal : {false, true}) {
        AttentionShape a;
        a.heads = 32;
        a.kv_heads = 8;
        a.seq_q = a.seq_kv = seq;
        a.causal = causal;
        // The kernel each GPU's Transformer Engine runs (FA2 on A100, cuDNN after): flash-attn 2
        // itself is slower on B200 than on H100 at short sequences (154 vs 260 TFLOP/s forward
        // at 1k, measured), so "faster GPU" holds for the kernel the stack picks, not for FA2.
        a.backend = AttentionBackend::transformer_engine;
        CAPTURE(seq);
        CAPTURE(causal);
        for (Pass p : {Pass::forward, Pass::backward})
          CHECK(attention_time(fast, a, p, Dtype::bf16).seconds <= attention_time(slow, a, p, Dtype::bf16).seconds * kTie);
      }
    }
    for (double bytes : {1e3, 1e6, 1e9})
      CHECK(memory_bound_time(fast, bytes).seconds <= memory_bound_time(slow, bytes).seconds * kTie);
  }
}

TEST_CASE("a dtype without a curve uses the bf16 curve and says so; a dtype without a peak is an error") {
  const ClusterSpec a100 = profile("a100-80gb");  // fp32 and tf32 peaks, no fp32/tf32 curve
  const KernelEstimate e = gemm_time(a100, {4096, 4096, 4096}, Dtype::tf32);
  CHECK(e.curve_fallback);
  CHECK(e.curve_dtype == Dtype::bf16);
  // The bf16 curve's per-tile rate, but each tile's fixed cost in TF32's own K: its K blocks are
  // 32 deep (four-byte operands), so 64 K against bf16's 128. Same waves (4096^2 is 512 tiles of
  // 128x256 on 108 SMs): the efficiency ratio is (4096 + 128) / (4096 + 64), to within the
  // launch taken off each sweep point, a smaller share at TF32's slower rate (1e-4).
  CHECK(gemm_time(a100, {4096, 4096, 4096}, Dtype::tf32).gemm_tile_overhead_k == 64);
  CHECK(gemm_efficiency(a100, {4096, 4096, 4096}, Dtype::tf32) ==
        doctest::Approx(gemm_efficiency(a100, {4096, 4096, 4096}, Dtype::bf16) * 4224.0 / 4160.0).epsilon(1e-4));
  CHECK_THROWS_AS(gemm_time(a100, {4096, 4096, 4096}, Dtype::fp8), InputError);  // A100 has no FP8
  CHECK_FALSE(gemm_time(profile("h100-sxm-80gb"), {4096, 4096, 4096}, Dtype::fp8).curve_fallback);
}

TEST_CASE("degenerate shapes") {
  const ClusterSpec h100 = profile("h100-sxm-80gb");
  CHECK(gemm_time(h100, {0, 4096, 4096}, Dtype::bf16).seconds == 0.0);  // nothing launched
  CHECK_THROWS_AS(gemm_time(h100, {-1, 4096, 4096}, Dtype::bf16), InputError);
  // Batched GEMM = the same work as its matrices stacked along M, plus each matrix's own B.
  const KernelEstimate batched = gemm_time(h100, GemmShape{4096, 4096, 4096, 8}, Dtype::bf16);
  const KernelEstimate stacked = gemm_time(h100, GemmShape{8 * 4096, 4096, 4096}, Dtype::bf16);
  CHECK(batched.flops == stacked.flops);
  CHECK(batched.compute_seconds == doctest::Approx(stacked.compute_seconds));
  CHECK(batched.bytes > stacked.bytes);
  // A 1x1x1 GEMM is all launch.
  CHECK(gemm_time(h100, {1, 1, 1}, Dtype::bf16).seconds == doctest::Approx(h100.gpu.kernel_launch_seconds).epsilon(0.01));
}

TEST_CASE("an estimate allocates nothing") {
  const ClusterSpec h100 = profile("h100-sxm-80gb");
  AttentionShape a;
  a.seq_q = a.seq_kv = 8192;
  const long before = g_allocations.load();
  double sink = 0;
  for (int i = 0; i < 100; ++i) {
    sink += gemm_time(h100, {8192 + i, 1024, 4096}, Dtype::bf16).seconds;
    sink += attention_time(h100, a, Pass::backward, Dtype::bf16).seconds;
    sink += memory_bound_time(h100, 1e6 * i + 1).seconds;
  }
  CHECK(g_allocations.load() == before);
  CHECK(sink > 0);
}

TEST_CASE("meshplan kernel CLI: JSON contract and one-line errors") {
  const std::filesystem::path bin = test::meshplan_bin();
  if (!std::filesystem::exists(bin)) {
    MESSAGE("meshplan binary not built; CLI checks skipped");
    return;
  }
  auto run = [&](const std::string& args, int& status) {
    const std::string cmd = bin.string() + " kernel " + args + " 2>&1";
    std::string out;
    FILE* p = popen(cmd.c_str(), "r");
    REQUIRE(p != nullptr);
    char buf[4096];
    while (std::size_t n = std::fread(buf, 1, sizeof buf, p)) out.append(buf, n);
    status = pclose(p);
    return out;
  };
  int status = 0;
  const std::string out = run("--cluster h100-sxm-80gb --gemm 8192x8192x8192 --dtype bf16 --json", status);
  REQUIRE(status == 0);
  const auto j = nlohmann::json::parse(out);
  // The sweep's 797.5 TFLOP/s (0.806 of peak) at the sustained clock, 0.836 of it.
  CHECK(j.at("tflops").get<double>() == doctest::Approx(0.836 * 797.5).epsilon(0.05));
  CHECK(j.at("time_us").get<double>() > 0);
  CHECK(j.at("efficiency").get<double>() == doctest::Approx(0.836 * 0.806).epsilon(0.05));
  CHECK(j.at("sustained_clock_fraction").get<double>() == 0.836);
  CHECK(j.at("bound").get<std::string>() == "compute");
  // The schedule is named: 2048 128x256 tiles in 16 waves of 15.5 over 132 SMs, at the tile
  // rate of the 4096^3 sweep point.
  CHECK(j.at("schedule").get<std::string>() == "data-parallel");
  CHECK(j.at("tiles").get<double>() == 2048);
  CHECK(j.at("waves").get<double>() == 16);
  CHECK(j.at("tile_efficiency").get<double>() == doctest::Approx(0.868).epsilon(0.002));
  CHECK(j.at("equivalent_square_dim").is_null());
  CHECK(j.at("tile_overhead_k").get<double>() == 128);
  CHECK(j.at("curve_source").get<std::string>() == "h100_torch_gemm");
  // Blackwell tiles pay nothing beside their K loop: 15872x4096x4096 (no padding) is its cube root.
  const auto bw = nlohmann::json::parse(run("--cluster b300 --gemm 15872x4096x4096 --json", status));
  CHECK(status == 0);
  CHECK(bw.at("tile_overhead_k").get<double>() == 0);
  CHECK(bw.at("schedule").get<std::string>() == "equivalent-square");
  CHECK(bw.at("equivalent_square_dim").get<double>() == doctest::Approx(std::cbrt(15872.0 * 4096 * 4096)).epsilon(1e-9));
  CHECK(bw.at("curve_source").get<std::string>() == "b300_bf16_gemm");

  const auto att = nlohmann::json::parse(
      run("--cluster h100-sxm-80gb --attention b=1,heads=32,seq=8192,head_dim=128,causal=1 --pass bwd --json", status));
  CHECK(status == 0);
  CHECK(att.at("tflops").get<double>() == doctest::Approx(0.836 * 308).epsilon(0.05));
  CHECK(att.at("kernel").get<std::string>() == "fa2");  // generic runtime: the flash-attn package
  CHECK(att.at("curve_source").get<std::string>() == "fa2_h100");
  // Megatron's Transformer Engine runs cuDNN fused attention on Blackwell: B200 causal hd128 8k
  // forward 1384 TFLOP/s measured (cudnn-frontend), at the microbenchmark clock with --burst.
  const auto te = nlohmann::json::parse(run("--cluster b200 --runtime megatron --burst --attention "
                                            "b=1,heads=128,kv_heads=8,seq=8192,head_dim=128,causal=1 --pass fwd --json",
                                            status));
  CHECK(status == 0);
  CHECK(te.at("kernel").get<std::string>() == "cudnn");
  CHECK(te.at("curve_pass").get<std::string>() == "fwd");
  CHECK(te.at("tflops").get<double>() == doctest::Approx(1384).epsilon(0.01));
  CHECK(te.contains("time_us"));

  const auto mem = nlohmann::json::parse(run("--cluster h100-sxm-80gb --memory-bytes 16e9 --json", status));
  CHECK(status == 0);
  CHECK(mem.at("bound").get<std::string>() == "memory");

  for (const char* bad : {"--gemm 8192x8192", "--gemm 0x1x1", "--gemm axbxc", "--gemm 8x8x8 --dtype int7",
                          "--attention heads=32", "--attention b=1,heads=32,seq=8,bogus=1",
                          "--cluster h100-sxm-80gb --gemm 8x8x8 --dtype fp4",
                          "--attention heads=8,seq=1024 --attention-kernel fa9", "--attention heads=8,seq=1024 --runtime jax"}) {
    const std::string err = run(bad, status);
    CAPTURE(bad);
    CAPTURE(err);
    CHECK(status != 0);
    CHECK(err.find("error") != std::string::npos);
    CHECK(err.find('\n') == err.size() - 1);  // one line
  }
}

TEST_CASE("per-tile overhead: a short K loop costs more per FLOP, squares keep their measured time") {
  const ClusterSpec a100 = profile("a100-80gb");
  // The tile rate is the best the large squares imply: 16384^3 (0.8221 of peak over 76 waves of
  // 75.85 128x256 tiles on 108 SMs, K 16384 + 128, less the 4 us latency): 0.830; 8192^3 then
  // runs 2048 tiles in 19 waves of 18.96 at K 8192 + 128, within 0.5 % of its own sweep point.
  const KernelEstimate square = gemm_time(a100, {8192, 8192, 8192}, Dtype::fp16);
  CHECK(square.gemm_tile_efficiency == doctest::Approx(0.830).epsilon(0.002));
  CHECK(square.compute_seconds == doctest::Approx(2.0 * 8192.0 * 8192 * 8192 / (312e12 * 0.8131)).epsilon(0.005));
  // Same FLOPs, K 8x shorter and M 8x longer: the tiles' fixed cost is spread over 1024 instead of
  // 8192 K, so the work grows by (1024 + 128) / 1024 against (8192 + 128) / 8192 (+10 %), less
  // the finer last wave of the 128x128 tiles.
  const KernelEstimate short_k = gemm_time(a100, {65536, 8192, 1024}, Dtype::fp16);
  CHECK(short_k.compute_seconds > 1.08 * square.compute_seconds);
  CHECK(short_k.compute_seconds < 1.12 * square.compute_seconds);
  // And the A100 skinny sweep point is met within 4 % (157.8 TFLOP/s, Azure ND A100 v4).
  const KernelEstimate skinny = gemm_time(a100, {802816, 192, 768}, Dtype::fp16);
  CHECK(tflops(skinny) == doctest::Approx(157.8).epsilon(0.04));
}

TEST_CASE("per-tile overhead: none on Blackwell, whose epilogue overlaps the next tile") {
  // Blackwell's epilogue runs under the next tile's MMAs (gpu.gemm_tile_overhead_k = 0): B300's
  // MAMF best shape (K = 1024) and TransformerEngine's 15872x4096x4096 both sit on the curve's top,
  // 1769 / 2250 of peak, at the microbenchmarks' clock.
  ClusterSpec b300 = profile("b300");
  b300.gpu.sustained_clock_fraction = 1;
  CHECK(gemm_efficiency(b300, {12288, 18432, 1024}, Dtype::bf16) == doctest::Approx(1769.0 / 2250).epsilon(1e-3));
  CHECK(gemm_efficiency(b300, {15872, 4096, 4096}, Dtype::bf16) == doctest::Approx(1769.0 / 2250).epsilon(1e-3));
  // Hopper keeps 128 K per tile: at the same tile grid K = 1024 does (1024 + 128) / 1024 the work per
  // FLOP of K = 8192's (8192 + 128) / 8192, both on the flat top: 1.125 / 1.0156 = 1.108 slower.
  ClusterSpec h100 = profile("h100-sxm-80gb");
  const double short_k = gemm_efficiency(h100, {16384, 16384, 1024}, Dtype::bf16);
  const double long_k = gemm_efficiency(h100, {16384, 16384, 8192}, Dtype::bf16);
  CHECK(long_k / short_k == doctest::Approx((1152.0 / 1024) / (8320.0 / 8192)).epsilon(0.02));
}

TEST_CASE("attention below the first measured length: the fixed-cost hyperbola through the first two points") {
  // H200's cuDNN causal forward curve starts at 2048 in FP8 (698 and 854 TFLOP/s at 2k and 4k):
  // R s / (s + s0) through them has s0 = 2048 x 4096 x (854 - 698) / (698 x 4096 - 854 x 2048)
  // = 1093, so 1k runs at 698 x (2048 + s0) / 2048 x 1024 / (1024 + s0).
  ClusterSpec h200 = profile("h200-141gb");
  h200.gpu.sustained_clock_fraction = h200.gpu.attention_sustained_clock_fraction = 1;
  AttentionShape a;
  a.heads = 64;
  a.kv_heads = 8;
  a.head_dim = 128;
  a.causal = true;
  a.kernel = AttentionKernel::cudnn;
  const double s0 = 2048.0 * 4096 * (854 - 698) / (698.0 * 4096 - 854.0 * 2048);
  for (std::int64_t seq : {512, 1024, 2048}) {
    a.seq_q = a.seq_kv = seq;
    const KernelEstimate e = attention_time(h200, a, Pass::forward, Dtype::fp8);
    const double expected = 698e12 * (2048 + s0) / 2048 * seq / (seq + s0);
    CAPTURE(seq);
    CHECK(e.flops / e.compute_seconds == doctest::Approx(expected).epsilon(1e-9));
  }
  // A curve that does not rise after its first point is held flat below it; one that rises faster
  // than any hyperbola (r1 / r0 above s1 / s0) falls in proportion to s, the limit as s0 grows.
  int edited = 0;
  for (AttentionCurve& c : h200.gpu.attention_curves) {
    if (c.kernel != "cudnn" || c.pass != "fwd" || c.dtype != Dtype::fp8 || !c.causal) continue;
    ++edited;
    a.seq_q = a.seq_kv = 1024;
    c.flops_per_s[1] = c.flops_per_s[0];
    KernelEstimate e = attention_time(h200, a, Pass::forward, Dtype::fp8);
    CHECK(e.flops / e.compute_seconds == doctest::Approx(698e12).epsilon(1e-9));
    c.flops_per_s[1] = 3 * c.flops_per_s[0];
    e = attention_time(h200, a, Pass::forward, Dtype::fp8);
    CHECK(e.flops / e.compute_seconds == doctest::Approx(698e12 * 1024 / 2048).epsilon(1e-9));
  }
  CHECK(edited == 1);
}

namespace {

std::int64_t as_int(const std::string& s) { return std::stoll(s); }

}  // namespace

// Every published GEMM and attention point for the Blackwell, 500 W Hopper and PCIe Hopper
// profiles (and the Hopper attention curves) lives in tests/cost/measured_kernels.csv with its
// source. `check` rows must come out within 10 % of the measurement; `excluded` rows carry the
// reason the model cannot match them, and warn if they start matching. Burst rows are compared
// at the microbenchmark's clock (sustained_clock_fraction 1), sustained rows at the profile's.
TEST_CASE("measured kernels: the profiles reproduce the published GEMM and attention points") {
  const test::CsvTable t = test::read_csv(test::data_root() / "tests" / "cost" / "measured_kernels.csv");
  REQUIRE(t.rows.size() > 400);
  std::map<std::string, ClusterSpec> clusters;
  int checked = 0, excluded = 0;
  std::string table = "\n  cluster        kind       kernel dtype pass  hd  shape                   measured predicted  err   role\n";
  for (const auto& r : t.rows) {
    const std::string name = t.at(r, "cluster");
    if (clusters.count(name) == 0) clusters.emplace(name, profile(name));
    ClusterSpec c = clusters.at(name);
    const bool sustained = t.at(r, "clocks") == "sustained";
    REQUIRE((sustained || t.at(r, "clocks") == "burst"));
    if (!sustained)
      c.gpu.sustained_clock_fraction = c.gpu.attention_sustained_clock_fraction =
          c.gpu.low_precision_sustained_clock_fraction = 1;
    const std::optional<Dtype> dtype = parse_dtype(t.at(r, "dtype"));
    REQUIRE(dtype.has_value());
    KernelEstimate e;
    std::string shape;
    if (t.at(r, "kind") == "gemm") {
      const GemmShape g{as_int(t.at(r, "m")), as_int(t.at(r, "n")), as_int(t.at(r, "k")), as_int(t.at(r, "batch"))};
      e = gemm_time(c, g, *dtype);
      CHECK_MESSAGE(e.curve_dtype == *dtype, name, " has no ", t.at(r, "dtype"), " GEMM curve");
      shape = std::to_string(g.m) + "x" + std::to_string(g.n) + "x" + std::to_string(g.k);
    } else if (t.at(r, "kind") == "te_layer") {
      // Transformer Engine's GEMM profiling layer: m tokens, hidden n, intermediate k; the fprop,
      // dgrad and wgrad of QKV (n -> 3n), attention out (n -> n), MLP up (n -> k) and down (k -> n),
      // reported as their total FLOPs over their total time.
      const std::int64_t tok = as_int(t.at(r, "m")), h = as_int(t.at(r, "n")), f = as_int(t.at(r, "k"));
      const GemmShape fprop[] = {{tok, 3 * h, h, 1}, {tok, h, h, 1}, {tok, f, h, 1}, {tok, h, f, 1}};
      double device_seconds = 0;
      for (const GemmShape& g : fprop) {
        // data gradient m x k = (m x n)(n x k), weight gradient k x n = (k x m)(m x n)
        for (const GemmShape& s : {g, GemmShape{g.m, g.k, g.n, 1}, GemmShape{g.k, g.n, g.m, 1}}) {
          const KernelEstimate one = gemm_time(c, s, *dtype);
          CHECK_MESSAGE(one.curve_dtype == *dtype, name, " has no ", t.at(r, "dtype"), " GEMM curve");
          e.flops += one.flops;
          // A scheduled GEMM's fixed latency is GPU time of the layer too; the equivalent-square
          // pricing (Blackwell) compares its device part, as its curves were placed.
          device_seconds += one.seconds - (one.equivalent_square_dim > 0 ? one.launch_seconds : 0.0);
        }
      }
      e.seconds = device_seconds;  // launch_seconds stays 0: device_tflops is flops / device_seconds
      shape = "layer " + std::to_string(tok) + "/" + std::to_string(h) + "/" + std::to_string(f);
    } else {
      REQUIRE(t.at(r, "kind") == "attention");
      AttentionShape a;
      a.batch = as_int(t.at(r, "batch"));
      a.heads = as_int(t.at(r, "heads"));
      a.kv_heads = as_int(t.at(r, "kv_heads"));
      a.seq_q = a.seq_kv = as_int(t.at(r, "seq"));
      a.head_dim = as_int(t.at(r, "head_dim"));
      a.causal = t.at(r, "causal") == "1";
      // torch SDPA's path to cuDNN is the cuDNN family called through torch.
      const bool torch_path = t.at(r, "kernel") == "torch-sdpa-cudnn";
      const std::optional<AttentionKernel> k =
          torch_path ? std::optional<AttentionKernel>(AttentionKernel::cudnn) : parse_attention_kernel(t.at(r, "kernel"));
      REQUIRE(k.has_value());
      a.kernel = *k;
      if (torch_path) a.backend = AttentionBackend::torch_sdpa;
      const std::string library = t.at(r, "library");
      if (!library.empty()) {
        REQUIRE(library.rfind("cudnn ", 0) == 0);
        const std::optional<int> v = parse_library_version(library.substr(6));
        REQUIRE(v.has_value());
        a.cudnn_version = *v;
      }
      const std::string pass = t.at(r, "pass");
      REQUIRE((pass == "fwd" || pass == "bwd"));
      e = attention_time(c, a, pass == "fwd" ? Pass::forward : Pass::backward, *dtype);
      CHECK_MESSAGE(e.attention_kernel == *k, name, " has no ", t.at(r, "kernel"), " attention curve");
      if (t.at(r, "role") == "check")
        CHECK_MESSAGE(e.curve_dtype == *dtype, name, " has no ", t.at(r, "dtype"), " ", t.at(r, "kernel"),
                      " attention curve");
      char buf[64];
      std::snprintf(buf, sizeof buf, "b%lld h%lld s%lld", static_cast<long long>(a.batch),
                    static_cast<long long>(a.heads), static_cast<long long>(a.seq_q));
      shape = buf;
    }
    // A scheduled GEMM's fixed per-kernel latency is GPU time that a back-to-back sweep holds
    // once per kernel, as the estimate does (docs/compute.md); attention curves and the
    // equivalent-square GEMM curves (Blackwell, DeepGEMM) are device rates.
    const bool scheduled = t.at(r, "kind") == "gemm" && e.equivalent_square_dim == 0;
    const double predicted = scheduled ? tflops(e) : device_tflops(e);
    const double measured = std::stod(t.at(r, "measured_tflops"));
    const double err = rel_err(predicted, measured);
    const bool ok = std::abs(err) <= 0.10;
    const bool is_excluded = t.at(r, "role") == "excluded";
    REQUIRE((is_excluded || t.at(r, "role") == "check"));
    char line[512];
    std::snprintf(line, sizeof line, "  %-14s %-9s %-6s %-5s %-4s %3s %-23s %8.1f %8.1f %+6.1f%% %s%s\n", name.c_str(),
                  t.at(r, "kind").c_str(), t.at(r, "kernel").c_str(), t.at(r, "dtype").c_str(), t.at(r, "pass").c_str(),
                  t.at(r, "head_dim").c_str(), shape.c_str(), measured, predicted, 100 * err,
                  is_excluded ? "excluded" : "check", ok ? "" : (is_excluded ? " (out)" : " FAIL"));
    table += line;
    const std::string source = t.at(r, "source");
    CAPTURE(name);
    CAPTURE(shape);
    CAPTURE(source);
    CHECK_FALSE(source.empty());
    if (is_excluded) {
      ++excluded;
      CHECK_FALSE(t.at(r, "reason").empty());
      WARN_MESSAGE(!ok, "excluded point now within 10 %, re-examine its reason: ", name, " ", shape);
    } else {
      ++checked;
      CHECK_MESSAGE(ok, "predicted ", predicted, " vs measured ", measured, " TFLOP/s (", 100 * err, " %)");
    }
  }
  MESSAGE(table);
  MESSAGE(checked, " points checked within 10 %, ", excluded, " excluded with a reason");
}

TEST_CASE("attention kernel per framework: TE -> cuDNN from Hopper, SDPA -> cuDNN on Blackwell, flash-attn -> FA2") {
  AttentionShape a;
  a.batch = 1;
  a.heads = a.kv_heads = 16;
  a.seq_q = a.seq_kv = 4096;
  struct Case {
    const char* cluster;
    AttentionBackend backend;
    AttentionKernel expected;
  };
  const Case cases[] = {
      {"a100-80gb", AttentionBackend::transformer_engine, AttentionKernel::fa2},
      {"h100-sxm-80gb", AttentionBackend::transformer_engine, AttentionKernel::cudnn},
      {"b200", AttentionBackend::transformer_engine, AttentionKernel::cudnn},
      {"h100-sxm-80gb", AttentionBackend::torch_sdpa, AttentionKernel::fa2},
      {"gb200", AttentionBackend::torch_sdpa, AttentionKernel::cudnn},
      {"b200", AttentionBackend::flash_attn, AttentionKernel::fa2},
      {"h100-sxm-80gb", AttentionBackend::flash_attn, AttentionKernel::fa2},
  };
  for (const Case& k : cases) {
    const ClusterSpec c = profile(k.cluster);
    a.backend = k.backend;
    CAPTURE(k.cluster);
    CAPTURE(std::string(to_string(k.backend)));
    CHECK(attention_kernel_for(c, a) == k.expected);
    CHECK(attention_time(c, a, Pass::forward, Dtype::bf16).attention_kernel == k.expected);
  }
  // A plan's explicit kernel wins; a family the profile lacks falls back to the nearest measured
  // one and says so (A100 has FA2 curves only).
  const ClusterSpec b200 = profile("b200");
  a.backend = AttentionBackend::flash_attn;
  a.kernel = AttentionKernel::fa4;
  const KernelEstimate fa4 = attention_time(b200, a, Pass::forward, Dtype::bf16);
  CHECK(fa4.attention_kernel == AttentionKernel::fa4);
  a.kernel = AttentionKernel::fa2;
  // FA2 on Blackwell runs at Hopper-class rates, ~3x slower than the tcgen05 kernels at 4k.
  CHECK(attention_time(b200, a, Pass::forward, Dtype::bf16).compute_seconds > 3 * fa4.compute_seconds);
  a.kernel = AttentionKernel::cudnn;
  const KernelEstimate fallback = attention_time(profile("a100-80gb"), a, Pass::forward, Dtype::bf16);
  CHECK(fallback.attention_kernel == AttentionKernel::fa2);
  CHECK(fallback.curve_fallback);
  // torch SDPA on GB200 takes its derived torch-path curve: the direct cuDNN rate times B200's
  // measured torch / direct ratio (1171 / 1384 forward at 8k); Transformer Engine the direct one.
  ClusterSpec gb200 = profile("gb200");
  gb200.gpu.sustained_clock_fraction = gb200.gpu.attention_sustained_clock_fraction = 1;
  AttentionShape t;
  t.heads = 128;
  t.kv_heads = 8;
  t.seq_q = t.seq_kv = 8192;
  t.backend = AttentionBackend::torch_sdpa;
  const KernelEstimate torch_path = attention_time(gb200, t, Pass::forward, Dtype::bf16);
  t.backend = AttentionBackend::transformer_engine;
  const KernelEstimate direct = attention_time(gb200, t, Pass::forward, Dtype::bf16);
  CHECK(torch_path.curve_source == "gb200_torch_sdpa_derived");
  CHECK(direct.curve_source == "gb200_cudnn_attention");
  CHECK(torch_path.flops / torch_path.compute_seconds == doctest::Approx(1574e12 * 1171 / 1384).epsilon(1e-3));
  CHECK(direct.flops / direct.compute_seconds == doctest::Approx(1574e12).epsilon(1e-9));
}

TEST_CASE("low-precision GEMMs: one curve per scaling format, nearest one where a part has none") {
  const GemmShape g{8192, 8192, 8192, 1};
  struct Case {
    const char* cluster;
    Dtype asked, priced;
    bool fallback;
  };
  const Case cases[] = {
      {"b200", Dtype::mxfp8, Dtype::mxfp8, false},
      {"b200", Dtype::fp4, Dtype::fp4, false},
      {"b200", Dtype::fp8, Dtype::fp8, false},
      // Transformer Engine runs Float8BlockScaling as MXFP8 GEMMs on Blackwell.
      {"gb200", Dtype::fp8_block, Dtype::mxfp8, true},
      {"h100-sxm-80gb", Dtype::fp8_block, Dtype::fp8_block, false},
      // Hopper has no MX tensor cores and no MXFP8 curve: per-tensor FP8's, flagged.
      {"h100-sxm-80gb", Dtype::mxfp8, Dtype::fp8, true},
  };
  for (const Case& k : cases) {
    const ClusterSpec c = profile(k.cluster);
    const KernelEstimate e = gemm_time(c, g, k.asked);
    CAPTURE(k.cluster);
    CAPTURE(std::string(to_string(k.asked)));
    CHECK(e.curve_dtype == k.priced);
    CHECK(e.curve_fallback == k.fallback);
    // Block-scaled FP8 issues at the FP8 dense rate.
    CHECK(e.peak_flops_per_s == c.peak_flops_per_s(k.asked == Dtype::fp4 ? Dtype::fp4 : Dtype::fp8));
  }
  // Separate curves, not one shape: at 12k^3 B200 MXFP8 runs at 0.523 of peak (the running maximum
  // of its points: the torchao grouped GEMM's 0.512 lies just under the FP8 point at 2580 it
  // borrows), per-tensor FP8 at the MAMF best shape's 0.763 (b200 profile).
  const ClusterSpec b200 = profile("b200");
  CHECK(gemm_curve_efficiency(b200, Dtype::mxfp8, 12438) == doctest::Approx(0.5231).epsilon(1e-9));
  CHECK(gemm_curve_efficiency(b200, Dtype::fp8, 12438) == doctest::Approx(0.7628).epsilon(1e-9));
  // Scale factors stream with the operands: MXFP8 1 + 1/32 bytes per input element.
  const GemmShape s{1024, 2048, 4096, 1};
  CHECK(gemm_bytes(s, Dtype::mxfp8) ==
        doctest::Approx((1.0 + 1.0 / 32) * (1024.0 * 4096 + 4096.0 * 2048) + 2.0 * 1024 * 2048).epsilon(1e-12));
  CHECK(gemm_bytes(s, Dtype::fp4) ==
        doctest::Approx((0.5 + 1.0 / 16) * (1024.0 * 4096 + 4096.0 * 2048) + 2.0 * 1024 * 2048).epsilon(1e-12));
}

TEST_CASE("quantize kernels per recipe: bytes read, copies and scales written (docs/compute.md)") {
  const Gemms one{{1024, 4096, 4096, 1}};  // m x k activation, k x n weight, m x n gradient
  const double mk = 1024.0 * 4096, kn = 4096.0 * 4096, mn = 1024.0 * 4096;
  const double e = 2;  // bf16
  // MXFP8: read bf16, write row- and column-wise E4M3 copies with an E8M0 scale per 32.
  const QuantRecipe mx = quant_recipe(Fp8Recipe::mxfp8);
  CHECK(quantize_forward_bytes(one, e, mx, true) == doctest::Approx((2 + 2 * (1 + 1.0 / 32)) * (mk + kn)));
  CHECK(quantize_forward_bytes(one, e, mx, false) == doctest::Approx((2 + 2 * (1 + 1.0 / 32)) * mk));
  CHECK(quantize_backward_bytes(one, e, mx) == doctest::Approx((2 + 2 * (1 + 1.0 / 32)) * mn));
  CHECK(quantize_forward_kernels(one, mx, true) == 2);
  // NVFP4: the per-tensor amax reads each tensor once more; E2M1 halves, E4M3 per 16 (16x16 for weights).
  const QuantRecipe nv = quant_recipe(Fp8Recipe::nvfp4);
  CHECK(quantize_forward_bytes(one, e, nv, true) ==
        doctest::Approx((4 + 2 * (0.5 + 1.0 / 16)) * mk + (4 + 2 * (0.5 + 1.0 / 256)) * kn));
  CHECK(quantize_forward_kernels(one, nv, true) == 4);
  // Blockwise FP8: an fp32 scale per 1x128 of activations, per 128x128 of weights.
  const QuantRecipe bw = quant_recipe(Fp8Recipe::te_blockwise);
  CHECK(quantize_forward_bytes(one, e, bw, true) ==
        doctest::Approx((2 + 2 * (1 + 4.0 / 128)) * mk + (2 + 2 * (1 + 4.0 / 16384)) * kn));
  // Delayed scaling: fused cast-transpose, no amax pass, plus the history roll of 3 tensors.
  const QuantRecipe dl = quant_recipe(Fp8Recipe::te_delayed);
  CHECK(quantize_forward_bytes(one, e, dl, false) == doctest::Approx(4 * mk + 3 * (2 * 1024 * 4 + 8)));
  CHECK(quantize_backward_bytes(one, e, dl) == doctest::Approx(4 * mn));
  // Current scaling reads each tensor for its amax first: one more read, one more launch.
  const QuantRecipe cur = quant_recipe(Fp8Recipe::te_current);
  CHECK(quantize_backward_bytes(one, e, cur) == doctest::Approx(6 * mn));
  CHECK(quantize_backward_kernels(one, cur) == 2);
  // torchao tensorwise casts the saved bf16 input and weight again in backward.
  const QuantRecipe ao = quant_recipe(Fp8Recipe::torchao_tensorwise);
  CHECK(quantize_forward_bytes(one, e, ao, true) == doctest::Approx(5 * (mk + kn)));
  CHECK(quantize_backward_bytes(one, e, ao) == doctest::Approx(6 * mn + 5 * mk + 5 * kn));
  CHECK(quantize_backward_kernels(one, ao) == 6);
  // With FSDP's float8 all-gather the backward gathers FP8 weights: only the input is recast; the
  // forward casts each rank's shard before the all-gather instead (2e read + 1 written, / shards).
  CHECK(quantize_backward_bytes(one, e, ao, false) == doctest::Approx(6 * mn + 5 * mk));
  CHECK(quantize_backward_kernels(one, ao, false) == 4);
  CHECK(quantize_weight_shard_bytes(one, e, ao, 8) == doctest::Approx(5 * kn / 8));
  // torchao rowwise: forward casts fuse their row amax (e read + 1 written); backward casts the
  // output gradient per row (e + 1) and per column (its own reduction: 2e + 1), and the input and
  // weight along the other dimension (2e + 1 each): 3e + 2 = 8 per gradient element, 5 per input
  // and weight element, against tensorwise's 6 / 5 / 5. Seven launches per linear.
  const QuantRecipe rw = quant_recipe(Fp8Recipe::torchao_rowwise);
  CHECK(quantize_forward_bytes(one, e, rw, true) == doctest::Approx(3 * (mk + kn)));
  CHECK(quantize_backward_bytes(one, e, rw) == doctest::Approx(8 * mn + 5 * mk + 5 * kn));
  CHECK(quantize_backward_kernels(one, rw) == 7);
  // Without torch.compile torchao's casts run as eager aten ops, each a full HBM round trip: abs
  // (2e), amax (e), upcast to fp32 (e + 4), scale (8), clamp (8), cast (4 + 1) = 4e + 25 = 33 bytes
  // per bf16 element against the fused 2e + 1 = 5, in ten launches (four on the scale itself).
  CHECK(eager_cast_bytes(e, 1) == 33);
  const QuantRecipe ao_eager = quant_recipe(Fp8Recipe::torchao_tensorwise, false);
  CHECK(ao_eager.eager_casts);
  CHECK(quantize_forward_bytes(one, e, ao_eager, true) == doctest::Approx(33 * (mk + kn)));
  CHECK(quantize_forward_kernels(one, ao_eager, true) == 20);
  // Backward: the gradient's chain plus its transposed copy (1 byte read, 1 written), then the
  // input's and the weight's chains again.
  CHECK(quantize_backward_bytes(one, e, ao_eager) == doctest::Approx(35 * mn + 33 * mk + 33 * kn));
  CHECK(quantize_backward_kernels(one, ao_eager) == 10 + 1 + 20);
  CHECK(quantize_weight_shard_bytes(one, e, ao_eager, 8) == doctest::Approx(33 * kn / 8));
  // Row-wise: the gradient's row and column copies are two chains (two scaling axes).
  const QuantRecipe rw_eager = quant_recipe(Fp8Recipe::torchao_rowwise, false);
  CHECK(quantize_backward_bytes(one, e, rw_eager) == doctest::Approx(66 * mn + 33 * mk + 33 * kn));
  CHECK(quantize_backward_kernels(one, rw_eager) == 40);
  // Compiled runs and Transformer Engine's fused casts are unchanged by it.
  CHECK_FALSE(quant_recipe(Fp8Recipe::torchao_rowwise, true).eager_casts);
  CHECK_FALSE(quant_recipe(Fp8Recipe::te_current, false).eager_casts);
  // The recipe picks the GEMM format.
  CHECK(low_precision_gemm_dtype(Fp8Recipe::mxfp8) == Dtype::mxfp8);
  CHECK(low_precision_gemm_dtype(Fp8Recipe::te_blockwise) == Dtype::fp8_block);
  CHECK(low_precision_gemm_dtype(Fp8Recipe::nvfp4) == Dtype::fp4);
  CHECK(low_precision_gemm_dtype(Fp8Recipe::te_current) == Dtype::fp8);
}

TEST_CASE("context parallelism: a causal query slice is masked only on its diagonal blocks") {
  const ClusterSpec c = profile("h100-sxm-80gb");
  // cp 8 of a 16k sequence: 2048 queries over 16384 keys, load-balanced (Megatron / TE ring).
  AttentionShape slice;
  slice.batch = 1;
  slice.heads = 64;
  slice.kv_heads = 8;
  slice.seq_q = 2048;
  slice.seq_kv = 16384;
  slice.head_dim = 128;
  slice.causal = true;
  slice.backend = AttentionBackend::transformer_engine;
  AttentionShape block = slice;
  block.seq_kv = 2048;
  AttentionShape full = block;
  full.causal = false;
  auto rate = [&](const AttentionShape& a, Pass p) {
    return attention_flops(a, p) / attention_time(c, a, p, Dtype::bf16).compute_seconds;
  };
  for (Pass p : {Pass::forward, Pass::backward}) {
    const double flops = attention_flops(slice, p);
    // 1/8 of the FLOPs (the diagonal 2048 x 2048 causal block) at the causal rate, 7/8 unmasked.
    const double expected = flops / 8 / rate(block, p) + flops * 7 / 8 / rate(full, p);
    CHECK(attention_time(c, slice, p, Dtype::bf16).compute_seconds == doctest::Approx(expected).epsilon(1e-9));
    CHECK(rate(full, p) > rate(block, p));  // the full mask runs faster on these curves
  }
}

TEST_CASE("cuDNN release: the newest measured by default, a stated one where measured, flagged otherwise") {
  // GB200 holds cudnn-frontend curves of cuDNN 9.22 and 9.17; causal bf16 backward at 2k, 128 q /
  // 8 kv heads: 885 vs 655 TFLOP/s measured (burst clocks).
  ClusterSpec gb200 = profile("gb200");
  gb200.gpu.sustained_clock_fraction = gb200.gpu.attention_sustained_clock_fraction = 1;
  AttentionShape a;
  a.heads = 128;
  a.kv_heads = 8;
  a.seq_q = a.seq_kv = 2048;
  a.kernel = AttentionKernel::cudnn;
  auto rate = [&](int version) {
    a.cudnn_version = version;
    const KernelEstimate e = attention_time(gb200, a, Pass::backward, Dtype::bf16);
    return std::pair{e.flops / e.compute_seconds, e};
  };
  const auto [newest, e_newest] = rate(0);
  CHECK(newest == doctest::Approx(885e12).epsilon(1e-9));
  CHECK(e_newest.curve_version == 9022);
  CHECK_FALSE(e_newest.curve_fallback);
  const auto [old, e_old] = rate(*parse_library_version("9.17"));
  CHECK(old == doctest::Approx(655e12).epsilon(1e-9));
  CHECK(e_old.curve_version == 9017);
  CHECK_FALSE(e_old.curve_fallback);
  const auto [unmeasured, e_unmeasured] = rate(*parse_library_version("9.13.1"));
  CHECK(unmeasured == doctest::Approx(885e12).epsilon(1e-9));
  CHECK(e_unmeasured.curve_fallback);
  // A profile without release-tagged curves ignores the release and flags nothing.
  ClusterSpec h100 = profile("h100-sxm-80gb");
  a.cudnn_version = 9017;
  a.head_dim = 128;
  CHECK_FALSE(attention_time(h100, a, Pass::forward, Dtype::bf16).curve_fallback);
  CHECK(parse_library_version("9") == std::nullopt);
  CHECK(parse_library_version("9.x") == std::nullopt);
  CHECK(parse_library_version("9.17.0.1") == std::nullopt);
  CHECK(library_version_text(9017) == "9.17");
}

TEST_CASE("cuDNN release as a plan key: read, refused when malformed, written back only when set") {
  const std::string base =
      "[model]\nname = \"llama3.1-8b\"\n[cluster]\nprofile = \"gb200\"\ngpus = 8\n"
      "[layout]\ndp_replicate = 8\n[sharding]\nstrategy = \"zero1\"\n[batch]\nseq_len = 4096\n"
      "global_batch = 8\nmicro_batch = 1\n[runtime]\nname = \"megatron\"\n";
  auto read = [](const std::string& text) { return read_plan_toml("p.toml", toml::parse(text)); };
  const RunConfig rc = read(base + "cudnn_version = \"9.17\"\n");
  CHECK(rc.plan.cudnn_version == 9017);
  CHECK(to_plan_toml(rc).find("cudnn_version = \"9.17\"") != std::string::npos);
  CHECK(to_plan_toml(read(base)).find("cudnn_version") == std::string::npos);
  try {
    (void)read(base + "cudnn_version = \"nine\"\n");
    FAIL("accepted");
  } catch (const InputError& e) {
    CHECK(e.key().find("cudnn_version") != std::string::npos);
  }
}

TEST_CASE("tile schedule by hand: waves of 128x256 tiles on 132 SMs, stream-K below a wave") {
  ClusterSpec h200 = profile("h200-141gb");
  h200.gpu.sustained_clock_fraction = 1;
  const double peak = h200.peak_flops_per_s(Dtype::bf16);
  // M = 4096, N = 192, K = 4096: N pads to 256, so 4096 / 128 x 1 = 32 tiles of 128x256, a quarter
  // of one wave on 132 SMs. Whole tiles would leave 100 SMs idle for one tile's K loop; stream-K
  // spreads the padded 4096 x 256 x (4096 + 128) MACs over all of them, plus one tile's 128-deep
  // prologue and epilogue (fixup): saving 73 % > 23.5 %.
  const KernelEstimate skinny = gemm_time(h200, {4096, 192, 4096}, Dtype::bf16);
  const double eta = skinny.gemm_tile_efficiency;
  CHECK(skinny.gemm_stream_k);
  CHECK(skinny.gemm_tiles == doctest::Approx(32));
  CHECK(skinny.gemm_waves == doctest::Approx(32.0 / 132));
  const double stream_k = 2.0 * 4096 * 256 * 4224 / peak + 2.0 * 128 * 256 * 128 * 132 / peak;
  CHECK(skinny.compute_seconds == doctest::Approx(stream_k / eta).epsilon(1e-12));
  // N = 128 and N = 64 pad to the same 128-wide stream-K step: the same tensor-core time.
  CHECK(gemm_time(h200, {4096, 64, 4096}, Dtype::bf16).compute_seconds ==
        doctest::Approx(gemm_time(h200, {4096, 128, 4096}, Dtype::bf16).compute_seconds).epsilon(1e-12));
  // 2560^2 x 4096: 20 x 10 = 200 tiles, 1.52 waves: two whole waves (stream-K would save 23 %,
  // below the margin; measured 90.4 us, as 2816^2's 242 tiles in two waves, 90.0 us).
  const KernelEstimate two = gemm_time(h200, {2560, 2560, 4096}, Dtype::bf16);
  CHECK_FALSE(two.gemm_stream_k);
  CHECK(two.gemm_tiles == 200);
  CHECK(two.gemm_waves == 2);
  CHECK(two.compute_seconds == doctest::Approx(2 * 2.0 * 128 * 256 * 4224 * 132 / peak / eta).epsilon(1e-12));
  CHECK(two.compute_seconds == doctest::Approx(gemm_time(h200, {2816, 2816, 4096}, Dtype::bf16).compute_seconds));
  // 3072^2 x 4096: 288 tiles, 2.18 waves: stream-K saves 26 % of three waves and runs.
  CHECK(gemm_time(h200, {3072, 3072, 4096}, Dtype::bf16).gemm_stream_k);
  // The tile rate: 4096^3 on the H200 curve (0.7971 of peak, 4 waves of 3.88, less 4 us).
  CHECK(eta == doctest::Approx(0.868).epsilon(0.002));
}

// tests/cost/measured_h200_shapes.csv: CUDA-graph GPU times of bf16 torch.mm on the lent H200
// (20 calls per replay, median of 5). The fixed per-kernel latency is in each time once, as in the
// estimate. A kernel of 100 us or more keeps the GPU busy 2 ms per replay and more: those ran at
// the power limit (the large layer GEMMs reach 608-645 TFLOP/s, the sustained 8192^3 rate is 663)
// and are compared at the profile's measured sustained clock (0.836), the shorter ones at the
// burst clock. Excluded, with the physical reason: the M = K = 4096 wave points with N <= 128,
// whose 33.5 MB A operand stays in the 60 MB L2 across the replays (they run faster than HBM can
// deliver it, 9.7 us against 12.9 predicted from HBM), and kernels under 8 us: a CUDA-graph replay
// issues them back to back with no launch gap, while the estimate's fixed latency is the eager
// launch's (the same GEMMs launched eagerly cost 5.9 us and more: calibrate's 256^3 and 512^3);
// they are counted, not compared.
TEST_CASE("H200 GEMMs by shape: waves, stream-K, short K and GPT layer GEMMs") {
  const test::CsvTable t = test::read_csv(test::data_root() / "tests" / "cost" / "measured_h200_shapes.csv");
  const ClusterSpec h200 = profile("h200-141gb");
  ClusterSpec burst = h200;
  burst.gpu.sustained_clock_fraction = 1;
  std::map<std::string, std::vector<double>> errors;
  int checked = 0, excluded = 0, within_10 = 0, graph_launched = 0;
  for (const auto& r : t.rows) {
    const std::string series = t.at(r, "series");
    // fp8_tensorwise / fp8_rowwise: torch._scaled_mm on Llama-3-8B shapes; fp8_bf16_ref the same
    // shapes in bf16. Both scalings are priced on the one FP8 curve (this GPU's own cuBLASLt sweep).
    const bool eight_bit = series == "fp8_tensorwise" || series == "fp8_rowwise";
    if (series != "gemm_wave" && series != "gemm_square" && series != "gemm_shortk" && series != "gemm_layer" &&
        !eight_bit && series != "fp8_bf16_ref")
      continue;
    const GemmShape g{as_int(t.at(r, "m")), as_int(t.at(r, "n")), as_int(t.at(r, "k")), 1};
    const double measured = std::stod(t.at(r, "seconds"));
    if (series == "gemm_wave" && g.n <= 128) {
      ++excluded;
      continue;
    }
    const KernelEstimate e = gemm_time(measured >= 100e-6 ? h200 : burst, g, eight_bit ? Dtype::fp8 : Dtype::bf16);
    const double err = rel_err(e.seconds, measured);
    if (measured < 8e-6) {
      ++graph_launched;
      continue;
    }
    errors[series].push_back(std::abs(err));
    ++checked;
    if (std::abs(err) <= 0.10) ++within_10;
    CAPTURE(series);
    CAPTURE(t.at(r, "label"));
    CAPTURE(g.m);
    CAPTURE(g.n);
    CAPTURE(g.k);
    CAPTURE(measured);
    CAPTURE(e.seconds);
    // Per point 50 %: two tile shapes and one stream-K rule against cuBLAS's per-shape kernel
    // choice miss a few shapes by 28-46 % (the hidden-1024 QKV and proj GEMMs: 768x1024x8192 wgrad runs
    // a split-K over fewer SMs than stream-K would use, 35.6 us against 20.5), and the clock of
    // each replay is only approximated by the 100 us rule; the series' MAPEs below hold the rest.
    CHECK(std::abs(err) <= 0.50);
  }
  auto mape = [](const std::vector<double>& v) {
    double s = 0;
    for (double x : v) s += x;
    return 100 * s / static_cast<double>(v.size());
  };
  MESSAGE(checked, " H200 GEMM shapes checked (", within_10, " within 10 %), ", graph_launched,
          " under 8 us counted, ", excluded, " excluded; MAPE wave ",
          mape(errors["gemm_wave"]), " %, square ", mape(errors["gemm_square"]), " %, short K ",
          mape(errors["gemm_shortk"]), " %, layer ", mape(errors["gemm_layer"]), " %; FP8 tensorwise ",
          mape(errors["fp8_tensorwise"]), " %, rowwise ", mape(errors["fp8_rowwise"]), " %, their bf16 ",
          mape(errors["fp8_bf16_ref"]), " %");
  CHECK(excluded == 2);
  CHECK(mape(errors["gemm_wave"]) < 6.5);
  CHECK(mape(errors["gemm_square"]) < 7.5);
  CHECK(mape(errors["gemm_shortk"]) < 11.0);
  CHECK(mape(errors["gemm_layer"]) < 8.0);
  // torchao's float8 recipes on Hopper: rowwise scaling's scaled-mm is no slower than tensorwise
  // here (0.90-1.02 of its time, median 0.95), so the recipes' measured difference in training is
  // in their casts and all-gathers, not the GEMM. Model: tensorwise 4.5 %, rowwise 8.8 % (priced
  // at tensorwise's rate, +8.8 % bias), bf16 2.4 % MAPE.
  CHECK(mape(errors["fp8_tensorwise"]) < 5.5);
  CHECK(mape(errors["fp8_rowwise"]) < 10.0);
  CHECK(mape(errors["fp8_bf16_ref"]) < 3.5);
}

// The per-expert token counts measure_shapes.py gave torch._grouped_mm (grouped_counts): balanced,
// or skewed as weights 1/sqrt(rank + 1), rounded to 16 (at least 16), the remainder on expert 0.
// Python's round() rounds half to even, as nearbyint does in the default rounding mode.
std::vector<std::int64_t> measured_group_rows(std::int64_t groups, std::int64_t per_expert, bool imbalanced) {
  std::vector<std::int64_t> rows(static_cast<std::size_t>(groups), per_expert);
  if (!imbalanced) return rows;
  const double total = static_cast<double>(groups * per_expert);
  double weights = 0;
  for (std::int64_t r = 0; r < groups; ++r) weights += 1.0 / std::sqrt(static_cast<double>(r + 1));
  std::int64_t sum = 0;
  for (std::int64_t r = 0; r < groups; ++r) {
    const double share = total / std::sqrt(static_cast<double>(r + 1)) / weights / 16;
    rows[static_cast<std::size_t>(r)] = std::max<std::int64_t>(16, static_cast<std::int64_t>(std::nearbyint(share)) * 16);
    sum += rows[static_cast<std::size_t>(r)];
  }
  rows[0] += groups * per_expert - sum;
  return rows;
}

// The clock a power-limited back-to-back loop of one grouped GEMM runs at: a CTA whose rows lie
// past its group's (the 256-row cluster step's padding) multiplies zero-filled operands, which
// draws little power, so the GPU holds a higher clock under its power cap. Dynamic power goes as
// activity x f x V^2 with V roughly proportional to f in the DVFS range, so at a fraction `a` of
// in-bounds tile work the capped clock is sustained / cbrt(a), at most the burst clock.
double power_limited_clock(const ClusterSpec& c, const std::vector<std::int64_t>& rows, std::int64_t n) {
  double real = 0, padded_rows = 0;
  for (const std::int64_t r : rows) {
    real += static_cast<double>(r);
    padded_rows += std::ceil(static_cast<double>(r) / 256.0) * 256.0;
  }
  const double a = real / padded_rows * static_cast<double>(n) / (std::ceil(static_cast<double>(n) / 256.0) * 256.0);
  return std::min(1.0, c.gpu.sustained_clock_fraction / std::cbrt(a));
}

// tests/cost/measured_h200_shapes.csv, series `grouped`: torch._grouped_mm (CUTLASS's sm90
// persistent ptr-array kernel) over 8-32 experts of gpt-oss-120b, Qwen3-30B-A3B and
// Qwen3-235B-A22B widths, 128-2048 tokens per expert, balanced and imbalanced (the exact per-expert
// counts above), up and down projections, CUDA-graph time. Priced by grouped_gemm_time: each
// expert's rows in 256-row cluster steps of 128x256 tiles, in waves over the 132 SMs, each tile
// its K loop plus twice the per-tile fixed cost (docs/compute.md, "Grouped expert GEMMs").
// Clocks: a kernel of 100 us or more runs at the power limit (as the dense shapes above), at the
// clock its in-bounds work allows (power_limited_clock); a shorter one at an unknown clock between
// the burst and that one (the dense shapes' short kernels ran at burst; a graph of 20 grouped
// calls may not), so it is checked against the range the two clocks span.
// Before (one batched GEMM of the mean rows, the dense schedule with stream-K): balanced >= 100 us
// MAPE 7.4 % (bias -5.4), balanced < 100 us bias -25.4 %, imbalanced -19.3 % / -37.1 %.
TEST_CASE("H200 grouped expert GEMMs: per-expert tiles of the persistent grouped kernel") {
  const test::CsvTable t = test::read_csv(test::data_root() / "tests" / "cost" / "measured_h200_shapes.csv");
  const ClusterSpec h200 = profile("h200-141gb");
  std::map<std::string, std::vector<double>> errors;
  int points = 0, within_10 = 0;
  for (const auto& r : t.rows) {
    if (t.at(r, "series") != "grouped") continue;
    const std::string label = t.at(r, "label");
    const std::int64_t groups = as_int(t.at(r, "groups")), n = as_int(t.at(r, "n")), k = as_int(t.at(r, "k"));
    const std::int64_t per_expert = std::stoll(label.substr(label.find("_t") + 2));
    const bool imbalanced = label.find("_imb") != std::string::npos;
    const std::vector<std::int64_t> rows = measured_group_rows(groups, per_expert, imbalanced);
    std::int64_t total = 0;
    for (const std::int64_t x : rows) total += x;
    REQUIRE(total == as_int(t.at(r, "m")));
    const double measured = std::stod(t.at(r, "seconds"));
    ClusterSpec at_clock = h200;
    at_clock.gpu.sustained_clock_fraction = power_limited_clock(h200, rows, n);
    const double limited = grouped_gemm_time(at_clock, rows, n, k, Dtype::bf16).seconds;
    at_clock.gpu.sustained_clock_fraction = 1;
    const double burst = grouped_gemm_time(at_clock, rows, n, k, Dtype::bf16).seconds;
    // The error: against the power-limited estimate, or for a short kernel the distance to the
    // nearer end of the [limited, burst] range (0 inside it).
    double err = rel_err(limited, measured);
    if (measured < 100e-6) err = measured > limited ? rel_err(limited, measured) : measured < burst ? rel_err(burst, measured) : 0.0;
    errors[std::string(imbalanced ? "imbalanced" : "balanced") + (measured >= 100e-6 ? " large" : " small")].push_back(err);
    ++points;
    if (std::abs(err) <= 0.10) ++within_10;
    CAPTURE(label);
    CAPTURE(measured);
    CAPTURE(limited);
    CAPTURE(burst);
    // Per point 40 %: the Qwen3-30B down projections of 8 experts (K = 768, 19-33 us) run 24-37 %
    // slower than priced, as short as a few waves of short tiles, where the kernel's own setup
    // (the per-group descriptor arrays it builds on the GPU before the GEMM) is not priced.
    CHECK(std::abs(err) <= 0.40);
  }
  auto mean = [](const std::vector<double>& v, bool absolute) {
    double s = 0;
    for (double x : v) s += absolute ? std::abs(x) : x;
    return 100 * s / static_cast<double>(v.size());
  };
  for (const auto& [cls, v] : errors)
    MESSAGE(cls, ": ", v.size(), " groups, bias ", mean(v, false), " %, MAPE ", mean(v, true), " %");
  MESSAGE(points, " grouped GEMMs, ", within_10, " within 10 %");
  REQUIRE(points == 180);
  REQUIRE(errors["balanced large"].size() == 61);
  CHECK(within_10 >= 150);
  CHECK(mean(errors["balanced large"], true) < 6.5);
  CHECK(mean(errors["imbalanced large"], true) < 6.5);
  CHECK(std::abs(mean(errors["balanced small"], false)) < 8.0);
  CHECK(std::abs(mean(errors["imbalanced small"], false)) < 8.0);
}

// A grouped GEMM by hand, H200 bf16, n = 5760 (23 tiles of 256), k = 2880: eight experts of 256
// rows are 8 cluster steps = 16 x 23 = 368 CTA tiles, 3 waves on 132 SMs; the skewed counts
// measure_shapes.py used for the same 2048 tokens (464, 336, 272, 240, 208, 192, 176, 160) are
// 2+2+2+1+1+1+1+1 = 11 steps = 506 tiles, 4 waves: an imbalanced group costs its tiles. Each wave
// is one 128x256 tile over K + 2 x 128 at the tile rate.
TEST_CASE("grouped GEMM by hand: per-expert cluster steps, waves, twice the tile's fixed cost") {
  const ClusterSpec h200 = profile("h200-141gb");
  const std::vector<std::int64_t> balanced(8, 256), skewed = {464, 336, 272, 240, 208, 192, 176, 160};
  const KernelEstimate b = grouped_gemm_time(h200, balanced, 5760, 2880, Dtype::bf16);
  const KernelEstimate s = grouped_gemm_time(h200, skewed, 5760, 2880, Dtype::bf16);
  CHECK(b.gemm_grouped);
  CHECK(b.gemm_tiles == 368);
  CHECK(b.gemm_waves == 3);
  CHECK(s.gemm_tiles == 506);
  CHECK(s.gemm_waves == 4);
  const double peak = h200.peak_flops_per_s(Dtype::bf16);
  const double wave = 2.0 * 128 * 256 * (2880 + 256) * 132 / peak / b.gemm_tile_efficiency / h200.gpu.sustained_clock_fraction;
  CHECK(b.compute_seconds == doctest::Approx(3 * wave).epsilon(1e-12));
  CHECK(s.compute_seconds == doctest::Approx(4 * wave).epsilon(1e-12));
  CHECK(s.flops == doctest::Approx(b.flops));
  // The same group as a mean and a spread (GemmShape::group) takes the expected cluster steps of
  // normally spread rows: with no spread, exactly the balanced group.
  const KernelEstimate mean_form = gemm_time(h200, {256, 5760, 2880, 8, GemmGroup::rows, 0.0F}, Dtype::bf16);
  CHECK(mean_form.compute_seconds == doctest::Approx(b.compute_seconds).epsilon(1e-12));
  // A spread of 0.35 (the skewed counts' own) pays on average half a step more per expert than
  // ceil(mean / 256) where the mean falls on a step: 8 x 1.5 = 12 steps, 552 tiles, 5 waves.
  const KernelEstimate spread = gemm_time(h200, {256, 5760, 2880, 8, GemmGroup::rows, 0.35F}, Dtype::bf16);
  CHECK(spread.gemm_tiles == doctest::Approx(8 * 1.5 * 2 * 23).epsilon(0.02));
  CHECK(spread.gemm_waves == 5);
  // The weight gradient of the up projection (256 x 5760 x 2880 per expert): every expert's
  // 2880 x 5760 weight gradient is 12 cluster steps x 2 x 23 tiles at the mean depth, K = 256.
  const GemmShape up{256, 5760, 2880, 8, GemmGroup::rows, 0.0F};
  const GemmShape w = wgrad(up);
  CHECK(w.group == GemmGroup::depth);
  CHECK(w.k == 256);
  const KernelEstimate wg = gemm_time(h200, w, Dtype::bf16);
  CHECK(wg.gemm_tiles == 8 * 12 * 2 * 23);
  CHECK(wg.compute_seconds == doctest::Approx(std::ceil(8 * 12 * 2 * 23 / 132.0) * 2.0 * 128 * 256 * (256 + 256) * 132 /
                                              peak / wg.gemm_tile_efficiency / h200.gpu.sustained_clock_fraction)
                                  .epsilon(1e-12));
}

// tests/cost/measured_h200_elementwise.csv: eager PyTorch element-wise, normalization and softmax
// kernels on the lent H200 by size (CUDA-graph GPU time; bytes = what each kernel reads plus
// writes). The profiles price every such kernel at one rate, elementwise_efficiency (fitted on
// dev.csv, docs/compute.md); the measurements show what that one rate stands for.
TEST_CASE("H200 element-wise kernels by class: the one fitted rate against the measured classes") {
  const test::CsvTable t = test::read_csv(test::data_root() / "tests" / "cost" / "measured_h200_elementwise.csv");
  const ClusterSpec h200 = profile("h200-141gb");
  const double peak = h200.gpu.hbm_bandwidth_bytes_per_s;
  // Kernels of 100 MB and more: past the 60 MB L2, so HBM sets the rate (smaller ones read an
  // input the previous replay left in L2 and run faster than HBM: add on 25 MB at 6.3 TB/s).
  std::map<std::string, std::vector<double>> fraction_of_peak;
  std::vector<double> score_gemm_errors;
  ClusterSpec burst = h200;
  burst.gpu.sustained_clock_fraction = 1;
  for (const auto& r : t.rows) {
    const double bytes = std::stod(t.at(r, "bytes")), seconds = std::stod(t.at(r, "seconds"));
    const std::string op = t.at(r, "op");
    if (op.rfind("bmm_", 0) == 0) {
      // Unfused attention's batched GEMMs, priced as GEMMs (the QK^T output store bounds them).
      if (seconds < 8e-6) continue;  // graph-launched: no launch gap (see the GEMM shapes case)
      const std::int64_t bh = as_int(t.at(r, "rows")), s = as_int(t.at(r, "width"));
      const std::int64_t d = op.find("d64") != std::string::npos ? 64 : 128;
      const GemmShape g = op.find("qk") != std::string::npos ? GemmShape{s, s, d, bh} : GemmShape{s, d, s, bh};
      score_gemm_errors.push_back(rel_err(gemm_time(seconds >= 100e-6 ? h200 : burst, g, Dtype::bf16).seconds, seconds));
      continue;
    }
    if (bytes >= 100e6) fraction_of_peak[t.at(r, "series") + ":" + op].push_back(bytes / seconds / peak);
  }
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  REQUIRE(fraction_of_peak.size() == 14);
  double inverse_sum = 0, lowest = 1, highest = 0;
  for (const auto& [cls, v] : fraction_of_peak) {
    const double m = median(v);
    MESSAGE(cls, ": ", v.size(), " sizes, median ", m, " of HBM peak");
    inverse_sum += 1 / m;
    lowest = std::min(lowest, m);
    highest = std::max(highest, m);
  }
  // Copy-like kernels (add, the fp32 -> bf16 cast, dropout's backward) stream at the STREAM copy
  // rate the profile takes from Azure's BabelStream (0.835 of peak): measured 0.87-0.88.
  for (const char* copy_like : {"activation:add", "activation:cast_down", "activation:dropout_bwd"})
    CHECK(median(fraction_of_peak[copy_like]) == doctest::Approx(h200.gpu.hbm_efficiency).epsilon(0.07));
  // The slowest class is LayerNorm's backward (0.33 of peak: a second pass for the weight and
  // bias gradients, and one row per warp at hidden 1024 reaching 0.19), the fastest the copies.
  CHECK(lowest == doctest::Approx(0.323).epsilon(0.02));
  CHECK(highest == doctest::Approx(0.884).epsilon(0.02));
  // Equal bytes in every class take the harmonic mean of the class rates: 0.577 of peak. The one
  // fitted rate (0.501) lies 13 % below it: on this GPU's own kernels the fit prices an even byte
  // mix too slow; what else it absorbs on the A100 rows it was fitted on is the open question of
  // docs/validation.md (Fitted parameters).
  const double harmonic = static_cast<double>(fraction_of_peak.size()) / inverse_sum;
  CHECK(harmonic == doctest::Approx(0.577).epsilon(0.01));
  const double fitted = h200.gpu.elementwise_efficiency;
  CHECK(fitted > lowest);
  CHECK(fitted < highest);
  CHECK(fitted / harmonic == doctest::Approx(0.869).epsilon(0.02));
  // Unfused attention's score GEMMs (QK^T and PV at head width 64 and 128, s 512-2048): the tile
  // model holds them to 9 % MAPE (QK^T, whose s x s output store bounds it, 11 % too fast).
  double abs_sum = 0;
  for (double e : score_gemm_errors) abs_sum += std::abs(e);
  const double mape = 100 * abs_sum / static_cast<double>(score_gemm_errors.size());
  MESSAGE(score_gemm_errors.size(), " score GEMMs, MAPE ", mape, " %");
  CHECK(score_gemm_errors.size() >= 40);
  CHECK(mape < 10.0);
}

// PyTorch's layer_norm by width and pass: the rates layernorm_time prices with are the measured
// ones at 32,768 rows, as fractions of the H200's STREAM copy rate; between the measured widths
// they follow log2(width), and an A100 takes the same fraction of its own copy rate.
TEST_CASE("LayerNorm kernels: the measured H200 rate by width and pass, and what a norm costs") {
  const test::CsvTable t = test::read_csv(test::data_root() / "tests" / "cost" / "measured_h200_elementwise.csv");
  const ClusterSpec h200 = profile("h200-141gb");
  int checked = 0;
  for (const auto& r : t.rows) {
    const std::string op = t.at(r, "op");
    if ((op != "layernorm" && op != "layernorm_bwd") || t.at(r, "rows") != "32768") continue;
    const std::int64_t width = as_int(t.at(r, "width"));
    const double bytes = std::stod(t.at(r, "bytes")), seconds = std::stod(t.at(r, "seconds"));
    const NormWork n{bytes, width, op == "layernorm" ? Pass::forward : Pass::backward};
    CAPTURE(op);
    CAPTURE(width);
    CHECK(layernorm_time(h200, n).memory_seconds == doctest::Approx(seconds).epsilon(0.01));
    ++checked;
  }
  CHECK(checked == 8);
  // Halfway in log2 between 1024 and 2048: the mean of their rates.
  CHECK(layernorm_stream_fraction(1448, Pass::backward) ==
        doctest::Approx((0.195 + 0.312) / 2 / 0.835).epsilon(0.002));
  CHECK(layernorm_stream_fraction(512, Pass::forward) == doctest::Approx(0.360 / 0.835));
  CHECK(layernorm_stream_fraction(16384, Pass::backward) == doctest::Approx(0.338 / 0.835));
  // An A100 backward norm over rows of 2048 bf16 values, 8192 tokens: read x and dy, write dx
  // (3 x 2 bytes) plus the weight-gradient pass, counted as 4 x 2 bytes per element, at 0.312 /
  // 0.835 of 2.039 TB/s x 0.79.
  const ClusterSpec a100 = profile("a100-80gb");
  const double bytes = 8.0 * 8192 * 2048;
  CHECK(layernorm_time(a100, {bytes, 2048, Pass::backward}).memory_seconds ==
        doctest::Approx(bytes / (2.039e12 * 0.79 * 0.312 / 0.835)).epsilon(1e-3));
}

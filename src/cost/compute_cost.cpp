// Kernel durations on one GPU: roofline of measured compute efficiency and measured HBM bandwidth,
// plus a fixed launch cost. Every formula and its source is in docs/compute.md.
#include "cost/compute_cost.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <span>
#include <string>
#include <string_view>

#include "spec/error.hpp"

namespace meshplan {
namespace {

// Output tile of the large-GEMM kernels cuBLAS picks on Ampere and Hopper
// (ampere_*gemm_*_256x128_ldg8_stages_64x3, sm90_xmma_gemm_*_128x256x64, CUTLASS 3 sm90 default
// 128x256x64; Blackwell's 2-SM 256x256 tile is 128x256 per SM): one SM computes one output tile
// at a time, so M and N are padded to a multiple of these sides and the tiles run in waves of
// one per SM.
constexpr std::int64_t kTileLongSide = 256;
constexpr std::int64_t kTileShortSide = 128;
// Stream-K and split-K kernels cover the output in 128-wide steps: on H200 (M = K = 4096) N = 64
// and 128 take the same time, as do N = 192 and 256 (tests/cost/measured_h200_shapes.csv).
constexpr std::int64_t kStreamKStep = 128;
// Grouped GEMMs (MoE experts in one launch: PyTorch's _grouped_mm, Megatron's grouped GEMM) run
// CUTLASS's sm90 persistent ptr-array kernel: cooperative 128x256x64 CTA tiles (M x N) in 2x1x1
// clusters, so each group's rows are covered in steps of two 128-row tiles; a CTA whose tile lies
// wholly past its group's rows still runs (its loads are zero-filled). The tile scheduler hands
// every group's tiles to the SMs in turn: no stream-K across groups (docs/compute.md, "Grouped
// expert GEMMs").
constexpr std::int64_t kGroupedClusterRows = 2 * kTileShortSide;
// The per-tile rate is read from the profile's squares of at least this side: 4096^2 is 512
// tiles, three waves or more on every shipped GPU, and a kernel of 100 us or more, where neither
// the last wave nor a launch counted into a published sweep's time weighs much.
constexpr double kLargeSquareDim = 4096;

// Every output tile also pays a fixed cost beside its K loop: the prologue of the multistage
// pipeline (a 3-stage kernel loads two 64-deep K blocks before its first MMA) and the epilogue
// that stores the accumulator tile. The profile counts it as gpu.gemm_tile_overhead_k more K per
// tile: 128 (two K blocks) where the epilogue is serial, as on Ampere and Hopper; 0 on Blackwell,
// whose kernels double-buffer the accumulator in tensor memory (docs/compute.md).

// That K is stated for 16-bit operands. A K block is a fixed number of bytes of each operand row
// (a 64-deep bf16 block, a 128-deep FP8 block: CUTLASS's sm80/sm90 tile shapes), so the prologue's
// two blocks hold 2 / (operand bytes) times the K, and the epilogue's store is a time, which at the
// tensor cores' rate for the dtype (twice bf16's for FP8) covers that much more K as well.
double tile_overhead_k(const ClusterSpec& c, Dtype operands) {
  return c.gpu.gemm_tile_overhead_k * 2.0 / bytes_per_element(operands);
}

// FlashAttention-2 "yields around 2x speedup compared to FlashAttention" (Dao 2023, arXiv:2307.08691
// abstract): a FlashAttention-1 class kernel (flash-attn 1.x, the Triton port) runs at half the
// FA2 rate the profiles' curves measure.
constexpr double kFlash1RateOverFlash2 = 0.5;

// FlashAttention writes the row log-sum-exp in fp32 (forward) and reads it plus the fp32
// rowsum(dO*O) backward.
constexpr double kSoftmaxStatBytes = 4.0;

double padded(std::int64_t x, std::int64_t tile) {
  return static_cast<double>((x + tile - 1) / tile * tile);
}

double dense_peak(const ClusterSpec& c, Dtype d) {
  const double peak = c.peak_flops_per_s(d);
  if (!(peak > 0))
    throw InputError(c.source_file, "gpu.peak_tflops." + std::string(to_string(d)),
                     c.gpu.model + " has no dense " + std::string(to_string(d)) + " peak");
  return peak;
}

double achieved_hbm_bytes_per_s(const ClusterSpec& c) {
  const double bw = c.gpu.hbm_bandwidth_bytes_per_s * c.gpu.hbm_efficiency;
  if (!(bw > 0))
    throw InputError(c.source_file, "gpu.hbm_efficiency",
                     "HBM bandwidth x efficiency must be positive to time memory-bound kernels");
  return bw;
}

// Element-wise kernels: the profile's elementwise_efficiency (profiles built in code may leave it
// unset: then STREAM's, as the loader defaults it).
double achieved_elementwise_bytes_per_s(const ClusterSpec& c) {
  const double eff = c.gpu.elementwise_efficiency > 0 ? c.gpu.elementwise_efficiency : c.gpu.hbm_efficiency;
  const double bw = c.gpu.hbm_bandwidth_bytes_per_s * eff;
  if (!(bw > 0))
    throw InputError(c.source_file, "gpu.elementwise_efficiency",
                     "HBM bandwidth x efficiency must be positive to time memory-bound kernels");
  return bw;
}

struct CurveChoice {
  const GemmCurve* curve = nullptr;
  bool fallback = false;
};

// Curves to try for `d`, nearest first. Blockwise FP8 on Blackwell runs as MXFP8 (Transformer
// Engine emulates Float8BlockScaling with MXFP8 GEMMs on sm100), so it takes the MXFP8 curve where
// it has none of its own (Hopper profiles have no MXFP8 curve: no MX tensor cores); both
// block-scaled formats then fall back to per-tensor FP8, everything to bf16.
std::array<Dtype, 4> curve_preference(Dtype d) {
  switch (d) {
    case Dtype::fp8_block: return {Dtype::fp8_block, Dtype::mxfp8, Dtype::fp8, Dtype::bf16};
    case Dtype::mxfp8: return {Dtype::mxfp8, Dtype::fp8, Dtype::bf16, Dtype::bf16};
    default: return {d, Dtype::bf16, Dtype::bf16, Dtype::bf16};
  }
}

// The dtype's own curve, else the nearest one of curve_preference (same tensor-core pipeline,
// efficiency is a fraction of the requested dtype's peak either way); the estimate records the
// fallback.
CurveChoice gemm_curve_for(const ClusterSpec& c, Dtype d) {
  for (Dtype want : curve_preference(d))
    for (const GemmCurve& g : c.gpu.gemm_curves)
      if (!g.points.empty() && g.dtype == want) return {&g, want != d};
  throw InputError(c.source_file, "gpu.gemm_curve",
                   "no GEMM efficiency curve for " + std::string(to_string(d)) + " nor bf16");
}

// Efficiency at `cube_dim` from the running maximum of the measured points (a bigger GEMM never
// runs at a lower efficiency than a smaller one: more waves, deeper K loops; the dips in the
// sweeps are throttling or heuristic picks, docs/compute.md), interpolated as a power law between
// neighbouring points and clamped at both ends. A power law keeps FLOPs / efficiency increasing
// whenever the measured times increase, which linear-in-efficiency interpolation does not.
double envelope_efficiency(const GemmCurve& curve, double cube_dim) {
  const auto& p = curve.points;
  double lo_eff = std::max(p.front().efficiency, 1e-9);
  if (cube_dim <= p.front().cube_dim) return lo_eff;
  for (std::size_t i = 1; i < p.size(); ++i) {
    const double hi_eff = std::max(lo_eff, p[i].efficiency);
    if (cube_dim <= p[i].cube_dim) {
      const double exponent = std::log(hi_eff / lo_eff) / std::log(p[i].cube_dim / p[i - 1].cube_dim);
      return lo_eff * std::pow(cube_dim / p[i - 1].cube_dim, exponent);
    }
    lo_eff = hi_eff;
  }
  return lo_eff;
}

// How the output tiles of one GEMM are spread over the SMs, timed at per-tile efficiency 1 and
// the dense peak (docs/compute.md, "GEMM time from the shape").
struct TileSchedule {
  double tiles = 0;         // output tiles of the kernel tile shape (stream-K: 128x256 equivalents)
  double waves = 0;         // tiles per SM: whole waves for data-parallel, a fraction for stream-K
  bool stream_k = false;
  bool grouped = false;     // the persistent grouped kernel (grouped_waves)
  double unit_seconds = 0;  // tensor-core seconds at efficiency 1
};

// The SMs a GEMM's tiles are scheduled over.
double scheduled_sms(const ClusterSpec& c) {
  const double sms = static_cast<double>(c.gpu.sm_count);
  if (!(sms > 0)) throw InputError(c.source_file, "gpu.sm_count", "must be positive to schedule GEMM tiles");
  return sms;
}

// Seconds one SM spends on a tile_m x tile_n output tile over `depth` K at its share of the peak.
double tile_seconds(double sms, double peak_flops_per_s, double tile_m, double tile_n, double depth) {
  return 2.0 * tile_m * tile_n * depth * sms / peak_flops_per_s;
}

// Data-parallel schedule of one tile shape: whole output tiles, one per SM at a time, so the GEMM
// takes ceil(tiles / SMs) waves of one tile's K loop and fixed cost; the last, partial wave costs
// a full one. `fixed_k` is the tile's fixed cost in K of this tile's own width.
TileSchedule waves_of(const GemmShape& g, double sms, double peak, std::int64_t tm, std::int64_t tn, double fixed_k) {
  TileSchedule s;
  s.tiles = static_cast<double>(g.batch) * (padded(g.m, tm) / tm) * (padded(g.n, tn) / tn);
  s.waves = std::ceil(s.tiles / sms);
  s.unit_seconds = s.waves * tile_seconds(sms, peak, static_cast<double>(tm), static_cast<double>(tn),
                                          static_cast<double>(g.k) + fixed_k);
  return s;
}

// The schedule cuBLAS runs, the fastest of its kernel families (docs/compute.md):
// * the large 128x256 tile in whole waves, in the orientation that runs fewer;
// * stream-K over the large tile (Osama et al., "Stream-K: Work-centric Parallel Decomposition
//   for Dense Matrix-Matrix Multiplication on the GPU", PPoPP 2023; cuBLAS's split-K for skinny
//   outputs): the K iterations of every tile spread evenly over all SMs, i.e. the padded work
//   over the whole GPU, plus one more tile prologue and epilogue for the partial sums the SMs
//   hand on (the fixup). The heuristic leaves the large-tile waves for it only when that saves
//   more than gpu.gemm_stream_k_min_saving of their time;
// * the 128x128 tile in whole waves: half the work per tile, so finer waves, but the same fixed
//   latency per tile (the pipeline fill and the epilogue's store do not shrink with the tile's
//   width): 2 k0 in its own K.
TileSchedule tile_schedule(const ClusterSpec& c, const GemmShape& g, double peak, double overhead_k) {
  const double sms = scheduled_sms(c);
  TileSchedule best = waves_of(g, sms, peak, kTileShortSide, kTileLongSide, overhead_k);
  const TileSchedule other = waves_of(g, sms, peak, kTileLongSide, kTileShortSide, overhead_k);
  if (other.unit_seconds < best.unit_seconds) best = other;
  const double depth = static_cast<double>(g.k) + overhead_k;
  const double padded_work =
      static_cast<double>(g.batch) * padded(g.m, kStreamKStep) * padded(g.n, kStreamKStep) * depth;
  const double stream_k =
      2.0 * padded_work / peak + tile_seconds(sms, peak, kTileShortSide, kTileLongSide, overhead_k);
  if (stream_k < (1.0 - c.gpu.gemm_stream_k_min_saving) * best.unit_seconds) {
    best.tiles = padded_work / (static_cast<double>(kTileShortSide * kTileLongSide) * depth);
    best.waves = best.tiles / sms;
    best.stream_k = true;
    best.unit_seconds = stream_k;
  }
  const TileSchedule small = waves_of(g, sms, peak, kTileShortSide, kTileShortSide, 2.0 * overhead_k);
  return small.unit_seconds < best.unit_seconds ? small : best;
}

// Expected ceil(x / step) for a group size x ~ Normal(mean, sd), a group of no rows running no
// tile: the sum over j >= 0 of P(x > j step). Steps wholly below mean - 8 sd count 1 each.
double expected_steps(double mean, double sd, double step) {
  if (!(sd > 0)) return std::ceil(std::max(0.0, mean) / step);
  const double first = std::max(0.0, std::floor((mean - 8 * sd) / step));
  double sum = first;
  for (double j = first;; j += 1) {
    const double z = (j * step - mean) / sd;
    sum += 0.5 * std::erfc(z / std::sqrt(2.0));
    if (z > 8) break;
  }
  return sum;
}

// The persistent grouped kernel: `row_steps` cluster steps of kGroupedClusterRows rows summed over
// the groups, two 128x256 CTA tiles per step and 256-wide N tile, handed out in waves of one per
// SM. Each tile runs its K loop plus twice the per-tile fixed cost: the ptr-array kernel rewrites
// its TMA descriptors when an SM moves to another group's tile (nearly every tile: a group holds
// fewer tiles than there are SMs, or a few times as many), so the next tile's pipeline is not
// filled during the previous tile's epilogue as in the dense persistent kernel: the prologue is
// paid again (docs/compute.md).
TileSchedule grouped_waves(const ClusterSpec& c, double row_steps, std::int64_t n, double depth, double peak,
                           double overhead_k) {
  const double sms = scheduled_sms(c);
  TileSchedule s;
  s.grouped = true;
  s.tiles = row_steps * static_cast<double>(kGroupedClusterRows / kTileShortSide) * (padded(n, kTileLongSide) / kTileLongSide);
  s.waves = std::ceil(s.tiles / sms);
  s.unit_seconds = s.waves * tile_seconds(sms, peak, kTileShortSide, kTileLongSide,
                                          depth + 2.0 * overhead_k);
  return s;
}

// A grouped GEMM described by its groups' mean and spread (GemmShape::group): the expected cluster
// steps of the ragged rows, or for a ragged depth (weight gradient) the fixed tiles of every group
// at the mean depth.
TileSchedule grouped_schedule(const ClusterSpec& c, const GemmShape& g, double peak, double overhead_k) {
  const double mean = static_cast<double>(g.m);
  const double steps = g.group == GemmGroup::rows
                           ? expected_steps(mean, static_cast<double>(g.group_cv) * mean, kGroupedClusterRows)
                           : std::ceil(mean / kGroupedClusterRows);
  return grouped_waves(c, static_cast<double>(g.batch) * steps, g.n, static_cast<double>(g.k), peak, overhead_k);
}

// The per-tile tensor-core efficiency a curve point implies: the rate at which an SM runs a tile
// once fed, such that the tile schedule reproduces the point. A point whose side is a multiple
// of 256 is a square of a published sweep, scheduled as that square; its time is the sweep's
// back-to-back kernel time, which holds the fixed per-kernel latency (gpu.kernel_launch) once, so
// that is taken off first, and a point left with less than half its time (a launch-bound sweep
// point) implies nothing (0). Any other side is a point `meshplan calibrate` fitted: the cube
// root of the shape's scheduled work (its tensor-core time at efficiency 1, times peak / 2) with
// the tensor-core efficiency the fit gives it, which it implies as it stands.
double implied_tile_efficiency(const ClusterSpec& c, double cube_dim, double efficiency, double peak, double overhead_k) {
  const auto side = static_cast<std::int64_t>(std::llround(cube_dim));
  if (side % kTileLongSide != 0) return std::min(1.0, efficiency);
  const GemmShape square{side, side, side, 1};
  const double unit = tile_schedule(c, square, peak, overhead_k).unit_seconds;
  const double measured = square.flops() / (peak * std::max(efficiency, 1e-9));
  const double kernel = measured - c.gpu.kernel_launch_seconds;
  if (!(kernel > 0.5 * measured)) return 0.0;
  return std::min(1.0, unit / kernel);
}

// The per-tile efficiency of a curve: the rate of an SM once fed, the best that the curve's large
// squares (kLargeSquareDim and up) imply, where neither the last wave nor the launch weighs much
// (the best, as the sweeps' running maximum: a dip is throttling or a heuristic pick,
// docs/compute.md). Every GEMM runs its tiles at that rate: what makes a small one slower per
// FLOP is its schedule (waves, K depth, stream-K) and the fixed latency, not the tile. A curve
// without large squares takes its best implied point; a flat test curve that implies nothing,
// its own efficiency.
double tile_efficiency(const ClusterSpec& c, const GemmCurve& curve, double peak) {
  double envelope = 0, large = 0, small = 0;
  for (const GemmEfficiencyPoint& p : curve.points) {
    envelope = std::max(envelope, p.efficiency);
    // The curve's points ran in its own dtype: their tiles paid that dtype's fixed cost.
    const double eta = implied_tile_efficiency(c, p.cube_dim, p.efficiency, peak, tile_overhead_k(c, curve.dtype));
    double& best = p.cube_dim >= kLargeSquareDim ? large : small;
    best = std::max(best, eta);
  }
  if (large > 0) return large;
  return small > 0 ? small : std::min(1.0, std::max(envelope, 1e-9));
}

// The side c of the square sweep point that does the same tensor-core work, tile overheads included:
// c^2 (c + k0) = work (Newton on a monotone cubic, from cbrt(work), which lies above the root).
double square_with_same_work(double work, double overhead_k) {
  double c = std::cbrt(work);
  for (int i = 0; i < 8; ++i) {
    const double f = c * c * (c + overhead_k) - work;
    const double step = f / (c * (3 * c + 2 * overhead_k));
    c -= step;
    if (std::fabs(step) < 1e-9 * c) break;
  }
  return c;
}

// Tensor-core work of one tile orientation: the padded tile grid, each tile's K loop plus its
// fixed overhead.
double tile_work(const GemmShape& g, std::int64_t tile_m, std::int64_t tile_n, double overhead_k) {
  return static_cast<double>(g.batch) * padded(g.m, tile_m) * padded(g.n, tile_n) *
         (static_cast<double>(g.k) + overhead_k);
}

// The square the GEMM is priced as: of the two tile orientations the one wasting less is taken, as
// cuBLAS's heuristic would.
double equivalent_square(const GemmShape& g, double overhead_k) {
  return square_with_same_work(std::min(tile_work(g, kTileShortSide, kTileLongSide, overhead_k),
                                        tile_work(g, kTileLongSide, kTileShortSide, overhead_k)),
                               overhead_k);
}

// Seconds on the tensor cores for a GEMM priced as the square of side c (equivalent_square: same padded
// tile grid, per-tile overheads), i.e. 2 c^3 / (peak x efficiency(c)). The curve's size axis
// stands for tiles per SM and K-loop depth, which that work has; squares are reproduced exactly,
// and time grows with the work, hence with M, N and K.
double tensor_core_seconds(const GemmCurve& curve, double peak_flops_per_s, double c) {
  return 2.0 * c * c * c / (peak_flops_per_s * envelope_efficiency(curve, c));
}

// The compute capability of the profile's arch ("sm90" -> 90).
int sm_version(const ClusterSpec& c) {
  const std::string& arch = c.gpu.arch;
  int v = 0;
  for (std::size_t i = 2; i < arch.size() && arch[i] >= '0' && arch[i] <= '9'; ++i) v = 10 * v + (arch[i] - '0');
  return v;
}

// How a GEMM was priced: the tile schedule at the per-tile efficiency (cuBLAS on Ampere and
// Hopper), or the measured square of the same tile work (Blackwell, DeepGEMM).
struct GemmPricing {
  double tensor_core_seconds = 0;  // at the microbenchmarks' clock
  TileSchedule schedule;
  double tile_efficiency = 0;
  double equivalent_square_dim = 0;
  double overhead_k = 0;
};

// Blackwell's GEMMs (CUTLASS sm100 persistent kernels: 2-SM tiles handed out by a hardware tile
// scheduler, accumulators double-buffered in tensor memory) show no wave quantization in their
// sweeps (GB300 FP8 4096^3, 3.2 waves of 128x256 tiles on 160 SMs, runs at 0.99 of 8192^3's
// efficiency), and no Blackwell GEMM was measured by shape: they keep the equivalent-square
// pricing. So does blockwise FP8 (DeepGEMM on Hopper, whose curve is its own shapes): its JIT
// picks the block width (16..256) and the SMs used per shape to fill whole waves.
GemmPricing price_gemm(const ClusterSpec& c, const GemmShape& g, Dtype dtype, const GemmCurve& curve, double peak) {
  GemmPricing out;
  out.overhead_k = tile_overhead_k(c, dtype);
  if (sm_version(c) >= 100 || dtype == Dtype::fp8_block) {
    out.equivalent_square_dim = equivalent_square(g, out.overhead_k);
    out.tensor_core_seconds = tensor_core_seconds(curve, peak, out.equivalent_square_dim);
    return out;
  }
  out.schedule = g.group == GemmGroup::none ? tile_schedule(c, g, peak, out.overhead_k)
                                            : grouped_schedule(c, g, peak, out.overhead_k);
  out.tile_efficiency = tile_efficiency(c, curve, peak);
  out.tensor_core_seconds = out.schedule.unit_seconds / out.tile_efficiency;
  return out;
}

void check_gemm(const GemmShape& g) {
  if (g.m < 0 || g.n < 0 || g.k < 0 || g.batch < 0)
    throw InputError("", "gemm", "negative dimension in " + std::to_string(g.batch) + " x " +
                                     std::to_string(g.m) + "x" + std::to_string(g.n) + "x" +
                                     std::to_string(g.k));
}

bool empty(const GemmShape& g) { return g.m == 0 || g.n == 0 || g.k == 0 || g.batch == 0; }

double stored_output_bytes(Dtype d) { return std::max(bytes_per_element(d), 2.0); }

KernelEstimate finish(KernelEstimate e, double launch_seconds) {
  e.launch_seconds = launch_seconds;
  e.memory_bound = e.memory_seconds > e.compute_seconds;
  e.seconds = std::max(e.compute_seconds, e.memory_seconds) + launch_seconds;
  e.efficiency = e.peak_flops_per_s > 0 && e.seconds > 0 ? e.flops / (e.seconds * e.peak_flops_per_s) : 0.0;
  return e;
}

// ---- attention curves ----

bool is_16bit_float(Dtype d) { return d == Dtype::bf16 || d == Dtype::fp16; }

// Below the first measured length: a fused attention kernel's time is its query tiles' walks over
// the key blocks plus a fixed cost per query tile (load Q, the causal diagonal block computed in
// full, the softmax rescale and the store of O), so its rate rises as R s / (s + s0), a
// hyperbola through the first two points. Where the curve does not rise there it is held flat;
// where it rises faster than the hyperbola allows, in proportion to s (its limit as s0 grows).
double rate_below_first_point(const std::vector<double>& s, const std::vector<double>& r, double seq_len) {
  if (s.size() < 2 || !(r[1] > r[0])) return r.front();
  const double denominator = r[0] * s[1] - r[1] * s[0];
  if (!(denominator > 0)) return r[0] * seq_len / s[0];
  const double s0 = s[0] * s[1] * (r[1] - r[0]) / denominator;
  return r[0] * (s[0] + s0) / s[0] * seq_len / (seq_len + s0);
}

// Achieved FLOP/s of one curve at `seq_len`: power law between points, the fixed-cost hyperbola
// below the first, held at the last above it.
double curve_rate(const AttentionCurve& a, double seq_len) {
  const auto& s = a.seq_len;
  const auto& r = a.flops_per_s;
  if (seq_len <= s.front()) return rate_below_first_point(s, r, seq_len);
  for (std::size_t i = 1; i < s.size(); ++i) {
    if (seq_len <= s[i]) {
      const double exponent = std::log(r[i] / r[i - 1]) / std::log(s[i] / s[i - 1]);
      return r[i - 1] * std::pow(seq_len / s[i - 1], exponent);
    }
  }
  return r.back();
}

struct AttentionRate {
  double flops_per_s = 0;  // as measured
  Dtype curve_dtype = Dtype::bf16;
  AttentionKernel kernel = AttentionKernel::framework;
  std::string_view source;
  std::string_view pass;
  std::string_view curve_kernel;  // the curve's own kernel name (a calibrated "cudnn-sdpa" vs "cudnn")
  int curve_version = 0;          // the library release the curve measured (0: not stated)
  bool fallback = false;   // kernel, pass, dtype, mask or head dim outside the curves
};

bool usable(const AttentionCurve& a) {
  return !a.seq_len.empty() && a.seq_len.size() == a.flops_per_s.size() && a.head_dim > 0;
}

// torch SDPA's cuDNN backend measured through torch ("torch-sdpa-cudnn"): cuDNN's kernels under
// torch's own engine choice and per-call work, which runs measurably slower than the direct
// cudnn-frontend call below 8k. It prices torch SDPA callers only.
constexpr std::string_view kTorchSdpaCudnn = "torch-sdpa-cudnn";

// Calibration records the kernel under the name its harness used ("cudnn-sdpa" for cuDNN's SDPA
// graph); any cudnn* name, and torch's path to it, is the cuDNN family.
AttentionKernel family_of(const AttentionCurve& a) {
  if (a.kernel == kTorchSdpaCudnn) return AttentionKernel::cudnn;
  if (const auto k = parse_attention_kernel(a.kernel)) return *k;
  return a.kernel.rfind("cudnn", 0) == 0 ? AttentionKernel::cudnn : AttentionKernel::framework;
}

// The requested family if the profile measured it, else the nearest one it did: cuDNN and FA4
// are the Blackwell-native kernels, cuDNN and FA3 the Hopper ones, FA2 the portable one.
AttentionKernel measured_family(const ClusterSpec& c, AttentionKernel want, bool& fallback) {
  auto has = [&](AttentionKernel k) {
    return std::any_of(c.gpu.attention_curves.begin(), c.gpu.attention_curves.end(),
                       [&](const AttentionCurve& a) { return usable(a) && family_of(a) == k; });
  };
  if (has(want)) return want;
  fallback = true;
  using K = AttentionKernel;
  // The last entry: curves of kernels no API selects (calibration proxies).
  std::array<K, 4> order{K::fa3, K::cudnn, K::fa4, K::framework};
  switch (want) {
    case K::cudnn: order = {K::fa4, K::fa3, K::fa2, K::framework}; break;
    case K::fa4: order = {K::cudnn, K::fa3, K::fa2, K::framework}; break;
    case K::fa3: order = {K::cudnn, K::fa4, K::fa2, K::framework}; break;
    case K::fa2: case K::framework: break;
  }
  for (K k : order)
    if (has(k)) return k;
  throw InputError(c.source_file, "gpu.attention_curve", "profile has no attention curve");
}

// The rate of `family`'s curves of one pass at `shape`: FP8 attention curves for fp8, else the
// 16-bit ones; the mask if measured (else the other one); a power law in head_dim between the
// nearest measured head dims, clamped. `fallback` is set where the shape is outside the curves.
AttentionRate pass_rate(const ClusterSpec& c, const AttentionShape& shape, AttentionKernel family,
                        std::string_view pass_name, Dtype dtype) {
  AttentionRate out;
  out.kernel = family;
  const std::vector<AttentionCurve>& curves = c.gpu.attention_curves;
  // Within the cuDNN family, curves measured through torch SDPA serve torch SDPA callers where the
  // profile has them for this pass, and no one else.
  const bool torch_path =
      family == AttentionKernel::cudnn && shape.backend == AttentionBackend::torch_sdpa &&
      std::any_of(curves.begin(), curves.end(),
                  [&](const AttentionCurve& a) { return usable(a) && a.kernel == kTorchSdpaCudnn && a.pass == pass_name; });
  // The library release: the one the run states if the family measured it, else the newest one
  // measured (flagged where a stated release has no curves); unversioned curves serve any release.
  // The stated release is cuDNN's: other families take their newest.
  const int stated = family == AttentionKernel::cudnn ? shape.cudnn_version : 0;
  int newest = 0;
  bool stated_measured = false;
  for (const AttentionCurve& a : curves) {
    if (!usable(a) || family_of(a) != family || a.version == 0) continue;
    newest = std::max(newest, a.version);
    stated_measured = stated_measured || a.version == stated;
  }
  const int release = stated_measured ? stated : newest;
  if (stated > 0 && newest > 0 && !stated_measured) out.fallback = true;
  auto in_pass = [&](const AttentionCurve& a) {
    return usable(a) && family_of(a) == family && a.pass == pass_name && (a.kernel == kTorchSdpaCudnn) == torch_path &&
           (a.version == 0 || a.version == release);
  };

  // FP8 inputs take FP8 curves, MXFP8 inputs MXFP8 curves (else the per-tensor FP8 ones, flagged);
  // every other dtype the 16-bit ones (a fraction of that peak).
  auto curve_class = [](Dtype d) { return is_8bit_attention_dtype(d) ? d : Dtype::bf16; };
  auto has_class = [&](Dtype k) {
    return std::any_of(curves.begin(), curves.end(), [&](const auto& a) { return in_pass(a) && curve_class(a.dtype) == k; });
  };
  Dtype use = Dtype::bf16;
  if (dtype == Dtype::mxfp8 && has_class(Dtype::mxfp8)) use = Dtype::mxfp8;
  else if (is_8bit_attention_dtype(dtype) && has_class(Dtype::fp8)) use = Dtype::fp8;
  if (use == Dtype::bf16 ? !is_16bit_float(dtype) : use != dtype) out.fallback = true;
  auto in_dtype = [&](const AttentionCurve& a) { return in_pass(a) && curve_class(a.dtype) == use; };

  bool causal = shape.causal;
  if (std::none_of(curves.begin(), curves.end(), [&](const auto& a) { return in_dtype(a) && a.causal == causal; })) {
    causal = !causal;
    out.fallback = true;
  }
  const AttentionCurve* below = nullptr;  // largest head_dim <= requested
  const AttentionCurve* above = nullptr;  // smallest head_dim >= requested
  const auto hd = static_cast<double>(shape.head_dim);
  for (const AttentionCurve& a : curves) {
    if (!in_dtype(a) || a.causal != causal) continue;
    if (a.head_dim <= hd && (below == nullptr || a.head_dim > below->head_dim)) below = &a;
    if (a.head_dim >= hd && (above == nullptr || a.head_dim < above->head_dim)) above = &a;
  }
  if (below == nullptr || above == nullptr) out.fallback = true;
  if (below == nullptr) below = above;
  if (above == nullptr) above = below;
  // The curves' x axis is the key/value length: the inner loop each query tile walks. Their batch
  // is 16k/seqlen, so the number of query tiles, hence SM occupancy, is the same at every point.
  const double seq = static_cast<double>(shape.seq_kv);
  const double rate_below = curve_rate(*below, seq);
  const double rate_above = curve_rate(*above, seq);
  double rate = rate_below;
  if (above->head_dim != below->head_dim) {
    const double t = std::log(hd / below->head_dim) / std::log(static_cast<double>(above->head_dim) / below->head_dim);
    rate = rate_below * std::pow(rate_above / rate_below, t);
  }
  out.flops_per_s = rate;
  out.curve_dtype = below->dtype;
  out.source = below->source;
  out.pass = pass_name;
  out.curve_kernel = below->kernel;
  out.curve_version = below->version;
  return out;
}

// Within the kernel family, the curves of the pass: "fwd+bwd" if the family has them (both passes
// of a training step timed together, as FlashAttention's own benchmark does), else the pass's own
// ("fwd" / "bwd"), else the other one (flagged).
AttentionRate attention_rate(const ClusterSpec& c, const AttentionShape& shape, Pass pass, Dtype dtype) {
  bool family_fallback = false;
  const AttentionKernel family = measured_family(c, attention_kernel_for(c, shape), family_fallback);
  const std::vector<AttentionCurve>& curves = c.gpu.attention_curves;
  auto has_pass = [&](std::string_view want) {
    return std::any_of(curves.begin(), curves.end(),
                       [&](const AttentionCurve& a) { return usable(a) && family_of(a) == family && a.pass == want; });
  };
  const std::array<std::string_view, 3> passes =
      pass == Pass::forward ? std::array<std::string_view, 3>{"fwd+bwd", "fwd", "bwd"}
                            : std::array<std::string_view, 3>{"fwd+bwd", "bwd", "fwd"};
  std::string_view chosen_pass = passes[2];
  for (std::string_view want : passes) {
    if (has_pass(want)) {
      chosen_pass = want;
      break;
    }
  }
  AttentionRate out = pass_rate(c, shape, family, chosen_pass, dtype);
  out.fallback = out.fallback || family_fallback || chosen_pass == passes[2];
  // A fwd+bwd curve (FlashAttention's README: both passes timed together) beside a forward-only
  // one of the same kernel pins both passes: the forward at its own rate, the backward at what is
  // left of the measured pair's time. For F_b = r F_f: t_b = (1 + r) F_f / R_fb - F_f / R_f, so
  // R_b = r / ((1 + r) / R_fb - 1 / R_f), and t_f + t_b is the measured fwd+bwd time. Only for
  // curves of one kernel: a calibrated fwd+bwd curve is not split by a shipped forward one.
  if (chosen_pass == "fwd+bwd" && has_pass("fwd")) {
    const AttentionRate fwd = pass_rate(c, shape, family, "fwd", dtype);
    if ((!fwd.fallback || out.fallback) && fwd.curve_kernel == out.curve_kernel) {
      if (pass == Pass::forward) {
        out = fwd;
        out.fallback = out.fallback || family_fallback;
      } else {
        const double r = kAttentionBackwardOverForward;
        const double inv = (1 + r) / out.flops_per_s - 1 / fwd.flops_per_s;
        if (inv > 0) {
          out.flops_per_s = r / inv;
          out.pass = "bwd (fwd+bwd less fwd)";
        }
      }
    }
  }
  return out;
}

void check_attention(const AttentionShape& a) {
  if (a.batch <= 0 || a.heads <= 0 || a.kv_heads <= 0 || a.seq_q <= 0 || a.seq_kv <= 0 || a.head_dim <= 0)
    throw InputError("", "attention", "batch, heads, kv_heads, seq_q, seq_kv and head_dim must be positive");
  if (a.flash_version < 1 || a.flash_version > 3)
    throw InputError("", "attention", "flash_version must be 1, 2 or 3, got " + std::to_string(a.flash_version));
  if (a.heads % a.kv_heads != 0)
    throw InputError("", "attention", "heads (" + std::to_string(a.heads) + ") must be a multiple of kv_heads (" +
                                          std::to_string(a.kv_heads) + ")");
  if (a.window < 0 || (a.window > 0 && !a.causal))
    throw InputError("", "attention", "window must be a non-negative token count, and only a causal mask has one");
}

}  // namespace

double gemm_bytes(const GemmShape& g, Dtype dtype) {
  const double m = static_cast<double>(g.m), n = static_cast<double>(g.n), k = static_cast<double>(g.k);
  // Block-scaled inputs also stream their scale factors.
  const double in = bytes_per_element(dtype) + scale_bytes_per_element(dtype);
  return static_cast<double>(g.batch) * (in * (m * k + k * n) + stored_output_bytes(dtype) * m * n);
}

double gemm_efficiency(const ClusterSpec& c, const GemmShape& g, Dtype dtype) {
  check_gemm(g);
  if (empty(g)) return 0.0;
  const double peak = dense_peak(c, dtype);
  const GemmPricing p = price_gemm(c, g, dtype, *gemm_curve_for(c, dtype).curve, peak);
  return g.flops() * c.gpu.gemm_sustained_fraction(dtype) / (peak * p.tensor_core_seconds);
}

double gemm_curve_efficiency(const ClusterSpec& c, Dtype dtype, double cube_dim) {
  return envelope_efficiency(*gemm_curve_for(c, dtype).curve, cube_dim);
}

namespace {
// The estimate of a priced GEMM: its flops and bytes, the schedule it was priced with, the
// sustained clock on the tensor-core part and the roofline.
KernelEstimate gemm_estimate(const ClusterSpec& c, Dtype dtype, const CurveChoice& curve, double peak,
                             const GemmPricing& p, double flops, double bytes) {
  KernelEstimate e;
  e.peak_flops_per_s = peak;
  e.curve_fallback = curve.fallback;
  e.curve_dtype = curve.curve->dtype;
  e.curve_source = curve.curve->source;
  e.flops = flops;
  e.bytes = bytes;
  e.gemm_tiles = p.schedule.tiles;
  e.gemm_waves = p.schedule.waves;
  e.gemm_stream_k = p.schedule.stream_k;
  e.gemm_grouped = p.schedule.grouped;
  e.gemm_tile_efficiency = p.tile_efficiency;
  e.equivalent_square_dim = p.equivalent_square_dim;
  e.gemm_tile_overhead_k = p.overhead_k;
  e.compute_seconds = p.tensor_core_seconds / c.gpu.gemm_sustained_fraction(dtype);
  e.memory_seconds = e.bytes / achieved_hbm_bytes_per_s(c);
  return finish(e, c.gpu.kernel_launch_seconds);
}
}  // namespace

KernelEstimate gemm_time(const ClusterSpec& c, const GemmShape& g, Dtype dtype) {
  check_gemm(g);
  if (empty(g)) return {};  // no kernel is launched
  if (g.group == GemmGroup::sequential) {
    // One launch per member: each pays its own waves (a few hundred rows fill a fraction of one)
    // and its fixed latency.
    KernelEstimate e = gemm_time(c, {g.m, g.n, g.k, 1, GemmGroup::none, 0}, dtype);
    const auto members = static_cast<double>(g.batch);
    for (double* x : {&e.seconds, &e.flops, &e.bytes, &e.compute_seconds, &e.memory_seconds, &e.launch_seconds}) *x *= members;
    return e;
  }
  const double peak = dense_peak(c, dtype);
  const CurveChoice curve = gemm_curve_for(c, dtype);
  return gemm_estimate(c, dtype, curve, peak, price_gemm(c, g, dtype, *curve.curve, peak), g.flops(), gemm_bytes(g, dtype));
}

KernelEstimate grouped_gemm_time(const ClusterSpec& c, std::span<const std::int64_t> rows, std::int64_t n,
                                 std::int64_t k, Dtype dtype) {
  double total_rows = 0, row_steps = 0;
  for (const std::int64_t r : rows) {
    if (r < 0) throw InputError("", "gemm", "negative group rows " + std::to_string(r));
    total_rows += static_cast<double>(r);
    row_steps += std::ceil(static_cast<double>(r) / kGroupedClusterRows);
  }
  const auto groups = static_cast<std::int64_t>(rows.size());
  const auto mean_rows = groups > 0 ? static_cast<std::int64_t>(std::llround(total_rows / static_cast<double>(groups))) : 0;
  const GemmShape mean{mean_rows, n, k, groups, GemmGroup::rows, 0};
  check_gemm(mean);
  if (total_rows == 0 || empty(mean)) return {};
  const double peak = dense_peak(c, dtype);
  const CurveChoice curve = gemm_curve_for(c, dtype);
  GemmPricing p = price_gemm(c, mean, dtype, *curve.curve, peak);
  if (p.equivalent_square_dim == 0) {  // scheduled: the groups' own cluster steps
    p.schedule = grouped_waves(c, row_steps, n, static_cast<double>(k), peak, p.overhead_k);
    p.tensor_core_seconds = p.schedule.unit_seconds / p.tile_efficiency;
  }
  const double e_in = bytes_per_element(dtype) + scale_bytes_per_element(dtype);
  const double kd = static_cast<double>(k), nd = static_cast<double>(n);
  const double bytes = e_in * (total_rows * kd + static_cast<double>(groups) * kd * nd) + stored_output_bytes(dtype) * total_rows * nd;
  return gemm_estimate(c, dtype, curve, peak, p, 2.0 * total_rows * nd * kd, bytes);
}

double attention_bytes(const AttentionShape& a, Pass pass, Dtype dtype) {
  const double elem = bytes_per_element(dtype);
  const double b = static_cast<double>(a.batch);
  const double q_elems = b * static_cast<double>(a.seq_q) * static_cast<double>(a.heads) * static_cast<double>(a.head_dim);
  // K and V have kv_heads heads: grouped-query attention shrinks their traffic, not the FLOPs.
  const double kv_elems = b * static_cast<double>(a.seq_kv) * static_cast<double>(a.kv_heads) * static_cast<double>(a.head_dim);
  const double stat_rows = b * static_cast<double>(a.heads) * static_cast<double>(a.seq_q);
  if (pass == Pass::forward)  // read Q, K, V; write O and the log-sum-exp
    return elem * (2.0 * q_elems + 2.0 * kv_elems) + kSoftmaxStatBytes * stat_rows;
  // read Q, O, dO, K, V, LSE, D; write dQ, dK, dV
  return elem * (4.0 * q_elems + 4.0 * kv_elems) + 2.0 * kSoftmaxStatBytes * stat_rows;
}

AttentionKernel attention_kernel_for(const ClusterSpec& c, const AttentionShape& a) {
  if (a.kernel != AttentionKernel::framework) return a.kernel;
  const int sm = sm_version(c);
  switch (a.backend) {
    // Transformer Engine's backend selection prefers its cuDNN FusedAttention over flash-attn
    // from Hopper on; on Ampere it runs flash-attn 2.
    case AttentionBackend::transformer_engine: return sm >= 90 ? AttentionKernel::cudnn : AttentionKernel::fa2;
    // torch SDPA's priority list puts the cuDNN backend first on Blackwell; elsewhere its flash
    // backend (FlashAttention-2 code) runs.
    case AttentionBackend::torch_sdpa: return sm >= 100 ? AttentionKernel::cudnn : AttentionKernel::fa2;
    case AttentionBackend::flash_attn: return AttentionKernel::fa2;
  }
  return AttentionKernel::fa2;
}

namespace {
// The key tile FlashAttention-2, FlashAttention-3 and cuDNN's fused attention walk: the unit in
// which a windowed kernel's loop is counted.
constexpr std::int64_t kAttentionKeyBlockTokens = 128;

// A sliding-window kernel's rate, from the kernel's own full and causal curves. Per block of B
// query rows, a kernel over s keys spends a fixed t0 (loading the queries, writing the output), t
// per unmasked key block and t + t_mask per masked one: a full kernel t0 + (s / B) t, a causal
// one on average t0 + (s / B + 1) t / 2 + t_mask (its one diagonal block masked). The full curve
// at two lengths gives t0 and t, the causal one t_mask. A window of w keys walks ceil(w / B) + 1
// key blocks of which the two at its ends are masked: t0 + (ceil(w / B) + 1) t + 2 t_mask for
// B w useful pairs. At w = 128, head_dim 64 this is 179 TFLOP/s forward on GB200 at burst clocks
// against cudnn-frontend's gpt-oss preset, 150-190 (tests/cost).
AttentionRate windowed_attention_rate(const ClusterSpec& c, const AttentionShape& a, Pass pass, Dtype dtype) {
  const std::int64_t b = kAttentionKeyBlockTokens;
  const std::int64_t blocks = (a.window + b - 1) / b + 1;
  auto at = [&](std::int64_t seq, bool causal) {
    AttentionShape s = a;
    s.window = 0;
    s.seq_q = s.seq_kv = seq;
    s.causal = causal;
    return attention_rate(c, s, pass, dtype);
  };
  const double bd = static_cast<double>(b);
  const double pair_flops = attention_flops(AttentionShape{1, 1, 1, 1, 1, a.head_dim, false}, pass);
  // Seconds per block of B query rows over s keys, at a measured rate and that kernel's pairs.
  auto block_seconds = [&](const AttentionRate& r, double s, bool causal) {
    return pair_flops * bd * (causal ? s / 2 : s) / r.flops_per_s;
  };
  const double s1 = bd * static_cast<double>(blocks), s2 = 2 * s1;
  const AttentionRate full1 = at(b * blocks, false), full2 = at(2 * b * blocks, false), causal1 = at(b * blocks, true);
  const double t = std::max(0.0, (block_seconds(full2, s2, false) - block_seconds(full1, s1, false)) / (s2 / bd - s1 / bd));
  const double t0 = std::max(0.0, block_seconds(full1, s1, false) - s1 / bd * t);
  const double t_mask = std::max(0.0, block_seconds(causal1, s1, true) - t0 - (s1 / bd + 1) / 2 * t);
  const double window_seconds = t0 + static_cast<double>(blocks) * t + 2 * t_mask;
  AttentionRate out = causal1;
  out.flops_per_s = pair_flops * bd * static_cast<double>(a.window) / window_seconds;
  out.fallback = causal1.fallback || full1.fallback || full2.fallback;
  return out;
}
}  // namespace

KernelEstimate attention_time(const ClusterSpec& c, const AttentionShape& a, Pass pass, Dtype dtype) {
  check_attention(a);
  KernelEstimate e;
  e.peak_flops_per_s = dense_peak(c, dtype);
  // A curve's rate is a fraction of its own dtype's peak; other dtypes keep that fraction.
  // An 8-bit request priced from a 16-bit curve (no FP8 measurement of that pass) keeps the
  // curve's absolute rate rather than doubling it with the FP8 peak.
  const bool want_eight_bit = is_8bit_attention_dtype(dtype);
  auto efficiency = [&](const AttentionRate& r) {
    const bool eight_bit = is_8bit_attention_dtype(r.curve_dtype);
    const double measured_peak =
        want_eight_bit && !eight_bit ? e.peak_flops_per_s : dense_peak(c, eight_bit ? Dtype::fp8 : Dtype::bf16);
    const double generation = a.flash_version == 1 && r.kernel == AttentionKernel::fa2 ? kFlash1RateOverFlash2 : 1.0;
    return std::min(generation * r.flops_per_s / measured_peak, 1.0);
  };
  e.flops = attention_flops(a, pass);
  e.bytes = attention_bytes(a, pass, dtype);
  const double rate_scale = e.peak_flops_per_s * c.gpu.attention_sustained_fraction();
  AttentionRate rate;
  if (a.windowed()) {
    rate = windowed_attention_rate(c, a, pass, dtype);
    e.compute_seconds = e.flops / (efficiency(rate) * rate_scale);
  } else if (a.causal && a.seq_q < a.seq_kv) {
    // A causal query slice over a longer key range (context parallelism's load-balanced chunks,
    // ring or all-gather): only the diagonal blocks, seq_q / seq_kv of the FLOPs, are masked; the
    // rest are unmasked blocks of seq_q keys (ring steps; TE and torch's ring attention run them
    // as full-mask kernel calls), at the full-mask rate.
    AttentionShape block = a;
    block.seq_kv = a.seq_q;
    rate = attention_rate(c, block, pass, dtype);
    AttentionShape unmasked = block;
    unmasked.causal = false;
    const AttentionRate full = attention_rate(c, unmasked, pass, dtype);
    const double diagonal = static_cast<double>(a.seq_q) / static_cast<double>(a.seq_kv);
    e.compute_seconds = e.flops * diagonal / (efficiency(rate) * rate_scale) +
                        e.flops * (1 - diagonal) / (efficiency(full) * rate_scale);
    rate.fallback = rate.fallback || full.fallback;
  } else {
    rate = attention_rate(c, a, pass, dtype);
    e.compute_seconds = e.flops / (efficiency(rate) * rate_scale);
  }
  e.curve_fallback = rate.fallback;
  e.curve_dtype = rate.curve_dtype;
  e.attention_kernel = rate.kernel;
  e.curve_source = rate.source;
  e.curve_pass = rate.pass;
  e.curve_version = rate.curve_version;
  e.memory_seconds = e.bytes / achieved_hbm_bytes_per_s(c);
  return finish(e, c.gpu.kernel_launch_seconds);
}

namespace {
// A kernel that only streams `bytes` through HBM at `bytes_per_s`; `key` names the input.
KernelEstimate streaming_time(const ClusterSpec& c, double bytes, double bytes_per_s, const char* key) {
  if (!(bytes >= 0) || !std::isfinite(bytes))
    throw InputError("", key, "must be a finite, non-negative byte count");
  KernelEstimate e;
  if (bytes == 0) return e;  // nothing to move, no kernel
  e.bytes = bytes;
  e.memory_seconds = bytes / bytes_per_s;
  return finish(e, c.gpu.kernel_launch_seconds);
}
}  // namespace

KernelEstimate cast_time(const ClusterSpec& c, double bytes) {
  return streaming_time(c, bytes, achieved_hbm_bytes_per_s(c), "cast_bytes");
}

KernelEstimate memory_bound_time(const ClusterSpec& c, double bytes) {
  return streaming_time(c, bytes, achieved_elementwise_bytes_per_s(c), "memory_bytes");
}

namespace {
// PyTorch's layer_norm (aten/src/ATen/native/cuda/layer_norm_kernel.cu) on the lent H200, rows of
// 32,768 tokens (past the L2, where HBM sets the rate), bf16, CUDA-graph GPU time: fraction of the
// HBM peak by row width (tests/cost/measured_h200_elementwise.csv, measure_elementwise.py). The
// forward is one row per block with a two-level reduction; the backward adds a pass over the rows
// for the weight and bias gradients, whose partial sums grow with the rows and not the width, so
// narrow rows run slowest (0.19 of peak at 1,024 against 0.88 for a copy).
struct NormRatePoint {
  std::int64_t width;
  double forward, backward;  // fraction of HBM peak
};
constexpr std::array<NormRatePoint, 4> kH200LayerNormRates{
    {{1024, 0.360, 0.195}, {2048, 0.477, 0.312}, {4096, 0.564, 0.375}, {8192, 0.505, 0.338}}};
// The H200's STREAM copy fraction (its profile's hbm_efficiency, Azure's BabelStream): the rates
// above transfer to other GPUs as fractions of their own copy rate.
constexpr double kH200StreamFraction = 0.835;
}  // namespace

// Linear in log2(width) between the measured widths, the end points' rates outside them.
double layernorm_stream_fraction(std::int64_t width, Pass pass) {
  auto rate = [pass](const NormRatePoint& p) { return pass == Pass::forward ? p.forward : p.backward; };
  const auto& pts = kH200LayerNormRates;
  if (width <= pts.front().width) return rate(pts.front()) / kH200StreamFraction;
  if (width >= pts.back().width) return rate(pts.back()) / kH200StreamFraction;
  std::size_t i = 1;
  while (pts[i].width < width) ++i;
  const double x = (std::log2(static_cast<double>(width)) - std::log2(static_cast<double>(pts[i - 1].width))) /
                   (std::log2(static_cast<double>(pts[i].width)) - std::log2(static_cast<double>(pts[i - 1].width)));
  return (rate(pts[i - 1]) + x * (rate(pts[i]) - rate(pts[i - 1]))) / kH200StreamFraction;
}

KernelEstimate layernorm_time(const ClusterSpec& c, const NormWork& n) {
  return streaming_time(c, n.bytes, achieved_hbm_bytes_per_s(c) * layernorm_stream_fraction(n.width, n.pass),
                        "layernorm_bytes");
}

}  // namespace meshplan

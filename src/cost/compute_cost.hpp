#pragma once
// Duration of one kernel on one GPU: the larger of FLOPs / (peak x efficiency) and
// bytes / achieved HBM bandwidth, plus the launch overhead (roofline with measured efficiency).
#include <cstdint>
#include <span>
#include <string_view>

#include "spec/cluster_spec.hpp"
#include "spec/dtype.hpp"
#include "workload/kernel_shapes.hpp"

namespace meshplan {


struct KernelEstimate {
  double seconds = 0;
  double flops = 0;
  double bytes = 0;
  double efficiency = 0;         // achieved FLOP/s / peak (compute-bound kernels)
  bool memory_bound = false;
  // The three terms behind `seconds` = max(compute, memory) + launch (docs/compute.md).
  double compute_seconds = 0;    // FLOPs / (peak x curve efficiency)
  double memory_seconds = 0;     // bytes / (HBM peak x hbm_efficiency)
  double launch_seconds = 0;
  double peak_flops_per_s = 0;   // dense peak of the requested dtype (0 for memory-bound ops)
  // True when the profile had no curve for what was asked (dtype without a GEMM curve -> the
  // nearest curve, docs/compute.md; attention dtype/mask without a curve -> nearest one); `curve_dtype` says which.
  bool curve_fallback = false;
  Dtype curve_dtype = Dtype::bf16;
  // Attention only: the kernel family whose curves priced it, and the source tag and measured
  // pass ("fwd", "bwd", "fwd+bwd") of the curve (the one below the head dim when two are
  // interpolated). Views into the ClusterSpec the estimate was made from: an estimate allocates
  // nothing.
  AttentionKernel attention_kernel = AttentionKernel::framework;
  std::string_view curve_source;  // GEMMs too: the source tag of the GEMM curve
  std::string_view curve_pass;
  int curve_version = 0;  // attention: the library release of the curve (parse_library_version), 0 = not stated
  // GEMM only: the tile schedule it was priced with (docs/compute.md, "GEMM time from the
  // shape"): output tiles of the 128x256 kernel tile, waves of them over the SMs, whether the
  // stream-K schedule (K iterations spread evenly over every SM) was taken instead of whole-tile
  // waves, and the per-tile tensor-core efficiency read off the profile's large squares.
  double gemm_tiles = 0;
  double gemm_waves = 0;
  bool gemm_stream_k = false;
  bool gemm_grouped = false;  // the persistent grouped kernel of MoE experts (GemmShape::group)
  double gemm_tile_efficiency = 0;
  // Blackwell GEMMs instead: the side of the measured square with the same padded tile work, each
  // tile paying gemm_tile_overhead_k more K (docs/compute.md); 0 where tiles were scheduled.
  double equivalent_square_dim = 0;
  // The fixed cost every output tile pays beside its K loop, in K of the GEMM's own dtype: the
  // profile's gpu.gemm_tile_overhead_k (16-bit operands) times 2 / operand bytes.
  double gemm_tile_overhead_k = 0;
};

// The tensor-core part of a GEMM's time as a fraction of peak (FLOPs / (peak x compute_seconds)):
// the tile schedule of the shape at the per-tile efficiency of the profile's large squares,
// with the sustained clock.
double gemm_efficiency(const ClusterSpec& c, const GemmShape& g, Dtype dtype);
// The profile's square-GEMM curve for `dtype` (the nearest one if it has none: blockwise FP8 ->
// MXFP8 -> FP8 -> bf16, docs/compute.md) at `cube_dim`: running
// maximum of the measured points, power law between them, clamped at the ends.
double gemm_curve_efficiency(const ClusterSpec& c, Dtype dtype, double cube_dim);
KernelEstimate gemm_time(const ClusterSpec& c, const GemmShape& g, Dtype dtype);
// A grouped GEMM with each group's own row count (the experts' tokens): C_g[rows_g, n] =
// A_g[rows_g, k] B_g[k, n] in one launch, the groups' cluster steps counted exactly rather than
// from a mean and spread (GemmShape::group). Zero rows in every group: no kernel.
KernelEstimate grouped_gemm_time(const ClusterSpec& c, std::span<const std::int64_t> rows, std::int64_t n,
                                 std::int64_t k, Dtype dtype);
// Bytes a GEMM must move at least once: A and B in `dtype`, C in at least 16 bits (fp8/fp4 GEMMs
// accumulate in fp32 and write bf16, as Transformer Engine and cuBLASLt default to).
double gemm_bytes(const GemmShape& g, Dtype dtype);

// Fused (FlashAttention-style) attention; its FLOPs are attention_flops (workload/kernel_shapes.hpp).
// Bytes the fused kernel must move through HBM: Q, K, V, O (and dO, dQ, dK, dV backward).
double attention_bytes(const AttentionShape& a, Pass pass, Dtype dtype);
KernelEstimate attention_time(const ClusterSpec& c, const AttentionShape& a, Pass pass, Dtype dtype);
// The kernel family the shape's attention API runs on this GPU (its explicit `kernel` if set):
// Transformer Engine -> cuDNN fused attention from sm90, torch SDPA -> cuDNN from sm100 and its
// flash (FA2) backend below, the flash-attn package -> FA2 (docs/compute.md). What the profile
// has curves for is resolved by attention_time (nearest measured family, flagged).
AttentionKernel attention_kernel_for(const ClusterSpec& c, const AttentionShape& a);

// The 8-bit formats attention curves are measured in: per-tensor scaled FP8 and MXFP8.
constexpr bool is_8bit_attention_dtype(Dtype d) { return d == Dtype::fp8 || d == Dtype::mxfp8; }

// Element-wise / reduction kernels: bytes read + written at achieved HBM bandwidth.
KernelEstimate memory_bound_time(const ClusterSpec& c, double bytes);
// Low-precision quantize (cast, cast-transpose) kernels: purpose-built streaming kernels, at the
// profile's copy bandwidth (hbm_efficiency) rather than eager element-wise code's.
KernelEstimate cast_time(const ClusterSpec& c, double bytes);
// PyTorch's layer_norm kernels over rows of `n.width` elements: the fraction of the STREAM copy
// rate they reach by width and pass, measured on the H200 (docs/compute.md "LayerNorm kernels").
KernelEstimate layernorm_time(const ClusterSpec& c, const NormWork& n);
double layernorm_stream_fraction(std::int64_t width, Pass pass);

}  // namespace meshplan

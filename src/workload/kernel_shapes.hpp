#pragma once
// Shapes of the kernels a rank runs: what the workload emits and the compute cost model prices.
#include <cstdint>

#include "spec/attention_kernel.hpp"

namespace meshplan {

// Which dimension of a grouped GEMM (MoE experts: one launch over `batch` groups) varies from
// group to group: the rows (forward and data gradient: each expert's own token count) or the
// reduction depth (weight gradient: K = each expert's token count).
// How the `batch` members of a GEMM run: one strided batched kernel (none), one grouped kernel
// over ragged rows or depth (rows, depth), or one launch each, one after another (sequential:
// Megatron's SequentialMLP looping over its local experts).
enum class GemmGroup : std::uint8_t { none, rows, depth, sequential };

struct GemmShape {
  std::int64_t m = 0, n = 0, k = 0;  // C[m,n] = A[m,k] B[k,n]
  std::int64_t batch = 1;            // batched GEMM count (grouped: the groups)
  // Grouped GEMM: `batch` groups whose `group` dimension (m or k) is the groups' mean, spread with
  // this coefficient of variation over the groups (0: every group the same). A batched GEMM
  // (GemmGroup::none) has `batch` equal members run as one strided kernel; a sequential one
  // (GemmGroup::sequential) `batch` equal GEMMs launched one by one.
  GemmGroup group = GemmGroup::none;
  float group_cv = 0;
  double flops() const { return 2.0 * static_cast<double>(m) * n * k * batch; }
  friend bool operator==(const GemmShape&, const GemmShape&) = default;
};

struct AttentionShape {
  std::int64_t batch = 1;
  std::int64_t heads = 1;        // query heads on this rank
  std::int64_t kv_heads = 1;
  std::int64_t seq_q = 0;        // query tokens
  std::int64_t seq_kv = 0;       // key/value tokens
  std::int64_t head_dim = 128;
  bool causal = true;
  // Fused kernel generation: 2 = FlashAttention-2 class (what the profiles' curves measure),
  // 1 = FlashAttention-1 class (flash-attn 1.x, Triton flash), priced relative to FA2.
  int flash_version = 2;
  // The API the runtime calls and an explicit kernel choice (`framework`: the API's pick on the
  // GPU); the cost model maps them onto the profile's measured kernel curves.
  AttentionBackend backend = AttentionBackend::flash_attn;
  AttentionKernel kernel = AttentionKernel::framework;
  // cuDNN release the run uses (parse_library_version); 0 = the newest the profile measured.
  int cudnn_version = 0;
  // A causal sliding window (ModelSpec::sliding_window): each query attends to at most this many
  // keys, itself included; 0 (or a window no shorter than seq_kv): the whole causal prefix.
  std::int32_t window = 0;  // 32 bits: it fits the struct's padding (OpWork keeps its size)
  bool windowed() const { return causal && window > 0 && window < seq_kv; }
  friend bool operator==(const AttentionShape&, const AttentionShape&) = default;
};

enum class Pass { forward, backward };

// LayerNorm run as PyTorch's own layer_norm kernels (eager runtimes: aten's row kernel, and in
// backward a second pass for the weight and bias gradients), whose rate depends on the row width
// and the pass (cost/compute_cost.hpp layernorm_time). `bytes` are part of the op's element-wise
// bytes; 0: the op runs no such kernel.
struct NormWork {
  double bytes = 0;
  std::int64_t width = 0;  // elements per normalized row (the model width)
  Pass pass = Pass::forward;
  friend bool operator==(const NormWork&, const NormWork&) = default;
};

// FlashAttention-2 backward does 5 matmuls (S and P recomputed, dV, dP, dQ, dK -> 2.5x the 2 of
// the forward); its benchmark counts FLOPs the same way (benchmarks/benchmark_flash_attention.py).
constexpr double kAttentionBackwardOverForward = 2.5;

// FLOPs the fused (FlashAttention-style) kernel executes. Forward: S = Q K^T and O = P V,
// 2 x (2 b h s_q s_kv d); a causal mask skips half the tiles. A sliding window of w keys over a
// sequence of s: the first w queries see the causal triangle (w^2 / 2 pairs), every later one w
// keys, s w - w^2 / 2 pairs in all (s^2 / 2 at w = s), of which a rank holding s_q of the s
// queries (context parallelism's balanced chunks) does its share s_q / s. Backward:
// kAttentionBackwardOverForward times the forward.
inline double attention_flops(const AttentionShape& a, Pass pass) {
  const double per_pair = 4.0 * static_cast<double>(a.batch) * static_cast<double>(a.heads) * static_cast<double>(a.head_dim);
  double fwd = per_pair * static_cast<double>(a.seq_q) * static_cast<double>(a.seq_kv);
  if (a.windowed()) {
    const double w = static_cast<double>(a.window), s = static_cast<double>(a.seq_kv);
    fwd = per_pair * static_cast<double>(a.seq_q) * (w - w * w / (2 * s));
  } else if (a.causal) {
    fwd *= 0.5;
  }
  return pass == Pass::forward ? fwd : kAttentionBackwardOverForward * fwd;
}

}  // namespace meshplan

#pragma once
// Numeric formats used for storage, compute and communication.
#include <optional>
#include <string>
#include <string_view>

namespace meshplan {

// The low-precision GEMM formats differ in how they are scaled, which sets both their tensor-core
// rate (separate GEMM curves) and the bytes of their scale factors (docs/compute.md):
//   fp8       E4M3/E5M2 with one scale per tensor (or per row: torchao rowwise)
//   fp8_block E4M3 with fp32 scales per 1x128 tile of activations / gradients and per 128x128
//             block of weights (DeepSeek-V3, arXiv:2412.19437; Transformer Engine Float8BlockScaling)
//   mxfp8     OCP microscaling: E4M3 with one E8M0 scale per 32 elements (Blackwell tcgen05)
//   fp4       NVFP4: E2M1 with one E4M3 scale per 16 elements and an fp32 scale per tensor
enum class Dtype { fp32, tf32, bf16, fp16, fp8, fp4, fp8_block, mxfp8 };

// Bytes per element as stored in memory, scale factors excluded (tf32 is stored as fp32; fp4 packs
// two per byte).
constexpr double bytes_per_element(Dtype d) {
  switch (d) {
    case Dtype::fp32: return 4.0;
    case Dtype::tf32: return 4.0;
    case Dtype::bf16: return 2.0;
    case Dtype::fp16: return 2.0;
    case Dtype::fp8: return 1.0;
    case Dtype::fp4: return 0.5;
    case Dtype::fp8_block: return 1.0;
    case Dtype::mxfp8: return 1.0;
  }
  return 4.0;
}

// Scale-factor bytes per element of an activation or gradient quantized to `d`: an fp32 per 128
// (fp8_block), an E8M0 byte per 32 (mxfp8), an E4M3 byte per 16 (NVFP4); per-tensor scales are
// negligible. Weights under fp8_block and NVFP4 use 2D blocks instead (workload/layer_kernels).
constexpr double scale_bytes_per_element(Dtype d) {
  switch (d) {
    case Dtype::fp8_block: return 4.0 / 128.0;
    case Dtype::mxfp8: return 1.0 / 32.0;
    case Dtype::fp4: return 1.0 / 16.0;
    default: return 0.0;
  }
}

std::string_view to_string(Dtype d);
// Accepts meshplan names (fp32, bf16, ...) and the runtimes' spellings
// (float32, bfloat16, torch.bfloat16, amp_bf16, half, float, ...).
std::optional<Dtype> parse_dtype(std::string_view s);

}  // namespace meshplan

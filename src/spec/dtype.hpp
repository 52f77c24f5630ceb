#pragma once
// Numeric formats used for storage, compute and communication.
#include <optional>
#include <string>
#include <string_view>

namespace meshplan {

enum class Dtype { fp32, tf32, bf16, fp16, fp8, fp4 };

// Bytes per element as stored in memory (tf32 is stored as fp32; fp4 packs two per byte).
constexpr double bytes_per_element(Dtype d) {
  switch (d) {
    case Dtype::fp32: return 4.0;
    case Dtype::tf32: return 4.0;
    case Dtype::bf16: return 2.0;
    case Dtype::fp16: return 2.0;
    case Dtype::fp8: return 1.0;
    case Dtype::fp4: return 0.5;
  }
  return 4.0;
}

std::string_view to_string(Dtype d);
// Accepts meshplan names (fp32, bf16, ...) and the runtimes' spellings
// (float32, bfloat16, torch.bfloat16, amp_bf16, half, float, ...).
std::optional<Dtype> parse_dtype(std::string_view s);

}  // namespace meshplan

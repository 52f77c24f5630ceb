#pragma once
// Which fused attention kernel runs: the framework's attention API (its backend) and, per GPU
// architecture, the kernel that API dispatches to (docs/compute.md, "Attention kernel per
// framework"). A plan may name the kernel outright ([runtime] attention_kernel).
#include <optional>
#include <string>
#include <string_view>

namespace meshplan {

// The attention API a runtime calls.
enum class AttentionBackend {
  flash_attn,          // the flash-attn package (llm-foundry/Composer, generic scripts)
  torch_sdpa,          // torch.nn.functional.scaled_dot_product_attention (torchtitan)
  transformer_engine,  // Transformer Engine's DotProductAttention (Megatron-LM, NeMo)
};

// Kernel families the profiles' attention curves are measured for. `framework` = the one the
// backend picks on the GPU's architecture.
enum class AttentionKernel { framework, fa2, fa3, fa4, cudnn };

constexpr std::string_view to_string(AttentionKernel k) {
  switch (k) {
    case AttentionKernel::framework: return "framework";
    case AttentionKernel::fa2: return "fa2";
    case AttentionKernel::fa3: return "fa3";
    case AttentionKernel::fa4: return "fa4";
    case AttentionKernel::cudnn: return "cudnn";
  }
  return "framework";
}

constexpr std::string_view to_string(AttentionBackend b) {
  switch (b) {
    case AttentionBackend::flash_attn: return "flash-attn";
    case AttentionBackend::torch_sdpa: return "torch-sdpa";
    case AttentionBackend::transformer_engine: return "transformer-engine";
  }
  return "flash-attn";
}

// Accepts the short family names and the package spellings profiles have used.
constexpr std::optional<AttentionKernel> parse_attention_kernel(std::string_view s) {
  if (s == "framework") return AttentionKernel::framework;
  if (s == "fa2" || s == "flash-attn-2") return AttentionKernel::fa2;
  if (s == "fa3" || s == "flash-attn-3") return AttentionKernel::fa3;
  if (s == "fa4" || s == "flash-attn-4") return AttentionKernel::fa4;
  if (s == "cudnn" || s == "cudnn-fused") return AttentionKernel::cudnn;
  return std::nullopt;
}

// A kernel library's release, "MAJOR.MINOR" (a third component is accepted and ignored: patch
// releases keep a minor's kernels), as MAJOR * 1000 + MINOR, so releases compare as integers.
// 0 = not stated. cuDNN's fused attention changes speed between minors (docs/compute.md).
constexpr std::optional<int> parse_library_version(std::string_view s) {
  int part[3] = {0, 0, 0};
  int parts = 0, digits = 0;
  for (char ch : s) {
    if (ch == '.') {
      if (digits == 0 || ++parts > 2) return std::nullopt;
      digits = 0;
    } else if (ch >= '0' && ch <= '9') {
      if (++digits > 3) return std::nullopt;
      part[parts] = 10 * part[parts] + (ch - '0');
    } else {
      return std::nullopt;
    }
  }
  if (digits == 0 || parts < 1 || part[0] == 0 || part[0] > 99) return std::nullopt;
  return part[0] * 1000 + part[1];
}

// parse_library_version's inverse: 9017 -> "9.17".
inline std::string library_version_text(int v) {
  return std::to_string(v / 1000) + "." + std::to_string(v % 1000);
}

}  // namespace meshplan

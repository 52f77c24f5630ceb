#pragma once
// Which fused attention kernel runs: the framework's attention API (its backend) and, per GPU
// architecture, the kernel that API dispatches to (docs/compute.md, "Attention kernel per
// framework"). A plan may name the kernel outright ([runtime] attention_kernel).
#include <optional>
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

}  // namespace meshplan

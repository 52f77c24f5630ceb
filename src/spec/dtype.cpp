#include "spec/dtype.hpp"

#include <algorithm>
#include <cctype>
#include <string>

namespace meshplan {

std::string_view to_string(Dtype d) {
  switch (d) {
    case Dtype::fp32: return "fp32";
    case Dtype::tf32: return "tf32";
    case Dtype::bf16: return "bf16";
    case Dtype::fp16: return "fp16";
    case Dtype::fp8: return "fp8";
    case Dtype::fp4: return "fp4";
    case Dtype::fp8_block: return "fp8_block";
    case Dtype::mxfp8: return "mxfp8";
  }
  return "fp32";
}

std::optional<Dtype> parse_dtype(std::string_view s) {
  std::string v(s);
  std::transform(v.begin(), v.end(), v.begin(), [](unsigned char c) { return std::tolower(c); });
  if (v.rfind("torch.", 0) == 0) v = v.substr(6);
  if (v.rfind("amp_", 0) == 0) v = v.substr(4);
  if (v == "fp32" || v == "float32" || v == "float" || v == "f32") return Dtype::fp32;
  if (v == "tf32") return Dtype::tf32;
  if (v == "bf16" || v == "bfloat16") return Dtype::bf16;
  if (v == "fp16" || v == "float16" || v == "half" || v == "f16") return Dtype::fp16;
  if (v == "fp8" || v == "float8" || v == "e4m3" || v == "e5m2") return Dtype::fp8;
  if (v == "fp4" || v == "nvfp4") return Dtype::fp4;
  if (v == "fp8_block" || v == "fp8-block" || v == "fp8_blockwise" || v == "blockwise") return Dtype::fp8_block;
  if (v == "mxfp8" || v == "mx_fp8") return Dtype::mxfp8;
  return std::nullopt;
}

}  // namespace meshplan

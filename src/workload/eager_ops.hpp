#pragma once
// Element-wise composites (RMSNorm, RoPE, SwiGLU's gate) as eager PyTorch runs them: one kernel per
// aten op, each a full round trip through HBM. Fused implementations (Transformer Engine and apex in
// Megatron, Inductor under torch.compile) read each input once and write each output once. The
// byte counts follow the modules' op sequences; docs/compute.md has the derivations.
#include "spec/model_spec.hpp"
#include "spec/plan.hpp"
#include "spec/runtime_traits.hpp"

namespace meshplan {

// The runtime executes these composites op by op: no torch.compile, and no fused kernels of its own.
inline bool eager_composites(const Plan& p) { return !p.compile && !runtime_traits(p).fused_elementwise_kernels; }

// HBM bytes and kernels of one composite, per element of the tensor it transforms.
struct ElementwiseCost {
  double forward_bytes_per_element = 0;
  double backward_bytes_per_element = 0;
  int forward_kernels = 0;
  int backward_kernels = 0;
};

// Bytes beyond the fused kernel's, for an input of `e` bytes per element computed in fp32.
//
// RMSNorm (torchtitan, torchtune, HF, litgpt: x.float(), pow, mean, rsqrt, mul, cast back, times
// the weight). Forward: cast (e + 4), pow (4 + 4), mean (4), mul (4 + 4), cast (4 + e), weight
// (2e) = 4e + 28 against the fused 2e. Backward: weight mul and its grad reduction (2e + 4e), cast
// (e + 4), mul (8), the rsqrt branch's product and sum (16), pow (12), the two grads of x summed
// (12), cast (4 + e) = 8e + 56 against the fused 4e.
inline ElementwiseCost eager_rmsnorm_extra(double e) {
  return {2 * e + 28, 4 * e + 56, 6, 9};
}

// RoPE (torchtitan's complex multiply; HF/litgpt's rotate_half moves the same bytes): cast to fp32
// (e + 4), rotate (4 + 4), cast back (4 + e) = 2e + 16 each way, against the fused 2e forward and
// 4e backward.
inline ElementwiseCost eager_rope_extra(double e) { return {16, 16 - 2 * e, 2, 2}; }

// SwiGLU gate, per element of the inner width: silu (e + e) then mul (2e + e) = 5e against the
// fused 3e; backward: two muls (3e each) and silu's backward (3e) = 9e against the fused 6e.
inline ElementwiseCost eager_swiglu_extra(double e) {
  return {2 * e, 3 * e, 1, 2};
}

}  // namespace meshplan

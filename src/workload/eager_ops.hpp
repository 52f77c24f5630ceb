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

// HBM bytes and kernels per attention call that torch's ring attention (context_parallel under
// DTensor: _templated_ring_attention and its backward) adds around the cp kernel calls of one
// rank, eagerly and in fp32. Forward (_SDPAMerger, per element of the rank's output): the first
// block's output cast to fp32 (e + 4); each of the cp - 1 later blocks cast (e + 4) and merged,
// out - sigmoid(lse_b - lse) * (out - out_b): a difference (12), a scaled product (8) and a
// difference (12); the result cast back (4 + e). Backward, per step: dQ += block dQ in fp32
// (e + 8 per query element), dK and dV likewise (per key/value element of the rank's chunk) and
// concatenated into the buffer rotated to the next rank (8 each); zero-filled fp32 accumulators
// before (4 each) and casts back after (4 + e). The log-sum-exp updates are per row, not per
// element: only their launches count. Load balancing's half-block steps move half the elements
// and copy the other half back (torch's _partial_update): counted as whole steps.
// Under torch.compile the ring attention is traced with the block (its collectives are functional)
// and Inductor fuses each step's merge into one pass: read the accumulator and the block output,
// write the accumulator (e + 8 per element, with the log-sum-exp update a second launch), and each
// fp32 gradient accumulation into one read-add-write (e + 8) that writes dK and dV straight into
// the rotated buffer.
struct RingMergeCost {
  double bytes = 0;
  int kernels = 0;
};
// `q_elements`: the rank's query (and output) elements; `kv_elements`: one key chunk's.
inline RingMergeCost ring_attention_merge(double q_elements, double kv_elements, int cp, double e, bool backward,
                                          bool compiled) {
  const double steps = cp;
  const double merge = compiled ? e + 8 : e + 36;
  if (!backward)
    return {((e + 4) + (steps - 1) * merge + (4 + e)) * q_elements, 2 + (compiled ? 2 : 9) * (cp - 1) + 2};
  const double per_q = 4 + steps * (e + 8) + (4 + e);
  const double per_kv = 4 + steps * (e + (compiled ? 8 : 16)) + (4 + e);  // each of dK and dV
  return {per_q * q_elements + 2 * per_kv * kv_elements, 3 + (compiled ? 3 : 4) * cp + 3};
}

}  // namespace meshplan

#pragma once
// Bytes a transformer block keeps for backward, per rank, for one micro-batch.
// Counted tensor by tensor the way Korthikanti et al. 2022 (arXiv:2205.05198, §4) count them,
// generalised to GQA, SwiGLU/ReLU^2 MLPs, fused (FlashAttention) attention and no dropout, so
// that their closed forms fall out as special cases:
//   no recompute, no TP:           s*b*h*(34 + 5*a*s/h)
//   TP t, no SP:                   s*b*h*(10 + 24/t + 5*a*s/(h*t))
//   TP t + SP:                     s*b*h*(34 + 5*a*s/h)/t
//   TP t + SP + selective (attn):  34*s*b*h/t
//   full recompute:                2*s*b*h (the block input only)
#include <cstdint>

#include "spec/model_spec.hpp"
#include "spec/plan.hpp"

namespace meshplan {

// Per-block tensors saved for backward, split by where they come from (bytes, one micro-batch).
struct BlockActivations {
  double norms_bytes = 0;          // inputs of the two norms
  double attention_bytes = 0;      // QKV input, Q, K, V, attention output, out-proj input
  double attention_scores_bytes = 0;  // s^2 terms of unfused attention (softmax out, dropout)
  double mlp_bytes = 0;            // MLP input and the inner-width tensors
  double dropout_masks_bytes = 0;  // 1-byte masks after attention and MLP
  double block_input_bytes = 0;    // what a checkpointed block keeps (its input)
  double total() const {
    return norms_bytes + attention_bytes + attention_scores_bytes + mlp_bytes + dropout_masks_bytes;
  }
};

// Shape of one micro-batch as one rank sees it.
struct MicroBatchShape {
  std::int64_t seq_len = 0;     // tokens per sequence on this rank (after CP split)
  std::int64_t micro_batch = 1; // sequences
};

// Everything a block saves with no checkpointing, under the plan's TP/SP/CP split.
BlockActivations block_activations(const ModelSpec& m, const Plan& p, MicroBatchShape mb);

// MoE blocks beyond the dense MLP's tensors: the permuted expert inputs and the expert outputs
// (top_k copies of each token, capacity-padded), the router's fp32 logits and probabilities.
double moe_routing_saved_bytes(const ModelSpec& m, const Plan& p, MicroBatchShape mb);
// Everything an MoE block saves beyond its input (Megatron --recompute-modules moe drops it all).
double moe_block_saved_bytes(const ModelSpec& m, const Plan& p, MicroBatchShape mb);
// What Plan::recompute_modules drops from a block's saved tensors (0 under full recompute).
double recompute_modules_freed_bytes(const ModelSpec& m, const Plan& p, MicroBatchShape mb);

// What one block holds between its forward and its backward under the plan's AC mode.
// `block_index` matters for selective_layer (every n-th block is checkpointed).
double saved_block_bytes(const ModelSpec& m, const Plan& p, MicroBatchShape mb, int block_index);

// What one block's activation offload copies to the host and back: every saved tensor, or under
// Megatron's fine-grained offload (Plan::offload_modules) only those the listed submodules save,
// each a part of saved_block_bytes (never more). 0 without act_offload.
double offloaded_block_bytes(const ModelSpec& m, const Plan& p, MicroBatchShape mb, int block_index);

// Peak extra bytes while one checkpointed block is recomputed and back-propagated.
// Non-reentrant checkpointing stops recomputing once every saved tensor exists and frees
// recomputed tensors as they are consumed; reentrant rebuilds the whole block (including its
// output) and back-propagates it as a unit, so it never holds less (PyTorch PR #78752).
double recompute_working_bytes(const ModelSpec& m, const Plan& p, MicroBatchShape mb);

// What one multi-token-prediction module saves before its block (Megatron-Core
// MultiTokenPredictionLayer: enorm of the shifted tokens' embedding, hnorm of the hidden state,
// their concatenation as the input of the 2h -> h projection eh_proj): the two norms' inputs and
// the projection's 2h-wide input, under the plan's TP/SP split. Its block saves what any block
// does (saved_block_bytes), its head and loss what the model's own do (loss_saved_bytes).
double mtp_input_saved_bytes(const ModelSpec& m, const Plan& p, MicroBatchShape mb);

// Saved tensors of the LM head and loss: the head input and the fp32 log-softmax that
// cross-entropy keeps (vocab split over TP under loss-parallel).
double loss_saved_bytes(const ModelSpec& m, const Plan& p, MicroBatchShape mb);
// Gradient of the logits at the start of backward (fp32, same shape as the log-softmax).
double loss_backward_working_bytes(const ModelSpec& m, const Plan& p, MicroBatchShape mb);
// Loss tensors alive while the forward's log-softmax runs: the final-norm and head inputs, the
// fp32 upcast of the logits (its input) and the fp32 log-probabilities (its output).
double loss_forward_peak_bytes(const ModelSpec& m, const Plan& p, MicroBatchShape mb);

// Gradient tensors alive, beyond the block's saved activations, while one block runs its backward:
// the incoming gradient of the block output and the widest gradients of the MLP backward (SwiGLU:
// d(silu) and d(up) while the product's gradient is freed; GELU / ReLU^2: one inner-width grad).
double block_backward_working_bytes(const ModelSpec& m, const Plan& p, MicroBatchShape mb);

// The stage output a non-Megatron pipeline runtime keeps, per micro-batch in flight, on a stage
// that sends to a next one: DeepSpeed's pipe buffers and torch.distributed.pipelining's forward
// cache hold the output tensor (data included) until its backward. Megatron frees the output's
// data once sent (deallocate_pipeline_outputs) and keeps only its autograd node: 0.
double pipeline_boundary_bytes(const ModelSpec& m, const Plan& p, MicroBatchShape mb, double microbatches_in_flight);

}  // namespace meshplan

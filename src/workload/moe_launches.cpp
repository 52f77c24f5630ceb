#include "workload/moe_launches.hpp"

namespace meshplan {

namespace {

// Forward and backward launches of one part of the layer.
struct Part {
  int forward = 0, backward = 0;
};

// router.py TopKRouter with moe_utils.py topk_softmax_with_capacity: the gating GEMM, top-k, the
// softmax over the k scores and its cast back, the dense probabilities (zeros + scatter), the
// routing map (zeros, int cast, scatter, bool cast) and the tokens per expert (a sum); backward the
// gating GEMM's data and weight gradients, the scatter's gather, the softmax's backward and the
// cast. Fused (--moe-router-fusion): the GEMM, Transformer Engine's top-k with score function and
// the sum; backward the GEMM's two gradients and the fused kernel's.
constexpr Part kRouter{10, 5}, kRouterFused{3, 3};
// The auxiliary load-balancing loss (switch_load_balancing_loss_func, MoEAuxLossAutoScaler): a
// softmax of every logit in fp32, its sum over the tokens, the product with the token counts and
// its sum, the scaling, the loss tracker's add; backward the autoscaler's gradient, the sum's
// expand and the softmax's backward. Fused: the scores for the loss, the loss, the tracker.
constexpr Part kAuxLoss{6, 3}, kAuxLossFused{3, 2};
// token_dispatcher.py MoEAlltoAllTokenDispatcher.preprocess with tokens crossing ranks: the counts
// (sum, long cast), the input splits (a sum and its copy to the host), the all-gather of every
// rank's counts over TP x EP, the local experts' slice, the output splits and the tokens per local
// expert (a sum and a host copy each), and unfused the local experts' chunk order (two index ops).
// Without crossing: the counts alone.
constexpr int kAlltoAllPreprocessAcross = 11, kChunkOrder = 2, kAlltoAllPreprocessLocal = 2;
// moe_utils.py permute: the routing map transposed, the token indices (arange), masked_select of
// the indices (a count and a gather), the probabilities transposed and masked-selected, and the
// rows gathered (index_select); backward the index_select's zeros + index_add and the masked
// probabilities' zeros + masked_scatter. Fused: the row-id map and the permute with probabilities;
// one backward kernel.
constexpr Part kPermute{8, 4}, kPermuteFused{2, 1};
// The probabilities' own all-to-all beside the tokens' (alltoall dispatcher); its backward's.
constexpr Part kProbsAllToAll{1, 1};
// sort_chunks_by_idxs into local-expert order (tokens and probabilities, a cat each) and back
// after the experts (tokens); backward the cats' splits. Fused: one kernel each way.
constexpr Part kSortChunks{3, 3}, kSortChunksFused{2, 2};
// The flex dispatcher (DeepEP, HybridEP; _DeepepManager / _HybridEPManager): the routing map
// turned into top-k indices and probabilities and the dispatch layout, before the permute.
constexpr Part kFlexMetadata{4, 0};
// experts.py TEGroupedMLP's activation: the probabilities' unsqueeze and the fused weighted
// bias-SwiGLU (or GELU); its backward.
constexpr Part kActivation{2, 2};
// moe_utils.py unpermute: zeros + scatter_add of the rows back to token order; backward a gather.
// Fused: one kernel each way.
constexpr Part kUnpermute{2, 1}, kUnpermuteFused{1, 1};
// GroupedLinear's GEMMs per local expert: fc1 and fc2 forward; data and weight gradient of each.
constexpr Part kExpertGemms{2, 4};
// experts.py SequentialMLP: per local expert its own MLP module, fc1, the weighted activation (2)
// and fc2, and their backward; the outputs concatenated once (and split back in backward).
constexpr Part kSequentialExpert{4, 6}, kSequentialConcat{1, 1};

}  // namespace

MoeLaunches megatron_moe_launches(const MoeLayerCode& code) {
  MoeLaunches n;
  auto add = [&](Part p, int times = 1) {
    n.forward += p.forward * times;
    n.backward += p.backward * times;
  };
  add(code.router_fusion ? kRouterFused : kRouter);
  add(code.router_fusion ? kAuxLossFused : kAuxLoss);
  n.router_forward = n.forward;
  n.router_backward = n.backward;
  add(code.permute_fusion ? kPermuteFused : kPermute);
  add(code.permute_fusion ? kUnpermuteFused : kUnpermute);
  if (code.grouped_gemm) {
    add(kActivation);
    add(kExpertGemms, code.local_experts);
  } else {
    add(kSequentialExpert, code.local_experts);
    add(kSequentialConcat);
  }
  if (code.dispatcher != MoeDispatcher::alltoall) {
    add(kFlexMetadata);
    n.preprocess_forward = kFlexMetadata.forward;
    return n;
  }
  n.preprocess_forward = code.across_ranks ? kAlltoAllPreprocessAcross - (code.permute_fusion ? kChunkOrder : 0)
                                           : kAlltoAllPreprocessLocal;
  add({n.preprocess_forward, 0});
  if (code.across_ranks) add(kProbsAllToAll);
  if (code.local_experts > 1) add(code.permute_fusion ? kSortChunksFused : kSortChunks);
  return n;
}

}  // namespace meshplan

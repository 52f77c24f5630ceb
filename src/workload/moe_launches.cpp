#include "workload/moe_launches.hpp"

namespace meshplan {

namespace {

// router.py TopKRouter with moe_utils.py topk_softmax_with_capacity: the gating GEMM, top-k, the
// softmax over the k scores and its cast back, the dense probabilities (zeros + scatter), the
// routing map (zeros, int cast, scatter, bool cast) and the tokens per expert (a sum).
constexpr int kRouterForward = 10;
// Its backward: the gating GEMM's data and weight gradients, the scatter's gather, the softmax's
// backward and the cast.
constexpr int kRouterBackward = 5;
// The auxiliary load-balancing loss (switch_load_balancing_loss_func, MoEAuxLossAutoScaler): a
// softmax of every logit in fp32, its sum over the tokens, the product with the token counts and
// its sum, the scaling, the loss tracker's add; backward the autoscaler's gradient, the sum's
// expand and the softmax's backward.
constexpr int kAuxLossForward = 6, kAuxLossBackward = 3;
// token_dispatcher.py MoEAlltoAllTokenDispatcher.preprocess with tokens crossing ranks: the counts
// (sum, long cast), the input splits (a sum and its copy to the host), the all-gather of every
// rank's counts over TP x EP, the local experts' slice, the output splits and the tokens per local
// expert (a sum and a host copy each), the local experts' chunk order (two index ops). Without
// crossing: the counts alone.
constexpr int kAlltoAllPreprocessAcross = 11, kAlltoAllPreprocessLocal = 2;
// moe_utils.py permute: the routing map transposed, the token indices (arange), masked_select of
// the indices (a count and a gather), the probabilities transposed and masked-selected, and the
// rows gathered (index_select); backward the index_select's zeros + index_add and the masked
// probabilities' zeros + masked_scatter.
constexpr int kPermuteForward = 8, kPermuteBackward = 4;
// The probabilities' own all-to-all beside the tokens' (alltoall dispatcher); its backward's.
constexpr int kProbsAllToAll = 1;
// sort_chunks_by_idxs into local-expert order (tokens and probabilities, a cat each) and back
// after the experts (tokens); backward the cats' splits.
constexpr int kSortChunksForward = 3, kSortChunksBackward = 3;
// The flex dispatcher (DeepEP, HybridEP; _DeepepManager / _HybridEPManager): the routing map
// turned into top-k indices and probabilities and the dispatch layout, before the permute.
constexpr int kFlexMetadata = 4;
// experts.py TEGroupedMLP's activation: the probabilities' unsqueeze and the fused weighted
// bias-SwiGLU (or GELU); its backward.
constexpr int kActivationForward = 2, kActivationBackward = 2;
// moe_utils.py unpermute: zeros + scatter_add of the rows back to token order; backward a gather.
constexpr int kUnpermuteForward = 2, kUnpermuteBackward = 1;
// GroupedLinear's GEMMs per local expert: fc1 and fc2 forward; data and weight gradient of each.
constexpr int kExpertGemmsForward = 2, kExpertGemmsBackward = 4;

}  // namespace

MoeLaunches megatron_moe_launches(MoeDispatcher dispatcher, bool across_ranks, int local_experts) {
  MoeLaunches n;
  n.forward = kRouterForward + kAuxLossForward + kPermuteForward + kActivationForward + kUnpermuteForward +
              kExpertGemmsForward * local_experts;
  n.backward = kRouterBackward + kAuxLossBackward + kPermuteBackward + kActivationBackward + kUnpermuteBackward +
               kExpertGemmsBackward * local_experts;
  if (dispatcher == MoeDispatcher::alltoall) {
    n.forward += across_ranks ? kAlltoAllPreprocessAcross + kProbsAllToAll : kAlltoAllPreprocessLocal;
    n.backward += across_ranks ? kProbsAllToAll : 0;
    if (local_experts > 1) {
      n.forward += kSortChunksForward;
      n.backward += kSortChunksBackward;
    }
  } else {
    n.forward += kFlexMetadata;
  }
  return n;
}

}  // namespace meshplan

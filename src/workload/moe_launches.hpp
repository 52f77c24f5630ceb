#pragma once
// The launches of one Megatron-Core MoE layer on one rank, op by op as its unfused default paths
// run them: the host issues each (one eager aten op or one cuBLAS call apiece), and the GPU pays
// each one's fixed latency. Counted from Megatron-Core's transformer/moe/ (router.py,
// moe_utils.py, token_dispatcher.py, experts.py), with or without its fusions (--moe-permute-fusion,
// --moe-router-fusion; off by default): with --moe-grouped-gemm Transformer Engine's GroupedLinear
// issues one cuBLAS GEMM per local expert, without it SequentialMLP loops over the experts
// (docs/host.md, "Megatron-Core's MoE layer").
#include "spec/plan.hpp"

namespace meshplan {

struct MoeLaunches {
  int forward = 0;
  int backward = 0;
  // Of those, the router's with its auxiliary loss, and the token dispatcher's bookkeeping before
  // the dispatch (what --cuda-graph-scope moe_router / moe_preprocess capture).
  int router_forward = 0, router_backward = 0;
  int preprocess_forward = 0;
};

struct MoeLayerCode {
  MoeDispatcher dispatcher = MoeDispatcher::alltoall;
  bool across_ranks = false;    // tokens leave the rank (ep > 1, or the all-to-all dispatcher's TP x EP group)
  int local_experts = 1;
  bool permute_fusion = false;  // --moe-permute-fusion
  bool router_fusion = false;   // --moe-router-fusion
  bool grouped_gemm = true;     // --moe-grouped-gemm (TEGroupedMLP); else SequentialMLP
};

// Router, token bookkeeping, permutation, the experts' GEMMs and activation, unpermutation; the
// dispatch and combine all-to-alls are ops of their own.
MoeLaunches megatron_moe_launches(const MoeLayerCode& code);

}  // namespace meshplan

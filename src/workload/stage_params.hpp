#pragma once
// Parameters one rank of a pipeline stage owns before data-parallel sharding: the one count the
// memory model and the lowering (FSDP unit sizes, gradient buckets, optimizer bytes) share.
#include "spec/model_spec.hpp"
#include "spec/plan.hpp"

namespace meshplan {

struct StageParams {
  double blocks = 0;           // all transformer blocks on this stage
  double per_block = 0;        // one block = one FSDP unit
  double per_block_norms = 0;  // of which norm weights (never float8)
  double root = 0;             // embeddings, position table, final norm, head on this stage
  double head_group = 0;       // final norm + head (torchtitan's [norm, output] FSDP group)
  // Multi-token-prediction modules on this stage (mtp_module_params_per_rank each) and, on a stage
  // other than the first, the copy of the embedding they read the shifted tokens from.
  double mtp = 0;
  double total() const { return blocks + root + mtp; }
};

// One block's parameters on one rank: attention split over TP (full TP only), the MLP over TP and,
// for MoE experts, over EP.
double block_params_per_rank(const ModelSpec& m, const Plan& p);

// One leading dense block of an MoE model (ModelSpec::moe.n_dense_layers) on one rank: its MLP is
// ffn_hidden wide and split over TP only.
double dense_block_params_per_rank(const ModelSpec& m, const Plan& p);

// One multi-token-prediction module on one rank (Megatron-Core multi_token_prediction.py
// MultiTokenPredictionLayer): its block (an MoE block in an MoE model, block_params_per_rank), the
// 2h -> h projection eh_proj (column-parallel: split over TP), and three norms (enorm, hnorm,
// final_layernorm). The embedding and the output head are the model's own, shared.
double mtp_module_params_per_rank(const ModelSpec& m, const Plan& p);

// Of the layers [first_layer, first_layer + n_layers), the leading dense blocks of an MoE model.
int dense_layers_in(const ModelSpec& m, int first_layer, int n_layers);

// `n_layers` blocks on `stage`, `n_dense` of them leading dense blocks of an MoE model (blocks
// counts each as what it is; per_block, the FSDP unit, stays the largest block); the first stage
// holds the embeddings, the last the final norm and the head (a tied embedding is its own head
// copy on the last stage once there are pipeline stages). `n_mtp`: the multi-token-prediction
// modules the stage holds; on a stage other than the first it keeps its own copy of the embedding
// for them, as for a tied head (Megatron-Core gpt_model.py builds `self.embedding` where
// pre_process or mtp_process, and all-reduces its gradient with the first stage's).
StageParams stage_params(const ModelSpec& m, const Plan& p, int stage, int n_layers, int n_dense = 0, int n_mtp = 0);

}  // namespace meshplan

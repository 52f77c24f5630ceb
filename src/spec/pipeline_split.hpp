#pragma once
// How a model's layers are divided among pipeline chunks (virtual stages).
#include <optional>
#include <string>
#include <vector>

#include "spec/pipeline_layout.hpp"
#include "spec/plan.hpp"

namespace meshplan {

// Layers of each of `n_chunks` consecutive model chunks, in order. An even split when the
// layers divide evenly; otherwise torchtitan's default (pipeline_parallel_first/last_stage_less_layers
// = 1): the embedding and the head each count as one layer, so the first and last chunk take one
// layer fewer — Llama-3.1-405B's 126 layers over 16 stages as 7, 8 x 14, 7. nullopt when neither
// split is exact.
std::optional<std::vector<int>> split_layers(int n_layers, int n_chunks);

// torchtitan's split when nothing names the stages' modules (generate_llm_fqn_per_model_part,
// distributed/pipeline_parallel.py @ 238fa9953e4a): the layers plus the embedding and the output,
// weighing first_less and last_less layers, spread evenly over the stages, the remainder one each
// to the lowest-index stages; the first stage builds first_less layers fewer than its share, the
// last last_less fewer. 32 layers over 4 stages: 8, 9, 8, 7. nullopt with `why` where torchtitan
// raises (more stages than weighted layers, a weight above the per-stage share).
std::optional<std::vector<int>> torchtitan_stage_layers(int n_layers, int n_stages, int first_less, int last_less,
                                                        std::string* why = nullptr);

// Why a split rule cannot place the layers: the rule's field (PipelineSplit member name, or
// "pp" / "vpp" for the degrees) and a one-line reason.
struct SplitError {
  std::string field;
  std::string reason;
};

// Layers of each of the pp x vpp model chunks, in model order (chunk k * pp + r is rank r's k-th
// chunk, as Megatron interleaves), under the plan's rule. Megatron's rules (TransformerConfig
// __post_init__ and get_num_layers_to_build, Megatron-LM core_v0.15):
//   * --decoder-first/last-pipeline-num-layers fix the first/last rank's layers; the others share
//     the rest evenly; every rank's count divides by vpp and each chunk takes count / vpp;
//   * --account-for-embedding/loss-in-pipeline-split count the embedding / the loss as one layer:
//     (layers + 1 + 1) divide by pp x vpp, and the first / last chunk builds one decoder layer
//     fewer (it may hold the embedding or the loss alone);
//   * the two families exclude each other;
//   * --pipeline-model-parallel-layout (PipelineSplit::chunk_layers) gives every chunk's layers
//     and excludes both.
// No rule given: split_layers. nullopt with `error` filled when the rule does not place the layers,
// or leaves a chunk with neither a layer nor the embedding or the loss.
std::optional<std::vector<int>> split_pipeline(int n_layers, int pp, int vpp, const PipelineSplit& rule,
                                               SplitError* error = nullptr);

// The plan's explicit layout (PipelineSplit::chunk_layers) as a layout string's parts, and back.
PipelineLayout layout_of(const PipelineSplit& s);
void set_layout(PipelineSplit& s, const PipelineLayout& l);

// The split rule Megatron needs to run `n_layers` over pp x vpp chunks: none when they divide;
// the embedding and the loss counted as layers when n_layers + 2 divides (the only flags that run
// it); else Megatron-Bridge's ceil(L / stages) layout (ceil_split_layout, MTP layers with the
// loss). nullopt when none places the layers. `how` gets a phrase naming the rule.
std::optional<PipelineSplit> megatron_split_for(int n_layers, int pp, int vpp, int mtp_layers = 0,
                                                std::string* how = nullptr);

// The model chunk (virtual stage) that holds the model's `n_mtp_layers` multi-token-prediction
// layers: the layout's `m` stage where a layout places them, else the last chunk, after every
// decoder layer and with the loss (Megatron-Core builds the MTP block on the last pipeline stage,
// multi_token_prediction.py get_mtp_num_layers_to_build; the layout validation keeps it in the last
// virtual chunk). -1 when the model has none.
int mtp_chunk_of(const PipelineSplit& rule, int n_chunks, int n_mtp_layers);

// One model chunk's layers: [first_layer, first_layer + n_layers).
struct LayerRange {
  int first_layer = 0;
  int n_layers = 0;
};

// Each pipeline rank's chunks in the order it holds them (chunk k of rank r is model chunk k * pp + r).
std::vector<std::vector<LayerRange>> chunks_of_ranks(const std::vector<int>& chunk_layers, int pp);

}  // namespace meshplan

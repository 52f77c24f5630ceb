#pragma once
// Megatron-Core's pipeline layout string (--pipeline-model-parallel-layout, core_v0.13 on;
// pipeline_parallel_layer_layout.py): one group per virtual stage, separated by `|`, of `E` (the
// embedding), `t` (a decoder layer), `m` (a multi-token-prediction layer) and `L` (the loss);
// `X*n` and `(...)*n` repeat, commas and spaces are cosmetic. Stage i is virtual chunk i / pp of
// pipeline rank i % pp, the order spec/pipeline_split.hpp numbers chunks in.
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace meshplan {

struct PipelineLayout {
  std::vector<int> chunk_layers;  // decoder layers of each virtual stage, in model order
  int mtp_chunk = -1;             // the stage holding the MTP layers (-1: none)
  int mtp_layers = 0;
};

// Parses and checks the string as Megatron's validate_layer_layout does: one `E`, in the first
// stage and first in it; one `L`, last in the last stage; the MTP layers together in one stage,
// after every decoder layer. nullopt with `why` set otherwise (a one-line reason).
std::optional<PipelineLayout> parse_pipeline_layout(std::string_view text, std::string* why = nullptr);

// The canonical string for a layout: `t*n` for runs of layers, `(S|)*k` for k equal stages in a
// row; parse_pipeline_layout(format_pipeline_layout(l)) == l.
std::string format_pipeline_layout(const PipelineLayout& l);

// Megatron-Bridge's DeepSeek-V3 / Kimi-K2 rule for `n_layers` over `stages` virtual stages:
// ceil(n_layers / stages) decoder layers in each stage and the remainder in the last, with the
// embedding in the first and the MTP layers and the loss in the last (recipes/deepseek/
// deepseek_v3.py: 61 layers over 16 stages as 4 x 15 + 1; over 8 as 8 x 7 + 5). Where that leaves
// the last stage no decoder layer, its H100 config's shape: the last stage the loss (and MTP)
// alone, ceil(L / (stages - 1)) in each middle stage and the rest in the first (61 over 32 as
// 1 + 2 x 30 + 0). nullopt when even the first would be empty.
std::optional<PipelineLayout> ceil_split_layout(int n_layers, int stages, int mtp_layers = 0);

}  // namespace meshplan

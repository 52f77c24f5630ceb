#pragma once
// How a model's layers are divided among pipeline chunks (virtual stages).
#include <optional>
#include <vector>

namespace meshplan {

// Layers of each of `n_chunks` consecutive model chunks, in order. An even split when the
// layers divide evenly; otherwise torchtitan's default (pipeline_parallel_first/last_stage_less_layers
// = 1): the embedding and the head each count as one layer, so the first and last chunk take one
// layer fewer — Llama-3.1-405B's 126 layers over 16 stages as 7, 8 x 14, 7. nullopt when neither
// split is exact.
std::optional<std::vector<int>> split_layers(int n_layers, int n_chunks);

}  // namespace meshplan

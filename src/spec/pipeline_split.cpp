#include "spec/pipeline_split.hpp"

namespace meshplan {

std::optional<std::vector<int>> split_layers(int n_layers, int n_chunks) {
  if (n_chunks <= 0 || n_layers <= 0) return std::nullopt;
  if (n_layers % n_chunks == 0) return std::vector<int>(static_cast<std::size_t>(n_chunks), n_layers / n_chunks);
  if (n_chunks < 2 || (n_layers + 2) % n_chunks != 0) return std::nullopt;
  const int per = (n_layers + 2) / n_chunks;
  if (per < 2) return std::nullopt;
  std::vector<int> layers(static_cast<std::size_t>(n_chunks), per);
  layers.front() -= 1;
  layers.back() -= 1;
  return layers;
}

}  // namespace meshplan

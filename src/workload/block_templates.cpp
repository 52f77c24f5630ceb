// A block lowered once per key (stage, pass, kind of layer, first micro-batch or not) and copied
// after: a 126-layer model over 16 micro-batches lowers each kind of block a few times instead of
// thousands, and the copies are what lowering it again would give, op for op (the test lowers with
// names, which turns templates off, and compares).
#include <algorithm>

#include "workload/step_builder.hpp"

namespace meshplan::lowering {

std::uint64_t Builder::block_key(int stage, int layer, std::int64_t mb, BlockPass pass, std::size_t n_first_deps) const {
  // What the block's lowering reads of `layer` and `mb` (layer_lowering.cpp): whether the layer
  // routes to experts (its MLP kernels, all-to-alls and sequence-parallel shard) and whether its
  // attention is windowed; of `mb`, only whether it is the first (weights cast to FP8 once).
  const std::uint64_t kind = (m_.moe.is_moe_layer(layer) ? 1u : 0u) | (m_.is_windowed_layer(layer) ? 2u : 0u) |
                             (mb == 0 ? 4u : 0u);
  return (static_cast<std::uint64_t>(stage) << 32) | (static_cast<std::uint64_t>(n_first_deps) << 8) | (kind << 2) |
         static_cast<std::uint64_t>(pass);
}

std::pair<int, int> Builder::copy_block(const BlockTemplate& t, const std::vector<int>& first_deps) {
  const int begin = static_cast<int>(prog_.ops.size());
  for (const StepOp& op : t.ops) {
    StepOp& copy = prog_.ops.emplace_back(op);
    for (int& d : copy.deps) d = d >= 0 ? d + begin : first_deps[static_cast<std::size_t>(-1 - d)];
  }
  return {begin + t.first, begin + t.last};
}

void Builder::keep_block(BlockTemplate& t, std::size_t begin, const std::vector<int>& first_deps,
                         std::pair<int, int> ends) const {
  // A dependency given twice could not say which of the two a copy's would be.
  std::vector<int> sorted = first_deps;
  std::sort(sorted.begin(), sorted.end());
  if (std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end() || ends.first < static_cast<int>(begin)) return;
  const int b = static_cast<int>(begin);
  t.ops.assign(prog_.ops.begin() + static_cast<std::ptrdiff_t>(begin), prog_.ops.end());
  for (StepOp& op : t.ops)
    for (int& d : op.deps) {
      if (d >= b) {
        d -= b;
        continue;
      }
      const auto at = std::find(first_deps.begin(), first_deps.end(), d);
      if (at == first_deps.end()) {  // the block waits for an op it was not handed: not a template
        t.ops.clear();
        return;
      }
      d = -1 - static_cast<int>(at - first_deps.begin());
    }
  t.first = ends.first - b;
  t.last = ends.second - b;
  t.usable = true;
}

}  // namespace meshplan::lowering

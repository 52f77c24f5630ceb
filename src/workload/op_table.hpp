#pragma once
// (row, micro-batch) -> op index, -1 where there is none: the lowering's bookkeeping of which op
// ends a layer's forward or starts a pipeline chunk's backward, as a dense table. Its rows are a
// stage's layers or the step's pipeline chunks; layers x micro-batches is bounded
// (limits::kMaxLayerMicrobatches), so the table is too. As std::map it was a node allocation and a
// tree walk per entry, a twentieth of a folded 405B simulation.
#include <cstdint>
#include <stdexcept>
#include <vector>

namespace meshplan::lowering {

class OpTable {
public:
  OpTable() = default;
  OpTable(int rows, std::int64_t microbatches)
      : rows_(rows), microbatches_(microbatches),
        ops_(static_cast<std::size_t>(rows) * static_cast<std::size_t>(microbatches), -1) {}
  // -1 for a row or micro-batch outside the table, like a key never set.
  int find(int row, std::int64_t mb) const { return inside(row, mb) ? ops_[index(row, mb)] : -1; }
  bool contains(int row, std::int64_t mb) const { return find(row, mb) >= 0; }
  // An entry that must be there (the lowering set it earlier).
  int at(int row, std::int64_t mb) const {
    const int op = find(row, mb);
    if (op < 0) throw std::logic_error("lowering: no op recorded for a pipeline chunk and micro-batch");
    return op;
  }
  void set(int row, std::int64_t mb, int op) {
    if (!inside(row, mb)) throw std::logic_error("lowering: a layer or chunk outside its table");
    ops_[index(row, mb)] = op;
  }
  // Every entry, row by row and micro-batch by micro-batch (std::map's order).
  template <typename F>
  void for_each(F&& f) const {
    for (int r = 0; r < rows_; ++r)
      for (std::int64_t mb = 0; mb < microbatches_; ++mb)
        if (const int op = ops_[index(r, mb)]; op >= 0) f(r, mb, op);
  }
  // Every entry's op, to renumber it.
  template <typename F>
  void for_each_op(F&& f) {
    for (int& op : ops_)
      if (op >= 0) f(op);
  }

private:
  bool inside(int row, std::int64_t mb) const { return row >= 0 && row < rows_ && mb >= 0 && mb < microbatches_; }
  std::size_t index(int row, std::int64_t mb) const {
    return static_cast<std::size_t>(row) * static_cast<std::size_t>(microbatches_) + static_cast<std::size_t>(mb);
  }
  int rows_ = 0;
  std::int64_t microbatches_ = 0;
  std::vector<int> ops_;
};

}  // namespace meshplan::lowering

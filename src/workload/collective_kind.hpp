#pragma once
// Collective operations and where a group's ranks sit: what the workload emits and the
// collective cost model prices.
#include <string_view>

namespace meshplan {

enum class CollectiveOp { all_reduce, all_gather, reduce_scatter, broadcast, reduce, all_to_all, send_recv };

std::string_view to_string(CollectiveOp op);
bool parse_collective_op(std::string_view s, CollectiveOp& out);

// Where a group's ranks sit: n_ranks in total, ranks_per_node of them on each node (TP innermost
// puts a group of <= gpus_per_node inside one node).
struct GroupPlacement {
  int n_ranks = 1;
  int ranks_per_node = 1;
  int n_nodes() const { return (n_ranks + ranks_per_node - 1) / ranks_per_node; }
};

}  // namespace meshplan

#pragma once
// Placement of a Mesh on a Topology and the route each process group's traffic takes.
//
// Rank order is torchtitan's/Megatron's: pp outermost, then dp_replicate, dp_shard, cp, tp
// innermost; global rank r runs on GPU r (node r / gpus_per_node, local GPU r % gpus_per_node).
// Every group kind is then an arithmetic progression of ranks {o, o + stride, ..., o + (n-1) stride}
// whose inner offsets fill [0, stride) and whose outer offsets step by n * stride, so which tier a
// group crosses is decided arithmetically (no path search per plan); the path itself comes from
// the per-tier routes build_topology() found in the graph. docs/topology.md.
#include <array>
#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "spec/plan.hpp"
#include "spec/topology.hpp"

namespace meshplan {

// Named MeshGroup, not GroupKind: workload/step_program.hpp owns that name for the ops' groups;
// the kinds map one to one (this one adds dp_shard alone).
enum class MeshGroup {
  tp,
  cp,
  dp_shard,
  dp_replicate,
  fsdp,  // dp_shard x cp: the FSDP all-gather / reduce-scatter group (torchtitan's dp_shard_cp)
  dp,    // all data-parallel ranks, dp_replicate x dp_shard x cp: the gradient-reduction group
         // (cp ranks hold the same weights; torchtitan's dp_cp mesh; step_program's GroupKind::dp)
  pp,
  ep,    // ep consecutive data-parallel ranks (stride tp), carved from dp_replicate x dp_shard x cp
  stage, // every rank of one pipeline stage, tp x cp x dp (Megatron's amax-reduction group)
};
inline constexpr std::array<MeshGroup, 9> kAllMeshGroups = {MeshGroup::tp,    MeshGroup::cp, MeshGroup::dp_shard,
                                                            MeshGroup::dp_replicate, MeshGroup::fsdp, MeshGroup::dp,
                                                            MeshGroup::pp,    MeshGroup::ep, MeshGroup::stage};
std::string_view to_string(MeshGroup k);
std::optional<MeshGroup> parse_mesh_group(std::string_view s);

struct MeshCoord {
  int pp = 0, dp_replicate = 0, dp_shard = 0, cp = 0, tp = 0;
};
MeshCoord mesh_coord(const Mesh& m, std::int64_t rank);
std::int64_t rank_of(const Mesh& m, const MeshCoord& c);

// Where a rank runs.
struct GpuLocation {
  int gpu = 0;
  int node = 0;
  int local_gpu = 0;
  int nvlink_domain = 0;
  int leaf_group = 0;  // scalable unit
};
GpuLocation locate(const Topology& t, std::int64_t rank);

// A group kind's shape in rank space: n_ranks members spaced stride apart.
struct GroupShape {
  int n_ranks = 1;
  std::int64_t stride = 1;
};
GroupShape group_shape(const Mesh& m, MeshGroup k);

// Ranks of the group of kind k that contains `rank`, ascending.
std::vector<std::int64_t> group_members(const Mesh& m, MeshGroup k, std::int64_t rank);

// What a group's collectives cross. Worst group of the kind: all groups of a kind synchronize
// through the step, so the slowest sets the pace (on an NVL72 rack a 64-rank group at ranks 64..127
// straddles two racks even though ranks 0..63 do not).
struct GroupRoute {
  MeshGroup kind = MeshGroup::tp;
  int n_ranks = 1;
  int ranks_per_node = 1;  // ceil(n_ranks / n_nodes), so GroupPlacement{n_ranks, ranks_per_node} agrees
  int n_nodes = 1;         // most nodes one group spans
  Tier tier = Tier::none;
  double bottleneck_bytes_per_s = 0;  // per-rank share on the path's narrowest edge, line rate
  double path_latency_seconds = 0;
  int switch_hops = 0;     // switches on the path (a same-rail pair in one scalable unit: 1)
  bool all_groups_alike = true;  // false when groups of this kind cross different tiers
};

// Throws InputError when the mesh does not match the topology (world != GPUs, a degree < 1,
// ep not dividing dp_replicate * dp_shard * cp).
void check_mesh(const Topology& t, const Mesh& m);

// O(leaf-group size / gcd) arithmetic, no graph search: call it for every candidate plan.
// Does not re-check the mesh; call check_mesh once for user input.
GroupRoute route_group(const Topology& t, const Mesh& m, MeshGroup k);

}  // namespace meshplan

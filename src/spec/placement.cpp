// Mesh placement and group routes; docs/topology.md.
#include "spec/placement.hpp"

#include <algorithm>
#include <numeric>
#include <string>
#include <utility>

#include "spec/error.hpp"

namespace meshplan {

std::string_view to_string(MeshGroup k) {
  switch (k) {
    case MeshGroup::tp: return "tp";
    case MeshGroup::cp: return "cp";
    case MeshGroup::dp_shard: return "dp_shard";
    case MeshGroup::dp_replicate: return "dp_replicate";
    case MeshGroup::fsdp: return "fsdp";
    case MeshGroup::dp: return "dp";
    case MeshGroup::pp: return "pp";
    case MeshGroup::ep: return "ep";
    case MeshGroup::stage: return "stage";
  }
  return "?";
}

std::optional<MeshGroup> parse_mesh_group(std::string_view s) {
  for (const MeshGroup k : kAllMeshGroups)
    if (to_string(k) == s) return k;
  return std::nullopt;
}

MeshCoord mesh_coord(const Mesh& m, std::int64_t rank) {
  MeshCoord c;
  c.tp = static_cast<int>(rank % m.tp);
  rank /= m.tp;
  c.cp = static_cast<int>(rank % m.cp);
  rank /= m.cp;
  c.dp_shard = static_cast<int>(rank % m.dp_shard);
  rank /= m.dp_shard;
  c.dp_replicate = static_cast<int>(rank % m.dp_replicate);
  rank /= m.dp_replicate;
  c.pp = static_cast<int>(rank);
  return c;
}

std::int64_t rank_of(const Mesh& m, const MeshCoord& c) {
  std::int64_t r = c.pp;
  r = r * m.dp_replicate + c.dp_replicate;
  r = r * m.dp_shard + c.dp_shard;
  r = r * m.cp + c.cp;
  return r * m.tp + c.tp;
}

GpuLocation locate(const Topology& t, std::int64_t rank) {
  GpuLocation l;
  l.gpu = static_cast<int>(rank);
  l.node = t.node_of_gpu(rank);
  l.local_gpu = static_cast<int>(rank % t.gpus_per_node);
  l.nvlink_domain = t.domain_of_gpu(rank);
  l.leaf_group = t.leaf_group_of_node(l.node);
  return l;
}

GroupShape group_shape(const Mesh& m, MeshGroup k) {
  const std::int64_t tp = m.tp, cp = m.cp, shard = m.dp_shard;
  switch (k) {
    case MeshGroup::tp: return {m.tp, 1};
    case MeshGroup::cp: return {m.cp, tp};
    case MeshGroup::dp_shard: return {m.dp_shard, cp * tp};
    case MeshGroup::dp_replicate: return {m.dp_replicate, shard * cp * tp};
    // Adjacent dimensions flatten into one progression: cp inside dp_shard inside dp_replicate.
    case MeshGroup::fsdp: return {m.dp_shard * m.cp, tp};
    case MeshGroup::dp: return {m.dp_replicate * m.dp_shard * m.cp, tp};
    case MeshGroup::pp: return {m.pp, m.world() / m.pp};
    // Experts borrow data-parallel ranks, innermost first (Megatron's expert mesh with
    // expert-tensor-parallel = tp; torchtitan with etp = tp): EP over dp_shard x cp before dp_replicate.
    // With expert-tensor-parallel etp < tp (Megatron) the EP group strides over etp ranks and
    // spans TP ranks.
    case MeshGroup::ep: return {m.ep, m.expert_tp()};
    case MeshGroup::stage: return {static_cast<int>(m.world() / m.pp), 1};
  }
  return {};
}

std::vector<std::int64_t> group_members(const Mesh& m, MeshGroup k, std::int64_t rank) {
  const GroupShape g = group_shape(m, k);
  const std::int64_t block = g.n_ranks * g.stride;
  const std::int64_t first = rank / block * block + rank % g.stride;
  std::vector<std::int64_t> out;
  out.reserve(static_cast<std::size_t>(g.n_ranks));
  for (int i = 0; i < g.n_ranks; ++i) out.push_back(first + i * g.stride);
  return out;
}

void check_mesh(const Topology& t, const Mesh& m) {
  const std::pair<const char*, int> degrees[] = {{"pp", m.pp},       {"dp_replicate", m.dp_replicate},
                                                 {"dp_shard", m.dp_shard}, {"cp", m.cp},
                                                 {"tp", m.tp},       {"ep", m.ep}};
  for (const auto& [key, v] : degrees)
    if (v < 1) throw InputError("", std::string("mesh.") + key, "must be at least 1, got " + std::to_string(v));
  if (m.world() != t.n_gpus)
    throw InputError("", "mesh", "pp*dp_replicate*dp_shard*cp*tp = " + std::to_string(m.world()) + " but the cluster has " +
                                     std::to_string(t.n_gpus) + " GPUs");
  const std::int64_t data_ranks =
      static_cast<std::int64_t>(m.dp_replicate) * m.dp_shard * m.cp * (m.tp / std::max(1, m.expert_tp()));
  if (data_ranks % m.ep != 0)
    throw InputError("", "mesh.ep",
                     "ep = " + std::to_string(m.ep) + " must divide dp_replicate*dp_shard*cp*(tp/etp) = " +
                         std::to_string(data_ranks));
}

GroupRoute route_group(const Topology& t, const Mesh& m, MeshGroup k) {
  GroupRoute r;
  r.kind = k;
  const GroupShape g = group_shape(m, k);
  r.n_ranks = g.n_ranks;
  if (g.n_ranks <= 1) return r;  // nothing to exchange

  const std::int64_t s = g.stride, span = (g.n_ranks - 1) * s, block = g.n_ranks * s;
  const std::int64_t n_blocks = std::max<std::int64_t>(1, m.world() / block);
  const std::int64_t G = t.gpus_per_node, D = t.domain_gpus, U = t.gpus_per_leaf_group();

  // Group start offsets are a + b*block, a in [0, s), b in [0, n_blocks). Node, domain and leaf
  // group boundaries repeat every M = lcm(D, U) ranks (G divides D), so mark the start offsets
  // modulo M (intervals, by a difference array) and judge each distinct residue once.
  const std::int64_t lcm = t.has_fabric ? std::lcm(D, U) : D;
  const std::int64_t M = std::min<std::int64_t>(lcm, m.world());
  std::vector<int> diff(static_cast<std::size_t>(M + 1), 0);
  const std::int64_t period = M / std::gcd(block % M == 0 ? M : block % M, M);
  const std::int64_t nb = std::min(n_blocks, period);
  for (std::int64_t b = 0; b < nb; ++b) {
    if (s >= M) {
      diff[0] += 1;
      diff[static_cast<std::size_t>(M)] -= 1;
      break;
    }
    const std::int64_t c = (b * block) % M, end = c + s;  // [c, end)
    diff[static_cast<std::size_t>(c)] += 1;
    if (end <= M) {
      diff[static_cast<std::size_t>(end)] -= 1;
    } else {
      diff[static_cast<std::size_t>(M)] -= 1;
      diff[0] += 1;
      diff[static_cast<std::size_t>(end - M)] -= 1;
    }
  }

  // A group starting at residue x spans [x, x + span]: it leaves its domain (or leaf group) when
  // x mod D + span reaches D. Crossing both means its first and last ranks differ in both.
  auto tier_at = [&](std::int64_t x) {
    if (x % D + span < D) return Tier::nvlink;
    return t.has_fabric && x % U + span >= U ? Tier::spine : Tier::leaf;
  };
  const Tier first_tier = tier_at(0);
  Tier worst = first_tier;
  int n_nodes = 1;
  int running = 0;
  for (std::int64_t x = 0; x < M; ++x) {
    running += diff[static_cast<std::size_t>(x)];
    if (running <= 0) continue;
    const Tier tx = tier_at(x);
    if (tx != first_tier) r.all_groups_alike = false;
    worst = std::max(worst, tx);
    const std::int64_t nodes = s >= G ? g.n_ranks : (x % G + span) / G + 1;
    n_nodes = std::max(n_nodes, static_cast<int>(nodes));
  }
  r.n_nodes = n_nodes;
  r.ranks_per_node = (g.n_ranks + n_nodes - 1) / n_nodes;
  r.tier = worst;
  const Route& path = t.route(worst);
  r.bottleneck_bytes_per_s = path.bottleneck_bytes_per_s;
  r.path_latency_seconds = path.latency_seconds;
  r.switch_hops = path.switch_hops;
  return r;
}

}  // namespace meshplan

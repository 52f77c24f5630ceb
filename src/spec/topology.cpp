// Topology graph from a ClusterSpec; docs/topology.md explains each rule and its source.
#include "spec/topology.hpp"

#include <algorithm>
#include <boost/graph/dijkstra_shortest_paths.hpp>
#include <boost/graph/filtered_graph.hpp>
#include <boost/property_map/property_map.hpp>
#include <cmath>
#include <limits>
#include <string>

#include "spec/error.hpp"
#include "spec/topology_graph.hpp"

namespace meshplan {

std::string_view to_string(VertexKind k) {
  switch (k) {
    case VertexKind::gpu: return "gpu";
    case VertexKind::nvswitch: return "nvswitch";
    case VertexKind::pcie_switch: return "pcie_switch";
    case VertexKind::nic: return "nic";
    case VertexKind::leaf: return "leaf";
    case VertexKind::spine: return "spine";
  }
  return "?";
}

std::string_view to_string(Tier t) {
  switch (t) {
    case Tier::none: return "none";
    case Tier::nvlink: return "nvlink";
    case Tier::leaf: return "leaf";
    case Tier::spine: return "spine";
  }
  return "?";
}

namespace {

int ceil_div(std::int64_t a, std::int64_t b) { return static_cast<int>((a + b - 1) / b); }

TopoVertexId add_vertex(TopoGraph::Adjacency& g, VertexKind kind, int index, std::string name) {
  return boost::add_vertex(TopoVertex{kind, index, std::move(name)}, g);
}

void add_link(TopoGraph::Adjacency& g, TopoVertexId a, TopoVertexId b, double bytes_per_s, double latency_s,
              double gpus_sharing) {
  boost::add_edge(a, b, TopoEdge{bytes_per_s, latency_s, gpus_sharing}, g);
}

bool is_switch(VertexKind k) {
  return k == VertexKind::nvswitch || k == VertexKind::pcie_switch || k == VertexKind::leaf ||
         k == VertexKind::spine;
}

// Spine count by the DGX SuperPOD rule (NVIDIA DGX SuperPOD H100 reference architecture, Table 4):
// spines are the leaf's switch model (same radix), there are enough of them for every leaf uplink,
// and each leaf spreads its uplinks evenly over all spines, so the count is the smallest one
// >= ports/radix that divides the leaf's uplinks (1 SU: 256/64 = 4; 3 SUs: 768/64 = 12 -> 16; 4 SUs: 16).
int spine_count(int n_leaves, int up_ports, int radix) {
  const int needed = ceil_div(static_cast<std::int64_t>(n_leaves) * up_ports, radix);
  for (int n = needed; n <= up_ports; ++n)
    if (up_ports % n == 0) return n;
  return needed;  // beyond a two-tier Clos: more spines than a leaf has uplinks
}

}  // namespace

// Vertices a route of a tier may use: the scale-up tier is GPUs and their switches; network tiers
// are GPUs, NICs and switches up to their level (no NVLink shortcuts: those pairs are rail-aligned
// by the caller, as NCCL's PXN makes them).
struct TierFilter {
  const TopoGraph::Adjacency* g = nullptr;
  Tier tier = Tier::nvlink;
  bool operator()(TopoVertexId v) const {
    switch ((*g)[v].kind) {
      case VertexKind::gpu: return true;
      case VertexKind::nvswitch:
      case VertexKind::pcie_switch: return tier == Tier::nvlink;
      case VertexKind::nic:
      case VertexKind::leaf: return tier == Tier::leaf || tier == Tier::spine;
      case VertexKind::spine: return tier == Tier::spine;
    }
    return false;
  }
};

Route find_route(const Topology& t, int gpu_from, int gpu_to) {
  Route r;
  r.gpu_from = gpu_from;
  r.gpu_to = gpu_to;
  if (gpu_from < 0 || gpu_to < 0 || gpu_from >= t.n_gpus || gpu_to >= t.n_gpus) return r;
  const TopoGraph::Adjacency& g = t.graph->adjacency;
  const auto n = boost::num_vertices(g);
  std::vector<TopoVertexId> pred(n);
  std::vector<double> dist(n, std::numeric_limits<double>::infinity());
  const TopoVertexId src = t.gpu_vertex[static_cast<std::size_t>(gpu_from)];
  const TopoVertexId dst = t.gpu_vertex[static_cast<std::size_t>(gpu_to)];
  // A mesh links GPUs directly, so a scale-up route is possible only inside one domain.
  const bool same_domain = t.domain_of_gpu(gpu_from) == t.domain_of_gpu(gpu_to);
  for (const Tier tier : kNetworkTiers) {
    if (tier == Tier::nvlink && !same_domain) continue;
    const boost::filtered_graph<TopoGraph::Adjacency, boost::keep_all, TierFilter> sub(g, boost::keep_all(), TierFilter{&g, tier});
    boost::dijkstra_shortest_paths(
        sub, src,
        boost::weight_map(boost::get(&TopoEdge::latency_seconds, g))
            .vertex_index_map(boost::get(boost::vertex_index, g))
            .predecessor_map(boost::make_iterator_property_map(pred.begin(), boost::get(boost::vertex_index, g)))
            .distance_map(boost::make_iterator_property_map(dist.begin(), boost::get(boost::vertex_index, g)))
            .distance_inf(std::numeric_limits<double>::infinity()));  // Boost's default is max(), finite
    if (std::isfinite(dist[dst])) {
      r.tier = tier;
      break;
    }
  }
  if (r.tier == Tier::none) return r;

  for (TopoVertexId v = dst;; v = pred[v]) {
    r.path.push_back(v);
    if (v == src) break;
  }
  std::reverse(r.path.begin(), r.path.end());
  r.present = true;
  r.latency_seconds = dist[dst];
  r.bottleneck_bytes_per_s = std::numeric_limits<double>::infinity();
  for (std::size_t i = 0; i + 1 < r.path.size(); ++i) {
    const auto [e, found] = boost::edge(r.path[i], r.path[i + 1], g);
    if (found) r.bottleneck_bytes_per_s = std::min(r.bottleneck_bytes_per_s, g[e].per_gpu_bytes_per_s());
    if (i > 0 && is_switch(g[r.path[i]].kind)) ++r.switch_hops;
  }
  if (r.path.size() < 2) r.bottleneck_bytes_per_s = 0;  // a GPU to itself moves nothing
  return r;
}

namespace {

// The counts and bandwidths the graph is built from, after checking the request fits the profile.
Topology topology_figures(const ClusterSpec& c, std::int64_t n_gpus) {
  const std::string file = c.source_file.empty() ? c.name : c.source_file;
  if (n_gpus < 1) throw InputError("", "--gpus", "must be at least 1, got " + std::to_string(n_gpus));
  if (n_gpus > std::numeric_limits<int>::max() / 4)
    throw InputError("", "--gpus", "too many GPUs for one topology: " + std::to_string(n_gpus));
  const NodeSpec& node = c.node;
  const FabricSpec& fab = c.fabric;
  if (node.gpus_per_node < 1 || node.nics_per_node < 1 || fab.nodes_per_leaf < 1)
    throw InputError(file, "node", "gpus_per_node, nics_per_node and fabric.nodes_per_leaf must be >= 1");

  Topology t;
  t.cluster_name = c.name;
  t.scaleup_kind = node.scaleup_kind;
  t.rail_optimized = fab.rail_optimized;
  t.has_fabric = fab.kind != "nvl_domain";
  t.n_gpus = static_cast<int>(n_gpus);
  t.gpus_per_node = node.gpus_per_node;
  t.n_nodes = ceil_div(n_gpus, t.gpus_per_node);
  // PCIe boxes have no NVLink domain beyond the node: the node's PCIe switch is the scale-up tier.
  t.domain_gpus = node.scaleup_kind == "pcie" ? t.gpus_per_node : std::max(node.nvlink_domain_gpus, t.gpus_per_node);
  t.n_domains = ceil_div(n_gpus, t.domain_gpus);
  if (!t.has_fabric && t.n_domains > 1)
    throw InputError(file, "fabric.kind",
                     "\"nvl_domain\" has no network beyond one NVLink domain of " + std::to_string(t.domain_gpus) +
                         " GPUs, but " + std::to_string(n_gpus) + " GPUs were asked for");
  t.nics_per_node = node.nics_per_node;
  t.n_nics = t.n_nodes * t.nics_per_node;
  t.gpus_per_nic = ceil_div(t.gpus_per_node, t.nics_per_node);
  t.nvlink_bytes_per_s = node.nvlink_bandwidth_bytes_per_s;
  t.nic_bytes_per_s = node.nic_bandwidth_bytes_per_s;
  t.leaf_oversubscription = fab.leaf_oversubscription;
  t.spine_oversubscription = fab.spine_oversubscription;
  t.nodes_per_leaf_group = fab.nodes_per_leaf;
  t.n_leaf_groups = t.has_fabric ? ceil_div(t.n_nodes, t.nodes_per_leaf_group) : 0;
  return t;
}

// Scale-up. NVSwitch: every GPU has links to every NVSwitch chip of its domain (4 chips in a
// DGX H100, 18 in an NVL72 rack), a non-blocking crossbar, so the chips fold into one vertex per
// domain with the GPU's full NVLink bandwidth on its edge. Per-link latency is the profile's
// per-hop value; GPU -> switch -> GPU is two hops, as in ASTRA-sim's validated HGX-H100 Switch.
void add_scaleup(Topology& t, double nvl_lat) {
  TopoGraph::Adjacency& g = t.graph->adjacency;
  const int D = t.domain_gpus;
  if (t.scaleup_kind == "nvlink-mesh") {
    // Direct mesh: each GPU's links are split evenly over its domain peers.
    const double per_peer = D > 1 ? t.nvlink_bytes_per_s / (D - 1) : t.nvlink_bytes_per_s;
    for (int a = 0; a < t.n_gpus; ++a)
      for (int b = a + 1; b < t.n_gpus && b / D == a / D; ++b)
        add_link(g, t.gpu_vertex[static_cast<std::size_t>(a)], t.gpu_vertex[static_cast<std::size_t>(b)], per_peer,
                 nvl_lat, 1);
  } else {
    const bool pcie = t.scaleup_kind == "pcie";
    for (int d = 0; d < t.n_domains; ++d) {
      const auto sw = add_vertex(g, pcie ? VertexKind::pcie_switch : VertexKind::nvswitch, d,
                                 (pcie ? "pcie" : "nvswitch") + std::to_string(d));
      for (int i = d * D; i < std::min(t.n_gpus, (d + 1) * D); ++i)
        add_link(g, t.gpu_vertex[static_cast<std::size_t>(i)], sw, t.nvlink_bytes_per_s, nvl_lat, 1);
    }
  }
}

// NICs: every node of the cluster carries all its NICs. GPU l of a node uses NIC l / gpus_per_nic
// (one NIC per GPU in DGX H100 and GB200 trays); with more NICs than GPUs, NIC j serves GPU
// j * G / nics. NIC latency is end to end (both NICs and the wire), half on each GPU-NIC edge.
// Returns the NIC vertices, node-major.
std::vector<TopoVertexId> add_nics(Topology& t, double nic_latency_s) {
  TopoGraph::Adjacency& g = t.graph->adjacency;
  const int G = t.gpus_per_node, nics = t.nics_per_node;
  const double half_nic_lat = nic_latency_s / 2;
  std::vector<TopoVertexId> nic_vertex;
  nic_vertex.reserve(static_cast<std::size_t>(t.n_nics));
  for (int u = 0; u < t.n_nodes; ++u)
    for (int j = 0; j < nics; ++j) {
      const auto v = add_vertex(g, VertexKind::nic, u * nics + j, "nic" + std::to_string(u) + "." + std::to_string(j));
      nic_vertex.push_back(v);
      for (int l = 0; l < G; ++l) {
        const int gpu = u * G + l;
        if (gpu >= t.n_gpus) break;
        const bool attached = nics <= G ? l / t.gpus_per_nic == j : (j * G) / nics == l;
        if (attached)
          add_link(g, t.gpu_vertex[static_cast<std::size_t>(gpu)], v, t.nic_bytes_per_s, half_nic_lat, t.gpus_per_nic);
      }
    }
  return nic_vertex;
}

// Leaves. Rail-optimized (SuperPOD): NIC i of every node in a scalable unit goes to leaf i of
// that unit; otherwise (a ToR per rack, as in Meta's clusters) all NICs of the unit's nodes go
// to its one leaf. A switch hop's latency is split over the two edges touching the switch.
// Returns the leaf vertices, group-major.
std::vector<TopoVertexId> add_leaves(Topology& t, double hop, const std::vector<TopoVertexId>& nic_vertex) {
  TopoGraph::Adjacency& g = t.graph->adjacency;
  const int nics = t.nics_per_node;
  t.leaves_per_group = t.rail_optimized ? nics : 1;
  t.n_leaves = t.n_leaf_groups * t.leaves_per_group;
  t.leaf_down_ports = t.nodes_per_leaf_group * (t.rail_optimized ? 1 : nics);
  t.leaf_up_ports = static_cast<int>(std::ceil(t.leaf_down_ports / t.leaf_oversubscription - 1e-9));
  t.leaf_uplink_bytes_per_s = t.leaf_down_ports * t.nic_bytes_per_s / t.leaf_oversubscription;
  std::vector<TopoVertexId> leaf_vertex;
  for (int k = 0; k < t.n_leaf_groups; ++k)
    for (int r = 0; r < t.leaves_per_group; ++r)
      leaf_vertex.push_back(add_vertex(g, VertexKind::leaf, k * t.leaves_per_group + r,
                                       "leaf" + std::to_string(k) + "." + std::to_string(r)));
  for (int u = 0; u < t.n_nodes; ++u)
    for (int j = 0; j < nics; ++j) {
      const int leaf = t.leaf_group_of_node(u) * t.leaves_per_group + (t.rail_optimized ? j : 0);
      add_link(g, nic_vertex[static_cast<std::size_t>(u * nics + j)], leaf_vertex[static_cast<std::size_t>(leaf)],
               t.nic_bytes_per_s, hop / 2, t.gpus_per_nic);
    }
  return leaf_vertex;
}

// Spines: a two-tier Clos, every leaf linked to every spine, the leaf's uplink capacity
// (downlink / leaf oversubscription) spread evenly (ECMP). The profile has no tier above the
// spine, so spine_oversubscription (Meta's 1:7 aggregation layer) divides the same capacity.
// Beyond a two-tier Clos (more spines than leaf uplinks) the spines are grouped into as many
// vertices as a leaf has uplinks, which keeps the edge count at the uplink-cable count.
void add_spines(Topology& t, double hop, const std::vector<TopoVertexId>& leaf_vertex) {
  if (t.n_leaves <= 1) return;
  t.n_spines = spine_count(t.n_leaves, t.leaf_up_ports, t.leaf_down_ports + t.leaf_up_ports);
  t.n_spine_vertices = std::min(t.n_spines, t.leaf_up_ports);
  const double edge_bytes_per_s = t.leaf_uplink_bytes_per_s / (t.spine_oversubscription * t.n_spine_vertices);
  const double leaf_gpus = static_cast<double>(t.leaf_down_ports) * t.gpus_per_nic;
  for (int s = 0; s < t.n_spine_vertices; ++s) {
    const auto sv = add_vertex(t.graph->adjacency, VertexKind::spine, s, "spine" + std::to_string(s));
    for (const auto lv : leaf_vertex) add_link(t.graph->adjacency, lv, sv, edge_bytes_per_s, hop, leaf_gpus / t.n_spine_vertices);
  }
}

// One route per tier, between GPUs with the same local index: NCCL keeps inter-node traffic
// rail-aligned (PXN first moves data over NVLink to the GPU on the destination's rail).
void add_tier_routes(Topology& t) {
  const int G = t.gpus_per_node, D = t.domain_gpus;
  auto& nv = t.tier_route[static_cast<std::size_t>(Tier::nvlink)];
  if (t.n_gpus >= 2 && D >= 2) nv = find_route(t, 0, 1);
  if (!t.has_fabric) return;
  const int P = t.nodes_per_leaf_group;
  for (int k = 0; k < t.n_leaf_groups; ++k) {
    const int first = k * P, last = std::min((k + 1) * P, t.n_nodes) - 1;
    if (first * G / D != last * G / D) {
      t.tier_route[static_cast<std::size_t>(Tier::leaf)] = find_route(t, first * G, last * G);
      break;
    }
  }
  const int far_node = std::max(D / G, P);  // first node in another domain and another leaf group
  if (far_node < t.n_nodes) t.tier_route[static_cast<std::size_t>(Tier::spine)] = find_route(t, 0, far_node * G);
}

}  // namespace

Topology build_topology(const ClusterSpec& c, std::int64_t n_gpus) {
  Topology t = topology_figures(c, n_gpus);
  t.graph = std::make_shared<TopoGraph>();
  t.gpu_vertex.reserve(static_cast<std::size_t>(t.n_gpus));
  for (int i = 0; i < t.n_gpus; ++i)
    t.gpu_vertex.push_back(add_vertex(t.graph->adjacency, VertexKind::gpu, i, "gpu" + std::to_string(i)));
  add_scaleup(t, c.node.nvlink_latency_seconds);
  const std::vector<TopoVertexId> nic_vertex = add_nics(t, c.fabric.nic_latency_seconds);
  if (t.has_fabric) {
    const std::vector<TopoVertexId> leaf_vertex = add_leaves(t, c.fabric.switch_hop_latency_seconds, nic_vertex);
    add_spines(t, c.fabric.switch_hop_latency_seconds, leaf_vertex);
  }
  add_tier_routes(t);
  return t;
}

TierBandwidth tier_bandwidth(const Topology& t, Tier tier) {
  TierBandwidth b;
  const double node_nic = t.nics_per_node * t.nic_bytes_per_s;
  switch (tier) {
    case Tier::none: break;
    case Tier::nvlink: {
      b.per_gpu_bytes_per_s = t.nvlink_bytes_per_s;
      b.per_node_bytes_per_s = t.gpus_per_node * t.nvlink_bytes_per_s;
      const int d = std::min(t.domain_gpus, t.n_gpus);
      if (t.scaleup_kind == "nvlink-mesh") {
        const double link = t.domain_gpus > 1 ? t.nvlink_bytes_per_s / (t.domain_gpus - 1) : 0;
        b.bisection_bytes_per_s = static_cast<double>(d / 2) * (d - d / 2) * link;
      } else {
        b.bisection_bytes_per_s = (d / 2) * t.nvlink_bytes_per_s;  // non-blocking crossbar
      }
      break;
    }
    case Tier::leaf: {
      if (!t.has_fabric) break;
      b.per_gpu_bytes_per_s = node_nic / t.gpus_per_node;
      b.per_node_bytes_per_s = node_nic;
      const int p = std::min(t.nodes_per_leaf_group, t.n_nodes);
      b.bisection_bytes_per_s = (p / 2) * node_nic;  // a leaf is non-blocking between its ports
      break;
    }
    case Tier::spine: {
      if (t.n_spines == 0) break;
      const double over = t.leaf_oversubscription * t.spine_oversubscription;
      b.per_gpu_bytes_per_s = node_nic / t.gpus_per_node / over;
      b.per_node_bytes_per_s = node_nic / over;
      // Half the leaves' uplinks face the other half; no more than half the nodes can inject.
      b.bisection_bytes_per_s = std::min((t.n_leaves / 2) * t.leaf_uplink_bytes_per_s / t.spine_oversubscription,
                                         (t.n_nodes / 2) * node_nic);
      break;
    }
  }
  return b;
}

}  // namespace meshplan

#pragma once
// Topology: the cluster as a Boost.Graph graph of GPUs, scale-up switches (NVSwitch crossbar, or a
// direct NVLink mesh, or a PCIe switch), NICs, leaf and spine switches, with bandwidth (bytes/s
// per direction, line rate: efficiencies belong to the cost model) and latency (seconds) on every
// edge. Built from a ClusterSpec and a GPU count by a pure function; docs/topology.md.
//
// Routes are shortest-latency paths (boost::dijkstra_shortest_paths) inside the lowest tier that
// connects the two GPUs. Because every node, domain
// and scalable unit is built alike, one route per tier is enough: build_topology() computes them
// once and placement (spec/placement.hpp) only decides which tier a group crosses.
#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "spec/cluster_spec.hpp"

namespace meshplan {

enum class VertexKind { gpu, nvswitch, pcie_switch, nic, leaf, spine };

// The highest layer of the network a route crosses. `none`: no traffic (a group of one rank).
// nvlink = inside one scale-up domain (NVLink, or PCIe when the profile has no NVLink);
// leaf = NIC -> one leaf switch -> NIC (same rail group / scalable unit);
// spine = leaf -> spine -> leaf.
enum class Tier { none, nvlink, leaf, spine };
inline constexpr std::array<Tier, 3> kNetworkTiers = {Tier::nvlink, Tier::leaf, Tier::spine};

std::string_view to_string(VertexKind k);
std::string_view to_string(Tier t);

struct TopoVertex {
  VertexKind kind = VertexKind::gpu;
  int index = 0;     // index among the vertices of its kind (GPU index = global rank)
  std::string name;  // "gpu17", "nvswitch2", "nic3.5" (node 3, NIC 5), "leaf1.4" (SU 1, rail 4), "spine7"
};

struct TopoEdge {
  double bandwidth_bytes_per_s = 0;  // capacity per direction (links are full duplex)
  double latency_seconds = 0;
  // GPUs whose traffic shares this edge when every GPU sends through it at once (GPUs per NIC
  // on NIC links, the leaf's GPUs spread over its spine links by ECMP): turns capacity into the
  // per-rank share a collective can count on.
  // Fractional on leaf-spine edges when the spines do not divide the leaf's GPUs evenly.
  double gpus_sharing = 1;
  double per_gpu_bytes_per_s() const { return bandwidth_bytes_per_s / gpus_sharing; }
};

// The Boost.Graph graph itself (spec/topology_graph.hpp): only what builds, walks or prints it
// includes Boost.Graph, which took 2.5 s of every file's build that includes this one.
struct TopoGraph;
using TopoVertexId = std::size_t;  // a vertex of a vecS adjacency list is its index

// A path between two GPUs and what it offers one rank.
struct Route {
  bool present = false;               // false: no such pair exists in this cluster
  int gpu_from = 0, gpu_to = 0;
  Tier tier = Tier::none;             // the lowest tier whose links connect the pair
  double bottleneck_bytes_per_s = 0;  // min over edges of per-GPU share
  double latency_seconds = 0;         // sum of edge latencies
  int switch_hops = 0;                // switches traversed (NVSwitch, leaf, spine)
  std::vector<TopoVertexId> path;     // from gpu_from to gpu_to
};

struct Topology {
  std::string cluster_name;
  std::string scaleup_kind;           // "nvswitch", "nvlink-mesh", "pcie"
  bool rail_optimized = true;
  bool has_fabric = true;             // false for fabric.kind = "nvl_domain": no leaf/spine layer

  int n_gpus = 0;
  int gpus_per_node = 0;
  int n_nodes = 0;                    // ceil(n_gpus / gpus_per_node)
  int domain_gpus = 0;                // GPUs in one scale-up domain (node for PCIe)
  int n_domains = 0;                  // ceil(n_gpus / domain_gpus)
  int nics_per_node = 0;
  int n_nics = 0;
  int gpus_per_nic = 1;               // ceil(gpus_per_node / nics_per_node)
  int nodes_per_leaf_group = 0;       // nodes a leaf reaches in one hop (a scalable unit)
  int n_leaf_groups = 0;              // scalable units, ceil(n_nodes / nodes_per_leaf_group)
  int leaves_per_group = 0;           // one leaf per rail (= NICs per node) if rail-optimized, else 1
  int n_leaves = 0;
  int leaf_down_ports = 0;            // NIC-facing ports per leaf
  int leaf_up_ports = 0;              // ceil(down / leaf oversubscription)
  int n_spines = 0;                   // physical spine switches (radix = leaf radix; SuperPOD RA rule)
  int n_spine_vertices = 0;           // spine vertices in the graph (see docs/topology.md)

  double nvlink_bytes_per_s = 0;      // per GPU, per direction
  double nic_bytes_per_s = 0;         // per NIC, per direction
  double leaf_uplink_bytes_per_s = 0; // per leaf, all uplinks, per direction
  double leaf_oversubscription = 1, spine_oversubscription = 1;

  // Built once by build_topology and never changed after: copies share it.
  std::shared_ptr<TopoGraph> graph;
  std::vector<TopoVertexId> gpu_vertex;  // by GPU index

  // One representative route per tier (index = Tier), computed at build time.
  std::array<Route, 4> tier_route{};
  const Route& route(Tier t) const { return tier_route[static_cast<std::size_t>(t)]; }

  int node_of_gpu(std::int64_t g) const { return static_cast<int>(g / gpus_per_node); }
  int domain_of_gpu(std::int64_t g) const { return static_cast<int>(g / domain_gpus); }
  int leaf_group_of_node(int node) const { return node / nodes_per_leaf_group; }
  std::int64_t gpus_per_leaf_group() const {
    return static_cast<std::int64_t>(nodes_per_leaf_group) * gpus_per_node;
  }
};

// Throws InputError for n_gpus < 1 or a GPU count one scale-up-only cluster cannot hold.
Topology build_topology(const ClusterSpec& c, std::int64_t n_gpus);

// The path NCCL would use between two GPUs: NVLink when both sit in one scale-up domain (NVLink
// P2P is preferred over the network even where this profile's NIC path has less latency), else
// the lowest network tier connecting them; within that tier's subgraph, the shortest-latency path
// (Dijkstra over edge latency on a boost::filtered_graph).
Route find_route(const Topology& t, int gpu_from, int gpu_to);

// Aggregate bandwidth (bytes/s per direction) a tier offers, from the graph's capacities.
struct TierBandwidth {
  double per_gpu_bytes_per_s = 0;
  double per_node_bytes_per_s = 0;
  // Across the worst half/half cut of the tier's reach: one scale-up domain for nvlink, one leaf
  // group for leaf, the whole cluster for spine.
  double bisection_bytes_per_s = 0;
};
TierBandwidth tier_bandwidth(const Topology& t, Tier tier);

}  // namespace meshplan

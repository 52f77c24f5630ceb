// Topology graph and mesh placement: counts and routes worked by hand from the DGX SuperPOD H100
// reference architecture (Table 4) and the GB200 NVL72 rack (DGX SuperPOD GB200 RA), and the
// arithmetic route_group() checked against a brute-force walk over every group.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdio>
#include <set>
#include <string>
#include <vector>

#include "spec/cluster_loader.hpp"
#include "spec/error.hpp"
#include "spec/placement.hpp"
#include "spec/topology.hpp"
#include "spec/topology_graph.hpp"
#include "test_paths.hpp"

using namespace meshplan;

namespace {

constexpr double kRel = 1e-12;
constexpr double kNicBytesPerS = 400e9 / 8;  // NDR 400 Gb/s

const ClusterSpec& h100() {
  static const ClusterSpec c = load_cluster("h100-sxm-80gb");
  return c;
}
const ClusterSpec& gb200() {
  static const ClusterSpec c = load_cluster("gb200");
  return c;
}

Mesh mesh(int pp, int dp_replicate, int dp_shard, int cp, int tp, int ep = 1) {
  Mesh m;
  m.pp = pp;
  m.dp_replicate = dp_replicate;
  m.dp_shard = dp_shard;
  m.cp = cp;
  m.tp = tp;
  m.ep = ep;
  return m;
}

// Brute force: walk every group of a kind, classify every member pair by where the two GPUs sit.
struct Brute {
  Tier tier = Tier::none;
  int n_nodes = 1;
  bool alike = true;
};
Brute brute_route(const Topology& t, const Mesh& m, MeshGroup k) {
  Brute b;
  std::set<std::int64_t> seen;
  bool first = true;
  Tier first_tier = Tier::none;
  for (std::int64_t r = 0; r < m.world(); ++r) {
    const auto members = group_members(m, k, r);
    if (!seen.insert(members.front()).second) continue;
    Tier worst = Tier::none;
    std::set<int> nodes;
    for (const auto a : members) {
      nodes.insert(t.node_of_gpu(a));
      for (const auto c : members) {
        if (a == c) continue;
        Tier p = Tier::spine;
        if (t.domain_of_gpu(a) == t.domain_of_gpu(c)) p = Tier::nvlink;
        else if (t.leaf_group_of_node(t.node_of_gpu(a)) == t.leaf_group_of_node(t.node_of_gpu(c))) p = Tier::leaf;
        worst = std::max(worst, p);
      }
    }
    if (first) first_tier = worst;
    else if (worst != first_tier) b.alike = false;
    first = false;
    b.tier = std::max(b.tier, worst);
    b.n_nodes = std::max(b.n_nodes, static_cast<int>(nodes.size()));
  }
  return b;
}

}  // namespace

TEST_CASE("1024 H100: 128 nodes, 128 NVSwitch domains of 8, 1024 NICs, 4 SUs x 8 rail leaves, 16 spines") {
  const Topology t = build_topology(h100(), 1024);
  CHECK(t.n_nodes == 128);
  CHECK(t.domain_gpus == 8);
  CHECK(t.n_domains == 128);
  CHECK(t.n_nics == 1024);
  CHECK(t.gpus_per_nic == 1);
  CHECK(t.n_leaf_groups == 4);
  CHECK(t.leaves_per_group == 8);
  CHECK(t.n_leaves == 32);
  // Quantum-2: 32 ports down, 32 up at 1:1 -> 64-port switch; 32 leaves x 32 uplinks / 64 = 16.
  CHECK(t.leaf_down_ports == 32);
  CHECK(t.leaf_up_ports == 32);
  CHECK(t.n_spines == 16);
  CHECK(t.n_spine_vertices == 16);

  // Graph: 1024 GPUs + 128 NVSwitch + 1024 NICs + 32 leaves + 16 spines; edges: 1024 GPU-NVSwitch,
  // 1024 GPU-NIC, 1024 NIC-leaf, 32 x 16 leaf-spine.
  CHECK(boost::num_vertices(t.graph->adjacency) == 1024 + 128 + 1024 + 32 + 16);
  CHECK(boost::num_edges(t.graph->adjacency) == 1024 + 1024 + 1024 + 32 * 16);
  int spines = 0;
  for (auto [v, end] = boost::vertices(t.graph->adjacency); v != end; ++v) spines += t.graph->adjacency[*v].kind == VertexKind::spine;
  CHECK(spines == 16);
  CHECK(t.graph->adjacency[t.gpu_vertex[1023]].name == "gpu1023");
}

TEST_CASE("spine counts follow the SuperPOD RA Table 4 (1, 2, 3, 4 SUs -> 4, 8, 16, 16)") {
  const int expected[] = {4, 8, 16, 16};
  for (int su = 1; su <= 4; ++su) {
    const Topology t = build_topology(h100(), su * 32 * 8);
    CHECK(t.n_leaves == 8 * su);
    CHECK(t.n_spines == expected[su - 1]);
  }
}

TEST_CASE("tier routes on 1024 H100") {
  const Topology t = build_topology(h100(), 1024);
  const double nvl_hop = h100().node.nvlink_latency_seconds;
  const double nic = h100().fabric.nic_latency_seconds, sw = h100().fabric.switch_hop_latency_seconds;

  const Route& nv = t.route(Tier::nvlink);
  REQUIRE(nv.present);
  CHECK(nv.switch_hops == 1);  // gpu0 > nvswitch0 > gpu1
  CHECK(nv.path.size() == 3);
  CHECK(nv.bottleneck_bytes_per_s == doctest::Approx(450e9).epsilon(kRel));
  CHECK(nv.latency_seconds == doctest::Approx(2 * nvl_hop).epsilon(kRel));

  const Route& leaf = t.route(Tier::leaf);
  REQUIRE(leaf.present);
  CHECK(leaf.switch_hops == 1);  // gpu > nic > leaf > nic > gpu
  CHECK(t.graph->adjacency[leaf.path[2]].kind == VertexKind::leaf);
  CHECK(leaf.bottleneck_bytes_per_s == doctest::Approx(kNicBytesPerS).epsilon(kRel));
  CHECK(leaf.latency_seconds == doctest::Approx(nic + sw).epsilon(kRel));

  const Route& spine = t.route(Tier::spine);
  REQUIRE(spine.present);
  CHECK(spine.switch_hops == 3);  // leaf > spine > leaf
  CHECK(spine.bottleneck_bytes_per_s == doctest::Approx(kNicBytesPerS).epsilon(kRel));  // 1:1
  CHECK(spine.latency_seconds == doctest::Approx(nic + 3 * sw).epsilon(kRel));

  // Dijkstra from the graph itself: a GPU to a same-rail GPU 31 nodes on is one leaf hop; to the
  // next SU it is leaf > spine > leaf.
  CHECK(find_route(t, 3, 31 * 8 + 3).switch_hops == 1);
  CHECK(find_route(t, 3, 32 * 8 + 3).switch_hops == 3);
  CHECK(find_route(t, 3, 5).switch_hops == 1);
}

TEST_CASE("groups on 1024 H100: TP 8 on NVLink, FSDP over 128 nodes on the spine, 32 nodes on one rail leaf") {
  const Topology t = build_topology(h100(), 1024);

  const Mesh fsdp = mesh(1, 1, 128, 1, 8);
  check_mesh(t, fsdp);
  const GroupRoute tp = route_group(t, fsdp, MeshGroup::tp);
  CHECK(tp.n_ranks == 8);
  CHECK(tp.ranks_per_node == 8);
  CHECK(tp.n_nodes == 1);
  CHECK(tp.tier == Tier::nvlink);
  CHECK(tp.bottleneck_bytes_per_s == doctest::Approx(450e9).epsilon(kRel));
  CHECK(tp.switch_hops == 1);

  const GroupRoute fs = route_group(t, fsdp, MeshGroup::fsdp);
  CHECK(fs.n_ranks == 128);
  CHECK(fs.ranks_per_node == 1);
  CHECK(fs.n_nodes == 128);
  CHECK(fs.tier == Tier::spine);
  CHECK(fs.switch_hops == 3);
  CHECK(fs.bottleneck_bytes_per_s == doctest::Approx(kNicBytesPerS).epsilon(kRel));
  CHECK(route_group(t, fsdp, MeshGroup::pp).tier == Tier::none);
  CHECK(route_group(t, fsdp, MeshGroup::pp).n_ranks == 1);

  // pp=4 x dp_shard=32 x tp=8: each shard group is 32 consecutive nodes = one SU, one rail.
  const Mesh su = mesh(4, 1, 32, 1, 8);
  const GroupRoute shard = route_group(t, su, MeshGroup::dp_shard);
  CHECK(shard.n_nodes == 32);
  CHECK(shard.tier == Tier::leaf);
  CHECK(shard.switch_hops == 1);
  CHECK(shard.all_groups_alike);
  CHECK(shard.path_latency_seconds ==
        doctest::Approx(h100().fabric.nic_latency_seconds + h100().fabric.switch_hop_latency_seconds).epsilon(kRel));
  // pp peers are 256 ranks = 32 nodes apart: different SUs.
  const GroupRoute pp = route_group(t, su, MeshGroup::pp);
  CHECK(pp.n_ranks == 4);
  CHECK(pp.n_nodes == 4);
  CHECK(pp.tier == Tier::spine);

  // HSDP: 8 replicas x 16-way shard x tp 8: shard within half an SU, replicas across SUs.
  const Mesh hsdp = mesh(1, 8, 16, 1, 8);
  CHECK(route_group(t, hsdp, MeshGroup::dp_shard).tier == Tier::leaf);
  CHECK(route_group(t, hsdp, MeshGroup::dp_replicate).tier == Tier::spine);
  CHECK(route_group(t, hsdp, MeshGroup::dp).n_ranks == 128);
}

TEST_CASE("GB200 NVL72: a 64-GPU group stays in NVLink; the rack spans 18 trays") {
  const Topology t = build_topology(gb200(), 72);
  CHECK(t.n_nodes == 18);
  CHECK(t.n_domains == 1);
  CHECK(t.domain_gpus == 72);
  CHECK(t.n_nics == 72);
  CHECK(t.n_leaves == 4);  // one SU (32 trays) x 4 rails

  const Topology t64 = build_topology(gb200(), 64);
  const Mesh m = mesh(1, 1, 64, 1, 1);
  const GroupRoute fs = route_group(t64, m, MeshGroup::fsdp);
  CHECK(fs.n_ranks == 64);
  CHECK(fs.n_nodes == 16);
  CHECK(fs.ranks_per_node == 4);
  CHECK(fs.tier == Tier::nvlink);
  CHECK(fs.bottleneck_bytes_per_s == doctest::Approx(900e9).epsilon(kRel));

  // 18 trays x 4 GPUs in one NVLink domain: a 72-way group too.
  CHECK(route_group(t, mesh(1, 1, 72, 1, 1), MeshGroup::fsdp).tier == Tier::nvlink);
  CHECK(route_group(t, mesh(1, 1, 18, 1, 4), MeshGroup::fsdp).tier == Tier::nvlink);

  // Two groups of 64 on 128 GPUs: ranks 64..127 straddle racks 0 and 1 (GPU 72), inside one
  // 32-tray leaf group, so the worst group crosses NIC + leaf.
  const Topology t128 = build_topology(gb200(), 128);
  const GroupRoute two = route_group(t128, mesh(1, 2, 64, 1, 1), MeshGroup::dp_shard);
  CHECK(two.tier == Tier::leaf);
  CHECK_FALSE(two.all_groups_alike);
  CHECK(two.switch_hops == 1);
}

TEST_CASE("oversubscription 7 lowers the spine bottleneck by 7x and leaves the leaf tier alone") {
  for (const bool at_spine : {false, true}) {
    ClusterSpec c = h100();
    (at_spine ? c.fabric.spine_oversubscription : c.fabric.leaf_oversubscription) = 7;
    const Topology base = build_topology(h100(), 1024);
    const Topology over = build_topology(c, 1024);
    CHECK(over.route(Tier::spine).bottleneck_bytes_per_s ==
          doctest::Approx(base.route(Tier::spine).bottleneck_bytes_per_s / 7).epsilon(kRel));
    CHECK(over.route(Tier::leaf).bottleneck_bytes_per_s ==
          doctest::Approx(base.route(Tier::leaf).bottleneck_bytes_per_s).epsilon(kRel));
    CHECK(route_group(over, mesh(1, 1, 128, 1, 8), MeshGroup::fsdp).bottleneck_bytes_per_s ==
          doctest::Approx(kNicBytesPerS / 7).epsilon(kRel));
    CHECK(tier_bandwidth(over, Tier::spine).per_gpu_bytes_per_s ==
          doctest::Approx(kNicBytesPerS / 7).epsilon(kRel));
    if (!at_spine) CHECK(over.leaf_up_ports == 5);  // ceil(32 / 7)
  }
}

TEST_CASE("Meta-style ToR fabric: all NICs of a rack's nodes on one leaf") {
  ClusterSpec c = h100();
  c.fabric.rail_optimized = false;
  c.fabric.nodes_per_leaf = 2;  // rack = 2 servers = 16 GPUs under one ToR (arXiv:2407.21783 §3.3)
  const Topology t = build_topology(c, 64);
  CHECK(t.n_leaves == 4);
  CHECK(t.leaf_down_ports == 16);
  const Mesh m = mesh(1, 1, 8, 1, 8);
  CHECK(route_group(t, mesh(1, 2, 4, 1, 8), MeshGroup::dp_replicate).tier == Tier::spine);
  CHECK(route_group(t, mesh(4, 1, 2, 1, 8), MeshGroup::dp_shard).tier == Tier::leaf);
  CHECK(route_group(t, m, MeshGroup::fsdp).tier == Tier::spine);
  // Cross-rail pairs are fine here: NIC 3 of node 0 and NIC 5 of node 1 share the ToR.
  CHECK(find_route(t, 3, 8 + 5).switch_hops == 1);
}

TEST_CASE("direct NVLink mesh and PCIe scale-up") {
  ClusterSpec mesh_node = h100();
  mesh_node.node.scaleup_kind = "nvlink-mesh";
  const Topology m = build_topology(mesh_node, 16);
  CHECK(boost::num_edges(m.graph->adjacency) == 2 * 28 + 16 + 16 + 8 * 4);  // 28 pairs per node, NICs, leaves->spines
  const Route& nv = m.route(Tier::nvlink);
  CHECK(nv.switch_hops == 0);
  CHECK(nv.path.size() == 2);
  CHECK(nv.bottleneck_bytes_per_s == doctest::Approx(450e9 / 7).epsilon(kRel));
  CHECK(tier_bandwidth(m, Tier::nvlink).bisection_bytes_per_s == doctest::Approx(16 * 450e9 / 7).epsilon(kRel));

  ClusterSpec pcie = h100();
  pcie.node.scaleup_kind = "pcie";
  pcie.node.nvlink_domain_gpus = 16;  // ignored: PCIe reaches no further than the node
  const Topology p = build_topology(pcie, 32);
  CHECK(p.domain_gpus == 8);
  CHECK(p.n_domains == 4);
  CHECK(p.graph->adjacency[p.route(Tier::nvlink).path[1]].kind == VertexKind::pcie_switch);
  CHECK(route_group(p, mesh(1, 1, 2, 1, 16), MeshGroup::tp).tier == Tier::leaf);
}

TEST_CASE("bandwidth per tier on 1024 H100") {
  const Topology t = build_topology(h100(), 1024);
  const TierBandwidth nv = tier_bandwidth(t, Tier::nvlink);
  CHECK(nv.per_gpu_bytes_per_s == doctest::Approx(450e9).epsilon(kRel));
  CHECK(nv.per_node_bytes_per_s == doctest::Approx(8 * 450e9).epsilon(kRel));
  CHECK(nv.bisection_bytes_per_s == doctest::Approx(4 * 450e9).epsilon(kRel));
  const TierBandwidth leaf = tier_bandwidth(t, Tier::leaf);
  CHECK(leaf.per_node_bytes_per_s == doctest::Approx(8 * kNicBytesPerS).epsilon(kRel));
  CHECK(leaf.bisection_bytes_per_s == doctest::Approx(16 * 8 * kNicBytesPerS).epsilon(kRel));  // 32-node SU
  const TierBandwidth spine = tier_bandwidth(t, Tier::spine);
  CHECK(spine.bisection_bytes_per_s == doctest::Approx(64 * 8 * kNicBytesPerS).epsilon(kRel));  // 25.6 TB/s
}

TEST_CASE("placement by hand: pp=2, dp_shard=2, tp=2 on 8 GPUs; cp inside dp_shard") {
  const Mesh m = mesh(2, 1, 2, 1, 2);
  const MeshCoord c = mesh_coord(m, 5);  // 5 = pp 1 * 4 + dp_shard 0 * 2 + tp 1
  CHECK(c.pp == 1);
  CHECK(c.dp_shard == 0);
  CHECK(c.tp == 1);
  CHECK(group_members(m, MeshGroup::tp, 5) == std::vector<std::int64_t>{4, 5});
  CHECK(group_members(m, MeshGroup::dp_shard, 5) == std::vector<std::int64_t>{5, 7});
  CHECK(group_members(m, MeshGroup::pp, 5) == std::vector<std::int64_t>{1, 5});
  CHECK(group_members(m, MeshGroup::fsdp, 5) == std::vector<std::int64_t>{5, 7});

  const Mesh m2 = mesh(1, 2, 2, 2, 2, 4);  // 16 ranks
  CHECK(group_members(m2, MeshGroup::cp, 0) == std::vector<std::int64_t>{0, 2});
  CHECK(group_members(m2, MeshGroup::dp_shard, 0) == std::vector<std::int64_t>{0, 4});
  CHECK(group_members(m2, MeshGroup::fsdp, 1) == std::vector<std::int64_t>{1, 3, 5, 7});
  CHECK(group_members(m2, MeshGroup::dp_replicate, 3) == std::vector<std::int64_t>{3, 11});
  CHECK(group_members(m2, MeshGroup::dp, 0) == std::vector<std::int64_t>{0, 2, 4, 6, 8, 10, 12, 14});
  CHECK(group_members(m2, MeshGroup::ep, 9) == std::vector<std::int64_t>{9, 11, 13, 15});
  for (std::int64_t r = 0; r < m2.world(); ++r) CHECK(rank_of(m2, mesh_coord(m2, r)) == r);

  const Topology t = build_topology(h100(), 16);
  const GpuLocation l = locate(t, 13);
  CHECK(l.node == 1);
  CHECK(l.local_gpu == 5);
  CHECK(l.nvlink_domain == 1);
  CHECK(l.leaf_group == 0);
  const GroupRoute dpr = route_group(t, m2, MeshGroup::dp_replicate);  // {r, r + 8}: next node
  CHECK(dpr.tier == Tier::leaf);
  CHECK(dpr.n_nodes == 2);
  CHECK(dpr.ranks_per_node == 1);
  const GroupRoute fsdp = route_group(t, m2, MeshGroup::fsdp);
  CHECK(fsdp.tier == Tier::nvlink);
  CHECK(fsdp.ranks_per_node == 4);
}

TEST_CASE("route_group agrees with a walk over every group, aligned or not") {
  ClusterSpec small = h100();
  small.fabric.nodes_per_leaf = 2;  // 16-GPU leaf groups make SU crossings cheap to reach
  ClusterSpec nvl = gb200();
  nvl.fabric.nodes_per_leaf = 8;    // 32-GPU leaf groups inside 72-GPU racks: misaligned on purpose
  struct Case {
    const ClusterSpec* c;
    Mesh m;
  };
  const std::vector<Case> cases = {
      {&small, mesh(1, 1, 6, 1, 8)},  {&small, mesh(2, 1, 3, 1, 8)},  {&small, mesh(1, 2, 3, 2, 4)},
      {&small, mesh(3, 2, 2, 1, 4)},  {&small, mesh(1, 1, 16, 1, 3)}, {&small, mesh(2, 3, 1, 2, 6)},
      {&nvl, mesh(1, 2, 16, 1, 4)},   {&nvl, mesh(1, 1, 36, 1, 4)},   {&nvl, mesh(2, 2, 9, 1, 4)},
      {&nvl, mesh(1, 3, 4, 3, 4)},    {&nvl, mesh(4, 1, 6, 1, 6)},    {&nvl, mesh(1, 1, 5, 1, 29)},
  };
  for (const auto& [c, m] : cases) {
    const Topology t = build_topology(*c, m.world());
    check_mesh(t, m);
    for (const MeshGroup k : kAllMeshGroups) {
      if (k == MeshGroup::ep) continue;
      const auto world = m.world();  // CAPTURE cannot name a structured binding in clang 14
      CAPTURE(world);
      CAPTURE(to_string(k));
      const GroupRoute r = route_group(t, m, k);
      const Brute b = brute_route(t, m, k);
      CHECK(r.tier == b.tier);
      CHECK(r.n_nodes == b.n_nodes);
      CHECK(r.all_groups_alike == b.alike);
      if (r.tier != Tier::none) CHECK(t.route(r.tier).present);
    }
  }
}

TEST_CASE("bad input is one InputError") {
  CHECK_THROWS_AS(build_topology(h100(), 0), InputError);
  CHECK_THROWS_AS(build_topology(h100(), -8), InputError);
  const Topology t = build_topology(h100(), 64);
  CHECK_THROWS_AS(check_mesh(t, mesh(1, 1, 4, 1, 8)), InputError);      // 32 != 64
  CHECK_THROWS_AS(check_mesh(t, mesh(1, 1, 8, 1, 8, 3)), InputError);   // ep 3 does not divide 8
  CHECK_THROWS_AS(check_mesh(t, mesh(1, 1, 8, 1, 8, 0)), InputError);
  CHECK_NOTHROW(check_mesh(t, mesh(1, 1, 8, 1, 8, 8)));
  ClusterSpec rack = gb200();
  rack.fabric.kind = "nvl_domain";
  CHECK_NOTHROW(build_topology(rack, 72));
  CHECK_THROWS_AS(build_topology(rack, 144), InputError);
}

TEST_CASE("meshplan topology: text, JSON and one-line errors") {
  const std::string bin = test::meshplan_bin().string();
  auto run = [&](const std::string& args, int& rc) {
    std::string out;
    FILE* p = popen((bin + " topology " + args + " 2>&1").c_str(), "r");
    REQUIRE(p != nullptr);
    char buf[4096];
    while (std::fgets(buf, sizeof buf, p) != nullptr) out += buf;
    const int status = pclose(p);
    rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    return out;
  };
  int rc = 0;
  std::string out = run("--cluster h100-sxm-80gb --gpus 1024 --mesh pp=1,dp_shard=128,tp=8", rc);
  CHECK(rc == 0);
  CHECK(out.find("128 x 8 GPUs") != std::string::npos);
  CHECK(out.find("fsdp") != std::string::npos);
  out = run("--cluster h100-sxm-80gb --gpus 1024 --json --mesh dp_shard=128,tp=8", rc);
  CHECK(rc == 0);
  CHECK(out.find("\"spine_switches\": 16") != std::string::npos);
  CHECK(out.find("\"tier\": \"spine\"") != std::string::npos);

  for (const char* bad : {"--cluster no-such-gpu --gpus 8", "--gpus 0", "--gpus -8",
                          "--gpus 64 --mesh dp_shard=4,tp=8", "--gpus 64 --mesh dp_shard=8,tpp=8"}) {
    CAPTURE(bad);
    out = run(bad, rc);
    CHECK(rc != 0);
    CHECK(std::count(out.begin(), out.end(), '\n') == 1);
    CHECK(out.find("error") != std::string::npos);
  }
}

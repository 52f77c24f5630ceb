// Collective cost model: the NCCL constants file loads strictly, each algorithm's closed form
// matches hand-worked cases (zero-byte latencies worked out from NCCL's tuning.cc), the pipeline
// ramp on top of NCCL's model matches its closed form, and predicted busbw matches measured
// nccl-tests figures (Azure AI-benchmarking-guide, ml-engineering, NVIDIA/nccl and nccl-tests
// threads; A100 and H100, one node and several; H200 as a cross-check): within 10 % at >= 1 MiB,
// 25 % below. A figure is excluded only with the reason it is not a measurement of what the model
// predicts (an average over sizes, another fabric, ...), and excluded figures are printed with the
// rest.
#include <doctest/doctest.h>

#include <array>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "cost/collective_cost.hpp"
#include "spec/cluster_loader.hpp"
#include "spec/error.hpp"
#include "spec/nccl_table.hpp"
#include "cost/csv_table.hpp"
#include "test_paths.hpp"

using namespace meshplan;
namespace fs = std::filesystem;

namespace {

constexpr double kUs = 1e-6;
constexpr double kGB = 1e9;
constexpr double kKiB = 1024.0;
constexpr double kMiB = 1024.0 * 1024.0;
constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

const ClusterSpec& h100() {
  static const ClusterSpec c = load_cluster("h100-sxm-80gb");
  return c;
}
const ClusterSpec& a100() {
  static const ClusterSpec c = load_cluster("a100-80gb");
  return c;
}
const ClusterSpec& h200() {
  static const ClusterSpec c = load_cluster("h200-141gb");
  return c;
}

// NCCL's own model: the shipped table with the pipeline ramp switched off (eta0 = 1). The
// closed forms of NCCL's formulas are checked against it; the ramp on top has its own test case.
const NcclTable& nccl_only_table() {
  static const NcclTable t = [] {
    NcclTable x = default_nccl_table();
    x.pipeline_small_message_efficiency = 1.0;
    return x;
  }();
  return t;
}
CollectiveOptions nccl_model() {
  CollectiveOptions o;
  o.nccl = &nccl_only_table();
  return o;
}
CollectiveOptions only(NcclAlgo a, NcclProto p) {
  CollectiveOptions o = nccl_model();
  o.algorithm_mask = algorithm_bit(a);
  o.protocol_mask = protocol_bit(p);
  return o;
}
CollectiveOptions only(NcclAlgo a) {
  CollectiveOptions o = nccl_model();
  o.algorithm_mask = algorithm_bit(a);
  return o;
}

GroupPlacement place(int nodes, int per_node) { return GroupPlacement{nodes * per_node, per_node}; }

double busbw(const CollectiveEstimate& e) { return e.bus_bytes / e.seconds; }

std::string slurp(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

fs::path shipped_table() { return test::data_root() / "hardware_profiles" / "nccl" / "nccl-2.30.7.toml"; }

// Write a modified copy of the shipped table and return the loader's error.
std::string load_error(const std::string& from, const std::string& to) {
  std::string text = slurp(shipped_table());
  const auto at = text.find(from);
  REQUIRE(at != std::string::npos);
  text.replace(at, from.size(), to);
  const fs::path p = fs::temp_directory_path() / "meshplan_test_nccl_bad.toml";
  {
    std::ofstream out(p);
    out << text;
  }
  try {
    (void)load_nccl_table(p.string());
  } catch (const InputError& e) {
    fs::remove(p);
    return e.what();
  }
  fs::remove(p);
  return {};
}

}  // namespace

TEST_CASE("nccl table: shipped 2.30.7 constants load in SI units, each with a source") {
  const NcclTable& t = default_nccl_table();
  CHECK(t.version == "2.30.7");
  const auto ring = static_cast<std::size_t>(NcclAlgo::ring);
  const auto tree = static_cast<std::size_t>(NcclAlgo::tree);
  const auto nvls = static_cast<std::size_t>(NcclAlgo::nvls);
  const auto ll = static_cast<std::size_t>(NcclProto::ll);
  const auto simple = static_cast<std::size_t>(NcclProto::simple);
  CHECK(t.base_latency_seconds[ring][ll] == doctest::Approx(6.6e-6));
  CHECK(t.base_latency_seconds[tree][simple] == doctest::Approx(8.4e-6));
  CHECK(t.hw_latency_seconds[static_cast<std::size_t>(NcclLink::nvlink)][nvls][simple] == doctest::Approx(25e-6));
  CHECK(t.hw_latency_seconds[static_cast<std::size_t>(NcclLink::net)][ring][simple] == doctest::Approx(14e-6));
  CHECK(t.tree_correction[simple][11] == doctest::Approx(0.5));
  CHECK(t.arch_table(90).ll_max_bytes_per_s[0] == doctest::Approx(141e9));
  CHECK(t.arch_table(100).tree_per_channel_bytes_per_s[2] == doctest::Approx(24e9));
  CHECK(t.arch_table(86).sm == 80);   // newest generation not newer than sm86
  CHECK(t.arch_table(103).sm == 100);
  CHECK(t.nvls_efficiency_sm90 == doctest::Approx(0.85));
  CHECK(t.simple_buffer_bytes == 4194304.0);
  CHECK(t.sources.at("base_latency_us.ring") == "base_lat");
  CHECK(t.sources.at("channels.max_channels") == "max_channels");
  CHECK(t.max_threads == std::array<int, 3>{512, 640, 512});
  CHECK(t.sources.at("max_threads.simple") == "max_threads_simple");
  CHECK(t.host_launch_amd_seconds == doctest::Approx(5.25e-6));
  CHECK(t.host_launch_intel_seconds == doctest::Approx(2.625e-6));
  CHECK(t.pipeline_small_message_efficiency == doctest::Approx(0.423));
  CHECK(t.pipeline_half_ramp_bytes == 17690582);  // 16.87 MiB
  CHECK(t.sources.at("pipeline_ramp.small_message_efficiency") == "pipeline_ramp_efficiency");
  CHECK(t.sources.at("pipeline_ramp.half_ramp_bytes") == "pipeline_ramp_half");
  // Both are fitted (calibrate --nccl-tests), within the bounds their sources declare.
  CHECK(t.fitted_bounds.at("pipeline_ramp_efficiency") == std::pair{0.05, 1.0});
  CHECK(t.fitted_bounds.at("pipeline_ramp_half") == std::pair{1048576.0, 1073741824.0});
  CHECK(t.fit_commands.at("pipeline_ramp_half").find("calibrate --nccl-tests") != std::string::npos);
  for (const auto& entry : t.sources) CHECK_MESSAGE(t.source_refs.contains(entry.second), entry.first);
}

TEST_CASE("nccl table: strict loader names the file and the key") {
  CHECK(load_error("pat = [8.0, 8.0, 8.0]", "pat = [8.0, 8.0]").find("base_latency_us.pat: must have 3 entries") !=
        std::string::npos);
  CHECK(load_error("[buffers]\nsrc = \"buffers\"\n", "[buffers]\nsrc = \"buffers\"\nbogus = 1\n")
            .find("buffers.bogus: unknown key") != std::string::npos);
  CHECK(load_error("src = \"nvls_eff\"", "src = \"nope\"").find("'nope' is not declared") != std::string::npos);
  CHECK(load_error("\nsm90 = 0.85", "\nsm90 = 1.5").find("nvls_efficiency.sm90: must be in") != std::string::npos);
  CHECK(load_error("steps = 8\n", "").find("buffers.steps: missing") != std::string::npos);
  CHECK(load_error("\nsm100 = 425", "\nsm100 = -1").find("nvls_switch_reduction_gb_per_s.sm100: must be in") !=
        std::string::npos);
  CHECK(load_error("small_message_efficiency = 0.423", "small_message_efficiency = 0")
            .find("pipeline_ramp.small_message_efficiency: must be in") != std::string::npos);
  CHECK(load_error("half_ramp_bytes = 17690582", "half_ramp_bytes = -1")
            .find("pipeline_ramp.half_ramp_bytes: must be in") != std::string::npos);
  // A fitted value lies within its source's bounds; a fitted source gives bounds and its command.
  CHECK(load_error("half_ramp_bytes = 17690582", "half_ramp_bytes = 512")
            .find("pipeline_ramp.half_ramp_bytes: fitted value 512 is outside its source's bounds") != std::string::npos);
  CHECK(load_error("bounds = [0.05, 1.0], ", "").find("sources.pipeline_ramp_efficiency.bounds: a fitted source must give") !=
        std::string::npos);
  CHECK(load_error("bounds = [0.05, 1.0]", "bounds = [1.0, 0.05]").find("must be [low, high] with low < high") !=
        std::string::npos);
  CHECK(load_error("kind = \"derived\", ref = \"not an NCCL constant: the ranks", "kind = \"derived\", fit = \"x\", ref = \"the ranks")
            .find("sources.pipeline_loop.fit: only a fitted source has bounds and a fit") != std::string::npos);
  CHECK(load_error("ring_ll = 0.5", "ring_ll = \"half\"").find("must be a number") != std::string::npos);
  const std::string e = load_error("simple = 64\n", "simple = 64\n[extra]\nx = 1\n");
  CHECK(e.find("extra: unknown key") != std::string::npos);
  CHECK(e.find("nccl-test") == std::string::npos);  // the temp file name is reported, not the shipped one
  CHECK_THROWS_AS(load_nccl_table("9.9.9"), InputError);
  CHECK_THROWS_AS(load_nccl_table("../etc"), InputError);
}

// NCCL's zero-byte AllReduce latencies, worked out from NCCL 2.30.7's tuning.cc constants and
// latency formulas (Intel host, IB plugin latency 0): the model must reproduce them exactly.
TEST_CASE("closed forms: all-reduce latency per algorithm equals NCCL's (tuning.cc constants)") {
  struct Row {
    int nodes;
    NcclAlgo algo;
    NcclProto proto;
    double us;
  };
  const Row rows[] = {
      {1, NcclAlgo::ring, NcclProto::ll, 15.0},      {1, NcclAlgo::ring, NcclProto::ll128, 40.6},
      {1, NcclAlgo::ring, NcclProto::simple, 56.0},  {1, NcclAlgo::tree, NcclProto::ll, 15.2},
      {1, NcclAlgo::tree, NcclProto::ll128, 31.5},   {1, NcclAlgo::tree, NcclProto::simple, 64.4},
      {1, NcclAlgo::nvls, NcclProto::simple, 25.0},  {2, NcclAlgo::ring, NcclProto::ll, 40.0},
      {2, NcclAlgo::ring, NcclProto::ll128, 75.2},   {2, NcclAlgo::tree, NcclProto::ll, 25.2},
      {2, NcclAlgo::tree, NcclProto::ll128, 48.5},   {2, NcclAlgo::tree, NcclProto::simple, 92.4},
      {2, NcclAlgo::nvlstree, NcclProto::simple, 66.8}, {16, NcclAlgo::ring, NcclProto::ll, 311.6},
      {16, NcclAlgo::ring, NcclProto::ll128, 559.6}, {16, NcclAlgo::tree, NcclProto::ll, 55.2},
      {16, NcclAlgo::tree, NcclProto::ll128, 99.5},  {16, NcclAlgo::tree, NcclProto::simple, 176.4},
      {16, NcclAlgo::nvlstree, NcclProto::simple, 192.2}, {128, NcclAlgo::ring, NcclProto::ll, 2484.4},
      {128, NcclAlgo::tree, NcclProto::ll, 85.2},    {128, NcclAlgo::tree, NcclProto::simple, 260.4},
      {128, NcclAlgo::nvlstree, NcclProto::simple, 317.6},
  };
  // NCCL's table assumes every node one switch hop away; keep all 128 nodes under one leaf here
  // (the spine-hop term is checked below).
  ClusterSpec flat = h100();
  flat.fabric.nodes_per_leaf = 1000;
  for (const Row& r : rows) {
    // 64 bytes: below the ring plateau threshold, so latency is the bare formula.
    const auto e = estimate_collective(flat, CollectiveOp::all_reduce, 64, place(r.nodes, 8), only(r.algo, r.proto));
    CAPTURE(r.nodes);
    CAPTURE(to_string(r.algo));
    CAPTURE(to_string(r.proto));
    CHECK(e.algorithm == to_string(r.algo));
    CHECK(e.protocol == to_string(r.proto));
    CHECK(e.latency_seconds / kUs == doctest::Approx(r.us).epsilon(1e-9));
  }
  // Ring Simple across nodes above the threshold: NCCL's x1.4 plateau factor (SM80+).
  // 2x8: 8.4 + 28 * max(3.4, 3 * 1.0) + 2 * 14 = 131.6 us, x1.4 (tuning.cc ring plateau).
  const auto big = estimate_collective(h100(), CollectiveOp::all_reduce, 1 * kGiB, place(2, 8),
                                       only(NcclAlgo::ring, NcclProto::simple));
  CHECK(big.latency_seconds / kUs == doctest::Approx(131.6 * 1.4));
  // Beyond one leaf group (32 nodes on the H100 profile) each network hop also crosses a spine:
  // + 2 switch hops x 0.25 us per tree level, 128 nodes = 7 levels, twice (up and down).
  const auto wide = estimate_collective(h100(), CollectiveOp::all_reduce, 64, place(128, 8),
                                        only(NcclAlgo::tree, NcclProto::ll));
  CHECK(wide.latency_seconds / kUs == doctest::Approx(85.2 + 2 * 7 * 2 * 0.25));
}

TEST_CASE("closed forms: bandwidth terms on hand-worked cases") {
  const double S = 1 * kGiB;
  const double h100_link = 450e9 * 0.822;  // profile: NVLink4 per direction x ring efficiency
  SUBCASE("ring all-reduce, one node: 2(n-1)/n S over the NVLink rate") {
    const auto e = estimate_collective(h100(), CollectiveOp::all_reduce, S, place(1, 8),
                                       only(NcclAlgo::ring, NcclProto::simple));
    CHECK(e.seconds == doctest::Approx(56e-6 + 1.75 * S / h100_link));
    CHECK(e.bus_bytes == doctest::Approx(1.75 * S));
    CHECK(e.bus_bandwidth_bytes_per_s == doctest::Approx(h100_link));
    CHECK_FALSE(e.crosses_nodes);
  }
  SUBCASE("ring LL: half the link, capped by NCCL's llMaxBw (141 GB/s on Hopper, one node)") {
    const auto e = estimate_collective(h100(), CollectiveOp::all_reduce, S, place(1, 8),
                                       only(NcclAlgo::ring, NcclProto::ll));
    CHECK(e.bus_bandwidth_bytes_per_s == doctest::Approx(141e9));
  }
  SUBCASE("NVLS all-reduce: (1 + 1/n) S per GPU per direction at link x nvlsEff") {
    const auto e = estimate_collective(h100(), CollectiveOp::all_reduce, S, place(1, 8), only(NcclAlgo::nvls));
    CHECK(e.seconds == doctest::Approx(25e-6 + S * 9.0 / 8.0 / (h100_link * 0.85)));
  }
  SUBCASE("NVLS reduction on NVLink5: the switch folds (n-1)/n S per GPU at 425 GB/s, so AR busbw <= 850") {
    static const ClusterSpec gb = load_cluster("gb200");
    const double link = 900e9 * 0.755 * 0.74;  // NVLink5 per direction x ring efficiency x nvlsEff = 502.8 GB/s
    // 72 GPUs (one NVL72): link time S x 73/72 / 502.8 GB/s < switch time S x 71/72 / 425 GB/s.
    const auto e72 = estimate_collective(gb, CollectiveOp::all_reduce, S, place(18, 4), only(NcclAlgo::nvls));
    CHECK(e72.seconds == doctest::Approx(25e-6 + S * 71.0 / 72.0 / 425e9));
    CHECK(e72.bus_bandwidth_bytes_per_s == doctest::Approx(850e9));
    // 8 GPUs: S x 9/8 / 502.8 GB/s > S x 7/8 / 425 GB/s, the links bound as before.
    const auto e8 = estimate_collective(gb, CollectiveOp::all_reduce, S, place(2, 4), only(NcclAlgo::nvls));
    CHECK(e8.seconds == doctest::Approx(25e-6 + S * 9.0 / 8.0 / link));
    // Reduce-scatter over 16 GPUs reduces the same (n-1)/n S per GPU: busbw <= 425; all-gather does not reduce.
    const auto rs = estimate_collective(gb, CollectiveOp::reduce_scatter, S, place(4, 4), only(NcclAlgo::nvls));
    CHECK(rs.seconds == doctest::Approx(25e-6 + S * 15.0 / 16.0 / 425e9));
    const auto ag = estimate_collective(gb, CollectiveOp::all_gather, S, place(4, 4), only(NcclAlgo::nvls));
    CHECK(ag.seconds == doctest::Approx(25e-6 + S * 15.0 / 16.0 / link));
    // Hopper has no known bound (0): the H100 case above stays link-bound.
    CHECK(default_nccl_table().nvls_switch_reduction_sm90_bytes_per_s == 0.0);
    CHECK(default_nccl_table().nvls_switch_reduction_sm100_bytes_per_s == doctest::Approx(425e9));
  }
  SUBCASE("tree, one node: 2S per GPU per direction, x0.92 and NCCL's size correction (0.9 at 1 GiB)") {
    const auto e = estimate_collective(h100(), CollectiveOp::all_reduce, S, place(1, 8),
                                       only(NcclAlgo::tree, NcclProto::simple));
    CHECK(e.seconds == doctest::Approx(64.4e-6 + S / (0.5 * 0.92 * h100_link * 0.9)));
  }
  SUBCASE("ring across nodes: min(NVLink, the node's NICs) = min(369.9, 8 x 50 x 0.96 = 384) GB/s") {
    const auto e = estimate_collective(h100(), CollectiveOp::all_gather, S, place(4, 8),
                                       only(NcclAlgo::ring, NcclProto::simple));
    CHECK(e.bus_bandwidth_bytes_per_s == doctest::Approx(h100_link));
    CHECK(e.crosses_nodes);
    const auto a = estimate_collective(a100(), CollectiveOp::all_gather, S, place(4, 8),
                                       only(NcclAlgo::ring, NcclProto::simple));
    CHECK(a.bus_bandwidth_bytes_per_s == doctest::Approx(8 * 25e9 * 0.96));  // 192 GB/s, NIC-bound
  }
  SUBCASE("one rank per node: the group gets one NIC's share of the node") {
    const auto e = estimate_collective(h100(), CollectiveOp::all_gather, S, place(8, 1),
                                       only(NcclAlgo::ring, NcclProto::simple));
    CHECK(e.bus_bandwidth_bytes_per_s == doctest::Approx(50e9 * 0.96));
    const auto p = estimate_collective(h100(), CollectiveOp::all_gather, S, place(8, 1), only(NcclAlgo::pat));
    CHECK(p.algorithm == "pat");
    CHECK(p.bus_bandwidth_bytes_per_s == doctest::Approx(50e9 * 0.96 * 0.75));
    // PAT latency: 8 + log2(8) * 14 / 3.5 + 8 * 2.8 = 42.4 us.
    CHECK(p.latency_seconds / kUs == doctest::Approx(42.4));
  }
  SUBCASE("NVLSTree: NVLS inside the node, 2S per node over the NICs beyond two nodes") {
    const auto e = estimate_collective(h100(), CollectiveOp::all_reduce, S, place(4, 8), only(NcclAlgo::nvlstree));
    const double algbw = std::min(h100_link * 0.85 * 8.0 / 9.0, 384e9 / 2.0);
    CHECK(e.seconds == doctest::Approx(e.latency_seconds + S / algbw));
    const auto two = estimate_collective(h100(), CollectiveOp::all_reduce, S, place(2, 8), only(NcclAlgo::nvlstree));
    CHECK(two.seconds == doctest::Approx(two.latency_seconds + S / std::min(h100_link * 0.85 * 8.0 / 9.0, 384e9)));
  }
  SUBCASE("all-to-all across nodes: the off-node share over one NIC per GPU") {
    // 2 nodes x 8: 8/16 of S goes over the GPU's NIC (48 GB/s), 7/16 over NVLink; NIC-bound.
    const auto e = estimate_collective(h100(), CollectiveOp::all_to_all, S, place(2, 8), nccl_model());
    CHECK(e.algorithm == "direct");
    CHECK(e.protocol == "Simple");
    CHECK(e.seconds == doctest::Approx(e.latency_seconds + 0.5 * S / 48e9));
    CHECK(e.latency_seconds / kUs == doctest::Approx(8.4 + 14.0));  // one Simple network hop
  }
  SUBCASE("send/recv: one link, busbw factor 1") {
    const auto intra = estimate_collective(h100(), CollectiveOp::send_recv, S, GroupPlacement{2, 2}, nccl_model());
    CHECK(intra.seconds == doctest::Approx(11.8e-6 + S / h100_link));
    const auto inter = estimate_collective(h100(), CollectiveOp::send_recv, S, GroupPlacement{2, 1}, nccl_model());
    CHECK(inter.seconds == doctest::Approx(22.4e-6 + S / 48e9));
    CHECK(inter.crosses_nodes);
  }
  SUBCASE("broadcast: S through every rank, ring rate") {
    const auto e = estimate_collective(a100(), CollectiveOp::broadcast, S, place(1, 8),
                                       only(NcclAlgo::ring, NcclProto::simple));
    CHECK(e.bus_bytes == doctest::Approx(S));
    CHECK(e.bus_bandwidth_bytes_per_s == doctest::Approx(300e9 * 0.775));
    // 8.4 base + 8 steps x 4.0 (Simple broadcast hops charged the Tree NVLink latency).
    CHECK(e.latency_seconds / kUs == doctest::Approx(8.4 + 8 * 4.0));
  }
  SUBCASE("spine oversubscription applies once a group outgrows a leaf group") {
    ClusterSpec c = h100();
    c.fabric.nodes_per_leaf = 4;
    c.fabric.spine_oversubscription = 2.0;
    const auto in_leaf = estimate_collective(c, CollectiveOp::all_gather, S, place(4, 8),
                                             only(NcclAlgo::ring, NcclProto::simple));
    const auto beyond = estimate_collective(c, CollectiveOp::all_gather, S, place(8, 8),
                                            only(NcclAlgo::ring, NcclProto::simple));
    CHECK(in_leaf.bus_bandwidth_bytes_per_s == doctest::Approx(h100_link));
    CHECK(beyond.bus_bandwidth_bytes_per_s == doctest::Approx(384e9 / 2.0));
  }
}

TEST_CASE("small messages: NCCL's channel/thread shrinking (enqueue.cc)") {
  // A100 one node: 2 x ceil(232.5 / 40) = 12 channels. Ring LL threshold 8 B x 8 ranks x 512 threads
  // = 32 KiB per channel; Simple 64 B x 512 = 32 KiB; LL128 8 B x 640 = 5 KiB.
  const double ll_rate = std::min(0.5 * 300e9 * 0.775, 87.7e9);  // NCCL's LL rate on 12 channels
  const auto ll = estimate_collective(a100(), CollectiveOp::all_reduce, 64 * kKiB, place(1, 8),
                                      only(NcclAlgo::ring, NcclProto::ll));
  CHECK(ll.channels == 2);
  CHECK(ll.bus_bandwidth_bytes_per_s == doctest::Approx(ll_rate * 2.0 / 12.0));
  CHECK(ll.seconds == doctest::Approx(15e-6 + ll.bus_bytes / (ll_rate * 2.0 / 12.0)));
  const auto full = estimate_collective(a100(), CollectiveOp::all_reduce, 1 * kMiB, place(1, 8),
                                        only(NcclAlgo::ring, NcclProto::ll));
  CHECK(full.channels == 12);  // 1 MiB >= 12 x 32 KiB: no shrinking
  CHECK(full.bus_bandwidth_bytes_per_s == doctest::Approx(ll_rate));
  const auto simple = estimate_collective(a100(), CollectiveOp::all_reduce, 128 * kKiB, place(1, 8),
                                          only(NcclAlgo::ring, NcclProto::simple));
  CHECK(simple.channels == 4);
  CHECK(simple.bus_bandwidth_bytes_per_s == doctest::Approx(300e9 * 0.775 * 4.0 / 12.0));
  const auto ll128 = estimate_collective(a100(), CollectiveOp::all_reduce, 20 * kKiB, place(1, 8),
                                         only(NcclAlgo::ring, NcclProto::ll128));
  CHECK(ll128.channels == 4);
  // Below one channel's worth the threads halve while a multiple of 128: 2 ranks, Ring LL threshold
  // 16 B; 1 KiB < 512 x 16 -> nt 512 -> 256 -> 128 -> 64 (1 KiB = 64 x 16 stops it).
  const auto tiny = estimate_collective(a100(), CollectiveOp::all_reduce, 1 * kKiB, place(1, 2),
                                        only(NcclAlgo::ring, NcclProto::ll));
  CHECK(tiny.channels == 1);
  CHECK(tiny.bus_bandwidth_bytes_per_s == doctest::Approx(ll_rate / 12.0 * 64.0 / 512.0));
  // NCCL selects on its full-channel prediction, then shrinks: the choice does not change.
  const auto pick = estimate_collective(h100(), CollectiveOp::all_reduce, 32 * kKiB, place(1, 8));
  CHECK(pick.algorithm == "ring");
  CHECK(pick.protocol == "LL");
  CHECK(pick.channels < 14);
}

TEST_CASE("pipeline ramp: NCCL's time plus t_link x (1/eta0 - 1) x S_half / (S + S_half)") {
  const NcclTable& t = default_nccl_table();
  const double k = 1.0 / t.pipeline_small_message_efficiency - 1.0;  // 1/0.423 - 1 = 1.364
  const double half = t.pipeline_half_ramp_bytes;                      // 16.87 MiB
  CollectiveOptions ring_simple;
  ring_simple.algorithm_mask = algorithm_bit(NcclAlgo::ring);
  ring_simple.protocol_mask = protocol_bit(NcclProto::simple);
  SUBCASE("A100 ring all-reduce at 64 MiB: NCCL's 56 us + 1.75 S / 232.5 GB/s, plus the ramp") {
    // t_link = 1.75 x 64 MiB / 232.5 GB/s = 505.1 us; ramp = 505.1 x 1.364 x 16.87 / (64 + 16.87)
    // = 505.1 x 0.2846 = 143.7 us; total 56 + 505.1 + 143.7 = 704.8 us.
    const double S = 64 * kMiB;
    const double t_link = 1.75 * S / (300e9 * 0.775);
    const auto e = estimate_collective(a100(), CollectiveOp::all_reduce, S, place(1, 8), ring_simple);
    const auto nccl = estimate_collective(a100(), CollectiveOp::all_reduce, S, place(1, 8),
                                          only(NcclAlgo::ring, NcclProto::simple));
    CHECK(e.ramp_seconds / kUs == doctest::Approx(t_link * k * half / (S + half) / kUs));
    CHECK(e.ramp_seconds / kUs == doctest::Approx(143.74).epsilon(1e-3));
    CHECK(e.seconds / kUs == doctest::Approx((nccl.seconds + e.ramp_seconds) / kUs));
    CHECK(nccl.seconds / kUs == doctest::Approx(56.0 + t_link / kUs));
    CHECK(e.latency_seconds / kUs == doctest::Approx(56.0));  // the ramp is a rate, not a latency
    // The simulator moves bus_bytes at bus_bandwidth after the latency: the ramp must be in the rate.
    CHECK(e.seconds / kUs ==
          doctest::Approx((e.latency_seconds + e.bus_bytes / e.bus_bandwidth_bytes_per_s) / kUs));
  }
  SUBCASE("small messages run at eta0 of the rate, large ones lose a bounded time") {
    // NVLS does not shrink its channels, so its transfer at 256 KiB is the ramped rate alone:
    // 1 + 1.364 x 16.87 / 17.12 = 2.344, i.e. 0.427 of the NVLS rate, close to eta0 = 0.423.
    const auto nvls = only(NcclAlgo::nvls);
    CollectiveOptions nvls_ramp;
    nvls_ramp.algorithm_mask = algorithm_bit(NcclAlgo::nvls);
    const double small = 256 * kKiB;
    const auto a = estimate_collective(h100(), CollectiveOp::all_reduce, small, place(1, 8), nvls_ramp);
    const auto b = estimate_collective(h100(), CollectiveOp::all_reduce, small, place(1, 8), nvls);
    CHECK(b.bus_bandwidth_bytes_per_s / a.bus_bandwidth_bytes_per_s == doctest::Approx(1 + k * half / (small + half)));
    CHECK(a.bus_bandwidth_bytes_per_s / b.bus_bandwidth_bytes_per_s == doctest::Approx(0.4266).epsilon(1e-3));
    // Far above S_half the added time tends to k x (the NVLS transfer time of S_half):
    // 1.364 x (9/8 x 16.87 MiB / 314.4 GB/s) = 86.34 us, reached within 0.1 % at 16 GiB.
    const double rate = 450e9 * 0.822 * 0.85;
    const double limit = k * half * 9.0 / 8.0 / rate;
    const auto big = estimate_collective(h100(), CollectiveOp::all_reduce, 16 * kGiB, place(1, 8), nvls_ramp);
    CHECK(limit / kUs == doctest::Approx(86.34).epsilon(1e-3));
    CHECK(big.ramp_seconds / limit == doctest::Approx(1.0).epsilon(1.1e-3));
    CHECK(big.ramp_seconds < limit);
  }
  SUBCASE("ring and NVLS: S_half grows with the ranks one kernel loop spans (fitted on a ring of 8)") {
    static const ClusterSpec gb = load_cluster("gb200");
    CHECK(t.pipeline_half_ramp_ranks == 8);
    // 4-GPU GB200 ring Simple at 64 MiB: S_half = 16.87 MiB x 4/8 = 8.44 MiB; t_link = 1.5 S / 679.5 GB/s
    // = 148.1 us; ramp = 148.1 x 1.364 x 8.44 / 72.44 = 23.53 us (an 8-rank loop would charge 42.1 us).
    const double S = 64 * kMiB;
    const double t_link = 1.5 * S / (900e9 * 0.755);
    const auto r4 = estimate_collective(gb, CollectiveOp::all_reduce, S, place(1, 4), ring_simple);
    CHECK(r4.ramp_seconds / kUs == doctest::Approx(t_link * k * (half / 2) / (S + half / 2) / kUs));
    CHECK(r4.ramp_seconds / kUs == doctest::Approx(23.53).epsilon(2e-3));
    // 72-GPU NVLS at 1 GiB: S_half = 16.87 MiB x 72/8 = 151.8 MiB; t_link is the switch-bound time
    // S x 71/72 / 425 GB/s = 2491.4 us; ramp = 2491.4 x 1.364 x 151.8 / 1175.8 = 438.8 us.
    CollectiveOptions nvls_ramp;
    nvls_ramp.algorithm_mask = algorithm_bit(NcclAlgo::nvls);
    const double G = 1 * kGiB;
    const double t72 = G * 71.0 / 72.0 / 425e9;
    const auto n72 = estimate_collective(gb, CollectiveOp::all_reduce, G, place(18, 4), nvls_ramp);
    CHECK(n72.ramp_seconds / kUs == doctest::Approx(t72 * k * (9 * half) / (G + 9 * half) / kUs));
    CHECK(n72.ramp_seconds / kUs == doctest::Approx(438.84).epsilon(2e-3));
    // Tree kernels loop over nChannels x chunkSize: the fitted S_half stays, whatever the ranks.
    const auto tr = estimate_collective(h100(), CollectiveOp::all_reduce, S, place(4, 8),
                                        only(NcclAlgo::tree, NcclProto::simple));
    CollectiveOptions tree_ramp;
    tree_ramp.algorithm_mask = algorithm_bit(NcclAlgo::tree);
    tree_ramp.protocol_mask = protocol_bit(NcclProto::simple);
    const auto trr = estimate_collective(h100(), CollectiveOp::all_reduce, S, place(4, 8), tree_ramp);
    CHECK(trr.ramp_seconds > 0);
    CHECK(trr.seconds / kUs == doctest::Approx((tr.seconds + trr.ramp_seconds) / kUs));
    // t_link = S / (0.5 x 0.92 x 369.9 GB/s): the tree's Simple algbw across 4 nodes (NVLink-bound).
    const double t_tree = S / (0.5 * 0.92 * 450e9 * 0.822);
    CHECK(trr.ramp_seconds / kUs == doctest::Approx(t_tree * k * half / (S + half) / kUs));
  }
  SUBCASE("NCCL's choice is not changed by the ramp (it selects on its own model)") {
    for (double S = 1 * kKiB; S <= 8 * kGiB; S *= 4) {
      for (const ClusterSpec* c : {&a100(), &h100()}) {
        for (GroupPlacement g : {place(1, 8), place(4, 8), place(16, 1)}) {
          const auto with = estimate_collective(*c, CollectiveOp::all_reduce, S, g);
          const auto without = estimate_collective(*c, CollectiveOp::all_reduce, S, g, nccl_model());
          CAPTURE(S);
          CHECK(with.algorithm == without.algorithm);
          CHECK(with.protocol == without.protocol);
          CHECK(with.channels == without.channels);
          CHECK(with.seconds >= without.seconds);
        }
      }
    }
  }
}

TEST_CASE("launch mode: one host thread driving several GPUs sets a per-iteration floor") {
  CollectiveOptions g8;
  g8.launch_mode = LaunchMode::single_process_multi_gpu;
  g8.amd_host = true;
  // 8 GPUs x 5.25 us (AMD host) = 42 us: above the 15 us of Ring LL at 1 KiB.
  const auto small = estimate_collective(a100(), CollectiveOp::all_reduce, 1 * kKiB, place(1, 8), g8);
  CHECK(small.host_floor_seconds / kUs == doctest::Approx(42.0));
  CHECK(small.host_bound);
  CHECK(small.seconds / kUs == doctest::Approx(42.0));
  g8.amd_host = false;  // Intel host: NCCL's 1:2 Intel:AMD host-overhead ratio -> 21 us
  CHECK(estimate_collective(a100(), CollectiveOp::all_reduce, 1 * kKiB, place(1, 8), g8).seconds / kUs ==
        doctest::Approx(21.0));
  // Large messages are GPU-bound: the floor does not change them.
  const auto big_g8 = estimate_collective(a100(), CollectiveOp::all_reduce, 1 * kGiB, place(1, 8), g8);
  const auto big_mp = estimate_collective(a100(), CollectiveOp::all_reduce, 1 * kGiB, place(1, 8));
  CHECK_FALSE(big_g8.host_bound);
  CHECK(big_g8.seconds == doctest::Approx(big_mp.seconds));
  // Default: one process per GPU (training), no floor.
  const auto mp = estimate_collective(a100(), CollectiveOp::all_reduce, 1 * kKiB, place(1, 8));
  CHECK(mp.host_floor_seconds == 0.0);
  CHECK(mp.seconds < 20e-6);
  // The floor counts the GPUs one process drives: its node's ranks.
  const auto two = estimate_collective(a100(), CollectiveOp::all_reduce, 32, place(1, 2), g8);
  CHECK(two.host_floor_seconds / kUs == doctest::Approx(2 * 2.625));
}

// A torch.distributed benchmark times each call with CUDA events on an idle stream: the kernel
// starts once c10d has dispatched the call, two host ops of the profile's 8 us on x86 (docs/host.md),
// so 16 us add to the GPU time at every size; the choice of algorithm does not change.
TEST_CASE("launch mode torch: c10d's dispatch of each timed call adds to the GPU time") {
  CollectiveOptions torch_call;
  torch_call.launch_mode = LaunchMode::torch_timed_call;
  for (const double bytes : {32.0 * kKiB, 2.0 * kMiB, 1.0 * kGiB}) {
    CAPTURE(bytes);
    const auto mp = estimate_collective(h200(), CollectiveOp::all_reduce, bytes, place(1, 8));
    const auto timed = estimate_collective(h200(), CollectiveOp::all_reduce, bytes, place(1, 8), torch_call);
    CHECK(h200().host.op_seconds / kUs == doctest::Approx(8.0));
    CHECK(timed.caller_seconds / kUs == doctest::Approx(16.0));
    CHECK((timed.seconds - mp.seconds) / kUs == doctest::Approx(16.0));
    CHECK(timed.algorithm == mp.algorithm);
    CHECK(timed.protocol == mp.protocol);
    CHECK_FALSE(timed.host_bound);
  }
}

TEST_CASE("selection: NCCL's choices where a measurement records them") {
  // MLE network/README.md L972 (stas00/ml-engineering @ 744d01e1): 8xH200 picks RING/LL up to 1 MiB, NVLS from
  // 2 MiB; H200 and H100 share NVLink4/NVLS, so the H100 profile must switch the same way.
  for (double s : {32 * kKiB, 256 * kKiB}) {
    const auto e = estimate_collective(h100(), CollectiveOp::all_reduce, s, place(1, 8));
    CHECK(e.algorithm == "ring");
    CHECK(e.protocol == "LL");
  }
  for (double s : {4 * kMiB, 64 * kMiB, 1 * kGiB}) {
    const auto e = estimate_collective(h100(), CollectiveOp::all_reduce, s, place(1, 8));
    CHECK(e.algorithm == "nvls");
  }
  // NVLS disabled: Ring Simple for large messages (same source).
  CollectiveOptions no_nvls;
  no_nvls.algorithm_mask &= ~algorithm_bit(NcclAlgo::nvls);
  const auto r = estimate_collective(h100(), CollectiveOp::all_reduce, 1 * kGiB, place(1, 8), no_nvls);
  CHECK(r.algorithm == "ring");
  CHECK(r.protocol == "Simple");
  // At scale small messages go to a logarithmic algorithm (NCCL's ring latency grows linearly in
  // ranks, tree and NVLSTree latency with log2 of nodes; tuning.cc).
  const auto small = estimate_collective(h100(), CollectiveOp::all_reduce, 1024, place(64, 8));
  CHECK((small.algorithm == "tree" || small.algorithm == "nvlstree"));
  // A100 has no NVLS; CollNet is off unless enabled.
  const auto a = estimate_collective(a100(), CollectiveOp::all_reduce, 1 * kGiB, place(1, 8));
  CHECK(a.algorithm == "ring");
  const auto multi = estimate_collective(a100(), CollectiveOp::all_reduce, 1 * kGiB, place(4, 8));
  CHECK(multi.algorithm.rfind("collnet", 0) != 0);
  CollectiveOptions sharp;
  sharp.collnet = true;
  const auto with_sharp = estimate_collective(a100(), CollectiveOp::all_reduce, 1 * kGiB, place(4, 8), sharp);
  CHECK(with_sharp.algorithm.rfind("collnet", 0) == 0);
  CHECK(with_sharp.seconds < multi.seconds);
  // Degenerate inputs.
  CHECK(estimate_collective(h100(), CollectiveOp::all_reduce, 1 * kMiB, place(1, 1)).seconds == 0.0);
  CHECK(estimate_collective(h100(), CollectiveOp::all_reduce, 0, place(1, 8)).seconds == 0.0);
  CollectiveOptions none;
  none.protocol_mask = 0;
  CHECK(std::isinf(estimate_collective(h100(), CollectiveOp::all_reduce, 1 * kMiB, place(1, 8), none).seconds));
}

// ---------------------------------------------------------------------------------------------
// Accuracy against measured nccl-tests figures.
//
// Every published A100 and H100 figure gathered for meshplan is listed (72; the count is checked).
// The pipeline ramp's two constants were fitted on the Azure 8xA100 series only; every other series
// is a check of them: the MLE 8xA100 run, the Azure 8xH100 NVLS run (another NVLink generation and
// another algorithm), and two series on the h200-141gb profile that are not part of the 72 (Azure
// 8xH200 NVLS with NCCL 2.20.5 and MLE's multi-process torch run).

namespace {

struct Measured {
  const char* source;     // where the figure comes from
  const ClusterSpec* cluster;
  CollectiveOp op;
  int nodes;
  int per_node;
  double bytes;
  double busbw_gbps;      // measured
  unsigned algorithm_mask;  // what the run allowed (NCCL_ALGO); ~0 = NCCL's default choice
  // nullptr: checked against the tolerance. Otherwise why the figure is not a measurement of what
  // the model predicts (kept in the table so the reason is printed with the number).
  const char* excluded;
  // How the run launched its ranks, and its host CPU vendor (set per source below).
  LaunchMode launch = LaunchMode::one_process_per_gpu;
  bool amd_host = false;
};

constexpr unsigned kDefault = ~0u;

double tolerance(double bytes) { return bytes >= kMiB ? 0.10 : 0.25; }

constexpr const char* kExclNvlsPlateau =
    "NCCL 2.18.5's forced-NVLS path at 64 KiB-1 MiB: a flat 42-43 us from 64 KiB to 2 MiB in a run whose "
    "1-16 KiB take 25.6-30.2 us, i.e. a step of +12 us between 16 and 64 KiB with no growth over the next "
    "32x in bytes. The same sizes on the same NVLink4/NVSwitch fabric under NCCL 2.20.5 (Azure H200, "
    "checked below) take 30.8-34.6 us with no step, as NCCL's flat 25 us NVLS latency has it; meeting "
    "both runs would need a fixed NVLS cost of ~34 us, 8 us above this run's own 1 KiB time. These are "
    "sizes NCCL's selection never runs on NVLS (Ring LL up to 1 MiB, MLE network/README.md): a property of "
    "that release's forced small-message path, not of the fabric";
constexpr const char* kExclMle1M =
    "MLE A100 1 MiB takes 101.9 us, the same as the same run's 4 MiB (101.5 us) and twice Azure's 1 MiB "
    "(50.7 us) on the same 8xA100 NVSwitch system type: a message 4x larger in the same time is not the "
    "steady-state time of one collective algorithm at this size";

std::vector<Measured> measured_points() {
  const ClusterSpec* A = &a100();
  const ClusterSpec* H = &h100();
  const ClusterSpec* H2 = &h200();
  static ClusterSpec a100_4nic = [] {
    ClusterSpec c = a100();
    c.node.nics_per_node = 4;  // the measured systems have 4 HDR NICs per node
    return c;
  }();
  const ClusterSpec* A4 = &a100_4nic;
  const unsigned nvls = algorithm_bit(NcclAlgo::nvls);
  const unsigned ring = algorithm_bit(NcclAlgo::ring);
  const auto AR = CollectiveOp::all_reduce;
  const char* azure_a = "Azure ND_A100_v4_results.md, 8xA100 80GB, NCCL 2.18.5, all_reduce_perf -g 8";
  const char* azure_h = "Azure ND_H100_v5_results.md, 8xH100, NCCL_ALGO=NVLS, NCCL 2.18.5, -g 8";
  const char* azure_h200 = "Azure ND_H200_v5_results.md, 8xH200, NCCL_ALGO=NVLS, NCCL 2.20.5, -g 8";
  const char* mle_h200 = "MLE network/README.md, 8xH200 torch all_reduce_bench.py, 8 processes, NCCL 2.27.7 default";
  const char* mle_a = "MLE network/README.md, 8xA100 all_reduce_perf -g 8";
  const char* nccl583 = "NVIDIA/nccl#583: 2xA100 (-g 2) all_reduce 32 B in 10.1 us";
  std::vector<Measured> v = {
      // A100, one node, Azure (default algorithm). The pipeline ramp was fitted on this series.
      {azure_a, A, AR, 1, 8, 1 * kKiB, 0.04, kDefault, nullptr},
      {azure_a, A, AR, 1, 8, 4 * kKiB, 0.17, kDefault, nullptr},
      {azure_a, A, AR, 1, 8, 16 * kKiB, 0.67, kDefault, nullptr},
      {azure_a, A, AR, 1, 8, 32 * kKiB, 1.37, kDefault, nullptr},
      {azure_a, A, AR, 1, 8, 64 * kKiB, 2.70, kDefault, nullptr},
      {azure_a, A, AR, 1, 8, 128 * kKiB, 5.15, kDefault, nullptr},
      {azure_a, A, AR, 1, 8, 256 * kKiB, 10.11, kDefault, nullptr},
      {azure_a, A, AR, 1, 8, 512 * kKiB, 19.24, kDefault, nullptr},
      {azure_a, A, AR, 1, 8, 1 * kMiB, 36.22, kDefault, nullptr},
      {azure_a, A, AR, 1, 8, 2 * kMiB, 53.54, kDefault, nullptr},
      {azure_a, A, AR, 1, 8, 4 * kMiB, 71.43, kDefault, nullptr},
      {azure_a, A, AR, 1, 8, 8 * kMiB, 89.99, kDefault, nullptr},
      {azure_a, A, AR, 1, 8, 16 * kMiB, 109.22, kDefault, nullptr},
      {azure_a, A, AR, 1, 8, 32 * kMiB, 132.77, kDefault, nullptr},
      {azure_a, A, AR, 1, 8, 64 * kMiB, 166.63, kDefault, nullptr},
      {azure_a, A, AR, 1, 8, 128 * kMiB, 174.18, kDefault, nullptr},
      {azure_a, A, AR, 1, 8, 256 * kMiB, 213.87, kDefault, nullptr},
      {azure_a, A, AR, 1, 8, 512 * kMiB, 221.58, kDefault, nullptr},
      {azure_a, A, AR, 1, 8, 1 * kGiB, 228.10, kDefault, nullptr},
      {azure_a, A, AR, 1, 8, 2 * kGiB, 230.22, kDefault, nullptr},
      {azure_a, A, AR, 1, 8, 4 * kGiB, 230.48, kDefault, nullptr},
      {azure_a, A, AR, 1, 8, 8 * kGiB, 231.58, kDefault, nullptr},
      // A100, one node, MLE.
      {mle_a, A, AR, 1, 8, 32 * kKiB, 1.31, kDefault, nullptr},
      {mle_a, A, AR, 1, 8, 128 * kKiB, 4.43, kDefault, nullptr},
      {mle_a, A, AR, 1, 8, 1 * kMiB, 18.00, kDefault, kExclMle1M},
      {mle_a, A, AR, 1, 8, 4 * kMiB, 72.33, kDefault, nullptr},
      {mle_a, A, AR, 1, 8, 16 * kMiB, 106.16, kDefault, nullptr},
      {mle_a, A, AR, 1, 8, 64 * kMiB, 171.54, kDefault, nullptr},
      {mle_a, A, AR, 1, 8, 256 * kMiB, 194.07, kDefault, nullptr},
      {mle_a, A, AR, 1, 8, 1 * kGiB, 229.04, kDefault, nullptr},
      {mle_a, A, AR, 1, 8, 4 * kGiB, 233.88, kDefault, nullptr},
      {mle_a, A, AR, 1, 8, 16 * kGiB, 234.89, kDefault, nullptr},
      {"NVIDIA/nccl-tests#175: 8xA100 single node AllReduce peak 232.54", A, AR, 1, 8, 8 * kGiB,
       232.54, kDefault, nullptr},
      {nccl583, A, AR, 1, 2, 32,
       32.0 / 10.1e-6 / kGB, kDefault, nullptr},  // host-bound: 2 GPUs x 5.25 us launch > 7.8 us GPU time
      // A100, several nodes.
      {"NVIDIA/nccl#812 (AddyLaddy): DGX A100 8xHDR multi-node AllReduce busbw 192 (node count "
       "not stated, evaluated at 4 nodes)", A, AR, 4, 8, 8 * kGiB, 192.0, kDefault, nullptr},
      {"NVIDIA/nccl-tests#175 / nccl#1048: 2xA100 nodes, 4xHDR each, 86 GB/s", A4, AR, 2, 8,
       8 * kGiB, 86.0, kDefault,
       "reported as a shortfall: the thread gives 86 GB/s against ~96-100 theoretical, i.e. the "
       "thread is about a system not reaching HDR rate (0.86 of 4 x 25 GB/s). The same configuration reaches "
       "91 (nccl-tests#100) and 3 such nodes 96 (nccl-tests#119), both checked; meeting 86 too would need a "
       "NIC efficiency of 0.946 or less where every other HDR/NDR figure (nccl#812, nccl-tests#290, #267) gives 0.96"},
      {"NVIDIA/nccl-tests#100: 2xHGX A100, 4xCX-6 200G, 91 GB/s", A4, AR, 2, 8, 8 * kGiB, 91.0,
       kDefault, nullptr},
      {"NVIDIA/nccl-tests#119: 3xA100 40GB nodes, 4xHDR each, peak ~96 GB/s", A4, AR, 3, 8,
       8 * kGiB, 96.0, kDefault, nullptr},
      {"NVIDIA/nccl-tests#119: 3xA100 40GB nodes, 4xHDR each, average 84.8 GB/s", A4, AR, 3, 8,
       8 * kGiB, 84.8, kDefault, "an average over sizes and runs, not one size; the peak of the same run is checked"},
      // H100, one node, Azure NVLS.
      {azure_h, H, AR, 1, 8, 1 * kKiB, 0.07, nvls, nullptr},
      {azure_h, H, AR, 1, 8, 4 * kKiB, 0.27, nvls, nullptr},
      {azure_h, H, AR, 1, 8, 16 * kKiB, 0.95, nvls, nullptr},
      {azure_h, H, AR, 1, 8, 64 * kKiB, 2.72, nvls, kExclNvlsPlateau},
      {azure_h, H, AR, 1, 8, 128 * kKiB, 5.40, nvls, kExclNvlsPlateau},
      {azure_h, H, AR, 1, 8, 256 * kKiB, 10.86, nvls, kExclNvlsPlateau},
      {azure_h, H, AR, 1, 8, 512 * kKiB, 21.35, nvls, kExclNvlsPlateau},
      {azure_h, H, AR, 1, 8, 1 * kMiB, 43.70, nvls, kExclNvlsPlateau},
      {azure_h, H, AR, 1, 8, 2 * kMiB, 81.93, nvls, nullptr},
      {azure_h, H, AR, 1, 8, 4 * kMiB, 128.73, nvls, nullptr},
      {azure_h, H, AR, 1, 8, 8 * kMiB, 172.13, nvls, nullptr},
      {azure_h, H, AR, 1, 8, 16 * kMiB, 234.45, nvls, nullptr},
      {azure_h, H, AR, 1, 8, 32 * kMiB, 295.53, nvls, nullptr},
      {azure_h, H, AR, 1, 8, 64 * kMiB, 361.78, nvls, nullptr},
      {azure_h, H, AR, 1, 8, 128 * kMiB, 400.61, nvls, nullptr},
      {azure_h, H, AR, 1, 8, 256 * kMiB, 423.38, nvls, nullptr},
      {azure_h, H, AR, 1, 8, 512 * kMiB, 438.46, nvls, nullptr},
      {azure_h, H, AR, 1, 8, 1 * kGiB, 466.35, nvls, nullptr},
      {azure_h, H, AR, 1, 8, 2 * kGiB, 472.36, nvls, nullptr},
      {azure_h, H, AR, 1, 8, 4 * kGiB, 475.54, nvls, nullptr},
      {azure_h, H, AR, 1, 8, 8 * kGiB, 478.87, nvls, nullptr},
      // H100, one node, peaks.
      {"NVIDIA/nccl#1455: 8xH100 AllReduce NCCL_ALGO=RING plateau 365-370", H, AR, 1, 8, 8 * kGiB,
       367.5, ring, nullptr},
      {"NVIDIA/nccl#2140: 8xH100 NCCL 2.30.4 default AllReduce (NVLS) busbw 480", H, AR, 1, 8,
       8 * kGiB, 480.0, kDefault, nullptr},
      {"NVIDIA/nccl-tests#212: 4xH100 NVLS busbw 370", H, AR, 1, 4, 8 * kGiB, 370.0, nvls, nullptr},
      {"NVIDIA/nccl-tests#212: 5xH100 NVLS busbw 420", H, AR, 1, 5, 8 * kGiB, 420.0, nvls, nullptr},
      {"NVIDIA/nccl-tests#212: 6xH100 NVLS busbw 440", H, AR, 1, 6, 8 * kGiB, 440.0, nvls, nullptr},
      {"NVIDIA/nccl-tests#212: 7xH100 NVLS busbw 460", H, AR, 1, 7, 8 * kGiB, 460.0, nvls, nullptr},
      {"NVIDIA/nccl-tests#212: 8xH100 NVLS busbw 480", H, AR, 1, 8, 8 * kGiB, 480.0, nvls, nullptr},
      {"NVIDIA/nccl-tests#212: H100 AllGather Ring busbw ~370", H, CollectiveOp::all_gather, 1, 8,
       8 * kGiB, 370.0, kDefault, nullptr},
      {"NVIDIA/nccl-tests#212: H100 ReduceScatter Ring busbw ~370", H,
       CollectiveOp::reduce_scatter, 1, 8, 8 * kGiB, 370.0, kDefault, nullptr},
      // H100, several nodes.
      {"NVIDIA/nccl#1649: GTC 2024, multi-node AllReduce busbw ~380 without SHARP, NVLSTree ~370-380 ("
       "node count not stated, evaluated at 4 nodes)", H, AR, 4, 8, 8 * kGiB, 375.0, kDefault, nullptr},
      {"NVIDIA/nccl#1221: 4 nodes x 8 H100, 8x400G RoCE, AllReduce ~320", H, AR, 4, 8, 8 * kGiB,
       320.0, kDefault,
       "RoCE fabric; the shipped profile is NDR InfiniBand (nic_efficiency 0.96 from IB figures) and no "
       "published RoCE efficiency is at hand to build a profile from"},
      {"NVIDIA/nccl#1221: 2 nodes x 8 H100, 8x400G RoCE, NVLS(Tree) ~430", H, AR, 2, 8, 8 * kGiB,
       430.0, kDefault,
       "RoCE fabric (see above); with IB figures NVLSTree at 2 nodes is NVLink-bound at 524 GB/s"},
  };
  // H200 (not among the 72): the same NVLink4/NVSwitch fabric with NVLS, other NCCL releases.
  const double h200_azure[][2] = {
      {1 * kKiB, 0.06},     {4 * kKiB, 0.23},     {16 * kKiB, 0.93},    {32 * kKiB, 1.84},    {64 * kKiB, 3.72},
      {128 * kKiB, 7.39},   {256 * kKiB, 14.75},  {512 * kKiB, 29.38},  {1 * kMiB, 52.96},    {2 * kMiB, 88.78},
      {4 * kMiB, 138.44},   {8 * kMiB, 181.94},   {16 * kMiB, 240.41},  {32 * kMiB, 300.91},  {64 * kMiB, 368.11},
      {128 * kMiB, 412.45}, {256 * kMiB, 432.24}, {512 * kMiB, 442.72}, {1 * kGiB, 467.58},   {2 * kGiB, 472.57},
      {4 * kGiB, 477.41},   {8 * kGiB, 479.98}};
  for (const auto& [bytes, gbps] : h200_azure) v.push_back({azure_h200, H2, AR, 1, 8, bytes, gbps, nvls, nullptr});
  const double h200_mle[][2] = {
      {32 * kKiB, 1.44},    {64 * kKiB, 2.93},    {128 * kKiB, 5.73},   {256 * kKiB, 11.74},  {512 * kKiB, 23.94},
      {1 * kMiB, 39.93},    {2 * kMiB, 64.53},    {4 * kMiB, 107.16},   {8 * kMiB, 155.53},   {16 * kMiB, 219.89},
      {32 * kMiB, 275.84},  {64 * kMiB, 346.51},  {128 * kMiB, 401.93}, {256 * kMiB, 436.15}, {512 * kMiB, 450.29},
      {1 * kGiB, 463.58},   {2 * kGiB, 469.17},   {4 * kGiB, 473.10},   {8 * kGiB, 477.45},   {16 * kGiB, 482.26}};
  // A torch.distributed benchmark (all_reduce_bench.py): each call is timed by CUDA events around
  // it, so c10d's dispatch of the call (two host ops, 16 us on this x86 host) is inside the timed
  // span. MLE minus Azure's nccl-tests on the same sizes is +15.6, +15.5, +13.7 us at 2, 4, 8 MiB
  // (both NVLS); with the dispatch every point from 32 KiB is checked.
  for (const auto& [bytes, gbps] : h200_mle) v.push_back({mle_h200, H2, AR, 1, 8, bytes, gbps, kDefault, nullptr});
  // Launch modes of the sources. Single process (-g N, one host thread driving the node's GPUs):
  // Azure's NCCLBandwidth.py (`all_reduce_perf ... -g 8`), MLE's A100 run (`-g 8`), nccl#583 (`-g 2`).
  // Host CPUs: Azure ND A100 v4 AMD EPYC 7V12, ND H100 v5 Xeon 8480C (Azure results); the MLE and
  // nccl#583 A100 systems are DGX/HGX A100 class, whose hosts are AMD EPYC. No source names the CPU
  // for ND H200 v5; its own 1 KiB time (29.9 us with 8 GPUs) caps the per-GPU host cost at 3.7 us,
  // which rules out the AMD figure (5.25 us), so the Intel one applies. Everything else: one process
  // per GPU (the MLE H200 run is 8 torch processes) or a plateau where the launch mode does not matter.
  for (Measured& m : v) {
    if (m.source == mle_h200) m.launch = LaunchMode::torch_timed_call;
    if (m.source == azure_a || m.source == mle_a || m.source == nccl583) {
      m.launch = LaunchMode::single_process_multi_gpu;
      m.amd_host = true;
    } else if (m.source == azure_h || m.source == azure_h200) {
      m.launch = LaunchMode::single_process_multi_gpu;
    }
  }
  return v;
}

}  // namespace

TEST_CASE("accuracy: predicted busbw vs measured nccl-tests") {
  int checked = 0, excluded = 0, required = 0, h200_checked = 0;
  std::string table = "\n  measured vs predicted busbw (GB/s); role: fit = the ramp was fitted here, chk = checked, "
                      "x = excluded (reason after the source)\n";
  for (const Measured& m : measured_points()) {
    CollectiveOptions o;
    o.algorithm_mask = m.algorithm_mask;
    o.launch_mode = m.launch;
    o.amd_host = m.amd_host;
    const auto e = estimate_collective(*m.cluster, m.op, m.bytes, place(m.nodes, m.per_node), o);
    const double predicted = busbw(e) / kGB;
    const double err = (predicted - m.busbw_gbps) / m.busbw_gbps;
    const bool ok = std::abs(err) <= tolerance(m.bytes);
    const bool fit = std::string_view(m.source).starts_with("Azure ND_A100");
    char line[1024];
    std::snprintf(line, sizeof line,
                  "  %-13s %2dx%d %-14s %12.0f B  measured %8.3f  predicted %8.3f  %+6.1f%%  %-8s %-6s ch %2d "
                  "ramp %7.1f us %-2s %-4s %-3s %s | %s%s%s\n",
                  m.cluster->name.c_str(), m.nodes, m.per_node, std::string(to_string(m.op)).c_str(), m.bytes,
                  m.busbw_gbps, predicted, 100 * err, e.algorithm.c_str(), e.protocol.c_str(), e.channels,
                  e.ramp_seconds / kUs,
                  m.launch == LaunchMode::single_process_multi_gpu ? "-g"
                  : m.launch == LaunchMode::torch_timed_call       ? "torch"
                                                                   : "mp",
                  e.host_bound ? "host" : "", m.excluded ? "x" : fit ? "fit" : "chk",
                  ok ? "ok" : (m.excluded ? "out" : "FAIL"), m.source, m.excluded ? " | excluded: " : "",
                  m.excluded ? m.excluded : "");
    table += line;
    if (m.cluster != &h200()) ++required;
    const std::string source = m.source;
    CAPTURE(source);
    CAPTURE(m.bytes);
    CAPTURE(predicted);
    if (m.excluded == nullptr) {
      CHECK_MESSAGE(ok, "predicted ", predicted, " GB/s vs measured ", m.busbw_gbps, " (", 100 * err, " %)");
      (m.cluster == &h200() ? h200_checked : checked) += 1;
    } else {
      if (m.cluster != &h200()) ++excluded;
      // An excluded figure that starts meeting the tolerance deserves a second look at its reason.
      WARN_MESSAGE(!ok, "excluded figure now within tolerance, re-examine the exclusion: ", m.source);
    }
  }
  MESSAGE(table);
  // Every gathered A100/H100 figure is in the table: none can be dropped silently.
  CHECK(required == 72);
  CHECK(checked + excluded == required);
  MESSAGE(checked, " of ", required, " A100/H100 points checked within tolerance, ", excluded,
          " excluded with the reason; ", h200_checked, " H200 cross-check points checked");
}

// nccl-tests bus bandwidth on B200, GB200 and GB300 from 1 MiB up, one row per published point in
// tests/cost/measured_collectives.csv with its source: `check` rows within 10 %, `excluded` rows with
// the reason the model cannot match them.
TEST_CASE("measured collectives: Blackwell nccl-tests busbw from 1 MiB up") {
  const test::CsvTable t = test::read_csv(test::data_root() / "tests" / "cost" / "measured_collectives.csv");
  REQUIRE(t.rows.size() > 50);
  std::map<std::string, ClusterSpec> clusters;
  int checked = 0, excluded = 0;
  std::string table = "\n  cluster  ranks          bytes  measured predicted    err  algo     proto  role\n";
  for (const auto& r : t.rows) {
    const std::string name = t.at(r, "cluster");
    if (clusters.count(name) == 0)
      clusters.emplace(name, load_cluster((test::data_root() / "hardware_profiles" / (name + ".toml")).string()));
    const ClusterSpec& c = clusters.at(name);
    REQUIRE(t.at(r, "op") == "all_reduce");
    const int nodes = std::stoi(t.at(r, "nodes"));
    const int per_node = std::stoi(t.at(r, "gpus_per_node"));
    const double bytes = std::stod(t.at(r, "bytes"));
    REQUIRE(bytes >= kMiB);
    CollectiveOptions o;
    if (t.at(r, "algo") == "ring") o.algorithm_mask = algorithm_bit(NcclAlgo::ring);
    else REQUIRE(t.at(r, "algo") == "default");
    if (t.at(r, "launch") == "g") o.launch_mode = LaunchMode::single_process_multi_gpu;
    else if (t.at(r, "launch") == "torch") o.launch_mode = LaunchMode::torch_timed_call;
    else REQUIRE(t.at(r, "launch") == "mp");
    const auto e = estimate_collective(c, CollectiveOp::all_reduce, bytes, place(nodes, per_node), o);
    const double predicted = busbw(e) / kGB;
    const double measured = std::stod(t.at(r, "busbw_gbps"));
    const double err = (predicted - measured) / measured;
    const bool ok = std::abs(err) <= 0.10;
    const bool is_excluded = t.at(r, "role") == "excluded";
    REQUIRE((is_excluded || t.at(r, "role") == "check"));
    char line[256];
    std::snprintf(line, sizeof line, "  %-7s %4dx%-2d %14.0f %8.1f %8.1f %+6.1f%%  %-8s %-6s %s%s\n", name.c_str(), nodes,
                  per_node, bytes, measured, predicted, 100 * err, e.algorithm.c_str(), e.protocol.c_str(),
                  is_excluded ? "excluded" : "check", ok ? "" : (is_excluded ? " (out)" : " FAIL"));
    table += line;
    const std::string source = t.at(r, "source");
    CAPTURE(name);
    CAPTURE(bytes);
    CAPTURE(source);
    if (is_excluded) {
      ++excluded;
      CHECK_FALSE(t.at(r, "reason").empty());
      WARN_MESSAGE(!ok, "excluded point now within 10 %, re-examine its reason: ", source);
    } else {
      ++checked;
      CHECK_MESSAGE(ok, "predicted ", predicted, " GB/s vs measured ", measured, " (", 100 * err, " %)");
    }
  }
  MESSAGE(table);
  MESSAGE(checked, " Blackwell points checked within 10 %, ", excluded, " excluded with a reason");
}

namespace {

// One checked nccl-tests point from 1 MiB up: its rank count and the model's signed busbw error.
struct RankError {
  int ranks = 0;
  double error = 0;  // (predicted - measured) / measured
};

// Every point the two accuracy tests above check from 1 MiB up (excluded ones left out: their
// reasons are stated there), from both tables.
std::vector<RankError> checked_errors_from_1mib() {
  std::vector<RankError> out;
  for (const Measured& m : measured_points()) {
    if (m.excluded != nullptr || m.bytes < kMiB) continue;
    CollectiveOptions o;
    o.algorithm_mask = m.algorithm_mask;
    o.launch_mode = m.launch;
    o.amd_host = m.amd_host;
    const auto e = estimate_collective(*m.cluster, m.op, m.bytes, place(m.nodes, m.per_node), o);
    out.push_back({m.nodes * m.per_node, (busbw(e) / kGB - m.busbw_gbps) / m.busbw_gbps});
  }
  const test::CsvTable t = test::read_csv(test::data_root() / "tests" / "cost" / "measured_collectives.csv");
  std::map<std::string, ClusterSpec> clusters;
  for (const auto& r : t.rows) {
    if (t.at(r, "role") != "check") continue;
    const std::string name = t.at(r, "cluster");
    if (clusters.count(name) == 0)
      clusters.emplace(name, load_cluster((test::data_root() / "hardware_profiles" / (name + ".toml")).string()));
    const int nodes = std::stoi(t.at(r, "nodes"));
    const int per_node = std::stoi(t.at(r, "gpus_per_node"));
    CollectiveOptions o;
    if (t.at(r, "algo") == "ring") o.algorithm_mask = algorithm_bit(NcclAlgo::ring);
    if (t.at(r, "launch") == "g") o.launch_mode = LaunchMode::single_process_multi_gpu;
    if (t.at(r, "launch") == "torch") o.launch_mode = LaunchMode::torch_timed_call;
    const auto e = estimate_collective(clusters.at(name), CollectiveOp::all_reduce, std::stod(t.at(r, "bytes")),
                                       place(nodes, per_node), o);
    const double measured = std::stod(t.at(r, "busbw_gbps"));
    out.push_back({nodes * per_node, (busbw(e) / kGB - measured) / measured});
  }
  return out;
}

}  // namespace

// Issue 35: a model right on average can still be biased by rank count (a ramp fitted on 8-rank
// rings and scaled to other counts by a rule). Grouped by ranks, the mean signed error of every
// checked point from 1 MiB must stay within 5 %: a group too fast or too slow as a whole fails
// even when each point is within its 10 %. A mean is a bias only over several points: a group of
// one or two is those points' own error, which the per-point 10 % checks above already bound, so
// it is printed and warned about, not failed (today: 16 ranks, one point; 144 ranks, two points at
// +6.3 %, the 2-rack NVL72 NVLSTree whose cross-rack NIC use is open, docs/collectives.md).
TEST_CASE("accuracy by rank count: no group of checked points from 1 MiB biased by more than 5 %") {
  constexpr std::size_t kMinPointsForBias = 3;
  std::map<int, std::vector<double>> by_ranks;
  for (const RankError& r : checked_errors_from_1mib()) by_ranks[r.ranks].push_back(r.error);
  REQUIRE(by_ranks.size() >= 5);  // 4, 5, 6, 7, 8 ranks at least, and multi-node groups
  int bias_checked_groups = 0;
  std::string table = "\n  ranks  points  mean error  MAPE\n";
  for (const auto& group : by_ranks) {
    // Named copies: doctest's CAPTURE and messages are lambdas, which cannot capture a structured
    // binding under clang 14.
    const int ranks = group.first;
    const std::vector<double>& errors = group.second;
    double sum = 0, abs_sum = 0;
    for (double e : errors) {
      sum += e;
      abs_sum += std::abs(e);
    }
    const double mean = sum / static_cast<double>(errors.size());
    char line[128];
    std::snprintf(line, sizeof line, "  %5d  %6zu  %+9.1f%%  %4.1f%%\n", ranks, errors.size(), 100 * mean,
                  100 * abs_sum / static_cast<double>(errors.size()));
    table += line;
    CAPTURE(ranks);
    bias_checked_groups += errors.size() >= kMinPointsForBias ? 1 : 0;
    if (errors.size() >= kMinPointsForBias)
      CHECK_MESSAGE(std::abs(mean) <= 0.05, "mean signed error ", 100 * mean, " % over ", errors.size(), " points");
    else
      WARN_MESSAGE(std::abs(mean) <= 0.05, "mean signed error ", 100 * mean, " % over only ", errors.size(),
                   " point(s): no bias check, the per-point 10 % check applies");
  }
  MESSAGE(table);
  CHECK(bias_checked_groups >= 6);  // 4, 5, 6, 7, 8, 32 ranks, 72 ...: the check is not vacuous
}

// Issue 35: 2, 4 and 8 ranks on one NVSwitch, A100 and H100, worked out by hand from NCCL 2.30.7's
// tuning formulas (tuning.cc; constants in hardware_profiles/nccl/nccl-2.30.7.toml) on the profiles'
// link rates: what NCCL's tuner predicts and selects (CollectiveEstimate::nccl_seconds: latency +
// bytes / bandwidth at the full channel count, before the pipeline ramp) and the channels it runs.
//   A100: B_link = 300 x 0.775 = 232.5 GB/s; channels 2 x ceil(232.5 / 40) = 12 (sm80 ladder top).
//   H100: B_link = 450 x 0.822 = 369.9 GB/s; channels 2 x ceil(369.9 / 60) = 14; NVLS 16 channels,
//         rate 369.9 x 0.85 = 314.415 GB/s, latency 25 us, (n + 1)/n x S per rank.
//   Ring latency base + 2(n - 1) x hw: LL 6.6 + 0.6/step, LL128 14 + 1.9, Simple 8.4 + 3.4.
//   Ring rates: LL min(0.5 B_link, llMaxBw: A100 87.7, H100 141), LL128 min(0.92 B_link, nCh x cap),
//   Simple B_link; bus bytes 2(n - 1)/n x S.
// Rank count changes the pick for NCCL's reasons: at 2 ranks the ring's bus bytes are S while NVLS
// still moves 1.5 S per GPU, so H100 2x64 MiB stays on Ring/Simple (196.6 us vs NVLS 345.2) where 4
// and 8 ranks go NVLS; A100 2x1 MiB goes Ring/Simple by 0.05 us over Ring/LL (2 steps of 3.4 us cost
// less than LL's half rate), 4 and 8 ranks Ring/LL.
TEST_CASE("hand-derived: 2/4/8-rank all-reduce on A100 and H100 NVSwitch, NCCL's pick, channels and time") {
  struct Row {
    const ClusterSpec* c;
    int n;
    double bytes;
    const char* algo;
    const char* proto;
    int nccl_channels;  // before enqueue.cc's shrinking
    int channels;       // after (the thresholds of the 'small messages' case keep them all from 1 MiB)
    double nccl_us;
    const char* derivation;
  };
  const Row rows[] = {
      {&a100(), 2, kMiB, "ring", "Simple", 12, 12, 19.710004, "8.4 + 2x3.4 + 1 MiB / 232.5 GB/s (LL: 7.8 + 1 MiB / 87.7 = 19.756)"},
      {&a100(), 2, 64 * kMiB, "ring", "Simple", 12, 12, 303.840275, "15.2 + 64 MiB / 232.5 GB/s"},
      {&a100(), 4, kMiB, "ring", "LL", 12, 12, 28.134595, "6.6 + 6x0.6 + 1.5 MiB / 87.7 GB/s"},
      {&a100(), 4, 64 * kMiB, "ring", "Simple", 12, 12, 461.760413, "8.4 + 6x3.4 + 96 MiB / 232.5 GB/s"},
      {&a100(), 8, kMiB, "ring", "LL", 12, 12, 35.923694, "6.6 + 14x0.6 + 1.75 MiB / 87.7 GB/s"},
      {&a100(), 8, 64 * kMiB, "ring", "Simple", 12, 12, 561.120482, "8.4 + 14x3.4 + 112 MiB / 232.5 GB/s"},
      {&h100(), 2, kMiB, "ring", "LL", 14, 14, 15.236709, "6.6 + 2x0.6 + 1 MiB / 141 GB/s"},
      {&h100(), 2, 64 * kMiB, "ring", "Simple", 14, 14, 196.624342, "15.2 + 64 MiB / 369.9 GB/s (NVLS 25 + 96 MiB / 314.415 = 345.2)"},
      {&h100(), 4, kMiB, "ring", "LL", 14, 14, 21.355064, "6.6 + 6x0.6 + 1.5 MiB / 141 GB/s"},
      {&h100(), 4, 64 * kMiB, "nvls", "Simple", 16, 16, 291.800503, "25 + 80 MiB / 314.415 GB/s (ring Simple 300.9)"},
      {&h100(), 8, kMiB, "ring", "LL", 14, 14, 28.014241, "6.6 + 14x0.6 + 1.75 MiB / 141 GB/s (NVLS 28.75)"},
      {&h100(), 8, 64 * kMiB, "nvls", "Simple", 16, 16, 265.120452, "25 + 72 MiB / 314.415 GB/s"},
  };
  for (const Row& r : rows) {
    const auto e = estimate_collective(*r.c, CollectiveOp::all_reduce, r.bytes, place(1, r.n));
    CAPTURE(r.c->name);
    CAPTURE(r.n);
    CAPTURE(r.bytes);
    CAPTURE(r.derivation);
    CHECK(e.algorithm == r.algo);
    CHECK(e.protocol == r.proto);
    CHECK(e.nccl_channels == r.nccl_channels);
    CHECK(e.channels == r.channels);
    CHECK(e.nccl_seconds / kUs == doctest::Approx(r.nccl_us).epsilon(1e-7));
    // The reported time is NCCL's plus the pipeline ramp (fitted, docs/collectives.md), never less.
    CHECK(e.seconds == doctest::Approx(e.nccl_seconds + e.ramp_seconds).epsilon(1e-9));
  }
}

// Issue 35: EFA's per-message cost. NCCL's latencies are InfiniBand's; the p6-b200 profile adds its
// transport's (fitted, docs/collectives.md "Transport latency") once per network hop of the
// algorithm. Tree all-reduce over 4 nodes crosses log2(4) = 2 levels up and down: 4 hops, so
// 4 x 63.922 us more than the same node on InfiniBand (the b200 profile), and nothing on one node.
TEST_CASE("transport latency: EFA's per-hop cost enters NCCL's latency once per network hop") {
  const ClusterSpec ib = load_cluster("b200");
  const ClusterSpec efa = load_cluster("p6-b200");
  REQUIRE(efa.base_profile == "b200");
  REQUIRE(ib.fabric.transport_latency_seconds == 0);
  CHECK(efa.fabric.transport == "efa");
  CHECK(efa.fabric.transport_latency_seconds / kUs == doctest::Approx(63.922));
  CollectiveOptions tree;
  tree.algorithm_mask = algorithm_bit(NcclAlgo::tree);
  tree.protocol_mask = protocol_bit(NcclProto::ll128);
  const double bytes = kMiB;
  const auto a = estimate_collective(ib, CollectiveOp::all_reduce, bytes, place(4, 8), tree);
  const auto b = estimate_collective(efa, CollectiveOp::all_reduce, bytes, place(4, 8), tree);
  CHECK((b.latency_seconds - a.latency_seconds) / kUs == doctest::Approx(4 * 63.922).epsilon(1e-9));
  // Ring over 4 nodes: 2 x (4 - 1) = 6 of its 62 steps leave a node. (LL: Simple's multi-node
  // all-reduce latency carries NCCL's 1.4 "plateau" factor, which then scales these hops too.)
  CollectiveOptions ring;
  ring.algorithm_mask = algorithm_bit(NcclAlgo::ring);
  ring.protocol_mask = protocol_bit(NcclProto::ll);
  const auto c = estimate_collective(ib, CollectiveOp::all_reduce, bytes, place(4, 8), ring);
  const auto d = estimate_collective(efa, CollectiveOp::all_reduce, bytes, place(4, 8), ring);
  CHECK((d.latency_seconds - c.latency_seconds) / kUs == doctest::Approx(6 * 63.922).epsilon(1e-9));
  // One node: no network hop, the two profiles agree to the bit.
  const auto e = estimate_collective(ib, CollectiveOp::all_reduce, 64 * kMiB, place(1, 8));
  const auto f = estimate_collective(efa, CollectiveOp::all_reduce, 64 * kMiB, place(1, 8));
  CHECK(e.seconds == f.seconds);
}

TEST_CASE("deduplicated MoE dispatch (DeepEP): a token's copies cross to each remote domain once") {
  // Qwen3-235B routing: top-8 of 128 experts, EP 32 over 4 H100 nodes (32 experts per node).
  // P(a node gets none of the 8) = prod_{i<8} (96 - i) / (128 - i) = 0.0927473.
  CHECK(expected_domains_hit(8, 128, 4) == doctest::Approx(4 * (1 - 0.0927473)).epsilon(1e-6));
  CHECK(expected_domains_hit(8, 128, 1) == 1.0);
  // One expert per domain and top-1: exactly one domain.
  CHECK(expected_domains_hit(1, 8, 8) == doctest::Approx(1.0));
  CHECK(expected_domains_hit(8, 8, 4) == 4.0);  // top-k of all experts reaches every domain
  const auto c = load_cluster("h100-sxm-80gb");
  const double bytes = 256.0 * 1024 * 1024;
  const GroupPlacement g{32, 8};
  CollectiveOptions dedup;
  dedup.dedup_top_k = 8;
  dedup.dedup_experts = 128;
  const auto plain = estimate_collective(c, CollectiveOp::all_to_all, bytes, g);
  const auto deep = estimate_collective(c, CollectiveOp::all_to_all, bytes, g, dedup);
  // Network-bound both ways: plain sends 24/32 of the copies over IB, DeepEP 3.629 x 3/4 / 8 of
  // them (0.3402 of the buffer): the transfer shrinks by 0.3402 / 0.75 = 0.4536.
  CHECK(deep.uses_network);
  CHECK((deep.seconds - deep.latency_seconds) / (plain.seconds - plain.latency_seconds) ==
        doctest::Approx(0.4536).epsilon(0.01));
  // Inside one node a token goes once to each rank holding any of its experts (16 per rank):
  // P(a rank gets none of the 8) = prod_{i<8} (112 - i) / (128 - i) = 0.332580, so 5.3394 ranks
  // of 8 instead of 8 copies: the NVLink transfer shrinks to 0.66742 of the plain all-to-all's.
  CHECK(expected_domains_hit(8, 128, 8) == doctest::Approx(8 * (1 - 0.332580)).epsilon(1e-6));
  const GroupPlacement node{8, 8};
  const auto in_node = estimate_collective(c, CollectiveOp::all_to_all, bytes, node, dedup);
  const auto in_node_plain = estimate_collective(c, CollectiveOp::all_to_all, bytes, node);
  CHECK_FALSE(in_node.uses_network);
  CHECK((in_node.seconds - in_node.latency_seconds) / (in_node_plain.seconds - in_node_plain.latency_seconds) ==
        doctest::Approx(0.66742).epsilon(0.01));
}

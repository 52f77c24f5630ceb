// NCCL-style collective cost (NVIDIA/nccl 2.30.7 src/graph/tuning.cc, enqueue.cc): for every
// enabled (algorithm, protocol) pair a latency assembled as NCCL 2.30 does (base + per-hop costs,
// constants from the versioned NCCL table) plus the bytes each rank must move over the bottleneck
// link of that algorithm, at the rate the cluster profile gives that link; the fastest pair wins.
// The winner is then timed with the channels it really runs on and the pipeline ramp (a measured
// efficiency of NCCL's chunked pipeline at mid-size messages, NCCL table [pipeline_ramp]). See
// docs/collectives.md.
//
// Hot path: no allocation (the result strings fit the small-string buffer), no table lookups by
// name; the NCCL table is loaded once.
#include "cost/collective_cost.hpp"
#include "cost/host_cost.hpp"

#include <algorithm>
#include <bit>
#include <cctype>
#include <cmath>
#include <limits>

namespace meshplan {
namespace {

// floor(log2(x)) for x >= 1, as NCCL's log2i.
int log2i(long long x) { return x <= 1 ? 0 : 63 - std::countl_zero(static_cast<unsigned long long>(x)); }

// Everything about where the group sits and which links it uses, derived once per call.
struct Geometry {
  int n = 1;             // ranks
  int ppn = 1;           // ranks per node
  int nodes = 1;         // physical nodes
  int islands = 1;       // NVLink domains the group spans (NCCL's "nodes" for the network)
  int local = 1;         // ranks per island
  bool nvlink_only = true;
  NcclLink intra_link = NcclLink::nvlink;
  int sm = 0;

  double intra_bytes_per_s = 0;     // achieved scale-up rate per GPU, per direction
  double island_net_bytes_per_s = 0;  // NIC rate out of one island available to this group
  double gpu_net_bytes_per_s = 0;   // one GPU's NIC rate (all-to-all, send/recv)
  // Per network hop, beyond NCCL's own (InfiniBand) latency: the spine hops when the group spans
  // several leaf groups, and what the transport adds (EFA's SRD and plugin proxy; 0 on InfiniBand).
  double extra_inter_seconds = 0;
  int cap_column = 0;               // per-channel cap column: 1 node, 2 nodes, >= 3 nodes
};

Geometry geometry(const ClusterSpec& c, GroupPlacement g) {
  Geometry geo;
  geo.n = std::max(1, g.n_ranks);
  geo.ppn = std::clamp(g.ranks_per_node, 1, geo.n);
  geo.nodes = (geo.n + geo.ppn - 1) / geo.ppn;
  const int gpn = std::max(1, c.node.gpus_per_node);
  // An NVLink domain larger than a node (GB200 NVL72) makes several nodes one scale-up island;
  // the group's nodes are assumed to fill domains in order.
  const int domain_nodes = std::max(1, c.node.nvlink_domain_gpus / gpn);
  geo.nvlink_only = geo.nodes <= domain_nodes;
  geo.islands = geo.nvlink_only ? 1 : (geo.nodes + domain_nodes - 1) / domain_nodes;
  const int island_nodes = std::min(geo.nodes, domain_nodes);
  geo.local = std::max(1, geo.n / geo.islands);
  geo.intra_link = c.node.scaleup_kind == "pcie" ? NcclLink::pci : NcclLink::nvlink;
  geo.sm = parse_sm(c.gpu.arch);
  geo.cap_column = std::min(geo.islands, 3) - 1;

  geo.intra_bytes_per_s = c.node.nvlink_bandwidth_bytes_per_s * c.node.nvlink_efficiency;

  // Traffic leaving a leaf group crosses the leaf uplinks and the spine: both ratios apply.
  const bool beyond_leaf = geo.nodes > std::max(1, c.fabric.nodes_per_leaf);
  const double fabric_share =
      beyond_leaf ? 1.0 / (std::max(1.0, c.fabric.leaf_oversubscription) *
                           std::max(1.0, c.fabric.spine_oversubscription))
                  : 1.0;
  geo.extra_inter_seconds =
      (beyond_leaf ? 2.0 * c.fabric.switch_hop_latency_seconds : 0.0) + c.fabric.transport_latency_seconds;

  const double nic_bytes_per_s = c.node.nic_bandwidth_bytes_per_s * c.node.nic_efficiency;
  const double node_nic_bytes_per_s = c.node.nics_per_node * nic_bytes_per_s;
  // The node's NICs are shared by every group placed like this one (rail-optimized DP/PP groups
  // run side by side, one per local GPU), so a group gets its ranks' share of them.
  const double share = std::min(1.0, static_cast<double>(geo.ppn) / gpn);
  geo.island_net_bytes_per_s = node_nic_bytes_per_s * share * island_nodes * fabric_share;
  // Point-to-point traffic of one GPU goes through one NIC (nccl-tests#267: all-to-all "cannot
  // aggregate the bandwidth of multiple NICs"), or its share when NICs are fewer than GPUs.
  geo.gpu_net_bytes_per_s = std::min(nic_bytes_per_s, node_nic_bytes_per_s / gpn) * fabric_share;
  return geo;
}

struct Candidate {
  double seconds = std::numeric_limits<double>::infinity();  // NCCL's predicted time: what it selects on
  double latency_seconds = 0;
  double transfer_seconds = 0;  // at the channel count the kernel really runs with (after shrinking), ramp included
  double ramp_seconds = 0;      // the pipeline-ramp part of transfer_seconds
  NcclAlgo algo = NcclAlgo::ring;
  NcclProto proto = NcclProto::simple;
  int channels = 0;
  int channels_unshrunk = 0;  // NCCL's channel count before enqueue.cc's small-message shrinking
  bool direct = false;  // point-to-point (all-to-all, send/recv): not one of NCCL's algorithms
};

// NCCL's small-message channel/thread shrinking (NCCL src/enqueue.cc, src/include/comm.h): after
// choosing the pair, `while (nBytes < nc * nt * threadThreshold) nc--`, then nt halves (while a
// multiple of 128). The collective then runs on nc channels of nt threads: busBw = nc x per-channel
// bw (tuning.cc), so the rate scales by (nc / nc0) x (nt / nt0).
struct Shrink {
  int channels = 1;
  double rate_factor = 1.0;
  int channels_unshrunk = 1;  // nc0
};

class Model {
public:
  Model(const NcclTable& t, const Geometry& geo, const CollectiveOptions& o, double bytes)
      : t_(t), geo_(geo), o_(o), bytes_(bytes), arch_(t.arch_table(geo.sm)),
        ramp_(pipeline_ramp(t, bytes)) {}

  // Pipeline ramp (docs/collectives.md): the fraction of the link-rate transfer time a message of
  // `bytes` loses to NCCL's pipeline not yet running full. The effective rate is
  // rate x (S + S_half) / (S + S_half / eta0): eta0 of the link for S << S_half, the link for
  // S >> S_half; the extra time t_link x (1/eta0 - 1) x S_half / (S + S_half) grows with the
  // message and saturates at (1/eta0 - 1) x (the transfer time of S_half).
  // `loop_scale`: the algorithm's ranks per kernel loop over the fitted series' (see loop_scale()).
  static double pipeline_ramp(const NcclTable& t, double bytes, double loop_scale = 1.0) {
    const double eta0 = t.pipeline_small_message_efficiency;
    const double half = t.pipeline_half_ramp_bytes * loop_scale;
    if (!(eta0 < 1.0) || !(half > 0)) return 0.0;
    return (1.0 / eta0 - 1.0) * half / (bytes + half);
  }

  bool allowed(NcclAlgo a, NcclProto p) const {
    if ((o_.algorithm_mask & algorithm_bit(a)) == 0 || (o_.protocol_mask & protocol_bit(p)) == 0) return false;
    // LL128 needs 128-byte store ordering: NVLink paths on SM70+ (NCCL tuning.cc enable rule).
    if (p == NcclProto::ll128 && (geo_.intra_link != NcclLink::nvlink || geo_.sm < 70)) return false;
    return true;
  }

  double intra_lat(NcclAlgo a, NcclProto p) const { return hw(geo_.intra_link, a, p); }
  double inter_lat(NcclAlgo a, NcclProto p) const {
    // With one rank per node NCCL charges every algorithm the Tree network latency.
    const NcclAlgo as = geo_.ppn == 1 ? NcclAlgo::tree : a;
    return hw(NcclLink::net, as, p) + geo_.extra_inter_seconds;
  }
  double base(NcclAlgo a, NcclProto p) const {
    return t_.base_latency_seconds[static_cast<std::size_t>(a)][static_cast<std::size_t>(p)];
  }
  double net_overhead(NcclProto p) const {
    const double o = o_.amd_host ? t_.net_overhead_amd_seconds : t_.net_overhead_intel_seconds;
    return p == NcclProto::simple ? o * t_.simple_net_overhead_factor : o;
  }

  // NCCL's LL cap: by GPU generation inside one node, by CPU vendor across nodes.
  double ll_max() const {
    if (geo_.islands == 1) return arch_.ll_max_bytes_per_s[0];
    const auto& row = o_.amd_host ? t_.ll_max_multi_node_amd_bytes_per_s : t_.ll_max_multi_node_intel_bytes_per_s;
    return row[geo_.islands == 2 ? 0 : 1];
  }

  // Channel count NCCL's search would settle on: enough channels at the top ladder speed to carry
  // `bus_bytes_per_s`, doubled as NCCL duplicates ring/tree channels (approximation of search.cc).
  int channels(double bus_bytes_per_s) const {
    const auto& ladder = geo_.islands <= 2 ? arch_.intra_ladder_bytes_per_s : arch_.inter_ladder_bytes_per_s;
    if (ladder.empty()) return t_.max_channels;
    const int n = 2 * static_cast<int>(std::ceil(bus_bytes_per_s / ladder.front()));
    return std::clamp(n, 2, t_.max_channels);
  }

  Shrink shrink(NcclAlgo a, NcclProto p, int nc0) const {
    const auto pi = static_cast<std::size_t>(p);
    const int nt0 = t_.max_threads[pi];
    // Ring LL's threshold is multiplied by the rank count (NCCL tuning.cc).
    const double thr = t_.thread_threshold_bytes[pi] * (a == NcclAlgo::ring && p == NcclProto::ll ? geo_.n : 1);
    // Closed form of the nc-- loop: the largest nc with nc * nt * thr <= nBytes (at least 1).
    int nc = nc0, nt = nt0;
    if (bytes_ < static_cast<double>(nc) * nt * thr)
      nc = std::max(1, static_cast<int>(std::floor(bytes_ / (static_cast<double>(nt) * thr))));
    while (nc == 1 && bytes_ < static_cast<double>(nt) * thr && nt % 128 == 0) nt /= 2;
    return Shrink{nc, (static_cast<double>(nc) / nc0) * (static_cast<double>(nt) / nt0), nc0};
  }

  int nvls_channels() const {
    if (geo_.sm >= 100) return geo_.islands > 1 ? t_.nvls_channels_sm100_multi_node : t_.nvls_channels_sm100_single_domain;
    return t_.nvls_channels_sm90;
  }
  double nvls_efficiency() const { return geo_.sm >= 100 ? t_.nvls_efficiency_sm100 : t_.nvls_efficiency_sm90; }
  // The switch folds (n - 1)/n x S operand bytes per GPU at this rate (0: no bound known).
  double nvls_switch_reduction() const {
    return geo_.sm >= 100 ? t_.nvls_switch_reduction_sm100_bytes_per_s : t_.nvls_switch_reduction_sm90_bytes_per_s;
  }
  // Time the switch needs to reduce `bytes` (nccl-tests size) over `ranks` GPUs; 0 without a bound.
  double nvls_reduction_seconds(double bytes, double ranks) const {
    const double r = nvls_switch_reduction();
    return r > 0 && ranks > 1 ? bytes * (ranks - 1) / ranks / r : 0.0;
  }

  // Rate of a ring edge: NVLink between local ranks, the island's NICs where the ring leaves it
  // (each ring crosses every island boundary once per direction).
  double ring_link_bytes_per_s() const {
    if (geo_.islands == 1) return geo_.intra_bytes_per_s;
    if (geo_.local == 1) return geo_.island_net_bytes_per_s;
    return std::min(geo_.intra_bytes_per_s, geo_.island_net_bytes_per_s);
  }

  // Ring / chain collectives: `bus_bytes` per rank over the ring rate, protocol-discounted.
  void ring(CollectiveOp op, double bus_bytes, Candidate& best) const {
    const double link = ring_link_bytes_per_s();
    const int nch = channels(link);
    const int n = geo_.n;
    const int I = geo_.islands;
    const bool chain = op == CollectiveOp::broadcast || op == CollectiveOp::reduce;
    const int nsteps = op == CollectiveOp::all_reduce ? 2 * (n - 1) : chain ? n : n - 1;
    const int ninter = I == 1 ? 0 : (op == CollectiveOp::all_reduce ? 2 * (I - 1) : I - 1);
    for (NcclProto p : {NcclProto::ll, NcclProto::ll128, NcclProto::simple}) {
      if (!allowed(NcclAlgo::ring, p)) continue;
      double bw = link;
      if (p == NcclProto::ll) bw = std::min(t_.ring_ll_efficiency * link, ll_max());
      if (p == NcclProto::ll128)
        bw = std::min(t_.ring_ll128_efficiency * link, nch * arch_.ring_ll128_per_channel_bytes_per_s[geo_.cap_column]);
      // Broadcast/Reduce Simple hops are charged NCCL's Tree latency (NCCL tuning.cc).
      const NcclAlgo lat_algo = chain && p == NcclProto::simple ? NcclAlgo::tree : NcclAlgo::ring;
      const double intra = I > 1 ? std::max(intra_lat(lat_algo, p), net_overhead(p)) : intra_lat(lat_algo, p);
      double lat = base(NcclAlgo::ring, p) + (nsteps - ninter) * intra + ninter * inter_lat(lat_algo, p);
      // NCCL's "plateau effect of ring" for large multi-node Simple all-reduce.
      if (op == CollectiveOp::all_reduce && p == NcclProto::simple && I > 1 &&
          bytes_ / (static_cast<double>(nch) * n) >= t_.ring_simple_plateau_min_bytes)
        lat *= geo_.sm >= 80 ? t_.ring_simple_plateau_factor_sm80 : t_.ring_simple_plateau_factor_older;
      // The ramp is charged on the Simple-rate transfer: it is the pipeline's, not the protocol's.
      consider(best, NcclAlgo::ring, p, lat, bus_bytes / bw, shrink(NcclAlgo::ring, p, nch), bus_bytes / link);
    }
  }

  // Double binary tree across islands, chain inside: per rank (and per island, at >= 3 islands)
  // 2x the buffer per direction, NCCL's 0.92 and size correction on top.
  void tree(Candidate& best) const {
    const double link = ring_link_bytes_per_s();
    const int nch = channels(link);
    const int col = geo_.cap_column;
    const double tree_bus = std::min(t_.tree_efficiency * link, nch * arch_.tree_per_channel_bytes_per_s[col]);
    const int idx = std::clamp(log2i(static_cast<long long>(bytes_ / 64.0)), 0, kTreeCorrectionEntries - 1);
    for (NcclProto p : {NcclProto::ll, NcclProto::ll128, NcclProto::simple}) {
      if (!allowed(NcclAlgo::tree, p)) continue;
      double bus = tree_bus;
      if (p == NcclProto::ll) bus = std::min(tree_bus / t_.tree_ll_divisor, ll_max());
      if (p == NcclProto::ll128)
        bus = std::min(tree_bus * (geo_.islands == 1 ? t_.tree_ll128_single_node_efficiency
                                                     : t_.tree_ll128_multi_node_efficiency),
                       nch * arch_.tree_ll128_per_channel_bytes_per_s[col]);
      bus *= t_.tree_correction[static_cast<std::size_t>(p)][static_cast<std::size_t>(idx)];
      const double algbw = 0.5 * bus;
      const double lat = base(NcclAlgo::tree, p) +
                         2.0 * ((geo_.local - 1) * intra_lat(NcclAlgo::tree, p) +
                                log2i(geo_.islands) * inter_lat(NcclAlgo::tree, p));
      consider(best, NcclAlgo::tree, p, lat, bytes_ / algbw, shrink(NcclAlgo::tree, p, nch), bytes_ / (0.5 * tree_bus));
    }
  }

  // NVLink SHARP inside one NVLink domain. All-reduce: each GPU sends its buffer to the switch
  // (multimem reduce) and pushes back 1/n of it, receiving 1/n reduced plus the whole result:
  // (1 + 1/n) x buffer per direction. All-gather / reduce-scatter move what a ring moves.
  // Reductions (AR, RS) also make the switch fold (n - 1)/n x S operand bytes per GPU: that work
  // grows with n while the link bytes shrink, so on a 72-GPU NVL72 the switch, not the links,
  // bounds (docs/collectives.md "NVLS switch reduction bound"). The slower of the two sets the time.
  void nvls(CollectiveOp op, Candidate& best) const {
    if (!allowed(NcclAlgo::nvls, NcclProto::simple)) return;
    const double rate = geo_.intra_bytes_per_s * nvls_efficiency();
    const double n = geo_.n;
    const double per_rank_bytes = op == CollectiveOp::all_reduce ? bytes_ * (n + 1) / n : bytes_ * (n - 1) / n;
    const bool reduces = op == CollectiveOp::all_reduce || op == CollectiveOp::reduce_scatter;
    const double t = std::max(per_rank_bytes / rate, reduces ? nvls_reduction_seconds(bytes_, n) : 0.0);
    consider(best, NcclAlgo::nvls, NcclProto::simple, intra_lat(NcclAlgo::nvls, NcclProto::simple), t,
             Shrink{nvls_channels(), 1.0, nvls_channels()}, t);
  }

  // NVLS inside each node, a tree of nodes over the NICs: each node moves its reduced buffer
  // once per direction with two nodes, twice (double binary tree interior) beyond.
  void nvlstree(Candidate& best) const {
    if (!allowed(NcclAlgo::nvlstree, NcclProto::simple)) return;
    const double L = geo_.local;
    const double n = geo_.n;
    double intra_algbw = geo_.intra_bytes_per_s * nvls_efficiency() * L / (L + 1);
    // The island's NVLS reduction is bounded by the switch like a one-domain NVLS (nvls()).
    if (const double t_red = nvls_reduction_seconds(bytes_, L); t_red > 0)
      intra_algbw = std::min(intra_algbw, bytes_ / t_red);
    const double inter_algbw = geo_.island_net_bytes_per_s / (geo_.islands <= 2 ? 1.0 : 2.0);
    double algbw = std::min(intra_algbw, inter_algbw);
    const double cap = arch_.nvlstree_per_channel_bytes_per_s[geo_.cap_column];
    if (cap > 0) algbw = std::min(algbw, nvls_channels() * cap * n / (2.0 * (n - 1)));
    const double lat = base(NcclAlgo::nvlstree, NcclProto::simple) + intra_lat(NcclAlgo::nvlstree, NcclProto::simple) +
                       2.0 * log2i(geo_.islands) * inter_lat(NcclAlgo::nvlstree, NcclProto::simple);
    consider(best, NcclAlgo::nvlstree, NcclProto::simple, lat, bytes_ / algbw, Shrink{nvls_channels(), 1.0, nvls_channels()},
             bytes_ / algbw);
  }

  // Parallel aggregated trees (one rank per node): ring bytes, log-depth latency, NCCL's 0.75.
  void pat(double bus_bytes, Candidate& best) const {
    if (!allowed(NcclAlgo::pat, NcclProto::simple)) return;
    const double rate = geo_.island_net_bytes_per_s * t_.pat_efficiency;
    const double lat = base(NcclAlgo::pat, NcclProto::simple) +
                       log2i(geo_.islands) * inter_lat(NcclAlgo::pat, NcclProto::simple) / t_.pat_inter_divisor +
                       geo_.n * t_.pat_per_rank_seconds;
    consider(best, NcclAlgo::pat, NcclProto::simple, lat, bus_bytes / rate, Shrink{}, bus_bytes / rate);
  }

  // In-network reduction (IB SHARP): each node sends its buffer up once and receives the result
  // once; inside the node a direct reduce-scatter/all-gather (Direct) or a chain (Chain).
  void collnet(Candidate& best) const {
    const double L = geo_.local;
    const NcclProto p = NcclProto::simple;
    const double net = geo_.island_net_bytes_per_s;
    if (allowed(NcclAlgo::collnet_direct, p)) {
      double algbw = L > 1 ? std::min(net, geo_.intra_bytes_per_s * L / (2.0 * (L - 1))) : net;
      if (geo_.sm >= 90) algbw *= t_.collnet_direct_sm90_efficiency;
      const double lat = base(NcclAlgo::collnet_direct, p) +
                         2.0 * (std::min(1.0, L - 1) * intra_lat(NcclAlgo::collnet_direct, p) +
                                (L - 1) * t_.collnet_direct_per_local_rank_seconds) +
                         inter_lat(NcclAlgo::collnet_direct, p);
      consider(best, NcclAlgo::collnet_direct, p, lat, bytes_ / algbw, Shrink{}, bytes_ / algbw);
    }
    if (allowed(NcclAlgo::collnet_chain, p)) {
      const double algbw = L > 1 ? std::min(net, 0.5 * geo_.intra_bytes_per_s) : net;
      const double lat = base(NcclAlgo::collnet_chain, p) + 2.0 * (L - 1) * intra_lat(NcclAlgo::collnet_chain, p) +
                         inter_lat(NcclAlgo::collnet_chain, p);
      consider(best, NcclAlgo::collnet_chain, p, lat, bytes_ / algbw, Shrink{}, bytes_ / algbw);
    }
  }

  // Grouped send/recv: one flow per peer, all at once. Latency of one hop over the slowest link
  // kind used (NCCL base + hw latency, as SimAI's network_frontend/ns3/entry.h derives per-flow
  // latency); NVLink peers and network peers proceed in parallel, the slower side bounds the time.
  void point_to_point(CollectiveOp op, Candidate& best) const {
    const double n = geo_.n;
    double intra_bytes = 0, net_bytes = 0;
    if (op == CollectiveOp::send_recv) {
      (geo_.nodes > 1 && !geo_.nvlink_only ? net_bytes : intra_bytes) = bytes_;
    } else if (o_.dedup_top_k > 0 && o_.dedup_experts >= geo_.n) {
      // A deduplicating dispatcher (DeepEP, HybridEP) sends a token once to each rank holding any
      // of its experts (that rank fans it out to its local experts; the combine sums them there
      // before sending back): copies per token are the ranks hit, not top-k. Across domains a
      // token's copies for one remote domain cross once (to the rank with the same local index
      // there) and go on over NVLink to the other ranks hit in it: (local - 1) / local of them.
      const double k = o_.dedup_top_k;
      const double ranks_hit = expected_domains_hit(o_.dedup_top_k, o_.dedup_experts, geo_.n);
      if (geo_.nvlink_only) {
        intra_bytes = bytes_ / k * ranks_hit * (n - 1) / n;
      } else {
        const double hit = expected_domains_hit(o_.dedup_top_k, o_.dedup_experts, geo_.islands);
        const double remote = hit * (geo_.islands - 1) / geo_.islands;  // the own domain is one of them
        intra_bytes = bytes_ / k * ranks_hit * (geo_.local - 1) / geo_.local;
        net_bytes = bytes_ * remote / k;
      }
    } else if (geo_.nvlink_only) {
      intra_bytes = bytes_ * (n - 1) / n;
    } else {
      intra_bytes = bytes_ * (geo_.local - 1) / n;
      net_bytes = bytes_ * (n - geo_.local) / n;
    }
    const NcclLink link = net_bytes > 0 ? NcclLink::net : geo_.intra_link;
    const double t_link = std::max(intra_bytes > 0 ? intra_bytes / geo_.intra_bytes_per_s : 0.0,
                                   net_bytes > 0 ? net_bytes / geo_.gpu_net_bytes_per_s : 0.0);
    for (NcclProto p : {NcclProto::ll, NcclProto::simple}) {
      if ((o_.protocol_mask & protocol_bit(p)) == 0) continue;
      const double eff = p == NcclProto::ll ? t_.ring_ll_efficiency : 1.0;
      const double t_bw = t_link / eff;
      const double lat = base(NcclAlgo::ring, p) + hw(link, NcclAlgo::ring, p) +
                         (link == NcclLink::net ? geo_.extra_inter_seconds : 0.0);
      const double ramp = t_link * ramp_;
      Candidate cand{lat + t_bw, lat, t_bw + ramp, ramp, NcclAlgo::ring, p, 0, 0, true};
      if (cand.seconds < best.seconds) best = cand;
    }
  }

private:
  // NCCL's ring and NVLS kernels move nChannels x nRanks (NVLS: nHeads, every GPU of the domain) x
  // chunkSize per loop, so the message that fills their pipeline grows with the ranks; the ramp was
  // fitted on an 8-GPU ring. Tree-shaped kernels loop over nChannels x chunkSize: fitted value kept.
  double loop_scale(NcclAlgo a) const {
    if (a != NcclAlgo::ring && a != NcclAlgo::nvls) return 1.0;
    return static_cast<double>(geo_.n) / std::max(1, t_.pipeline_half_ramp_ranks);
  }
  double hw(NcclLink l, NcclAlgo a, NcclProto p) const {
    return t_.hw_latency_seconds[static_cast<std::size_t>(l)][static_cast<std::size_t>(a)][static_cast<std::size_t>(p)];
  }
  // NCCL selects on its own prediction (full channel count, no ramp); the kernel then runs shrunk
  // and pays the pipeline ramp on `t_link`, the same bytes at the algorithm's Simple rate.
  void consider(Candidate& best, NcclAlgo a, NcclProto p, double lat, double t_bw, Shrink sh,
                double t_link) const {
    if (!(t_bw >= 0) || !std::isfinite(t_bw)) return;
    const double s = lat + t_bw;
    if (s < best.seconds) {
      const double ramp = t_link * pipeline_ramp(t_, bytes_, loop_scale(a));
      best = Candidate{s, lat, t_bw / sh.rate_factor + ramp, ramp, a, p, sh.channels, sh.channels_unshrunk, false};
    }
  }

  const NcclTable& t_;
  const Geometry& geo_;
  const CollectiveOptions& o_;
  double bytes_;
  const NcclArchTable& arch_;
  double ramp_;  // pipeline-ramp fraction for this message size
};

}  // namespace

std::string_view to_string(CollectiveOp op) {
  switch (op) {
    case CollectiveOp::all_reduce: return "all_reduce";
    case CollectiveOp::all_gather: return "all_gather";
    case CollectiveOp::reduce_scatter: return "reduce_scatter";
    case CollectiveOp::broadcast: return "broadcast";
    case CollectiveOp::reduce: return "reduce";
    case CollectiveOp::all_to_all: return "all_to_all";
    case CollectiveOp::send_recv: return "send_recv";
  }
  return "?";
}

bool parse_collective_op(std::string_view s, CollectiveOp& out) {
  static constexpr CollectiveOp kOps[] = {CollectiveOp::all_reduce, CollectiveOp::all_gather,
                                          CollectiveOp::reduce_scatter, CollectiveOp::broadcast,
                                          CollectiveOp::reduce, CollectiveOp::all_to_all, CollectiveOp::send_recv};
  for (CollectiveOp op : kOps)
    if (s == to_string(op)) {
      out = op;
      return true;
    }
  // nccl-tests spellings
  if (s == "allreduce") return out = CollectiveOp::all_reduce, true;
  if (s == "allgather") return out = CollectiveOp::all_gather, true;
  if (s == "reducescatter") return out = CollectiveOp::reduce_scatter, true;
  if (s == "alltoall") return out = CollectiveOp::all_to_all, true;
  if (s == "sendrecv") return out = CollectiveOp::send_recv, true;
  return false;
}

bool parse_nccl_algo(std::string_view s, NcclAlgo& out) {
  for (int a = 0; a < kNcclAlgoCount; ++a) {
    const auto algo = static_cast<NcclAlgo>(a);
    if (s == to_string(algo)) return out = algo, true;
  }
  return false;
}

bool parse_nccl_proto(std::string_view s, NcclProto& out) {
  auto lower_eq = [](std::string_view a, std::string_view b) {
    if (a.size() != b.size()) return false;
    for (std::size_t i = 0; i < a.size(); ++i)
      if (std::tolower(static_cast<unsigned char>(a[i])) != std::tolower(static_cast<unsigned char>(b[i]))) return false;
    return true;
  };
  for (int p = 0; p < kNcclProtoCount; ++p) {
    const auto proto = static_cast<NcclProto>(p);
    if (lower_eq(s, to_string(proto))) return out = proto, true;
  }
  return false;
}

double expected_domains_hit(int top_k, int experts, int domains) {
  if (domains <= 1 || top_k <= 0 || experts <= 0) return domains >= 1 ? 1.0 : 0.0;
  if (top_k >= experts) return domains;  // every expert, so every domain
  // P(no pick in one domain) = C(E - E/D, k) / C(E, k) = prod_{i<k} (E - E/D - i) / (E - i).
  const double per_domain = static_cast<double>(experts) / domains;
  double miss = 1.0;
  for (int i = 0; i < top_k; ++i) miss *= std::max(0.0, experts - per_domain - i) / (experts - i);
  return domains * (1.0 - miss);
}

double bus_bandwidth_factor(CollectiveOp op, int n_ranks) {
  const double n = std::max(1, n_ranks);
  switch (op) {
    case CollectiveOp::all_reduce: return 2.0 * (n - 1) / n;
    case CollectiveOp::all_gather:
    case CollectiveOp::reduce_scatter:
    case CollectiveOp::all_to_all: return (n - 1) / n;
    case CollectiveOp::broadcast:
    case CollectiveOp::reduce:
    case CollectiveOp::send_recv: return 1.0;
  }
  return 1.0;
}

namespace {

// What the caller adds to the GPU time (LaunchMode): nothing for a process per GPU; a single-process
// launcher's floor; a torch.distributed benchmark's dispatch of each timed call.
void add_caller(CollectiveEstimate& e, const ClusterSpec& c, const NcclTable& table, const CollectiveOptions& options,
                int ranks_per_node) {
  if (options.launch_mode == LaunchMode::single_process_multi_gpu) {
    // One host thread enqueues and launches the kernels of its node's GPUs one after the other;
    // back-to-back iterations pipeline host and GPUs, so the period is max(GPU time, host time).
    const double per_gpu = options.amd_host ? table.host_launch_amd_seconds : table.host_launch_intel_seconds;
    e.host_floor_seconds = ranks_per_node * per_gpu;
    if (e.host_floor_seconds > e.seconds) {
      e.seconds = e.host_floor_seconds;
      e.host_bound = true;
    }
  } else if (options.launch_mode == LaunchMode::torch_timed_call) {
    // The start event completes at once on the idle stream; the kernel starts only once the host
    // has dispatched the call: the dispatch adds to the GPU time.
    e.caller_seconds = c10d_collective_seconds(c);
    e.seconds += e.caller_seconds;
  }
}

}  // namespace

CollectiveEstimate estimate_collective(const ClusterSpec& c, CollectiveOp op, double bytes, GroupPlacement g) {
  static const CollectiveOptions kDefaults{};
  return estimate_collective(c, op, bytes, g, kDefaults);
}

CollectiveEstimate estimate_collective(const ClusterSpec& c, CollectiveOp op, double bytes, GroupPlacement g,
                                       const CollectiveOptions& options) {
  // An explicit table (collective --nccl, tests) wins over the cluster's nccl_version.
  const NcclTable& table = options.nccl != nullptr ? *options.nccl
                           : c.nccl != nullptr    ? *c.nccl
                                                  : default_nccl_table();
  const Geometry geo = geometry(c, g);
  CollectiveEstimate e;
  e.crosses_nodes = geo.nodes > 1;
  e.uses_network = !geo.nvlink_only;
  e.ranks_per_domain = geo.local;
  // A single rank (or nothing to move) costs no communication; send/recv always has a peer.
  if ((geo.n <= 1 && op != CollectiveOp::send_recv) || !(bytes > 0)) {
    e.algorithm = "none";
    e.protocol = "none";
    return e;
  }

  const Model m(table, geo, options, bytes);
  const double bus_bytes = bytes * bus_bandwidth_factor(op, geo.n);
  const bool nvls_ok = c.node.nvls && geo.n > 1;
  Candidate best;
  switch (op) {
    case CollectiveOp::all_reduce:
      m.ring(op, bus_bytes, best);
      m.tree(best);
      if (nvls_ok && geo.nvlink_only) m.nvls(op, best);
      if (nvls_ok && !geo.nvlink_only) m.nvlstree(best);
      if (options.collnet && !geo.nvlink_only) m.collnet(best);
      break;
    case CollectiveOp::all_gather:
    case CollectiveOp::reduce_scatter:
      m.ring(op, bus_bytes, best);
      // NVLS AG/RS: one NVLink domain (multi-node needs CollNet), at most 32 local ranks.
      if (nvls_ok && geo.nvlink_only && geo.n <= 32) m.nvls(op, best);
      if (!geo.nvlink_only && geo.local == 1) m.pat(bus_bytes, best);
      break;
    case CollectiveOp::broadcast:
    case CollectiveOp::reduce:
      m.ring(op, bus_bytes, best);
      break;
    case CollectiveOp::all_to_all:
    case CollectiveOp::send_recv:
      m.point_to_point(op, best);
      break;
  }

  if (!std::isfinite(best.seconds)) {
    // Every pair disabled by the masks: say so rather than invent a time.
    e.seconds = std::numeric_limits<double>::infinity();
    e.algorithm = "none";
    e.protocol = "none";
    return e;
  }
  e.seconds = best.latency_seconds + best.transfer_seconds;
  e.latency_seconds = best.latency_seconds;
  e.ramp_seconds = best.ramp_seconds;
  e.channels = best.channels;
  e.nccl_seconds = best.seconds;
  e.nccl_channels = best.channels_unshrunk;
  add_caller(e, c, table, options, geo.ppn);
  e.bus_bytes = bus_bytes;
  e.bus_bandwidth_bytes_per_s = best.transfer_seconds > 0 ? bus_bytes / best.transfer_seconds : 0.0;
  e.algorithm = best.direct ? std::string_view("direct") : to_string(best.algo);
  e.protocol = to_string(best.proto);
  return e;
}

}  // namespace meshplan

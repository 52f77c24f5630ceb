#pragma once
// NCCL-style collective cost: for each (algorithm, protocol) a latency plus bytes over bandwidth,
// the minimum wins (NCCL 2.30 tuning model, src/graph/tuning.cc); the winner is timed with
// NCCL's small-message shrinking and the pipeline ramp on top (docs/collectives.md). Constants
// live in data.
#include <cstdint>
#include <string>
#include <string_view>

#include "spec/cluster_spec.hpp"
#include "spec/nccl_table.hpp"
#include "workload/collective_kind.hpp"

namespace meshplan {

struct CollectiveEstimate {
  double seconds = 0;
  double latency_seconds = 0;       // the fixed part
  double bus_bytes = 0;             // bytes each rank moves on its busiest link (nccl-tests busbw basis)
  double bus_bandwidth_bytes_per_s = 0;  // the rate those bytes move at (pipeline ramp included)
  double ramp_seconds = 0;          // part of `seconds` lost to the pipeline ramp (docs/collectives.md)
  std::string algorithm;            // "ring", "tree", "nvls", "nvlstree", "pat", "direct"
  std::string protocol;             // "LL", "LL128", "Simple"
  bool crosses_nodes = false;
  // The group leaves its NVLink domain (a GB200 NVL72 rack spans 18 nodes): its traffic crosses
  // the NICs, shared by the ranks of one domain. Within a domain every byte stays on NVLink.
  bool uses_network = false;
  int ranks_per_domain = 1;         // members in one NVLink domain (with uses_network)
  int channels = 0;                 // channels NCCL runs the chosen pair on, after small-message shrinking
  // What NCCL's tuner itself predicts for the chosen pair, the figure it selects on (tuning.cc
  // ncclTopoGetAlgoTime: latency + bytes / bandwidth at the full channel count, no ramp), and
  // that channel count before enqueue.cc shrinks it (collective --explain prints both).
  double nccl_seconds = 0;
  int nccl_channels = 0;
  double host_floor_seconds = 0;    // single-process launch floor (0 in one-process-per-GPU mode)
  double caller_seconds = 0;        // torch_timed_call: c10d's dispatch, inside the timed span
  bool host_bound = false;          // `seconds` is the host floor, not the GPU time
};

// How the measured or modelled caller launches its collectives. one_process_per_gpu: training (the
// simulator charges the host's issue on its own thread) and nccl-tests with a process per GPU.
// single_process_multi_gpu: nccl-tests `-g N`, one host thread enqueueing and launching the kernels
// of N GPUs one after the other, so an iteration cannot be shorter than N x the per-GPU host launch
// cost (NCCL table, host_launch_us). torch_timed_call: torch.distributed benchmarks
// (all_reduce_bench.py) that time each call with CUDA events recorded around it on an idle stream,
// so c10d's dispatch of the call precedes its kernel inside the timed span.
enum class LaunchMode { one_process_per_gpu, single_process_multi_gpu, torch_timed_call };

// What NCCL is allowed to pick from (NCCL_ALGO / NCCL_PROTO / CollNet availability) and which
// constants it uses. The defaults are NCCL's defaults: every algorithm but CollNet, every protocol.
struct CollectiveOptions {
  const NcclTable* nccl = nullptr;  // nullptr: the cluster's table (ClusterSpec::nccl), else the shipped default
  unsigned algorithm_mask = ~0u;    // bit (1u << int(NcclAlgo)) set = allowed
  unsigned protocol_mask = ~0u;     // bit (1u << int(NcclProto)) set = allowed
  bool collnet = false;             // IB SHARP / CollNet plugin present: enables CollNet algorithms
  bool amd_host = false;            // NCCL's net overhead, multi-node LL cap and host launch cost depend on the CPU vendor
  LaunchMode launch_mode = LaunchMode::one_process_per_gpu;  // single_process_multi_gpu: one thread per node
  // all_to_all as an MoE dispatcher that deduplicates per NVLink domain (DeepEP, HybridEP): each
  // token's top-k copies, routed uniformly over `dedup_experts` experts spread evenly over the
  // group, cross the network once per remote domain they hit and fan out over NVLink there.
  // 0: NCCL's all-to-all, every copy on its own.
  int dedup_top_k = 0;
  int dedup_experts = 0;
};

// Expected number of the D domains (holding experts/D experts each) that at least one of a
// token's top_k distinct experts lands in, when they are drawn uniformly without replacement.
double expected_domains_hit(int top_k, int experts, int domains);

inline constexpr unsigned algorithm_bit(NcclAlgo a) { return 1u << static_cast<int>(a); }
inline constexpr unsigned protocol_bit(NcclProto p) { return 1u << static_cast<int>(p); }

// `bytes` is the nccl-tests size: the buffer each rank contributes/receives (all-gather: output size).
CollectiveEstimate estimate_collective(const ClusterSpec& c, CollectiveOp op, double bytes, GroupPlacement g);
CollectiveEstimate estimate_collective(const ClusterSpec& c, CollectiveOp op, double bytes, GroupPlacement g,
                                       const CollectiveOptions& options);

// nccl-tests' busbw factor for `op` over n ranks (busbw = algbw * factor; nccl-tests
// doc/PERFORMANCE.md).
double bus_bandwidth_factor(CollectiveOp op, int n_ranks);

// "ring", "tree", "nvls", "nvlstree", "pat", "collnet_direct", "collnet_chain" (NCCL_ALGO names).
bool parse_nccl_algo(std::string_view s, NcclAlgo& out);
// "LL", "LL128", "Simple" (case-insensitive).
bool parse_nccl_proto(std::string_view s, NcclProto& out);

}  // namespace meshplan

#pragma once
// NCCL's tuning-model constants (latencies, protocol factors, per-channel caps, ...) for one NCCL
// release, read from hardware_profiles/nccl/nccl-VERSION.toml. NCCL refits these between releases,
// so they are data, versioned, each tagged with the NCCL source file it comes from (NVIDIA/nccl
// 2.30.7: src/graph/tuning.cc, topo.h, search.cc, src/include/device.h, src/init.cc).
// All values in SI units: seconds, bytes, bytes/s.
#include <array>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace meshplan {

// Indices follow NCCL's own enums (nccl_tuner.h): algorithms and protocols.
enum class NcclAlgo : int { tree, ring, collnet_direct, collnet_chain, nvls, nvlstree, pat };
enum class NcclProto : int { ll, ll128, simple };
// The kind of link a hop crosses (NCCL's hwLatencies first index).
enum class NcclLink : int { nvlink, pci, net };

inline constexpr int kNcclAlgoCount = 7;
inline constexpr int kNcclProtoCount = 3;
inline constexpr int kNcclLinkCount = 3;
inline constexpr int kTreeCorrectionEntries = 24;  // log2(bytes/64) = 0 .. 23 (64 B .. 512 MiB)

std::string_view to_string(NcclAlgo a);   // "tree", "ring", ..., "pat"
std::string_view to_string(NcclProto p);  // "LL", "LL128", "Simple"

using ProtoValues = std::array<double, kNcclProtoCount>;  // [LL, LL128, Simple]
using NodeCountValues = std::array<double, 3>;            // [1 node, 2 nodes, >= 3 nodes]

// Caps and speed ladder of one GPU generation (NCCL's tables are per compute capability).
struct NcclArchTable {
  int sm = 0;                                       // 70, 80, 90, 100
  NodeCountValues ll_max_bytes_per_s{};             // total LL cap (single-node row)
  NodeCountValues ring_ll128_per_channel_bytes_per_s{};
  NodeCountValues tree_ll128_per_channel_bytes_per_s{};
  NodeCountValues tree_per_channel_bytes_per_s{};
  NodeCountValues nvlstree_per_channel_bytes_per_s{};  // 0 = no cap defined
  std::vector<double> intra_ladder_bytes_per_s;     // per-channel speeds, highest first; may be empty
  std::vector<double> inter_ladder_bytes_per_s;
};

struct NcclTable {
  std::string version;       // "2.30.7"
  std::string source_file;

  std::array<ProtoValues, kNcclAlgoCount> base_latency_seconds{};
  std::array<std::array<ProtoValues, kNcclAlgoCount>, kNcclLinkCount> hw_latency_seconds{};

  double net_overhead_intel_seconds = 0;
  double net_overhead_amd_seconds = 0;
  double simple_net_overhead_factor = 0;
  double pat_inter_divisor = 0;
  double pat_per_rank_seconds = 0;
  double collnet_direct_per_local_rank_seconds = 0;
  double ring_simple_plateau_factor_sm80 = 0;
  double ring_simple_plateau_factor_older = 0;
  double ring_simple_plateau_min_bytes = 0;

  double ring_ll_efficiency = 0;
  double ring_ll128_efficiency = 0;
  double tree_efficiency = 0;
  double tree_ll_divisor = 0;
  double tree_ll128_single_node_efficiency = 0;
  double tree_ll128_multi_node_efficiency = 0;
  double pat_efficiency = 0;
  double collnet_direct_sm90_efficiency = 0;
  double nvls_efficiency_sm90 = 0;
  double nvls_efficiency_sm100 = 0;
  // Rate at which the NVSwitch fabric combines reduction operands per attached GPU (bytes/s; 0 =
  // no bound known): an NVLS reduction over n GPUs makes the switch fold (n - 1)/n x S operand
  // bytes per GPU, so all-reduce busbw cannot exceed 2x this and reduce-scatter busbw 1x
  // (docs/collectives.md "NVLS switch reduction bound"). A property of the NVSwitch generation,
  // kept here beside nvlsEff because NCCL's tables are keyed by the same GPU generation.
  double nvls_switch_reduction_sm90_bytes_per_s = 0;
  double nvls_switch_reduction_sm100_bytes_per_s = 0;

  std::array<std::array<double, kTreeCorrectionEntries>, kNcclProtoCount> tree_correction{};

  std::vector<NcclArchTable> arch;  // sorted by sm
  std::array<double, 2> ll_max_multi_node_intel_bytes_per_s{};  // [2 nodes, >= 3 nodes]
  std::array<double, 2> ll_max_multi_node_amd_bytes_per_s{};

  int max_channels = 0;
  int nvls_channels_sm90 = 0;
  int nvls_channels_sm100_single_domain = 0;
  int nvls_channels_sm100_multi_node = 0;

  double ll_buffer_bytes = 0;
  double ll128_buffer_bytes = 0;
  double simple_buffer_bytes = 0;
  int steps = 0;
  ProtoValues thread_threshold_bytes{};
  std::array<int, kNcclProtoCount> max_threads{};  // threads per channel (CTA) NCCL launches, per protocol

  // Host time to enqueue one GPU's part of a collective (NCCL enqueue + cudaLaunchKernel) when one
  // host thread drives several GPUs (nccl-tests -g N): by CPU vendor, like NCCL's net overhead.
  double host_launch_intel_seconds = 0;
  double host_launch_amd_seconds = 0;

  // Pipeline ramp (not an NCCL constant; fitted on nccl-tests, docs/collectives.md): below
  // `pipeline_half_ramp_bytes` NCCL's chunked pipeline moves data at a fraction of the link rate
  // that tends to `pipeline_small_message_efficiency` for small messages and to 1 for large ones:
  // extra transfer time = t_link x (1 / eta0 - 1) x S_half / (S + S_half).
  double pipeline_small_message_efficiency = 1;  // eta0, in (0, 1]; 1 = no ramp (NCCL's own model)
  double pipeline_half_ramp_bytes = 0;           // S_half, message size (nccl-tests bytes)
  // Ranks one loop of the fitted series' kernel spans (8: an 8-GPU ring). NCCL's ring and NVLS
  // kernels move nChannels x nRanks (NVLS: nHeads) x chunkSize per loop, so their S_half scales by
  // ranks / this (docs/collectives.md "Pipeline ramp").
  int pipeline_half_ramp_ranks = 8;

  std::map<std::string, std::string> sources;      // "base_latency_us.ring" -> tag
  std::map<std::string, std::string> source_refs;  // tag -> "kind: ref"
  // Tags of kind `fitted` (set by a committed fit, not read from NCCL): the interval the fit
  // searches and every value of the tag must lie in, and the command that refits it.
  std::map<std::string, std::pair<double, double>> fitted_bounds;
  std::map<std::string, std::string> fit_commands;

  // The table of the newest generation not newer than `sm` (the oldest one if `sm` predates all).
  const NcclArchTable& arch_table(int sm) const;
};

inline constexpr std::string_view kDefaultNcclVersion = "2.30.7";

// "2.30.7" reads hardware_profiles/nccl/nccl-2.30.7.toml under the data root; a value ending in
// .toml is a path. Strict: unknown or missing keys, wrong types, out-of-range values and values
// without a declared source throw InputError(file, key, reason). A version with no table is
// InputError(origin_file, origin_key, "unknown NCCL version 'X' (available: ...)"): the origin is
// where the value was written (a profile and its `nccl_version` key, or "" and a CLI flag).
NcclTable load_nccl_table(const std::string& version_or_path = std::string(kDefaultNcclVersion),
                          const std::string& origin_file = "", const std::string& origin_key = "nccl_version");

// The versions that have a table in hardware_profiles/nccl/ (nccl-VERSION.toml), sorted.
std::vector<std::string> available_nccl_versions();

// load_nccl_table, read once per version or path and shared for the process lifetime
// (thread-safe): profiles and CLI overrides name a handful of tables and many estimates use them.
std::shared_ptr<const NcclTable> shared_nccl_table(const std::string& version_or_path,
                                                   const std::string& origin_file = "",
                                                   const std::string& origin_key = "nccl_version");

// The shipped default version, loaded once (thread-safe) and kept for the process lifetime.
const NcclTable& default_nccl_table();

// "sm90" -> 90; 0 when the string is not of that form.
int parse_sm(std::string_view arch);

}  // namespace meshplan

#pragma once
// ClusterSpec: GPU, node, host link and fabric of a cluster (the "system" input), read from
// hardware_profiles/*.toml. Every number carries a source tag in `sources` (dotted key -> tag).
// SI units throughout: bytes, seconds, FLOP/s, bytes/s per direction.
#include <map>
#include <memory>
#include <optional>
#include <utility>
#include <string>
#include <string_view>
#include <vector>

#include "spec/dtype.hpp"

namespace meshplan {

// One measured point of a GEMM efficiency curve (achieved / dense peak) for square-ish shapes.
struct GemmEfficiencyPoint {
  double cube_dim = 0;   // (M*N*K)^(1/3)
  double efficiency = 0; // achieved / dense peak
};
struct GemmCurve {
  Dtype dtype = Dtype::bf16;
  std::vector<GemmEfficiencyPoint> points;  // increasing cube_dim
  std::string source;
};

// Fused attention throughput vs sequence length, per kernel family, pass, mask, head dim and
// input dtype (docs/hardware_profiles.md).
struct AttentionCurve {
  std::string kernel;      // family: "fa2", "fa3", "fa4", "cudnn" (spec/attention_kernel.hpp)
  std::string pass;        // "fwd", "bwd" or "fwd+bwd"
  Dtype dtype = Dtype::bf16;  // Q/K/V dtype: bf16/fp16, or fp8 (FP8 attention)
  int head_dim = 128;
  bool causal = true;
  std::vector<double> seq_len;
  std::vector<double> flops_per_s;  // achieved, as counted by the kernel's authors
  std::string source;
  // The library release measured (parse_library_version: 9.22 -> 9022); 0 = not stated. Where a
  // family has curves of several releases the newest prices by default.
  int version = 0;
};

struct GpuSpec {
  std::string model;                       // "H100-SXM5-80GB"
  std::string arch;                        // "sm90"
  int sm_count = 0;
  double hbm_bytes = 0;                    // marketed capacity (datasheet)
  // What CUDA exposes (nvidia-smi's total, torch.cuda.mem_get_info's total): the capacity every
  // fit check uses. 0 in profiles built in code: the marketed size stands in.
  double usable_memory_bytes = 0;
  double hbm_bandwidth_bytes_per_s = 0;    // spec peak
  double hbm_efficiency = 0;               // achieved copy bandwidth / peak (STREAM copy)
  // What eager element-wise and normalization kernels reach (bf16 casts, LayerNorm/RMSNorm
  // backward reductions, GELU's erf, dropout's RNG), as a fraction of peak; STREAM's if unset.
  double elementwise_efficiency = 0;
  // Tensor-core throughput under sustained training load as a fraction of what the (short)
  // microbenchmarks behind the GEMM and attention curves reached: power and thermal limits hold
  // the clock lower when every GPU of a node runs for minutes. 1 = no throttling.
  double sustained_clock_fraction = 1;
  // The same for attention kernels where it was measured apart (a GEMM at full FP8 rate draws
  // more power than attention, whose softmax leaves the tensor cores idle part of the time);
  // 0 = sustained_clock_fraction.
  double attention_sustained_clock_fraction = 0;
  double attention_sustained_fraction() const {
    return attention_sustained_clock_fraction > 0 ? attention_sustained_clock_fraction : sustained_clock_fraction;
  }
  // The same for FP8 and FP4 GEMMs where it was measured apart: a GEMM at twice or four times
  // the BF16 rate draws the most power of any kernel, so its sustained clock is the lowest and is
  // not carried to BF16 work; 0 = sustained_clock_fraction.
  double low_precision_sustained_clock_fraction = 0;
  double gemm_sustained_fraction(Dtype d) const {
    return bytes_per_element(d) < 2.0 && low_precision_sustained_clock_fraction > 0 ? low_precision_sustained_clock_fraction
                                                                                     : sustained_clock_fraction;
  }
  // Fixed cost of one GEMM output tile beside its K loop (pipeline prologue, epilogue storing
  // the accumulator), in units of K: a tile of depth K costs like K + this (docs/compute.md).
  // Blackwell kernels keep the accumulator in tensor memory, double-buffered, so one tile's
  // epilogue runs under the next tile's MMAs: 0 there.
  double gemm_tile_overhead_k = 128;
  // cuBLAS's heuristic leaves whole-tile waves for a stream-K schedule (K iterations spread
  // evenly over the SMs) only when that saves more than this fraction of the waves' time: fitted
  // on the H200 square and wave series (docs/compute.md, "GEMM time from the shape").
  double gemm_stream_k_min_saving = 0.235;
  std::map<Dtype, double> peak_flops_per_s;  // dense tensor-core peaks per dtype
  double kernel_launch_seconds = 0;
  // Compute runs 1/(1+factor) as fast while NCCL kernels share the SMs and HBM.
  double comm_interference_factor = 0;
  std::vector<GemmCurve> gemm_curves;
  std::vector<AttentionCurve> attention_curves;

  // Device memory allocations can use: the CUDA context and NCCL buffers come off it
  // (workload/memory_estimate.cpp).
  double device_memory_bytes() const { return usable_memory_bytes > 0 ? usable_memory_bytes : hbm_bytes; }
};

struct NodeSpec {
  int gpus_per_node = 8;
  std::string scaleup_kind;                // "nvswitch", "nvlink-mesh", "pcie"
  int nvlink_domain_gpus = 8;              // GPUs reachable over NVLink (72 for NVL72)
  double nvlink_bandwidth_bytes_per_s = 0; // per GPU, per direction (spec)
  double nvlink_efficiency = 0;            // achieved p2p / spec
  double nvlink_latency_seconds = 0;       // per hop
  bool nvls = false;                       // NVSwitch multicast/reduction (SHARP in NVSwitch)
  std::string host_link_kind;              // "pcie4x16", "pcie5x16", "nvlink-c2c"
  double host_h2d_bytes_per_s = 0;         // achieved, pinned
  double host_d2h_bytes_per_s = 0;
  double host_memory_bytes = 0;            // per node
  int nics_per_node = 0;
  double nic_bandwidth_bytes_per_s = 0;    // per NIC, per direction (line rate)
  double nic_efficiency = 0;               // achieved / line rate
};

struct FabricSpec {
  std::string kind = "fat_tree";           // fat_tree | nvl_domain
  std::string transport = "infiniband";    // infiniband | roce | efa | omnipath
  bool rail_optimized = true;              // NIC i of every node on leaf i
  int nodes_per_leaf = 32;                 // nodes one leaf (rail) group reaches in one hop
  double leaf_oversubscription = 1.0;      // downlink / uplink bandwidth at the leaf
  double spine_oversubscription = 1.0;
  double nic_latency_seconds = 0;          // end-to-end NIC + wire
  double switch_hop_latency_seconds = 0;
  // What the transport adds to every network hop of an NCCL message beyond NCCL's own latencies,
  // which are InfiniBand's: 0 on InfiniBand and RoCE; on AWS EFA the SRD protocol and the
  // aws-ofi-nccl plugin's proxy (docs/collectives.md, "Transport latency").
  double transport_latency_seconds = 0;
};

// The CPU that runs the training process: what one eagerly dispatched op costs it (Python,
// the PyTorch dispatcher, autograd bookkeeping and the launch), docs/host.md.
struct HostSpec {
  std::string cpu = "x86";                 // "x86" or "grace"
  double op_seconds = 0;                   // per eager PyTorch op issuing one kernel
  // Megatron-DeepSpeed's host work per kernel the lowering counts, as a multiple of op_seconds: it
  // drives every layer through Python autograd Functions (tensor-parallel regions, DeepSpeed's
  // CheckpointFunction with its RNG-state save and restore). 1 = plain eager.
  double megatron_deepspeed_op_factor = 1;
};

// Fixed costs of the software stack, not of the model.
struct FrameworkOverheads {
  double cuda_context_bytes = 0;           // CUDA context + cuBLAS/cuDNN workspaces
  double nccl_buffer_bytes_per_group = 0;  // NCCL channel buffers per communicator
  double allocator_reserve_fraction = 0;   // caching allocator: reserved / allocated slack
  // Coefficient of variation of a trained MoE router's per-expert token load under dropless
  // routing with an auxiliary balancing loss (docs/compute.md, "Router load imbalance"): a
  // property of the training recipe, fitted on runs, one number for every profile. 0 = balanced.
  double moe_router_load_cv = 0;
};

// What interrupts a long run and what a checkpoint and a restart cost (the optional
// [reliability] table; docs/goodput.md). Rates are interruptions per unit per year, each unit
// being what the component scales with (GPUs, NICs, nodes). `present` is false when the
// profile has no such table: capacity then cannot price failures.
struct ReliabilitySpec {
  bool present = false;
  double gpu_failures_per_gpu_year = 0;       // GPU die, SRAM, GSP, thermal, silent data corruption
  double hbm_failures_per_gpu_year = 0;
  double nic_failures_per_nic_year = 0;
  double switch_failures_per_gpu_year = 0;    // fabric switches and cables (scale with endpoints)
  double host_failures_per_node_year = 0;     // CPU, DRAM, SSD, PSU, chassis, unplanned maintenance
  double software_failures_per_gpu_year = 0;  // software bugs, dependencies, collective timeouts
  double planned_interruptions_per_gpu_year = 0;  // maintenance and operator restarts (checkpointed first)
  double storage_write_bytes_per_s = 0;       // checkpoint storage, per node
  double storage_read_bytes_per_s = 0;        // per node
  double relaunch_seconds = 0;                // detect, reschedule, start processes, init communicators
  double warmup_seconds = 0;                  // compile and the first slow steps after a restart
};

struct NcclTable;

struct ClusterSpec {
  std::string name;                        // profile name, e.g. "h100-sxm-80gb"
  std::string description;
  std::string base_profile;  // the shipped profile this one names as its `base` (empty: none)
  // The NCCL release whose tuning constants price this cluster's collectives (the profile's
  // optional `nccl_version`, a version in hardware_profiles/nccl/ or a .toml path; a CLI
  // --nccl-version replaces it). `nccl` is that table; nullptr = the shipped default, the same
  // table default_nccl_table() returns (docs/collectives.md "Inputs").
  std::string nccl_version;
  std::shared_ptr<const NcclTable> nccl;
  GpuSpec gpu;
  NodeSpec node;
  FabricSpec fabric;
  HostSpec host;
  FrameworkOverheads framework;
  ReliabilitySpec reliability;
  std::map<std::string, std::string> sources;  // "gpu.hbm_bytes" -> "h100_datasheet"
  std::map<std::string, std::string> source_refs;  // tag -> citation ("kind: ref")
  // Sources of kind `fitted`: tag -> the bounds a fit may move their values within.
  std::map<std::string, std::pair<double, double>> fitted_bounds;
  std::vector<std::string> warnings;       // e.g. alias resolution ("a100-unknown")
  std::string source_file;                 // the profile TOML this spec was read from

  // The bounds the profile declares for a fitted key ("gpu.gemm_stream_k_min_saving"), or nullopt
  // when the key's source is not of kind `fitted`.
  std::optional<std::pair<double, double>> declared_fitted_bounds(std::string_view key) const {
    const auto tag = sources.find(std::string(key));
    if (tag == sources.end()) return std::nullopt;
    const auto b = fitted_bounds.find(tag->second);
    if (b == fitted_bounds.end()) return std::nullopt;
    return b->second;
  }

  // Block-scaled FP8 (fp8_block, mxfp8) issues the same FP8 tensor-core MMAs (on Blackwell the
  // block-scaled tcgen05 MMA has the FP8 dense rate): the fp8 peak unless the profile names one.
  double peak_flops_per_s(Dtype d) const {
    auto it = gpu.peak_flops_per_s.find(d);
    if (it == gpu.peak_flops_per_s.end() && (d == Dtype::fp8_block || d == Dtype::mxfp8))
      it = gpu.peak_flops_per_s.find(Dtype::fp8);
    return it == gpu.peak_flops_per_s.end() ? 0.0 : it->second;
  }
};

}  // namespace meshplan

#pragma once
// One optimizer step lowered into the ops a representative rank of each pipeline stage issues:
// compute (GEMM shapes, attention shapes, bytes of memory-bound kernels), collectives (kind,
// process group, bytes), pipeline p2p, host copies and the optimizer step, with the streams
// they run on, their dependencies and the memory they allocate and free. No durations here:
// src/cost prices the ops, src/sim runs them.
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <boost/container/small_vector.hpp>

#include "spec/model_spec.hpp"
#include "spec/placement.hpp"
#include "spec/plan.hpp"
#include "workload/collective_kind.hpp"
#include "workload/kernel_shapes.hpp"

namespace meshplan {

// amax: delayed FP8 scaling's amax all-reduce, on its own communicator (and so its own NCCL stream).
enum class StreamKind { compute, fsdp_all_gather, fsdp_reduce_scatter, tp, cp, ep, pp, dp, host_copy, amax };
constexpr int kStreamKinds = 10;
std::string_view to_string(StreamKind s);

// What an op's time counts as in the step breakdown.
enum class OpCategory {
  compute, recompute, optimizer,
  fsdp_all_gather, fsdp_reduce_scatter, dp_all_reduce, dp_reduce_scatter, param_all_gather,
  tp, cp, ep, pp, offload, amax,
};
constexpr int kOpCategories = 14;
static_assert(static_cast<int>(OpCategory::amax) + 1 == kOpCategories);
std::string_view to_string(OpCategory c);
bool is_communication(OpCategory c);

// Process groups a collective runs over (placement decides which links they cross). stage: every
// rank of one pipeline stage (tp x cp x dp), Megatron's amax-reduction group.
enum class GroupKind { tp, cp, fsdp, dp_replicate, dp, ep, pp, stage };
constexpr int kGroupKinds = 8;
static_assert(static_cast<int>(GroupKind::stage) + 1 == kGroupKinds);
std::string_view to_string(GroupKind g);
// The workload names process groups by what they do; placement knows where their ranks sit.
MeshGroup mesh_group(GroupKind g);

enum class OpKind { compute, collective, p2p, host_copy };

// The transient memory terms the timeline tracks (the rest of the breakdown is static state):
// `grads` as backward produces them (when they do not live through forward), `optimizer` the
// optimizer step's temporaries, `host` the pinned host memory activation offload fills (not device
// memory).
enum class MemoryTerm { activations, unsharded_params, reduce_buffers, recompute, grads, optimizer, host };
constexpr int kMemoryTerms = 7;

// An op's lists are short (a few kernels, dependencies and memory changes) and kept inline: a
// 16k-GPU step lowers ~40k ops, and a heap block per list was most of the lowering's cost.
template <typename T, std::size_t N>
using SmallVector = boost::container::small_vector<T, N>;
using Gemms = SmallVector<GemmShape, 3>;
using MemoryChanges = SmallVector<std::pair<MemoryTerm, double>, 1>;

// What an op computes or moves: everything the cost model reads to price it. The same layer's op
// is the same work in every micro-batch, so a program keeps each distinct work once
// (StepProgram::works) and its ops refer to it by index: a GPT-1T step lowers half a million ops
// but a few hundred works.
struct OpWork {
  // compute
  Gemms gemms;
  SmallVector<AttentionShape, 1> attention;
  Pass attention_pass = Pass::forward;
  double memory_bound_bytes = 0;     // element-wise kernels' bytes read + written
  NormWork layernorm;                // the LayerNorm kernels among them, where priced by width
  double cast_bytes = 0;             // low-precision quantize (cast) kernels' bytes read + written
  int kernels = 0;                   // launches, for the launch overhead
  // Of those, the ones a scoped CUDA graph replays (Plan::cuda_graph_scope), in how many replays:
  // the host issues the rest one by one and each graph with one launch.
  int graphed_kernels = 0;
  int graph_replays = 0;
  bool low_precision_gemms = false;  // the GEMMs are block linears run in the plan's FP8/FP4 recipe
  bool low_precision_attention = false;  // the fused attention runs in FP8 (Plan::fp8_attention)
  double model_flops = 0;            // useful FLOPs (MFU numerator; 0 for recompute)
  double hardware_flops = 0;         // FLOPs the GPU executes (HFU numerator)
  // communication
  CollectiveOp collective = CollectiveOp::all_reduce;
  GroupKind group = GroupKind::dp;
  double bytes = 0;                  // nccl-tests size, p2p payload or host-copy bytes
  // An MoE dispatch or combine through a deduplicating dispatcher (DeepEP, HybridEP): top-k of
  // how many experts, spread evenly over the EP group (0: a plain all-to-all).
  int a2a_dedup_top_k = 0;
  int a2a_dedup_experts = 0;
  bool host_to_device = false;       // host copies
  friend bool operator==(const OpWork&, const OpWork&) = default;
};
// For interning works (Builder::add): mixes the fields that tell works apart fastest.
std::uint64_t work_hash(const OpWork& w);

// Where and when an op runs: its stage, stream, dependencies and the memory it allocates and frees.
struct OpSchedule {
  int stage = 0;
  StreamKind stream = StreamKind::compute;
  OpCategory category = OpCategory::compute;
  OpKind kind = OpKind::compute;
  // The host reads a device result before it can issue this op (an MoE dispatch that needs the
  // token counts on the CPU): it first waits for the op's dependencies to finish on the GPU.
  bool host_sync = false;
  SmallVector<int, 3> deps;          // indices into StepProgram::ops
  // Memory allocated (+) / freed (-) when the op starts and when it ends, by report term.
  MemoryChanges at_start, at_end;
};

// An op as the lowering writes it: its work, its schedule and its name together.
struct Op : OpWork, OpSchedule {
  std::string name;  // empty unless LowerOptions::op_names (traces, messages)
};

// An op as a program keeps it: its schedule and the index of its work in StepProgram::works.
struct StepOp : OpSchedule {
  std::uint32_t work = 0;
};

struct StepProgram {
  int n_stages = 1;
  std::int64_t n_microbatches = 1;
  std::vector<StepOp> ops;
  std::vector<OpWork> works;  // distinct, in order of first use
  // Op i's name where LowerOptions::op_names asked for them (traces, tests); else empty, and
  // name(i) is "": an empty string per op would cost as much as a sixth of the op.
  std::vector<std::string> names;
  const std::string& name(std::size_t i) const;
  const OpWork& work(const StepOp& op) const { return works[op.work]; }
  const OpWork& work(std::size_t op) const { return works[ops[op].work]; }
  // Op `i` whole, its work and schedule together (a copy, for tests: the simulator and traces read
  // `ops` and `works` apart).
  Op op(std::size_t i) const;
  std::vector<Op> expanded() const;
  // First op of every micro-batch's forward and backward of every pipeline chunk, ascending:
  // where a framework that times each pass synchronizes the host with the GPU.
  std::vector<int> pass_first_ops;
  // Those of them that start a backward, ascending: a stage whose passes alternate forward,
  // backward is in a pipeline's steady state (sim/periodic_fold checks that it repeats).
  std::vector<int> backward_first_ops;
  double model_flops_per_step = 0;   // per rank, summed over ops
  double tokens_per_step = 0;        // global
};

struct LowerOptions {
  // Op names are for traces and people. The simulator alone never reads them, and formatting
  // one per op was a large share of the lowering's cost.
  bool op_names = true;
  // The trained router's per-expert load coefficient of variation under dropless routing
  // (ClusterSpec::framework.moe_router_load_cv): sets the most-loaded EP rank's rows and bytes.
  double moe_router_load_cv = 0;
};

// Lowers the step. mesh degrees must already be resolved (config_loader::resolve_layout).
StepProgram lower_step(const ModelSpec& m, const Plan& p, const Job& j, LowerOptions options = {});

// Model FLOPs per token: 6 * (N - input embeddings) + 12 * L * (heads * head_dim) * seq
// (PaLM appendix B / torchtitan's count: attention counted without the causal discount; a
// windowed layer's keys are its window, not seq).
double model_flops_per_token(const ModelSpec& m, std::int64_t seq_len);

}  // namespace meshplan

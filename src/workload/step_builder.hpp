#pragma once
// The lowering's builder, shared by the files that lower one concern each (internal to
// src/workload; lower_step() in step_program.hpp is the interface):
//   layer_lowering.cpp      one block's forward/backward with its TP/SP/CP/EP collectives
//   block_templates.cpp     a block lowered once per kind and stage, copied for the others
//   stage_lowering.cpp      a stage's schedule: embedding, blocks, head, recompute, offload
//   fsdp_lowering.cpp       FSDP/ZeRO-3: unit all-gathers, copy-out, reshard, reduce-scatters
//   grad_sync_lowering.cpp  DDP / ZeRO-1/2 buckets, Megatron's param gather, DeepSpeed's fp32 sync
//   pipeline_wiring.cpp     p2p sends between stages and the dependencies they carry
//   optimizer_lowering.cpp  the optimizer step
//   mtp_lowering.cpp        a multi-token-prediction module's input projection (its block is a block)
// and the pure pieces they read: layer_kernels.hpp (a block's kernel shapes and bytes),
// stage_params.hpp (parameters per rank, shared with the memory model), pipeline_schedule.hpp
// (a stage's order of forwards and backwards), spec/runtime_traits.hpp (what differs by runtime).
// Ops are appended in issue order; an op's index in StepProgram::ops is its identity, so the order
// in which these functions add ops is part of the output (traces and goldens depend on it).
#include <fmt/format.h>

#include <cstdint>
#include <array>
#include <map>
#include <string>
#include <utility>
#include <unordered_map>
#include <vector>

#include "spec/runtime_traits.hpp"
#include "workload/a2a_overlap.hpp"
#include "workload/activation_memory.hpp"
#include "workload/layer_kernels.hpp"
#include "workload/memory_estimate.hpp"
#include "workload/op_table.hpp"
#include "workload/pipeline_schedule.hpp"
#include "workload/stage_params.hpp"
#include "workload/step_program.hpp"

namespace meshplan::lowering {

// Figures of the step that every stage reads, computed once.
struct StepShape {
  int pp = 1, v = 1;
  std::vector<int> chunk_layers;  // per virtual stage
  std::vector<int> chunk_first;   // first (global) layer of each virtual stage
  std::int64_t microbatches = 1;
  std::int64_t per_run = 1;       // micro-batches per pipeline schedule run
  double reduce_b = 4;
  double unit = 0;                // one block's parameters on this rank (one FSDP unit)
  bool fsdp = false;
  bool reshard = true;
  bool prefetch_two = false;      // the next unit prefetched in backward
  // Units a backward all-gather may run ahead of: 1 + the backward prefetch depth (FSDP1's
  // backward_prefetch_limit), 1 without prefetch.
  int bwd_window = 1;
  // FSDP1 forward_prefetch: the pre-forward hook also issues the next units' all-gathers (this many,
  // forward_prefetch_limit) before the current unit runs; 0 without.
  int fwd_prefetch = 0;
  // FSDP1's rate limiter (limit_all_gathers) holds an all-gather until the unit two before the
  // issuing one is freed: two units gathered, 2 + fwd_prefetch under forward_prefetch; FSDP2 and
  // Megatron-FSDP bound it themselves.
  bool limit_gathers = true;
  bool hsdp = false;
  int dp_all = 1;
  MicroBatchShape mbs;
  // Transient memory terms of one micro-batch (the same for every layer and micro-batch).
  double block_grads = 0, stage_output = 0, logits_upcast = 0;
  // A recomputed block's working set, what recomputing submodules holds again, and what each
  // block (decoder layers, then MTP blocks) keeps for its backward: the same every micro-batch.
  double recompute_working = 0, modules_freed = 0;
  std::vector<double> saved_of_block;
  double saved(int layer) const { return saved_of_block[static_cast<std::size_t>(layer)]; }
  // fp32 weights under autocast: each layer's linears leave a low-precision copy of their weights
  // in autocast's cache until the forward ends (memory_estimate's end-of-forward phase).
  double autocast_cache_per_layer = 0;
  double act_p2p = 0;             // activation bytes a stage sends per micro-batch
  // Multi-token prediction: the chunk holding the modules (-1: none) and their number. Module k
  // (1-based) runs as block n_layers + k - 1 of that chunk, after its decoder layers, behind its
  // input projection (mtp_lowering.cpp); its head and loss follow the model's on the loss chunk.
  int mtp_chunk = -1;
  int n_mtp = 0;
  double mtp_input_saved = 0;     // what one module's input projection keeps (mtp_input_saved_bytes)
  // The memory model's terms (memory_estimate.hpp), attached to the ops that allocate and free them.
  StateBytesPerParam state;
  RootGathering root;
  // One unit as all-gathered: what its all-gather sends and allocates and what resharding frees
  // (float8 all-gather: the linears in 1 byte, the norms in the param dtype).
  double unit_gathered = 0;
  // Activation offload on its own stream with one layer of look-ahead (torchtune, torchtitan,
  // Megatron); false: torch's save_on_cpu (Composer), a blocking copy on the compute stream.
  bool offload_stream = false;
};

// The first and last ops of each chunk's forward and backward and its sends, per micro-batch
// (rows: virtual stages): what the pipeline wiring connects once every stage is lowered.
struct PipelineLinks {
  OpTable fwd_first, fwd_last, bwd_first, bwd_last, fwd_send, bwd_send;
  std::array<OpTable*, 6> tables() { return {&fwd_first, &fwd_last, &bwd_first, &bwd_last, &fwd_send, &bwd_send}; }
};

// One stage's bookkeeping while its ops are added.
struct StageState {
  int stage = 0;
  std::size_t begin = 0;  // this stage's ops are those from here on
  bool first = false, last = false;
  // Per layer of this stage and micro-batch (rows: row_of_layer): where its forward and backward
  // end, its FSDP reduce-scatter, its activations' copy to the host.
  std::vector<int> row_of_layer;  // -1 for another stage's layers
  int row(int layer) const {
    return layer >= 0 && layer < static_cast<int>(row_of_layer.size()) ? row_of_layer[static_cast<std::size_t>(layer)] : -1;
  }
  OpTable fwd_end_of_layer, bwd_end_of_layer, rs_of_layer, offload_d2h_of_layer;
  int prev_ag = -1;       // the stage's last FSDP all-gather (all-gathers run in order)
  std::map<int, int> param_gather_of_layer;
  int blocking_send = -1; // DeepSpeed: the send the next compute op waits for
  // FSDP's groups outside the blocks (memory_estimate.hpp RootGathering): parameters on this
  // stage, whether each is gathered now, the op that starts the stage's backward (the block
  // gathers of backward are issued once it is done).
  double root_params = 0, embed_params = 0, head_params = 0;
  std::map<int, bool> group_gathered;
  int bwd_gate = -1;
  int root_bwd_first = -1;
  // FSDP2 keeps a reduce-scatter's input until the next group's post-backward waits on it.
  double pending_reduce_free = 0;
  int pending_reduce_scatter = -1;
};

// An op with no work yet: the caller fills in what it computes or moves.
Op make_op(int stage, std::string name, StreamKind stream, OpCategory cat, OpKind kind);

class Builder {
public:
  Builder(const ModelSpec& m, const Plan& p, const Job& j, LowerOptions options)
      : m_(m), p_(p), j_(j), options_(options), traits_(runtime_traits(p)), d_(layer_dims(m, p, j, options.moe_router_load_cv)),
        k_(layer_kernels(m, p, d_)), k_dense_(layer_kernels(m, p, d_, false)) {}

  StepProgram build();

  // --- op construction (used by every concern) ---------------------------------------------
  // Names are formatted only when someone will read them (LowerOptions::op_names).
  template <typename... Args>
  std::string op_name(fmt::format_string<Args...> format, Args&&... args) const {
    return options_.op_names ? fmt::format(format, std::forward<Args>(args)...) : std::string();
  }
  std::string sub_name(const std::string& tag, std::string_view suffix) const {
    return options_.op_names ? tag + std::string(suffix) : std::string();
  }
  // Ops travel by reference until they land in the program: moving one copies its inline lists.
  // Its work joins the program's distinct works (step_builder.cpp).
  int add(Op&& op);
  StepOp& op_at(int id) { return prog_.ops[static_cast<std::size_t>(id)]; }
  Op compute_op(int stage, std::string name, OpCategory cat) const;
  Op collective_op(int stage, std::string name, StreamKind stream, OpCategory cat, CollectiveOp c, GroupKind g,
                   double bytes) const;
  // Chains an op after `prev` (if any) and records the first op of the chain.
  int chain(Op&& op, int& prev, int& first, std::vector<int>& pending_deps);

private:
  struct LayerChain;

  // --- layer_lowering.cpp: one block, TP/SP/CP/EP -----------------------------------------
  // A layer's forward (or its recompute) as compute segments with TP/CP/EP collectives between.
  // Returns {first, last} op indices; `first_deps` gate the first op. Copied from the block's
  // template where one of the same key was lowered before (block_templates.cpp).
  std::pair<int, int> layer_forward(int stage, int layer, std::int64_t mb, bool recompute, std::vector<int> first_deps);
  std::pair<int, int> layer_backward(int stage, int layer, std::int64_t mb, std::vector<int> first_deps);
  // The lowering itself, for a block whose key has no template yet (or none usable).
  std::pair<int, int> lower_layer_forward(int stage, int layer, std::int64_t mb, bool recompute, std::vector<int> first_deps);
  std::pair<int, int> lower_layer_backward(int stage, int layer, std::int64_t mb, std::vector<int> first_deps);

  // Megatron --recompute-modules other than core attention, before the layer's backward: the
  // norms' and the experts' activation (memory-bound), or the whole MoE block with its all-to-alls.
  // Returns {first, last} ops, or {-1, -1} when nothing is recomputed.
  std::pair<int, int> recompute_modules(int stage, int layer, std::int64_t mb, const std::vector<int>& deps);
  // The MLP kernels of `layer`: an MoE block's, or the dense MLP of a leading dense layer.
  const LayerKernels& kernels_of(int layer) const { return m_.moe.is_moe_layer(layer) || !m_.moe.enabled() ? k_ : k_dense_; }
  bool ep_all_to_all(int layer) const { return m_.moe.is_moe_layer(layer) && p_.mesh.ep > 1; }
  // The MoE block runs on the sequence-parallel shard without the TP gather around the MLP.
  bool moe_on_sp_shard(int layer) const {
    return m_.moe.is_moe_layer(layer) && d_.moe_skips_tp_gather && m_.moe.n_shared_experts == 0;
  }
  void forward_attention(LayerChain& chain, Op&& pre, int stage, int layer, const std::string& tag, OpCategory cat,
                         std::int64_t mb, bool overlap, double flops_scale);
  // The fused attention kernel of `layer`: the block's, with the model's sliding window where the
  // layer is a windowed one.
  AttentionShape attention_of(int layer) const;
  // Adds a layer's core attention to `op`: the fused kernel of shape `a` (attention_of), or the
  // unfused batched GEMMs and softmax, which compute every score a window would mask; returns the
  // FLOPs the GPU executes.
  double add_core_attention(Op& op, Pass pass, const AttentionShape& a) const;
  // The block linears run in the plan's FP8/FP4 recipe (attention and the LM head stay in the
  // compute dtype, as Transformer Engine and torchao's float8 conversion leave them).
  void add_layernorm(Op& op, Pass pass, int norms) const;
  bool low_precision() const { return p_.fp8 != Fp8Recipe::none && k_.fused_attention; }
  void quantize_forward(Op& op, const Gemms& linears, std::int64_t mb) const;
  void quantize_backward(Op& op, const Gemms& linears) const;
  bool fp8_weights_gathered() const;  // FSDP float8 all-gather: weights cast per shard, gathered in FP8
  void chunk_for_overlap(Op& op) const;
  Op partial_sum_op(int stage, std::string name, OpCategory cat, double full_bytes) const;
  Op tp_collective(int stage, std::string name, CollectiveOp c, double bytes) const;
  // One direction of the EP all-to-all (dispatch, combine, or either's backward).
  Op ep_all_to_all_op(int stage, std::string name) const;
  void moe_mlp_forward(LayerChain& chain, int stage, int layer, const std::string& tag, Op&& mlp);
  // Scoped CUDA graphs (Plan::cuda_graph_scope): marks what of a layer's op the graphs of its
  // module replay: the whole op (the attention, a dense MLP, a whole MoE block) or, of an MoE
  // block's op, its router's and its dispatcher's bookkeeping launches. Recompute runs eagerly.
  enum class GraphModule : std::uint8_t { attention, mlp };
  void capture_in_graph(Op& op, int layer, GraphModule module, Pass pass) const;

  // --- block_templates.cpp: a block lowered once per kind, copied after ---------------------
  // A block's ops depend on its stage, its pass, the kind of layer (MoE or dense, windowed or full
  // attention) and whether its micro-batch is the step's first (weight casts that are cached
  // after it), not on which layer or micro-batch it otherwise is: a second block of the same key
  // is the first one's ops again with their dependencies moved. Off when ops are named (the names
  // carry the layer and micro-batch).
  enum class BlockPass : std::uint8_t { forward, recompute, backward };
  struct BlockTemplate {
    bool usable = false;      // false: a block of this key reached outside its first_deps
    std::vector<StepOp> ops;  // a dep d >= 0: the template's op d; d < 0: first_deps[-1 - d]
    int first = 0, last = 0;  // as indices into ops
  };
  std::uint64_t block_key(int stage, int layer, std::int64_t mb, BlockPass pass, std::size_t n_first_deps) const;
  // The block of `key`, {first, last}: copied from its template, or where there is none usable
  // lowered by `lower(first_deps)` (the first block of a key is then kept as its template).
  template <typename Lower>
  std::pair<int, int> block_from_template(std::uint64_t key, std::vector<int>&& first_deps, Lower&& lower);
  std::pair<int, int> copy_block(const BlockTemplate& t, const std::vector<int>& first_deps);
  // The ops from `begin` on, which the block's lowering has just added, as the template `t`.
  void keep_block(BlockTemplate& t, std::size_t begin, const std::vector<int>& first_deps, std::pair<int, int> ends) const;

  // --- stage_lowering.cpp: a stage's compute order ----------------------------------------
  void lower_stage(int stage);
  void forward_chunk(StageState& st, const Step& step);
  void backward_chunk(StageState& st, const Step& step);
  void backward_layer(StageState& st, const Step& step, int vstage, int layer, bool chunk_last_layer, int& last);
  int forward_head(StageState& st, std::int64_t mb, int last, double& autocast_cached);
  // The vocabulary the loss runs over: the TP shard under loss parallelism, else all of it.
  double loss_vocab() const;
  // Without loss parallelism: the head's GEMM as an op of its own and the all-gather of its
  // logits over TP, which the loss op `head` then waits for; false (nothing added) with it.
  bool gather_logits(int stage, std::int64_t mb, Op& head);
  int backward_head(StageState& st, int vstage, std::int64_t mb);
  int embedding(int stage, std::int64_t mb, Pass pass);
  // Delayed FP8 scaling's amax all-reduce at the end of a chunk's block forward or backward,
  // chained after `last`; returns the op, or `last` when the recipe has none.
  int amax_reduction(int stage, int vstage, std::int64_t mb, Pass pass, int last);
  Op host_copy(int stage, std::string name, bool to_device, double bytes) const;
  // The selective recompute of one layer (per-op SAC, or core attention without FlashAttention).
  int selective_recompute(int stage, int layer, std::int64_t mb, const std::vector<int>& deps);

  // --- fsdp_lowering.cpp -------------------------------------------------------------------
  // torchtitan under PP keeps units gathered and skips gradient sync until the last backward
  // of a schedule run (the pipelining stage sets reshard_after_backward / requires_gradient_sync
  // only for the last micro-batch), so a unit is gathered once per run, not per micro-batch.
  bool defers_fsdp_sync() const { return traits_.pipelining_defers_fsdp_sync && s_.pp > 1 && !s_.reshard; }
  bool fsdp_run_last(std::int64_t mb) const {
    return mb % s_.per_run == s_.per_run - 1 || mb == s_.microbatches - 1;
  }
  // Whether this micro-batch's backward reduces the gradients (else they accumulate unsharded).
  bool fsdp_syncs(std::int64_t mb) const {
    return defers_fsdp_sync() ? fsdp_run_last(mb) : p_.grad_sync_every_microbatch || mb == s_.microbatches - 1;
  }
  // `issuing_layer`: the unit whose pre-forward hook issues the gather (the unit itself, or under
  // forward_prefetch the one it runs ahead of).
  int fsdp_gather_forward(StageState& st, int layer, int issuing_layer, std::int64_t mb, std::vector<int>& deps);
  void fsdp_gather_backward(StageState& st, int layer, std::int64_t mb, int last, std::vector<int>& deps);
  int copy_out(int stage, int all_gather, std::string name, double bytes);
  // The groups outside the blocks: 0 the root unit, 1 the embedding, 2 [norm, output].
  enum RootGroup { kRoot = 0, kEmbed = 1, kHead = 2 };
  double group_params(const StageState& st, int group) const;
  void fsdp_gather_group(StageState& st, int group, std::int64_t mb, bool backward, std::vector<int>& deps);
  void fsdp_release_group(StageState& st, int group, int op);
  void fsdp_reduce_group(StageState& st, int group, std::int64_t mb, int backward_first, int backward_end);
  // Gradients that do not live through forward appear as backward (or the reduce-scatter) produces them.
  void add_grads(int op, double params);
  // The reduce buffer of the previous group's reduce-scatter is freed at `op`'s end (FSDP2), then
  // `buffer` becomes the pending one; FSDP1 frees each at the end of its own reduce-scatter.
  void hold_reduce_buffer(StageState& st, int op, int rs, double buffer);
  // FSDP2's final callback at the end of each backward waits for the last reduce-scatter.
  void release_pending_reduce(StageState& st);
  // torchtitan does not reshard the model's last block after forward (RootGathering).
  bool kept_gathered(int layer) const { return s_.root.last_block_kept && layer == m_.n_layers - 1; }
  void fsdp_wait_previous_reduce(const StageState& st, int layer, std::int64_t mb, std::vector<int>& deps) const;
  void fsdp_reduce(StageState& st, int layer, std::int64_t mb, int backward_first, int backward_end);

  // --- grad_sync_lowering.cpp --------------------------------------------------------------
  void gather_updated_params(StageState& st);
  void dp_reduce(int stage, int layer, int backward_end);
  int hp_grad_accumulate(int stage, int vstage, std::int64_t mb, int n_chunk_layers, int last);
  void all_reduce_after_flush(const StageState& st);

  // --- mtp_lowering.cpp: a multi-token-prediction module before and after its block ----------
  // Forward: the shifted tokens' embedding, the two norms, their concatenation and the 2h -> h
  // projection with its TP collectives; returns {first, last}. The block follows as `layer`.
  std::pair<int, int> mtp_input_forward(int stage, int layer, std::int64_t mb, std::vector<int> deps);
  // Backward, after the block's: returns the last op.
  int mtp_input_backward(StageState& st, int layer, std::int64_t mb, int last);
  // The 2h -> h projection (eh_proj), column-parallel over TP.
  GemmShape mtp_projection_gemm() const;
  // Activations (forward) or their gradients (backward) a chunk sends: from the chunk holding the
  // multi-token-prediction modules on, the model's and each module's hidden states travel together.
  double p2p_bytes(int vstage, bool forward) const;

  // --- pipeline_wiring.cpp -----------------------------------------------------------------
  // Activations (forward) or their gradients (backward) to the neighbouring pipeline stage.
  Op p2p_send(int stage, std::string name, double bytes, int after) const;
  int send(StageState& st, Op&& op);
  template <typename Deps>
  void after_blocking_send(StageState& st, Deps& deps) const {
    if (st.blocking_send >= 0) deps.push_back(st.blocking_send);
    st.blocking_send = -1;
  }
  void wire_pipeline();
  // Megatron-Core's expert all-to-all overlap: the stage's merged forward/backward pairs reissued
  // (stage_lowering.cpp, workload/a2a_overlap.hpp).
  void overlap_expert_all_to_alls(const StageState& st, const std::vector<Step>& order, const std::vector<OpSpan>& spans);

  // --- optimizer_lowering.cpp --------------------------------------------------------------
  void optimizer_step(StageState& st);

  // --- figures ------------------------------------------------------------------------------
  // The parameters of `stage`'s blocks (its chunks' leading dense blocks counted as dense) and root.
  StageParams stage_params_of(int stage) const;
  double stage_params_total(int stage) const { return stage_params_of(stage).total(); }
  int chunk_layers(int vstage) const { return s_.chunk_layers[static_cast<std::size_t>(vstage)]; }
  // Decoder layers on pipeline stage `stage`, over all its chunks.
  int stage_layers(int stage) const {
    int layers = 0;
    for (int c = 0; c < s_.v; ++c) layers += chunk_layers(c * s_.pp + stage);
    return layers;
  }
  int chunk_first(int vstage) const { return s_.chunk_first[static_cast<std::size_t>(vstage)]; }
  // The chunk's blocks: its decoder layers and, on the chunk holding them, the MTP modules' blocks.
  int chunk_blocks(int vstage) const { return chunk_layers(vstage) + (vstage == s_.mtp_chunk ? s_.n_mtp : 0); }
  void set_up_step();

  const ModelSpec& m_;
  const Plan& p_;
  const Job& j_;
  LowerOptions options_;
  RuntimeTraits traits_;
  LayerDims d_;
  LayerKernels k_;
  LayerKernels k_dense_;  // MoE models' leading dense layers (== k_ for a dense model)
  StepShape s_;
  PipelineLinks links_;
  StepProgram prog_;
  std::unordered_map<std::uint64_t, SmallVector<std::uint32_t, 2>> works_by_hash_;  // into prog_.works
  std::unordered_map<std::uint64_t, BlockTemplate> block_templates_;
  int n_vstages_ = 1;
};

template <typename Lower>
std::pair<int, int> Builder::block_from_template(std::uint64_t key, std::vector<int>&& first_deps, Lower&& lower) {
  if (options_.op_names) return lower(std::move(first_deps));
  auto [it, fresh] = block_templates_.try_emplace(key);
  BlockTemplate& t = it->second;  // references into an unordered_map outlive its rehashing
  if (!fresh) return t.usable ? copy_block(t, first_deps) : lower(std::move(first_deps));
  const std::size_t begin = prog_.ops.size();
  const std::vector<int> deps = first_deps;
  const std::pair<int, int> ends = lower(std::move(first_deps));
  keep_block(t, begin, deps, ends);
  return ends;
}

}  // namespace meshplan::lowering

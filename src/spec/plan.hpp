#pragma once
// Plan: how a model is laid out over GPUs and every runtime knob that changes memory or time
// (the "execution" input). Importers map runtime files onto it with the runtimes' own defaults.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "spec/attention_kernel.hpp"
#include "spec/dtype.hpp"

namespace meshplan {

// Mesh degrees; world = pp * dp_replicate * dp_shard * cp * tp. TP is innermost (within a node).
// ep re-partitions the data-parallel ranks for MoE experts and does not multiply the world.
struct Mesh {
  int pp = 1;
  int vpp = 1;           // virtual stages per pipeline rank (interleaved 1F1B)
  int dp_replicate = 1;  // replicas of the model state (DDP, or HSDP's replicate dim)
  int dp_shard = 1;      // FSDP shard group (ZeRO-3 / HSDP's shard dim)
  int cp = 1;            // context parallel: sequence split across ranks
  int tp = 1;            // tensor parallel
  int ep = 1;            // expert parallel (MoE)
  // Expert tensor parallel: the TP degree of the expert MLPs (Megatron --expert-tensor-parallel-size,
  // torchtitan expert_tensor_parallel_degree); 0 means tp. With etp < tp the EP group borrows
  // tensor-parallel ranks too: ep * etp divides tp * dp * cp.
  int etp = 0;
  int expert_tp() const { return etp > 0 ? etp : tp; }
  // Saturates at INT64_MAX instead of wrapping: callers compare it against the GPU count, and
  // degrees straight from a file can be anything up to INT_MAX each.
  std::int64_t world() const {
    std::int64_t w = 1;
    for (int d : {pp, dp_replicate, dp_shard, cp, tp})
      if (__builtin_mul_overflow(w, static_cast<std::int64_t>(d), &w)) return INT64_MAX;
    return w;
  }
  int dp() const { return dp_replicate * dp_shard; }
};

// What is sharded over the data-parallel group (ZeRO stages).
enum class Sharding {
  none,   // NO_SHARD / DDP: everything replicated
  zero1,  // optimizer state (and fp32 master params) sharded: Megatron distributed optimizer
  zero2,  // + gradients: FSDP SHARD_GRAD_OP, FSDP2 reshard_after_forward=False
  zero3,  // + parameters: FSDP FULL_SHARD / HYBRID_SHARD
};

enum class Runtime {
  composer_fsdp1,   // MosaicML Composer / llm-foundry on torch FSDP1
  composer_fsdp2,   // Composer with FSDP_VERSION=2
  torchtitan_fsdp2, // torchtitan (fully_shard + DTensor)
  megatron,         // Megatron-LM / Megatron-Core / NeMo
  generic,          // meshplan's own plan TOML without a runtime
};

enum class BackwardPrefetch { none, backward_pre, backward_post };

enum class AcMode {
  none,
  full,             // every block checkpointed, recomputed whole in backward
  selective_layer,  // every ac_every_n-th block checkpointed (torchtitan selective "N")
  selective_op,     // per-op SAC: matmul outputs saved, every second mm recomputed
  selective_attn,   // Megatron selective: only core attention recomputed
};

enum class TpStyle {
  full,      // Megatron/torchtitan: attention heads and MLP split, SP optional
  mlp_only,  // llm-foundry "ffn" strategy: only the MLP is tensor-parallel
};

enum class PipelineSchedule { gpipe, one_f_one_b, interleaved_1f1b };

// te_blockwise: Transformer Engine Float8BlockScaling (DeepSeek-V3 style 1x128 / 128x128 scales).
enum class Fp8Recipe { none, te_delayed, te_current, mxfp8, nvfp4, torchao_tensorwise, torchao_rowwise, te_blockwise };

enum class Optimizer { adamw, adamw8bit, sgd };

// How the optimizer's update is computed (torchtitan's optimizer.implementation; torch.optim's
// foreach / fused flags). `framework` = the runtime's default (RuntimeTraits::foreach_adamw).
// foreach allocates whole-model temporaries; fused and for-loop do not (for-loop's are one
// tensor at a time, below the rest of the step's working set).
enum class OptimizerImpl { framework, foreach, fused, for_loop };

// How an MoE layer's tokens reach the experts' ranks (Megatron --moe-token-dispatcher-type; the
// flex dispatcher's DeepEP / HybridEP backends; torchtitan expert_parallel_comm_backend).
// alltoall: NCCL all-to-all, every routed copy of a token crosses on its own. deepep / hybridep:
// a token's copies for one NVLink domain cross the network once and fan out over NVLink there
// (docs/collectives.md "Deduplicated dispatch").
enum class MoeDispatcher { alltoall, deepep, hybridep };

// How the decoder layers are divided among pipeline ranks when the runtime is told (Megatron's
// TransformerConfig; docs/layouts.md "Pipeline splits"). Nothing given: an even split, else
// torchtitan's default (spec/pipeline_split.hpp).
struct PipelineSplit {
  bool embedding_as_layer = false;  // --account-for-embedding-in-pipeline-split
  bool loss_as_layer = false;       // --account-for-loss-in-pipeline-split
  int first_stage_layers = -1;      // --decoder-first-pipeline-num-layers (-1: not given)
  int last_stage_layers = -1;       // --decoder-last-pipeline-num-layers (-1: not given)
  // --pipeline-model-parallel-layout (spec/pipeline_layout.hpp): the decoder layers of each
  // virtual stage in model order, the embedding in the first, the loss in the last; empty: none.
  std::vector<int> chunk_layers;
  int mtp_chunk = -1;               // the stage the layout puts its MTP layers in (-1: none)
  int mtp_layers = 0;               // the MTP layers (m) the layout places
  bool given() const {
    return embedding_as_layer || loss_as_layer || first_stage_layers >= 0 || last_stage_layers >= 0 ||
           !chunk_layers.empty();
  }
};

struct Plan {
  Runtime runtime = Runtime::generic;
  Mesh mesh;

  // Data-parallel sharding.
  Sharding sharding = Sharding::zero3;
  bool reshard_after_forward = true;     // false for zero2 (and for FSDP2 roots / PP in torchtitan)
  bool root_unsharded = false;           // FSDP1: root unit (embeddings, final norm, head) stays unsharded
  BackwardPrefetch backward_prefetch = BackwardPrefetch::backward_pre;
  bool forward_prefetch = false;
  int forward_prefetch_limit = 1;
  int backward_prefetch_limit = 1;
  bool limit_all_gathers = true;         // FSDP1 rate limiter: at most 2 all-gathers in flight
  bool grad_sync_every_microbatch = true; // Composer and torchtitan reduce-scatter per micro-batch

  // Precision. State = fp32 master params + fp32 grads + optimizer moments unless state_dtype says bf16.
  Dtype param_dtype = Dtype::bf16;       // compute and all-gather dtype
  Dtype reduce_dtype = Dtype::fp32;      // gradient reduce-scatter / all-reduce dtype
  Dtype state_dtype = Dtype::fp32;       // stored weights, grads, optimizer moments
  Dtype compute_dtype = Dtype::bf16;     // matmul/activation dtype (autocast); fp32 only without AMP
  std::string mixed_precision_name;      // "FULL", "DEFAULT", "PURE", "custom" (as written by the user)
  bool keep_low_precision_grads = false;
  Fp8Recipe fp8 = Fp8Recipe::none;
  bool fp8_all_gather = false;           // FSDP float8 all-gather (torchao)
  // Transformer Engine's FP8 DotProductAttention (Megatron --fp8-dot-product-attention,
  // NVTE_FP8_DPA=1): the fused attention kernel runs on FP8 Q, K, V under the linears' recipe.
  bool fp8_attention = false;

  // Activation checkpointing and offload.
  AcMode ac = AcMode::none;
  int ac_every_n = 1;                    // selective_layer: checkpoint blocks with index % n == 0
  bool ac_reentrant = false;
  // Megatron --recompute-modules beyond core attention (with any ac mode but full): submodules
  // whose outputs are dropped after forward and recomputed in backward.
  struct RecomputeModules {
    bool norms = false;    // layernorm: the two block norms' outputs
    bool moe_act = false;  // moe_act: the experts' activation function
    bool moe = false;      // moe: the whole MoE block (router, dispatch, experts, combine)
    bool any() const { return norms || moe_act || moe; }
  } recompute_modules;
  bool act_offload = false;              // activations saved for backward live in pinned host memory
  // Megatron --fine-grained-activation-offloading --offload-modules: with act_offload, only the
  // tensors these submodules save go to the host (none set: every saved tensor, --cpu-offloading).
  struct OffloadModules {
    bool attn_norm = false;   // the attention norm's input
    bool qkv_linear = false;  // the QKV projection's input (the norm output)
    bool core_attn = false;   // Q, K, V and the softmax statistics core attention saves
    bool attn_proj = false;   // the output projection's input (the attention output)
    bool mlp_norm = false;    // the MLP norm's input
    bool expert_fc1 = false;  // the experts' first GEMM input (the dispatched tokens)
    bool moe_act = false;     // the experts' activation input (the first GEMM's output)
    bool any() const { return attn_norm || qkv_linear || core_attn || attn_proj || mlp_norm || expert_fc1 || moe_act; }
  } offload_modules;
  bool param_offload = false;            // FSDP CPU offload: params, grads, optimizer step on host

  // Model parallelism details.
  TpStyle tp_style = TpStyle::full;
  bool sequence_parallel = false;
  bool async_tp = false;
  // The loss over the head's vocabulary-sharded logits (torchtitan's loss_parallel, Megatron's
  // vocab-parallel cross entropy); false (torchtitan's disable_loss_parallel): the logits are
  // all-gathered over the TP ranks and each computes the loss over the whole vocabulary.
  bool loss_parallel = true;
  PipelineSchedule schedule = PipelineSchedule::one_f_one_b;
  PipelineSplit pipeline_split;
  bool flash_attention = true;           // fused attention: no s^2 score matrix kept
  int flash_attention_version = 2;       // fused kernel generation (2: flash-attn 2.x/SDPA, 1: flash-attn 1.x, Triton)
  // The fused attention kernel family; `framework` = what the runtime's attention API picks on
  // the GPU (spec/attention_kernel.hpp, docs/compute.md).
  AttentionKernel attention_kernel = AttentionKernel::framework;
  // cuDNN release of the run's container (parse_library_version: "9.17" -> 9017); 0 = the newest
  // the profile measured. Only cuDNN fused attention reads it.
  int cudnn_version = 0;
  bool dropout = false;                  // dropout on (keeps 1-byte masks; Megatron GPT default)
  // One-kernel cross-entropy on the low-precision logits (flash-attn's xentropy, llm-foundry's MPT
  // default `loss_fn: fused_crossentropy`): saves the logits and a per-row log-sum-exp, writes one
  // gradient in their dtype. Otherwise torch's log_softmax + nll_loss over fp32 logits.
  bool fused_cross_entropy = false;
  // torchtune's CEWithChunkedOutputLoss: the output projection, the fp32 upcast and the loss run
  // over `loss_chunks` chunks of the sequence (plan key loss_kernel = "chunked").
  bool chunked_cross_entropy = false;
  int loss_chunks = 8;
  // The optimizer steps each parameter in its post-accumulate-grad hook, inside backward
  // (torchtune optimizer_in_bwd): the whole model's gradients never exist at once.
  bool optimizer_in_backward = false;
  // Megatron-DeepSpeed: the Megatron model driven by DeepSpeed's pipeline engine and BF16_Optimizer
  // (blocking pipeline sends, fp32 gradient accumulation after every micro-batch, an fp32
  // all-reduce of gradients after the flush, pipe buffers kept per micro-batch). Megatron only.
  bool deepspeed_engine = false;

  Optimizer optimizer = Optimizer::adamw;
  OptimizerImpl optimizer_impl = OptimizerImpl::framework;
  MoeDispatcher moe_dispatcher = MoeDispatcher::alltoall;
  // Megatron-Core's expert all-to-all overlap (--overlap-moe-expert-parallel-comm): where the
  // schedule runs a forward and a backward of different micro-batches back to back, they run as
  // one merged step, layer by layer, so that each one's dispatch and combine all-to-alls run
  // under the other's attention and expert compute (workload/a2a_overlap.hpp). Needs ep > 1 and,
  // with pp > 1, the interleaved schedule.
  bool moe_a2a_overlap = false;
  // Megatron-Core's fused MoE kernels (workload/moe_launches.hpp): --moe-permute-fusion (Transformer
  // Engine's permute, unpermute and chunk-sort kernels) and --moe-router-fusion (its top-k with
  // score function and auxiliary-loss kernels). Both off by default, as in Megatron-LM.
  bool moe_permute_fusion = false;
  bool moe_router_fusion = false;
  // The routed experts' GEMMs as grouped GEMMs (Megatron --moe-grouped-gemm: Transformer Engine's
  // GroupedLinear), or, without it, one expert after another (Megatron's SequentialMLP: each
  // expert's GEMMs their own launches and waves). Grouped in meshplan's plans; Megatron-LM's own
  // default is sequential.
  bool moe_grouped_gemm = true;
  bool compile = false;
  // CUDA graphs (Megatron --enable-cuda-graph / --external-cuda-graph / --cuda-graph-impl,
  // torch.compile mode="reduce-overhead"): each captured region is replayed with one launch from
  // the host.
  bool cuda_graphs = false;
  // What the graphs capture (Megatron --cuda-graph-scope): every op of the step (full, the
  // default), or only the listed modules of each layer, the rest issued eagerly.
  struct CudaGraphScope {
    bool full = true;
    bool attn = false;            // the self-attention: norm, QKV, core attention, projection
    bool mlp = false;             // a dense layer's MLP
    bool moe = false;             // a whole MoE layer
    bool moe_router = false;      // the router and its auxiliary loss
    bool moe_preprocess = false;  // the token dispatcher's bookkeeping before the dispatch
    friend bool operator==(const CudaGraphScope&, const CudaGraphScope&) = default;
  };
  CudaGraphScope cuda_graph_scope;
};

// Megatron's --cuda-graph-scope names, in its order; parse_cuda_graph_scope refuses others.
std::vector<std::string> cuda_graph_scope_names(const Plan::CudaGraphScope& s);
// Every name parse_cuda_graph_scope takes, for error messages: "full, full_iteration, attn, ...".
std::string cuda_graph_scope_choices();
std::optional<Plan::CudaGraphScope> parse_cuda_graph_scope(const std::vector<std::string>& names, std::string* bad);

// fp32 weights computed under torch.autocast alone (no FSDP/Megatron mixed-precision policy):
// the residual stream stays fp32 and autocast caches a low-precision copy of every weight it
// casts until the forward's autocast region exits.
inline bool autocast_fp32_weights(const Plan& p) {
  return p.param_dtype == Dtype::fp32 && (p.compute_dtype == Dtype::bf16 || p.compute_dtype == Dtype::fp16);
}

// Ranks over which the stored state (optimizer moments, and with zero2/zero3 the gradients and
// parameters) of one parameter is divided. HSDP-style layouts (an FSDP shard dim beside a
// replicate dim) shard within the shard dim; otherwise the whole data-parallel group shares it,
// context-parallel ranks included (torchtitan folds CP into FSDP; Megatron's distributed optimizer
// shards over the data-parallel group with context parallelism).
inline double state_shard_group(const Plan& p) {
  const Mesh& m = p.mesh;
  const double shard = static_cast<double>(m.dp_shard) * m.cp;
  const double all = static_cast<double>(m.dp_replicate) * m.dp_shard * m.cp;
  switch (p.sharding) {
    case Sharding::none: return 1;
    case Sharding::zero3: return shard;
    case Sharding::zero1:
    case Sharding::zero2: return (m.dp_shard > 1 && m.dp_replicate > 1) ? shard : all;
  }
  return 1;
}

// The dtype the block linears' GEMMs run in under a low-precision recipe, each with its own GEMM
// curve: NVFP4, MXFP8, blockwise FP8, and per-tensor / row-wise FP8 for the rest; `none` leaves the
// compute dtype.
inline Dtype low_precision_gemm_dtype(Fp8Recipe r) {
  switch (r) {
    case Fp8Recipe::nvfp4: return Dtype::fp4;
    case Fp8Recipe::mxfp8: return Dtype::mxfp8;
    case Fp8Recipe::te_blockwise: return Dtype::fp8_block;
    default: return Dtype::fp8;
  }
}

// The dtype Transformer Engine's FP8 attention runs in: MXFP8 block scales under the MXFP8 recipe,
// per-tensor scaled FP8 under delayed and current scaling.
inline Dtype fp8_attention_dtype(Fp8Recipe r) { return r == Fp8Recipe::mxfp8 ? Dtype::mxfp8 : Dtype::fp8; }

// Recipes whose attention Transformer Engine can run in FP8.
inline bool supports_fp8_attention(Fp8Recipe r) {
  return r == Fp8Recipe::te_delayed || r == Fp8Recipe::te_current || r == Fp8Recipe::mxfp8;
}

// The batch: what one optimizer step processes.
// Importers may leave global_batch, micro_batch or grad_accum at 0 when the file fixes them only
// in terms of the GPU count (torchtitan global_batch_size=-1, Composer microbatch 'auto');
// resolve_layout (config_loader.hpp) fills them in.
struct Job {
  std::int64_t seq_len = 0;        // tokens per sequence
  std::int64_t global_batch = 0;   // sequences per optimizer step, all replicas
  std::int64_t micro_batch = 1;    // sequences per forward/backward per data-parallel rank
  std::int64_t grad_accum = 1;     // micro-batches per step per data-parallel rank
  // Micro-batches per pipeline schedule run; 0 = all grad_accum micro-batches in one run
  // (Megatron). torchtitan runs one schedule per local batch (local_batch / pp microbatch size),
  // and each run pays its own pipeline bubble.
  std::int64_t pp_microbatches = 0;
  std::int64_t tokens_per_step() const { return global_batch * seq_len; }
};

std::string_view to_string(Sharding s);
std::string_view to_string(Runtime r);  // names from the registry (spec/runtimes.cpp)
std::string_view to_string(BackwardPrefetch b);
std::string_view to_string(AcMode a);
std::string_view to_string(TpStyle t);
std::string_view to_string(PipelineSchedule p);
std::string_view to_string(Fp8Recipe f);
std::string_view to_string(Optimizer o);
std::string_view to_string(OptimizerImpl o);
std::string_view to_string(MoeDispatcher d);
std::optional<Sharding> parse_sharding(std::string_view s);
std::optional<Runtime> parse_runtime(std::string_view s);
std::optional<BackwardPrefetch> parse_backward_prefetch(std::string_view s);
std::optional<AcMode> parse_ac_mode(std::string_view s);
std::optional<PipelineSchedule> parse_schedule(std::string_view s);
std::optional<Fp8Recipe> parse_fp8(std::string_view s);
std::optional<Optimizer> parse_optimizer(std::string_view s);
std::optional<OptimizerImpl> parse_optimizer_impl(std::string_view s);
std::optional<MoeDispatcher> parse_moe_dispatcher(std::string_view s);

}  // namespace meshplan

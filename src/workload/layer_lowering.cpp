// One transformer block's forward and backward on one rank, with the collectives that layer-internal
// parallelism puts between its kernels: tensor parallelism (all-reduces, or sequence parallelism's
// all-gathers and reduce-scatters; llm-foundry's MLP-only TP gathering the batch), context
// parallelism's K/V exchange and expert parallelism's all-to-alls. FP8/FP4 quantization and
// overlapped (asynchronous) TP shape the same ops.
#include <algorithm>
#include <cstdint>
#include <limits>

#include "workload/eager_ops.hpp"
#include "workload/step_builder.hpp"

namespace meshplan::lowering {

// One layer's ops in issue order. With `overlap` (async TP: Megatron --tp-comm-overlap,
// torchtitan's micro-pipelined TP) a TP all-gather is cut into chunks that pipeline with the GEMM
// op consuming it, and a reduce-scatter with the GEMM op producing it: the collective runs beside
// that op and the op after the pair waits for both. Otherwise every op waits for the one before.
struct Builder::LayerChain {
  LayerChain(Builder& builder, bool overlapped) : b(builder), overlap(overlapped) {}
  Builder& b;
  bool overlap = false;
  int prev = -1, first = -1;
  std::vector<int> pending;     // deps of the next op chained
  std::vector<int> after_next;  // all-gathers running beside the next op: the op after it waits
  void compute(Op&& op) {
    b.chain(std::move(op), prev, first, pending);
    pending.insert(pending.end(), after_next.begin(), after_next.end());
    after_next.clear();
  }
  void comm(Op&& op) {
    if (!overlap || op.category != OpCategory::tp) {
      compute(std::move(op));
      return;
    }
    if (first < 0) {
      // A zero-work entry op carries the layer's incoming dependencies (pipeline wiring
      // attaches to the first op), so the collective and its consumer can both follow it.
      compute(b.compute_op(op.stage, op.name.empty() ? std::string() : op.name + ".entry", OpCategory::compute));
    }
    if (op.collective == CollectiveOp::all_gather) {
      op.deps.assign(pending.begin(), pending.end());
      op.deps.push_back(prev);
      after_next.push_back(b.add(std::move(op)));
    } else {
      const auto producer_deps = b.op_at(prev).deps;
      op.deps.assign(producer_deps.begin(), producer_deps.end());
      const int stage = op.stage;
      const double full_bytes = op.bytes;
      std::string sum_name = op.name.empty() ? std::string() : op.name + ".sum";
      pending.push_back(b.add(std::move(op)));
      if (b.traits_.async_tp_sums_partials)
        compute(b.partial_sum_op(stage, std::move(sum_name), b.op_at(prev).category, full_bytes));
    }
  }
  // The layer ends when its overlapped collectives do.
  std::pair<int, int> finish(int stage, const std::string& name, OpCategory cat) {
    pending.insert(pending.end(), after_next.begin(), after_next.end());
    after_next.clear();
    if (!pending.empty() && first >= 0) {
      Op join = b.compute_op(stage, name, cat);
      compute(std::move(join));
    }
    return {first, prev};
  }
};

AttentionShape Builder::attention_of(int layer) const {
  AttentionShape a = k_.attention;
  // A window as long as the keys is no window (AttentionShape::windowed), so clamping keeps it in 32 bits.
  if (m_.is_windowed_layer(layer))
    a.window = static_cast<std::int32_t>(std::min({m_.sliding_window, a.seq_kv, std::int64_t{std::numeric_limits<std::int32_t>::max()}}));
  return a;
}

double Builder::add_core_attention(Op& op, Pass pass, const AttentionShape& a) const {
  if (k_.fused_attention) {
    op.attention = {a};
    op.attention_pass = pass;
    if (p_.fp8_attention && low_precision()) {
      op.low_precision_attention = true;
      op.cast_bytes += attention_cast_bytes(a, pass, d_.e, quant_recipe(p_.fp8));
      op.kernels += kAttentionCastKernelsPerPass;
    }
    if (p_.mesh.cp > 1 && traits_.ring_attention_merges_eagerly) {
      const double q_elements = static_cast<double>(a.batch * a.seq_q * a.heads * a.head_dim);
      const double kv_elements = static_cast<double>(a.batch * a.seq_q * a.kv_heads * a.head_dim);  // a chunk: s / cp
      const RingMergeCost merge =
          ring_attention_merge(q_elements, kv_elements, p_.mesh.cp, d_.e, pass == Pass::backward, p_.compile);
      op.memory_bound_bytes += merge.bytes;
      op.kernels += merge.kernels;
    }
    return attention_flops(a, pass);
  }
  double flops = 0;
  for (const GemmShape& g : k_.score_gemms) {
    if (pass == Pass::forward) {
      op.gemms.push_back(g);
      flops += g.flops();
    } else {
      op.gemms.push_back(dgrad(g));
      op.gemms.push_back(wgrad(g));
      flops += 2 * g.flops();
    }
  }
  op.memory_bound_bytes += pass == Pass::forward ? k_.score_bytes_fwd : k_.score_bytes_bwd;
  op.kernels += pass == Pass::forward ? k_.score_kernels_fwd : k_.score_kernels_bwd;
  return flops;
}

void Builder::quantize_forward(Op& op, const Gemms& linears, std::int64_t mb) const {
  if (!low_precision()) return;
  // Transformer Engine caches the quantized weights after the first micro-batch of a step;
  // torchao's float8 linears cast them on every forward.
  // With FSDP's float8 all-gather the gathered weights arrive in FP8: each rank casts only its
  // shard, before the all-gather (torchao's fsdp_pre_all_gather).
  const QuantRecipe q = quant_recipe(p_.fp8, p_.compile);
  const bool gathered_fp8 = fp8_weights_gathered();
  const bool weights = (!q.caches_weights || mb == 0) && !gathered_fp8;
  op.low_precision_gemms = true;
  op.cast_bytes += quantize_forward_bytes(linears, d_.e, q, weights);
  op.kernels += quantize_forward_kernels(linears, q, weights);
  if (gathered_fp8) {
    op.cast_bytes += quantize_weight_shard_bytes(linears, d_.e, q, p_.mesh.dp_shard);
    op.kernels += (q.eager_casts ? kEagerCastKernels : 2) * static_cast<int>(linears.size());
  }
}

void Builder::quantize_backward(Op& op, const Gemms& linears) const {
  if (!low_precision()) return;
  op.low_precision_gemms = true;
  const QuantRecipe q = quant_recipe(p_.fp8, p_.compile);
  // The backward's all-gather brings the FP8 weights again: only the inputs are recast.
  const bool weights = !fp8_weights_gathered();
  op.cast_bytes += quantize_backward_bytes(linears, d_.e, q, weights);
  op.kernels += quantize_backward_kernels(linears, q, weights);
}

// `norms` of the block's LayerNorms in `pass`, where they run as PyTorch's layer_norm kernels
// (layer_kernels.hpp): their bytes are already in the op's element-wise bytes.
void Builder::add_layernorm(Op& op, Pass pass, int norms) const {
  const double bytes = norms * (pass == Pass::forward ? k_.layernorm_bytes_fwd : k_.layernorm_bytes_bwd);
  if (bytes <= 0) return;
  op.layernorm.bytes += bytes;
  op.layernorm.width = d_.h;
  op.layernorm.pass = pass;
}

bool Builder::fp8_weights_gathered() const { return p_.fp8_all_gather && p_.mesh.dp_shard > 1; }

// Overlapped TP runs each GEMM beside a collective as tp chunks of m / tp rows, one per ring
// step (Transformer Engine userbuffers, torchtitan's micro-pipelined TP), so they are priced as
// tp separate GEMMs of that size.
void Builder::chunk_for_overlap(Op& op) const {
  const int tp = p_.mesh.tp;
  Gemms chunked;
  for (const GemmShape& g : op.gemms) {
    if (g.m < tp) {
      chunked.push_back(g);
      continue;
    }
    GemmShape chunk = g;
    chunk.m = g.m / tp;
    for (int i = 0; i < tp; ++i) chunked.push_back(chunk);
  }
  op.kernels += static_cast<int>(chunked.size() - op.gemms.size());
  op.gemms = std::move(chunked);
}

// torch's micro-pipelined matmul + reduce-scatter ends with the tp partial chunks of this rank's
// slice stacked in one buffer and summed by one reduction kernel: it reads the whole tensor the
// reduce-scatter took (tp chunks of 1/tp each) and writes the rank's 1/tp.
Op Builder::partial_sum_op(int stage, std::string name, OpCategory cat, double full_bytes) const {
  Op op = compute_op(stage, std::move(name), cat);
  op.memory_bound_bytes = full_bytes * (1.0 + 1.0 / p_.mesh.tp);
  op.kernels = 1;
  return op;
}

Op Builder::tp_collective(int stage, std::string name, CollectiveOp c, double bytes) const {
  return collective_op(stage, std::move(name), StreamKind::tp, OpCategory::tp, c, GroupKind::tp, bytes);
}

void Builder::capture_in_graph(Op& op, int layer, GraphModule module, Pass pass) const {
  const Plan::CudaGraphScope& s = p_.cuda_graph_scope;
  if (!p_.cuda_graphs || s.full || op.kernels == 0) return;
  auto whole = [&] {
    op.graphed_kernels = op.kernels;
    op.graph_replays = 1;
  };
  if (module == GraphModule::attention) {
    if (s.attn) whole();
    return;
  }
  if (!m_.moe.enabled() || !m_.moe.is_moe_layer(layer)) {
    if (s.mlp) whole();
    return;
  }
  if (s.moe) {
    whole();
    return;
  }
  const LayerKernels& k = kernels_of(layer);
  auto part = [&](bool scoped, int kernels) {
    if (!scoped || kernels == 0) return;
    op.graphed_kernels += kernels;
    ++op.graph_replays;
  };
  part(s.moe_router, pass == Pass::forward ? k.router_kernels : k.router_kernels_bwd);
  part(s.moe_preprocess && pass == Pass::forward, k.preprocess_kernels);
}

// The attention half of a forward after the QKV op `pre`: with CP the K/V all-gather splits it
// from the core attention and output projection; overlapped TP makes the core attention an op of
// its own; otherwise QKV, attention and output projection are one op.
void Builder::forward_attention(LayerChain& chain_of, Op&& pre, int stage, int layer, const std::string& tag,
                                OpCategory cat, std::int64_t mb, bool overlap, double flops_scale) {
  const AttentionShape attention = attention_of(layer);
  const double model_attention_flops = attention_flops(attention, Pass::forward);
  // The output projection (with the core attention before it, unless that is an op of its own).
  auto projection = [&](const char* suffix, bool with_attention) {
    Op op = compute_op(stage, sub_name(tag, suffix), cat);
    op.gemms = k_.post_attention;
    op.memory_bound_bytes = k_.post_attention_bytes;
    add_layernorm(op, Pass::forward, 1);
    op.kernels = k_.attn_kernels;
    quantize_forward(op, k_.post_attention, mb);
    const double flops = gemm_flops(op.gemms);
    op.hardware_flops = flops + (with_attention ? add_core_attention(op, Pass::forward, attention) : 0.0);
    op.model_flops = flops_scale * (flops + (with_attention ? model_attention_flops : 0.0));
    if (overlap) chunk_for_overlap(op);
    return op;
  };
  auto graphed = [&](Op&& op) {
    if (cat == OpCategory::compute) capture_in_graph(op, layer, GraphModule::attention, Pass::forward);
    chain_of.compute(std::move(op));
  };
  if (p_.mesh.cp > 1) {
    graphed(std::move(pre));
    // torchtitan's default rotate method all-gathers K and V across the CP group.
    chain_of.comm(collective_op(stage, sub_name(tag, ".cp_ag_kv"), StreamKind::cp, OpCategory::cp,
                                CollectiveOp::all_gather, GroupKind::cp, d_.cp_kv_bytes(p_.mesh.cp)));
    graphed(projection(".attn", true));
  } else if (overlap) {
    // Overlapped TP pairs the all-gather with the QKV GEMM and the reduce-scatter with the output
    // projection, so the attention kernel between them is an op of its own.
    graphed(std::move(pre));
    Op core = compute_op(stage, sub_name(tag, ".attn"), cat);
    core.hardware_flops = add_core_attention(core, Pass::forward, attention);
    core.model_flops = flops_scale * model_attention_flops;
    graphed(std::move(core));
    graphed(projection(".proj", false));
  } else {
    pre.gemms.insert(pre.gemms.end(), k_.post_attention.begin(), k_.post_attention.end());
    pre.memory_bound_bytes += k_.post_attention_bytes;
    add_layernorm(pre, Pass::forward, 1);
    pre.kernels += k_.attn_kernels;
    quantize_forward(pre, k_.post_attention, mb);
    const double flops = gemm_flops(pre.gemms);
    pre.hardware_flops = flops + add_core_attention(pre, Pass::forward, attention);
    pre.model_flops = flops_scale * (flops + model_attention_flops);
    graphed(std::move(pre));
  }
}

Op Builder::ep_all_to_all_op(int stage, std::string name) const {
  Op o = collective_op(stage, std::move(name), StreamKind::ep, OpCategory::ep, CollectiveOp::all_to_all, GroupKind::ep,
                       d_.a2a_bytes());
  if (p_.moe_dispatcher != MoeDispatcher::alltoall) {
    o.a2a_dedup_top_k = m_.moe.top_k;
    o.a2a_dedup_experts = m_.moe.n_experts;
  }
  return o;
}

// The MLP of a block's forward: an MoE block's token dispatch to the experts' ranks, the router
// and grouped expert GEMMs, and the combine back (all-to-alls over the EP group when ep > 1).
void Builder::moe_mlp_forward(LayerChain& chain_of, int stage, int layer, const std::string& tag, Op&& mlp) {
  const bool a2a = ep_all_to_all(layer);
  if (a2a) {
    Op dispatch = ep_all_to_all_op(stage, sub_name(tag, ".ep_dispatch"));
    // Dropless routing sizes the received buffers and the grouped GEMM's splits on the host:
    // Megatron's all-to-all dispatcher copies the token counts to the CPU and synchronizes
    // before the all-to-all, and DeepEP's normal-mode dispatch spins on a pinned counter for the
    // received count. (HybridEP, with its worst-case buffers, and a capacity factor, with fixed
    // splits, do not wait.)
    dispatch.host_sync = m_.moe.capacity_factor <= 0 && p_.moe_dispatcher != MoeDispatcher::hybridep;
    chain_of.comm(std::move(dispatch));
  }
  chain_of.compute(std::move(mlp));
  if (a2a) chain_of.comm(ep_all_to_all_op(stage, sub_name(tag, ".ep_combine")));
}

std::pair<int, int> Builder::recompute_modules(int stage, int layer, std::int64_t mb, const std::vector<int>& deps) {
  const Plan::RecomputeModules& r = p_.recompute_modules;
  if (!r.any() || p_.ac == AcMode::full) return {-1, -1};
  const bool moe_layer = m_.moe.is_moe_layer(layer);
  const std::string tag = op_name("recompute.L{}.mb{}", layer, mb);
  LayerChain chain_of{*this, false};
  chain_of.pending = deps;
  Op small = compute_op(stage, sub_name(tag, ".modules"), OpCategory::recompute);
  const double t = static_cast<double>(d_.tokens);
  if (r.norms) {
    small.memory_bound_bytes += 2 * 2 * d_.e * t * static_cast<double>(d_.h) / d_.sp_split;  // two norms, read + write
    add_layernorm(small, Pass::forward, 2);
    small.kernels += 2;
  }
  if (r.moe_act && !r.moe && moe_layer) {
    const double io = m_.mlp == MlpKind::swiglu ? 3 : 2;
    small.memory_bound_bytes += io * d_.e * static_cast<double>(d_.per_expert_tokens) * d_.local_experts *
                                static_cast<double>(d_.f_expert_local);
    small.kernels += 1;
  }
  if (small.kernels > 0) chain_of.compute(std::move(small));
  if (r.moe && moe_layer) {
    Op mlp = compute_op(stage, sub_name(tag, ".moe"), OpCategory::recompute);
    mlp.gemms = k_.mlp;
    mlp.memory_bound_bytes = k_.mlp_bytes;
    mlp.kernels = k_.mlp_kernels;
    mlp.hardware_flops = gemm_flops(mlp.gemms);
    quantize_forward(mlp, k_.mlp, mb);
    moe_mlp_forward(chain_of, stage, layer, tag, std::move(mlp));
  }
  if (chain_of.first < 0) return {-1, -1};
  return chain_of.finish(stage, sub_name(tag, ".join"), OpCategory::recompute);
}

std::pair<int, int> Builder::layer_forward(int stage, int layer, std::int64_t mb, bool recompute,
                                           std::vector<int> first_deps) {
  const BlockPass pass = recompute ? BlockPass::recompute : BlockPass::forward;
  return block_from_template(block_key(stage, layer, mb, pass, first_deps.size()), std::move(first_deps),
                             [&](std::vector<int>&& deps) { return lower_layer_forward(stage, layer, mb, recompute, std::move(deps)); });
}

std::pair<int, int> Builder::layer_backward(int stage, int layer, std::int64_t mb, std::vector<int> first_deps) {
  return block_from_template(block_key(stage, layer, mb, BlockPass::backward, first_deps.size()), std::move(first_deps),
                             [&](std::vector<int>&& deps) { return lower_layer_backward(stage, layer, mb, std::move(deps)); });
}

std::pair<int, int> Builder::lower_layer_forward(int stage, int layer, std::int64_t mb, bool recompute,
                                                 std::vector<int> first_deps) {
  const OpCategory cat = recompute ? OpCategory::recompute : OpCategory::compute;
  const std::string tag = op_name("{}L{}.mb{}", recompute ? "recompute." : "fwd.", layer, mb);
  const bool tp = p_.mesh.tp > 1;
  const bool full_tp = p_.tp_style == TpStyle::full;
  const double act = d_.activation_bytes();
  const bool overlap = p_.async_tp && tp && full_tp;
  LayerChain chain_of{*this, overlap};
  chain_of.pending = std::move(first_deps);
  auto comm = [&](Op&& op) { chain_of.comm(std::move(op)); };
  const double flops_scale = recompute ? 0.0 : 1.0;

  if (tp && full_tp && p_.sequence_parallel)
    comm(tp_collective(stage, sub_name(tag, ".tp_ag_attn"), CollectiveOp::all_gather, act));
  // A forward op of block linears: their GEMMs, the element-wise work around them, quantization.
  auto linears_op = [&](const char* suffix, const Gemms& linears, double bytes, int kernels) {
    Op op = compute_op(stage, sub_name(tag, suffix), cat);
    op.gemms = linears;
    op.memory_bound_bytes = bytes;
    op.kernels = kernels;
    op.hardware_flops = gemm_flops(op.gemms);
    op.model_flops = flops_scale * op.hardware_flops;
    quantize_forward(op, linears, mb);
    if (overlap) chunk_for_overlap(op);
    return op;
  };
  Op pre = linears_op(".qkv", k_.pre_attention, k_.pre_attention_bytes, k_.pre_kernels);
  add_layernorm(pre, Pass::forward, 1);
  forward_attention(chain_of, std::move(pre), stage, layer, tag, cat, mb, overlap, flops_scale);
  const bool sp_shard_moe = moe_on_sp_shard(layer);
  if (tp && full_tp) {
    comm(tp_collective(stage, sub_name(tag, ".tp_attn_out"),
                       p_.sequence_parallel ? CollectiveOp::reduce_scatter : CollectiveOp::all_reduce, act));
    if (p_.sequence_parallel && !sp_shard_moe)
      comm(tp_collective(stage, sub_name(tag, ".tp_ag_mlp"), CollectiveOp::all_gather, act));
  } else if (tp) {
    // llm-foundry ffn TP: the MLP input is gathered along the batch from every TP rank.
    comm(tp_collective(stage, sub_name(tag, ".tp_ag_batch"), CollectiveOp::all_gather, act * p_.mesh.tp));
  }
  const LayerKernels& kl = kernels_of(layer);
  Op mlp = linears_op(".mlp", kl.mlp, kl.mlp_bytes, kl.mlp_kernels);
  mlp.model_flops -= flops_scale * kl.mlp_excess_flops;  // the most-loaded rank's extra rows
  if (!recompute) capture_in_graph(mlp, layer, GraphModule::mlp, Pass::forward);
  moe_mlp_forward(chain_of, stage, layer, tag, std::move(mlp));
  if (tp && !sp_shard_moe) {
    const bool rs = !full_tp || p_.sequence_parallel;
    comm(tp_collective(stage, sub_name(tag, ".tp_mlp_out"), rs ? CollectiveOp::reduce_scatter : CollectiveOp::all_reduce,
                       full_tp ? act : act * p_.mesh.tp));
  }
  return chain_of.finish(stage, sub_name(tag, ".tp_join"), cat);
}

std::pair<int, int> Builder::lower_layer_backward(int stage, int layer, std::int64_t mb, std::vector<int> first_deps) {
  const std::string tag = op_name("bwd.L{}.mb{}", layer, mb);
  const bool tp = p_.mesh.tp > 1;
  const bool full_tp = p_.tp_style == TpStyle::full;
  const bool sp = tp && full_tp && p_.sequence_parallel;
  const double act = d_.activation_bytes();
  LayerChain chain_of{*this, p_.async_tp && tp && full_tp};
  chain_of.pending = std::move(first_deps);
  auto comm = [&](Op&& op) { chain_of.comm(std::move(op)); };
  // The backward of one forward op: data and weight gradients of its linears (and, for the
  // attention op, the core attention's backward), then their quantization and TP chunking.
  auto backward_op = [&](const char* suffix, const Gemms& linears, double bytes, int kernels, bool with_attention) {
    Op op = compute_op(stage, sub_name(tag, suffix), OpCategory::compute);
    op.gemms = grads_of(linears);
    op.memory_bound_bytes = bytes;
    // The attention and QKV ops each hold one norm's backward (the MLP's input norm, the block's).
    if (suffix != std::string_view(".mlp")) add_layernorm(op, Pass::backward, 1);
    op.kernels = kernels;
    const double flops = gemm_flops(op.gemms);
    op.hardware_flops = op.model_flops = flops;
    if (with_attention) {
      const AttentionShape attention = attention_of(layer);
      op.hardware_flops += add_core_attention(op, Pass::backward, attention);
      op.model_flops += kAttentionModelBackwardOverForward * attention_flops(attention, Pass::forward);
    }
    quantize_backward(op, linears);
    if (chain_of.overlap) chunk_for_overlap(op);
    return op;
  };
  const bool sp_shard_moe = moe_on_sp_shard(layer);
  if (tp && !sp_shard_moe)
    comm(tp_collective(stage, sub_name(tag, ".tp_mlp_out"),
                       (full_tp && !p_.sequence_parallel) ? CollectiveOp::all_reduce : CollectiveOp::all_gather,
                       full_tp ? act : act * p_.mesh.tp));
  const LayerKernels& kl = kernels_of(layer);
  // The combine's backward sends each token's output gradient back to the experts that produced
  // it; the dispatch's backward returns the experts' input gradients: the forward's bytes again.
  if (ep_all_to_all(layer)) comm(ep_all_to_all_op(stage, sub_name(tag, ".ep_combine_bwd")));
  Op mlp = backward_op(".mlp", kl.mlp, kl.mlp_bytes_bwd, kl.mlp_kernels_bwd, false);
  mlp.model_flops -= 2 * kl.mlp_excess_flops;  // data and weight gradients of the extra rows
  capture_in_graph(mlp, layer, GraphModule::mlp, Pass::backward);
  comm(std::move(mlp));
  if (ep_all_to_all(layer)) comm(ep_all_to_all_op(stage, sub_name(tag, ".ep_dispatch_bwd")));
  if (sp && !sp_shard_moe) comm(tp_collective(stage, sub_name(tag, ".tp_mlp_in"), CollectiveOp::reduce_scatter, act));
  else if (tp && !full_tp)
    comm(tp_collective(stage, sub_name(tag, ".tp_batch"), CollectiveOp::reduce_scatter, act * p_.mesh.tp));
  if (sp) comm(tp_collective(stage, sub_name(tag, ".tp_attn_out"), CollectiveOp::all_gather, act));
  Op attn = backward_op(".attn", k_.post_attention, k_.post_attention_bytes_bwd, k_.attn_kernels_bwd, true);
  capture_in_graph(attn, layer, GraphModule::attention, Pass::backward);
  comm(std::move(attn));
  if (p_.mesh.cp > 1)
    comm(collective_op(stage, sub_name(tag, ".cp_rs_dkv"), StreamKind::cp, OpCategory::cp, CollectiveOp::reduce_scatter,
                       GroupKind::cp, d_.cp_kv_bytes(p_.mesh.cp)));
  Op qkv = backward_op(".qkv", k_.pre_attention, k_.pre_attention_bytes_bwd, k_.pre_kernels_bwd, false);
  capture_in_graph(qkv, layer, GraphModule::attention, Pass::backward);
  comm(std::move(qkv));
  if (tp && full_tp)
    comm(tp_collective(stage, sub_name(tag, ".tp_qkv_in"),
                       p_.sequence_parallel ? CollectiveOp::reduce_scatter : CollectiveOp::all_reduce, act));
  return chain_of.finish(stage, sub_name(tag, ".tp_join"), OpCategory::compute);
}

}  // namespace meshplan::lowering

// MoE and MLA through the lowering, checked against hand-lowered steps: the expert-parallel
// all-to-alls of a two-layer MoE (bytes per direction, forward, backward and recompute), the
// grouped expert GEMMs, shared experts, leading dense layers, the capacity factor, expert tensor
// parallelism, and multi-head latent attention's projections and attention FLOPs.
#include <doctest/doctest.h>

#include <cstddef>
#include <memory>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "cost/host_cost.hpp"
#include "sim/step_simulator.hpp"
#include "spec/cluster_loader.hpp"
#include "spec/model_spec.hpp"
#include "spec/plan.hpp"
#include "workload/a2a_overlap.hpp"
#include "workload/activation_memory.hpp"
#include "workload/layer_kernels.hpp"
#include "workload/moe_routing.hpp"
#include "workload/pipeline_schedule.hpp"
#include "workload/stage_params.hpp"
#include "workload/step_program.hpp"

using namespace meshplan;

namespace {

// Two MoE layers: d 256, 8 experts of width 512, top-2, SwiGLU, 4 heads of 64.
ModelSpec two_layer_moe() {
  ModelSpec m;
  m.name = "moe2";
  m.n_layers = 2;
  m.d_model = 256;
  m.n_heads = m.n_kv_heads = 4;
  m.head_dim = 64;
  m.mlp = MlpKind::swiglu;
  m.ffn_hidden = 512;
  m.vocab = 1024;
  m.pos_emb = PosEmb::rope;
  m.norm = NormKind::rmsnorm;
  m.max_seq_len = 1024;
  m.moe.n_experts = 8;
  m.moe.top_k = 2;
  m.moe.expert_ffn = 512;
  return m;
}

// 4 data-parallel ranks, EP 4 over them: 2 experts per rank; bf16; 1024 tokens x 1 sequence.
Plan ep_plan(int ep) {
  Plan p;
  p.runtime = Runtime::megatron;
  p.mesh.dp_replicate = 4;
  p.mesh.ep = ep;
  p.sharding = Sharding::zero1;
  p.param_dtype = p.compute_dtype = Dtype::bf16;
  p.reduce_dtype = Dtype::fp32;
  p.dropout = false;
  return p;
}

Job job(std::int64_t grad_accum) {
  Job j;
  j.seq_len = 1024;
  j.micro_batch = 1;
  j.grad_accum = grad_accum;
  j.global_batch = 4 * grad_accum;
  return j;
}

struct A2a {
  int fwd = 0, bwd = 0, recompute = 0;
  double fwd_bytes = 0, bwd_bytes = 0, recompute_bytes = 0;
};

A2a all_to_alls(const StepProgram& prog) {
  A2a a;
  for (const Op& op : prog.expanded()) {
    if (op.category != OpCategory::ep) continue;
    CHECK(op.kind == OpKind::collective);
    CHECK(op.collective == CollectiveOp::all_to_all);
    CHECK(op.group == GroupKind::ep);
    if (op.name.rfind("fwd.", 0) == 0) {
      ++a.fwd;
      a.fwd_bytes += op.bytes;
    } else if (op.name.rfind("bwd.", 0) == 0) {
      ++a.bwd;
      a.bwd_bytes += op.bytes;
    } else if (op.name.rfind("recompute.", 0) == 0) {
      ++a.recompute;
      a.recompute_bytes += op.bytes;
    }
  }
  return a;
}

// The most-loaded of the 4 EP ranks under dropless routing with no router preference (the
// lowering's default): 1024 tokens x top-2 over 8 experts draw 2048 copies per rank with relative
// variance (8 - 2) / (7 x 2048), and E[max of 4 normals] = 1.0294: 1 + 1.0294 x 0.02046 = 1.02106.
double hot_rank_load() { return routed_load(8, 2, 4, 1024, 0.0).rank_load_factor; }

// The op named `name` whole (a copy: a program keeps works apart), or null.
std::shared_ptr<const Op> find_op(const StepProgram& prog, const std::string& name) {
  for (std::size_t i = 0; i < prog.ops.size(); ++i)
    if (prog.name(i) == name) return std::make_shared<const Op>(prog.op(i));
  return nullptr;
}

// Its position in issue order (-1: none).
std::ptrdiff_t index_of(const StepProgram& prog, const std::string& name) {
  for (std::size_t i = 0; i < prog.ops.size(); ++i)
    if (prog.name(i) == name) return static_cast<std::ptrdiff_t>(i);
  return -1;
}

}  // namespace

TEST_CASE("two-layer MoE, EP 4: all-to-all bytes per direction, forward and backward, by hand") {
  const ModelSpec m = two_layer_moe();
  const Plan p = ep_plan(4);
  const Job j = job(3);
  const StepProgram prog = lower_step(m, p, j);
  // One direction = every routed copy of the rank's tokens: 1024 tokens x top-2 x 256 x 2 bytes
  // = 1,048,576 bytes (the collective moves the 3/4 that leave the rank), on the most-loaded rank
  // the copies it receives (hot_rank_load).
  CHECK(hot_rank_load() == doctest::Approx(1.02106).epsilon(1e-4));
  const double per_direction = 1024.0 * 2 * 256 * 2 * hot_rank_load();
  const auto dispatch = find_op(prog, "fwd.L0.mb0.ep_dispatch");
  const auto combine = find_op(prog, "fwd.L1.mb2.ep_combine");
  const auto combine_bwd = find_op(prog, "bwd.L1.mb0.ep_combine_bwd");
  const auto dispatch_bwd = find_op(prog, "bwd.L0.mb1.ep_dispatch_bwd");
  REQUIRE(dispatch != nullptr);
  REQUIRE(combine != nullptr);
  REQUIRE(combine_bwd != nullptr);
  REQUIRE(dispatch_bwd != nullptr);
  for (const auto& op : {dispatch, combine, combine_bwd, dispatch_bwd}) CHECK(op->bytes == doctest::Approx(per_direction));
  // Per step: 2 layers x 3 micro-batches x (dispatch + combine), in forward and again in backward.
  const A2a a = all_to_alls(prog);
  CHECK(a.fwd == 12);
  CHECK(a.bwd == 12);
  CHECK(a.recompute == 0);
  CHECK(a.fwd_bytes == doctest::Approx(12 * per_direction));
  CHECK(a.bwd_bytes == doctest::Approx(12 * per_direction));
  // The combine's backward runs before the experts' backward, the dispatch's after it.
  const auto mlp_bwd = find_op(prog, "bwd.L1.mb0.mlp");
  REQUIRE(mlp_bwd != nullptr);
  CHECK(combine_bwd < mlp_bwd);
  CHECK(index_of(prog, "bwd.L1.mb0.ep_dispatch_bwd") > index_of(prog, "bwd.L1.mb0.mlp"));

  // EP 1: no all-to-all at all, the same expert FLOPs spread over all 8 local experts.
  const StepProgram local = lower_step(m, ep_plan(1), j);
  CHECK(all_to_alls(local).fwd == 0);
  CHECK(all_to_alls(local).bwd == 0);
}

TEST_CASE("full recompute repeats the dispatch and combine; --recompute-modules moe repeats them too") {
  const ModelSpec m = two_layer_moe();
  const double per_direction = 1024.0 * 2 * 256 * 2 * hot_rank_load();
  Plan full = ep_plan(4);
  full.ac = AcMode::full;
  const A2a f = all_to_alls(lower_step(m, full, job(2)));
  CHECK(f.fwd == 8);
  CHECK(f.bwd == 8);
  CHECK(f.recompute == 8);
  CHECK(f.recompute_bytes == doctest::Approx(8 * per_direction));

  Plan moe_only = ep_plan(4);
  moe_only.recompute_modules.moe = true;
  const StepProgram prog = lower_step(m, moe_only, job(2));
  const A2a r = all_to_alls(prog);
  CHECK(r.recompute == 8);
  const auto rc = find_op(prog, "recompute.L0.mb1.moe");
  REQUIRE(rc != nullptr);
  CHECK(rc->category == OpCategory::recompute);
  CHECK(rc->model_flops == 0);
  // layernorm + moe_act recompute only memory-bound kernels: no GEMM, no all-to-all.
  Plan small = ep_plan(4);
  small.recompute_modules.norms = true;
  small.recompute_modules.moe_act = true;
  const StepProgram ps = lower_step(m, small, job(2));
  CHECK(all_to_alls(ps).recompute == 0);
  const auto mods = find_op(ps, "recompute.L1.mb0.modules");
  REQUIRE(mods != nullptr);
  CHECK(mods->gemms.empty());
  // Two RMSNorms (read + write 1024 x 256 bf16 each) and SwiGLU over the 2 x 1046 copies the
  // most-loaded rank's experts received x 512 (read 2, write 1): 2 x 2 x 2 x 262,144 + 3 x 2 x
  // 2092 x 512.
  CHECK(mods->memory_bound_bytes == doctest::Approx(8.0 * 262144 + 6.0 * 2092 * 512));
}

TEST_CASE("expert GEMMs are grouped GEMMs over the local experts; shared experts see every token") {
  ModelSpec m = two_layer_moe();
  m.moe.n_shared_experts = 1;
  const Plan p = ep_plan(4);
  const LayerDims d = layer_dims(m, p, job(1));
  CHECK(d.local_experts == 2);
  // 1024 tokens x 2 copies x 4 EP ranks over 8 experts: 1024 rows per expert on average, 1046 on
  // the most-loaded rank, spread over its experts by the draws' sampling noise: relative variance
  // (1 - 2/8) / 1024, a coefficient of variation of 0.027.
  CHECK(d.per_expert_tokens == 1046);
  CHECK(d.expert_rows_cv == doctest::Approx(std::sqrt(0.75 / 1024)));
  const LayerKernels k = layer_kernels(m, p, d);
  // router, gate, up, down (grouped over 2 local experts), then the shared expert's 3 GEMMs.
  REQUIRE(k.mlp.size() == 7);
  CHECK(k.mlp[0].m == 1024);
  CHECK(k.mlp[0].n == 8);
  for (int i = 1; i <= 3; ++i) {
    CHECK(k.mlp[i].batch == 2);
    CHECK(k.mlp[i].m == 1046);
    CHECK(k.mlp[i].group == GemmGroup::rows);
    CHECK(k.mlp[i].group_cv == doctest::Approx(d.expert_rows_cv));
  }
  for (int i = 4; i <= 6; ++i) {
    CHECK(k.mlp[i].batch == 1);
    CHECK(k.mlp[i].m == 1024);
  }
  // FLOPs: router 2 x 1024 x 8 x 256; routed 2 experts x 3 x 2 x 1024 x 512 x 256; shared the same
  // as one expert over all 1024 tokens. The most-loaded rank computes 2 x 22 more rows per GEMM,
  // which are not model FLOPs (mlp_excess_flops).
  const double expected = 2.0 * 1024 * 8 * 256 + 2 * 3 * 2.0 * 1024 * 512 * 256 + 3 * 2.0 * 1024 * 512 * 256;
  const double excess = 2 * 3 * 2.0 * 22 * 512 * 256;
  CHECK(k.mlp_excess_flops == doctest::Approx(excess));
  CHECK(gemm_flops(k.mlp) == doctest::Approx(expected + excess));
  // Model FLOPs per rank equal top_k x tokens x the expert's FLOPs per token, whatever the ep; with
  // every expert on one rank there is no most-loaded rank.
  const LayerKernels k1 = layer_kernels(m, ep_plan(1), layer_dims(m, ep_plan(1), job(1)));
  CHECK(k1.mlp_excess_flops == 0);
  CHECK(gemm_flops(k1.mlp) == doctest::Approx(expected));
}

// Megatron-Core's unfused MoE layer (workload/moe_launches.cpp), counted by hand for 8 experts,
// SwiGLU, no shared expert. With the all-to-all dispatcher and tokens crossing ranks, forward:
// router 10 + auxiliary loss 6 + preprocess 11 + permute 8 + the probabilities' all-to-all 1 +
// sorting into local-expert chunks and back 3 + activation 2 + unpermute 2 = 43, and fc1 and fc2
// per local expert; backward 5 + 3 + 4 + 1 + 3 + 2 + 1 = 19, and fc1's and fc2's data and weight
// gradients per local expert. The flex dispatcher (DeepEP, HybridEP) keeps the router, the
// permutation and the experts but replaces the bookkeeping by its 4 metadata launches: 32 and 15.
TEST_CASE("Megatron-Core's MoE layer, launch by launch: bookkeeping and one GEMM per local expert, by hand") {
  const ModelSpec m = two_layer_moe();
  auto counts = [&](const Plan& p) {
    const LayerKernels k = layer_kernels(m, p, layer_dims(m, p, job(1)));
    return std::pair{k.mlp_kernels, k.mlp_kernels_bwd};
  };
  // EP 4: 2 local experts.
  CHECK(counts(ep_plan(4)) == std::pair{43 + 2 * 2, 19 + 4 * 2});
  Plan deepep = ep_plan(4);
  deepep.moe_dispatcher = MoeDispatcher::deepep;
  CHECK(counts(deepep) == std::pair{32 + 2 * 2, 15 + 4 * 2});
  // EP 1, TP 1: all 8 experts local, no token leaves the rank: the preprocess only counts the
  // tokens (2 launches), no probabilities' all-to-all; 8 GEMM pairs.
  CHECK(counts(ep_plan(1)) == std::pair{28 + 2 + 3 + 2 * 8, 15 + 3 + 4 * 8});
  // --moe-permute-fusion: permute 8 -> 2 (backward 4 -> 1), unpermute 2 -> 1, the chunk sorting
  // 3 -> 2 each way, and the preprocess drops its 2 chunk-order ops; --moe-router-fusion: router
  // 10 -> 3 (backward 5 -> 3), auxiliary loss 6 -> 3 (3 -> 2).
  Plan fused = ep_plan(4);
  fused.moe_permute_fusion = true;
  CHECK(counts(fused) == std::pair{43 - 6 - 1 - 1 - 2 + 2 * 2, 19 - 3 - 1 + 4 * 2});
  fused.moe_router_fusion = true;
  CHECK(counts(fused) == std::pair{33 - 7 - 3 + 2 * 2, 15 - 2 - 1 + 4 * 2});
  // The host issues each launch at the profile's per-op cost (8 us on x86): the EP 4 forward's 47
  // launches hold the host 376 us per layer and micro-batch.
  const ClusterSpec c = load_cluster("h100-sxm-80gb");
  const HostModel host = host_model(c, ep_plan(4));
  OpWork w;
  w.kernels = counts(ep_plan(4)).first;
  CHECK(host_seconds(OpSchedule{}, w, host) == doctest::Approx(47 * 8e-6));
  // Other runtimes count the router and experts as a few fused kernels around one grouped GEMM:
  // router, softmax/top-k, permute, the two up GEMMs, activation, down, residual add, unpermute,
  // combine, and the auxiliary loss's 3 (torch.compile: no eager SwiGLU composite beside them).
  Plan titan = ep_plan(4);
  titan.runtime = Runtime::torchtitan_fsdp2;
  titan.compile = true;
  CHECK(counts(titan) == std::pair{13, 26});
}

// Megatron's --cuda-graph-scope: graphs of the listed modules replace their launches by one replay
// each; the rest of the op is issued eagerly. EP 4 (2 local experts), all-to-all dispatcher:
// forward 47 launches, of which the router's 16 (10 + auxiliary loss 6) and the preprocess's 11;
// backward 27, of which the router's 8.
TEST_CASE("scoped CUDA graphs: the router and the dispatcher's bookkeeping replayed, the rest eager, by hand") {
  const ModelSpec m = two_layer_moe();
  Plan p = ep_plan(4);
  p.cuda_graphs = true;
  p.cuda_graph_scope = *parse_cuda_graph_scope({"moe_router", "moe_preprocess"}, nullptr);
  const StepProgram prog = lower_step(m, p, job(1));
  const auto fwd = find_op(prog, "fwd.L0.mb0.mlp");
  const auto bwd = find_op(prog, "bwd.L0.mb0.mlp");
  const auto attn = find_op(prog, "fwd.L0.mb0.qkv");
  REQUIRE(fwd);
  REQUIRE(bwd);
  REQUIRE(attn);
  CHECK(fwd->kernels == 47);
  CHECK(fwd->graphed_kernels == 16 + 11);
  CHECK(fwd->graph_replays == 2);
  CHECK(bwd->kernels == 27);
  CHECK(bwd->graphed_kernels == 8);
  CHECK(bwd->graph_replays == 1);
  CHECK(attn->graphed_kernels == 0);  // attention is not in the scope
  // The host: 20 eager launches at 8 us and 2 replays at the 4 us launch cost, where the whole-step
  // graphs (scope full) replay the op with one launch and no graphs issue all 47.
  const ClusterSpec c = load_cluster("h100-sxm-80gb");
  CHECK(host_seconds(*fwd, *fwd, host_model(c, p)) == doctest::Approx(20 * 8e-6 + 2 * 4e-6));
  Plan whole = p;
  whole.cuda_graph_scope = {};
  CHECK(host_seconds(*fwd, *fwd, host_model(c, whole)) == doctest::Approx(4e-6));
  Plan eager = p;
  eager.cuda_graphs = false;
  CHECK(host_seconds(*fwd, *fwd, host_model(c, eager)) == doctest::Approx(47 * 8e-6));
  // Scope attn: the attention ops whole, forward and backward; the MLP eager.
  p.cuda_graph_scope = *parse_cuda_graph_scope({"attn"}, nullptr);
  const StepProgram attn_graphs = lower_step(m, p, job(1));
  for (const char* name : {"fwd.L1.mb0.qkv", "bwd.L1.mb0.attn", "bwd.L1.mb0.qkv"}) {
    CAPTURE(name);
    const auto op = find_op(attn_graphs, name);
    REQUIRE(op);
    CHECK(op->graphed_kernels == op->kernels);
    CHECK(op->graph_replays == 1);
  }
  CHECK(find_op(attn_graphs, "fwd.L1.mb0.mlp")->graphed_kernels == 0);
  // Names outside Megatron's scopes are refused, and full_iteration is the whole step.
  std::string bad;
  CHECK_FALSE(parse_cuda_graph_scope({"attn", "router"}, &bad));
  CHECK(bad == "router");
  CHECK(parse_cuda_graph_scope({"full_iteration"}, nullptr)->full);
}

TEST_CASE("capacity factor pads the expert buffers and the all-to-all") {
  ModelSpec m = two_layer_moe();
  m.moe.capacity_factor = 1.25;
  const LayerDims d = layer_dims(m, ep_plan(4), job(1));
  CHECK(d.routed_tokens == doctest::Approx(1024 * 2 * 1.25));
  CHECK(d.per_expert_tokens == 1280);
  CHECK(d.a2a_bytes() == doctest::Approx(2560.0 * 256 * 2));
}

TEST_CASE("leading dense layers: a dense MLP of ffn_hidden and no all-to-all") {
  ModelSpec m = two_layer_moe();
  m.moe.n_dense_layers = 1;
  m.ffn_hidden = 1024;
  const StepProgram prog = lower_step(m, ep_plan(4), job(1));
  CHECK(find_op(prog, "fwd.L0.mb0.ep_dispatch") == nullptr);
  CHECK(find_op(prog, "fwd.L1.mb0.ep_dispatch") != nullptr);
  const auto dense = find_op(prog, "fwd.L0.mb0.mlp");
  REQUIRE(dense != nullptr);
  // gate, up, down of 1024 x 1024 x 256.
  CHECK(dense->hardware_flops == doctest::Approx(3 * 2.0 * 1024 * 1024 * 256));
  // Parameters: one dense and one MoE layer.
  const ParamCounts c = param_counts(m);
  CHECK(c.dense_mlp_per_layer == 3 * 256 * 1024);
  CHECK(n_params(m) == c.per_layer() * 2 - (c.mlp_per_layer - c.dense_mlp_per_layer) + c.embedding + c.lm_head +
                           c.final_norm);
}

TEST_CASE("expert tensor parallel 1 under TP 2 + SP: experts on the sequence shard, no TP gather around them") {
  const ModelSpec m = two_layer_moe();
  Plan p = ep_plan(4);
  p.mesh.dp_replicate = 2;
  p.mesh.tp = 2;
  p.mesh.etp = 1;
  p.sequence_parallel = true;
  const LayerDims d = layer_dims(m, p, job(1));
  CHECK(d.moe_skips_tp_gather);
  CHECK(d.moe_tokens == 512);
  CHECK(d.f_expert_local == 512);
  // Half the tokens per rank: half the all-to-all bytes of the TP 1 plan (on the most-loaded rank,
  // whose relative excess grows as 1 / sqrt(tokens)).
  CHECK(d.a2a_bytes() == doctest::Approx(512.0 * 2 * 256 * 2 * routed_load(8, 2, 4, 512, 0.0).rank_load_factor));
  const StepProgram prog = lower_step(m, p, job(1));
  CHECK(find_op(prog, "fwd.L0.mb0.tp_ag_mlp") == nullptr);
  CHECK(find_op(prog, "fwd.L0.mb0.tp_attn_out") != nullptr);
  CHECK(find_op(prog, "fwd.L0.mb0.ep_dispatch") != nullptr);
  // Routed experts split over ep x etp = 4; attention over tp.
  const ParamCounts c = param_counts(m);
  const double routed = static_cast<double>(c.mlp_per_layer - c.router_per_layer);
  CHECK(block_params_per_rank(m, p) == doctest::Approx(static_cast<double>(c.attention_per_layer) / 2 + routed / 4 +
                                                        static_cast<double>(c.router_per_layer + c.norm_per_layer)));
}

TEST_CASE("MLA: projection GEMMs, attention FLOPs with the rotary part, latents in memory") {
  ModelSpec m = two_layer_moe();
  m.attention = AttentionKind::mla;
  m.n_heads = m.n_kv_heads = 4;
  m.head_dim = 32;  // non-rotary q/k width
  m.mla = {.q_lora_rank = 96, .kv_lora_rank = 64, .rope_head_dim = 16, .v_head_dim = 32};
  Plan p = ep_plan(1);
  const LayerDims d = layer_dims(m, p, job(1));
  const LayerKernels k = layer_kernels(m, p, d);
  // q_a 256->96, q_b 96->4x48, kv_a 256->(64+16), kv_b 64->4x(32+32); out 4x32 -> 256.
  REQUIRE(k.pre_attention.size() == 4);
  const double t = 1024;
  const double proj = 2 * t * (256.0 * 96 + 96.0 * 192 + 256.0 * 80 + 64.0 * 256);
  CHECK(gemm_flops(k.pre_attention) == doctest::Approx(proj));
  CHECK(gemm_flops(k.post_attention) == doctest::Approx(2 * t * 128 * 256));
  // Causal attention: QK^T over 48 per head and PV over 32: 0.5 x 2 x 1024^2 x 4 x (48 + 32).
  CHECK(attention_flops(k.attention, Pass::forward) == doctest::Approx(0.5 * 2 * t * t * 4 * (48 + 32)));
  // Parameters: q_a + norm + q_b, kv_a + norm + kv_b, o.
  const ParamCounts c = param_counts(m);
  CHECK(c.attention_per_layer == 256 * 96 + 96 + 96 * 192 + 256 * 80 + 64 + 64 * 256 + 128 * 256);
  // Saved: the norm output, the two latents (96 + 64 + 16) and Q, K (48 per head), V, O (32).
  const MicroBatchShape mb{1024, 1};
  const BlockActivations a = block_activations(m, p, mb);
  CHECK(a.attention_bytes == doctest::Approx(2 * t * (256 + 176 + 4 * (2 * 48 + 2 * 32))));
}

TEST_CASE("MoE saved activations: routed copies and router logits; recompute modules drop them") {
  const ModelSpec m = two_layer_moe();
  Plan p = ep_plan(4);
  const MicroBatchShape mb{1024, 1};
  // 2 x (2 bytes x 2048 copies x 256) + 2 x 4 bytes x 1024 x 8 experts.
  CHECK(moe_routing_saved_bytes(m, p, mb) == doctest::Approx(2 * 2.0 * 2048 * 256 + 8.0 * 1024 * 8));
  const double none = saved_block_bytes(m, p, mb, 0);
  p.recompute_modules.moe = true;
  // Everything of the MoE block beyond its input: the routing tensors and 4 SwiGLU inner tensors.
  CHECK(none - saved_block_bytes(m, p, mb, 0) ==
        doctest::Approx(moe_routing_saved_bytes(m, p, mb) + 4 * 2.0 * 1024 * 512 * 2));
}

TEST_CASE("fine-grained activation offload moves only the listed submodules' saved tensors") {
  const ModelSpec m = two_layer_moe();
  Plan p = ep_plan(4);
  const MicroBatchShape mb{1024, 1};
  const double saved = saved_block_bytes(m, p, mb, 1);
  CHECK(offloaded_block_bytes(m, p, mb, 1) == 0);  // no offload at all
  p.act_offload = true;
  CHECK(offloaded_block_bytes(m, p, mb, 1) == doctest::Approx(saved));  // whole layers
  // expert_fc1: the dispatched tokens, 2 copies (top-2) of 1024 tokens x 256 x 2 bytes.
  p.offload_modules.expert_fc1 = true;
  CHECK(offloaded_block_bytes(m, p, mb, 1) == doctest::Approx(2.0 * 2048 * 256));
  // moe_act: its input, the first grouped GEMM's gate and up outputs, 2 x 2048 copies x 512 x 2 bytes.
  p.offload_modules.moe_act = true;
  CHECK(offloaded_block_bytes(m, p, mb, 1) == doctest::Approx(2.0 * 2048 * 256 + 2 * 2.0 * 2048 * 512));
  // core_attn: Q, K, V (4 heads of 64 each) and the fp32 log-sum-exp per head and token.
  Plan attn = p;
  attn.offload_modules = {};
  attn.offload_modules.core_attn = true;
  CHECK(offloaded_block_bytes(m, attn, mb, 1) == doctest::Approx(2.0 * 1024 * 3 * 256 + 4.0 * 4 * 1024));
  // With the whole MoE block recomputed there is nothing of the experts left to move.
  Plan rc = p;
  rc.recompute_modules.moe = true;
  CHECK(offloaded_block_bytes(m, rc, mb, 1) == 0);
  // Never more than the block saves.
  Plan all = p;
  for (bool* f : {&all.offload_modules.attn_norm, &all.offload_modules.qkv_linear, &all.offload_modules.core_attn,
                  &all.offload_modules.attn_proj, &all.offload_modules.mlp_norm})
    *f = true;
  CHECK(offloaded_block_bytes(m, all, mb, 1) <= saved);
  // Expert modules save nothing on a dense model.
  ModelSpec dense = m;
  dense.moe = {};
  Plan e = p;
  e.offload_modules = {};
  e.offload_modules.expert_fc1 = true;
  CHECK(offloaded_block_bytes(dense, e, mb, 1) == 0);
}

TEST_CASE("fine-grained offload: the lowering copies the listed share; the rest stays on the device") {
  const ModelSpec m = two_layer_moe();
  Plan p = ep_plan(4);
  p.act_offload = true;
  p.offload_modules.expert_fc1 = true;
  const MicroBatchShape mb{1024, 1};
  const StepProgram prog = lower_step(m, p, job(2));
  double d2h = 0, h2d = 0;
  for (const Op& o : prog.expanded()) {
    if (o.kind != OpKind::host_copy) continue;
    (o.name.rfind("offload.d2h", 0) == 0 ? d2h : h2d) += o.bytes;
  }
  // 2 layers x 2 micro-batches, out and back.
  CHECK(d2h == doctest::Approx(4 * 2.0 * 2048 * 256));
  CHECK(h2d == doctest::Approx(d2h));
  CHECK(offloaded_block_bytes(m, p, mb, 0) < saved_block_bytes(m, p, mb, 0));
}

TEST_CASE("Transformer Engine FP8 linears keep their inputs quantized for the weight gradient") {
  const ModelSpec m = two_layer_moe();
  Plan p = ep_plan(4);
  const MicroBatchShape mb{1024, 1};
  const double bf16 = saved_block_bytes(m, p, mb, 0);
  p.fp8 = Fp8Recipe::mxfp8;
  // MXFP8: 1 byte plus an E8M0 scale per 32 elements; the expert outputs stay bf16.
  const double q = 1.0 + 1.0 / 32;
  CHECK(moe_routing_saved_bytes(m, p, mb) == doctest::Approx((q + 2.0) * 2048 * 256 + 8.0 * 1024 * 8));
  // Per block: the QKV input (1024 x 256) and the experts' up-projection input (2048 copies x
  // 256) at q instead of 2; the down projection's input (2048 x 512) too; the out-projection
  // keeps a quantized copy of the attention output (1024 x 256) beside the kernel's bf16 one.
  const double saved = (2.0 - q) * (1024.0 * 256 + 2048.0 * 256 + 2048.0 * 512) - q * 1024.0 * 256;
  CHECK(bf16 - saved_block_bytes(m, p, mb, 0) == doctest::Approx(saved));
  // torchao's float8 linears save the high-precision input: nothing changes.
  p.fp8 = Fp8Recipe::torchao_tensorwise;
  CHECK(saved_block_bytes(m, p, mb, 0) == doctest::Approx(bf16));
}

TEST_CASE("router load imbalance: the expected maximum of normals and the most-loaded rank, by hand") {
  // E[max of n standard normals]: 1/sqrt(pi) for 2, 3/(2 sqrt(pi)) for 3; tabulated 1.4236 (8),
  // 1.7660 (16), 2.0697 (32) (e.g. Harter 1961).
  CHECK(expected_max_standard_normal(1) == 0);
  CHECK(expected_max_standard_normal(2) == doctest::Approx(1 / std::sqrt(3.14159265358979)).epsilon(1e-9));
  CHECK(expected_max_standard_normal(3) == doctest::Approx(1.5 / std::sqrt(3.14159265358979)).epsilon(1e-9));
  CHECK(expected_max_standard_normal(8) == doctest::Approx(1.42360).epsilon(1e-5));
  CHECK(expected_max_standard_normal(16) == doctest::Approx(1.76599).epsilon(1e-5));
  CHECK(expected_max_standard_normal(32) == doctest::Approx(2.06967).epsilon(1e-5));
  // Qwen3-235B (128 experts, top-8), EP 8: 16 experts per rank, 4096 tokens per rank (16k tokens
  // over TP 4 with expert TP 1). With c = 0.592 the rank's relative spread is sqrt(0.592^2 / 16 +
  // 120 / (127 x 32768)) = 0.1481, and the most-loaded of 8 ranks receives 1 + 1.4236 x 0.1481 =
  // 1.2108 x the mean; its experts' rows spread with sqrt(0.592^2 + (1 - 8/128) / 2048) = 0.5924.
  const RoutedLoad ep8 = routed_load(128, 8, 8, 4096, 0.592);
  CHECK(ep8.rank_load_factor == doctest::Approx(1.21083).epsilon(1e-5));
  CHECK(ep8.expert_rows_cv == doctest::Approx(0.59239).epsilon(1e-4));
  // EP 32 (4 experts per rank, 2048 tokens each): 1 + 2.0697 x sqrt(0.592^2 / 4 + 120 / (127 x
  // 16384)) = 1.6128: fewer experts per rank average less of the router's preference away.
  CHECK(routed_load(128, 8, 32, 2048, 0.592).rank_load_factor == doctest::Approx(1.61282).epsilon(1e-5));
  // Forced balance leaves the draws' noise only: 1 + 1.4236 x sqrt(120 / (127 x 32768)) = 1.0076.
  CHECK(routed_load(128, 8, 8, 4096, 0.0).rank_load_factor == doctest::Approx(1.00764).epsilon(1e-4));
  // One rank holds every expert: nothing to wait for.
  CHECK(routed_load(128, 8, 1, 4096, 0.592).rank_load_factor == 1);
}

TEST_CASE("dropless routing: the trained router's imbalance slows the most-loaded rank; forced balance and capacity do not") {
  ModelSpec m = two_layer_moe();
  const Plan p = ep_plan(4);
  const LayerDims trained = layer_dims(m, p, job(1), 0.5);
  CHECK(trained.moe_rank_load == doctest::Approx(routed_load(8, 2, 4, 1024, 0.5).rank_load_factor));
  CHECK(trained.moe_rank_load > 1.3);
  CHECK(trained.a2a_bytes() == doctest::Approx(1024.0 * 2 * 256 * 2 * trained.moe_rank_load));
  m.moe.force_balance = true;
  const LayerDims forced = layer_dims(m, p, job(1), 0.5);
  CHECK(forced.moe_rank_load == doctest::Approx(hot_rank_load()));
  m.moe.force_balance = false;
  m.moe.capacity_factor = 1.0;
  const LayerDims padded = layer_dims(m, p, job(1), 0.5);
  CHECK(padded.moe_rank_load == 1);
  CHECK(padded.per_expert_tokens == 1024);
  // Through the lowering: the profile's router spread reaches the all-to-alls.
  m.moe.capacity_factor = 0;
  const StepProgram prog = lower_step(m, p, job(1), LowerOptions{.op_names = true, .moe_router_load_cv = 0.5});
  const auto dispatch = find_op(prog, "fwd.L0.mb0.ep_dispatch");
  REQUIRE(dispatch != nullptr);
  CHECK(dispatch->bytes == doctest::Approx(trained.a2a_bytes()));
  // Model FLOPs stay the mean rank's.
  const auto mlp = find_op(prog, "fwd.L0.mb0.mlp");
  REQUIRE(mlp != nullptr);
  const LayerKernels k = layer_kernels(m, p, trained);
  CHECK(mlp->model_flops == doctest::Approx(mlp->hardware_flops - k.mlp_excess_flops));
}

// Megatron-Core's expert all-to-all overlap (--overlap-moe-expert-parallel-comm), without a
// pipeline: each backward merges with the next micro-batch's forward
// (forward_backward_no_pipelining), layer by layer in TransformerLayerSchedulePlan.run's order:
//   compute: forward attention | backward MLP     | forward MLP       | backward attention
//   comm:    backward combine  | forward dispatch | backward dispatch | forward combine
// The backward walks the layers down while the forward walks them up, so forward layer i meets
// backward layer L - 1 - i.
TEST_CASE("expert all-to-all overlap: Megatron-Core's merged order of a backward and the next forward") {
  const ModelSpec m = two_layer_moe();
  Plan p = ep_plan(4);
  const StepProgram plain = lower_step(m, p, job(2));
  p.moe_a2a_overlap = true;
  const StepProgram merged = lower_step(m, p, job(2));
  // Nothing added or dropped: the same ops, reissued.
  REQUIRE(merged.ops.size() == plain.ops.size());
  std::vector<std::string> a, b;
  for (const Op& op : plain.expanded()) a.push_back(op.name);
  for (const Op& op : merged.expanded()) b.push_back(op.name);
  CHECK(a != b);
  std::sort(a.begin(), a.end());
  std::sort(b.begin(), b.end());
  CHECK(a == b);
  CHECK(merged.model_flops_per_step == doctest::Approx(plain.model_flops_per_step).epsilon(1e-12));

  // Micro-batch 0's forward runs alone; its backward merges with micro-batch 1's forward.
  std::vector<std::string> issued;
  bool in_pair = false;
  for (const Op& op : merged.expanded()) {
    if (op.name == "bwd.head_loss.mb0") in_pair = true;
    if (in_pair) issued.push_back(op.name);
    if (op.name == "fwd.head_loss.mb1") break;
  }
  const std::vector<std::string> expected = {
      "bwd.head_loss.mb0",                                                 // the loss's backward
      "fwd.embed.mb1",               "fwd.L0.mb1.qkv",                     // forward attention, layer 0
      "bwd.L1.mb0.ep_combine_bwd",   "fwd.L0.mb1.ep_dispatch",             // comm under the attention
      "bwd.L1.mb0.mlp",              "bwd.L1.mb0.ep_dispatch_bwd",         // backward MLP | forward dispatch
      "fwd.L0.mb1.mlp",              "fwd.L0.mb1.ep_combine",              // forward MLP | backward dispatch
      "bwd.L1.mb0.attn",             "bwd.L1.mb0.qkv",                     // backward attention | forward combine
      "fwd.L1.mb1.qkv",              "bwd.L0.mb0.ep_combine_bwd", "fwd.L1.mb1.ep_dispatch", "bwd.L0.mb0.mlp",
      "bwd.L0.mb0.ep_dispatch_bwd",  "fwd.L1.mb1.mlp",            "fwd.L1.mb1.ep_combine", "bwd.L0.mb0.attn",
      "bwd.L0.mb0.qkv",              "bwd.embed.mb0",             "fwd.head_loss.mb1"};
  CHECK(issued == expected);
  // Every dependency still points at the op it meant: each one's name is unchanged.
  for (std::size_t i = 0; i < merged.ops.size(); ++i) {
    const std::string name = merged.name(i);
    CAPTURE(name);
    const auto before = find_op(plain, name);
    REQUIRE(before != nullptr);
    std::vector<std::string> was, now;
    for (const int d : before->deps) was.push_back(plain.name(static_cast<std::size_t>(d)));
    for (const int d : merged.ops[i].deps) now.push_back(merged.name(static_cast<std::size_t>(d)));
    CHECK(was == now);
  }
}

TEST_CASE("expert all-to-all overlap: which schedule steps merge, and the interleaved warm-up") {
  // Without a pipeline: F0 B0 F1 B1 F2 B2 -> B0 + F1, B1 + F2 (forward_backward_no_pipelining).
  Plan p = ep_plan(4);
  p.moe_a2a_overlap = true;
  CHECK(a2a_overlap_pairs(stage_order(p, 0, 3)) == std::vector<std::size_t>{1, 3});
  // Interleaved 1F1B, pp 2 x vpp 2, 4 micro-batches: stage 0 warms up with 2 (pp - 1) + (vpp - 1) pp
  // = 4 forwards, one more under the overlap (a merged forward sends its output only when the
  // merged step ends), then forward/backward pairs, each merged, then the cool-down backwards: the
  // steady state's first forward makes 6 leading forwards (5 without the overlap).
  p.mesh.pp = 2;
  p.mesh.vpp = 2;
  p.mesh.dp_replicate = 2;
  p.mesh.ep = 2;
  p.schedule = PipelineSchedule::interleaved_1f1b;
  auto leading_forwards = [](const std::vector<Step>& order) {
    std::size_t n = 0;
    while (n < order.size() && order[n].forward) ++n;
    return n;
  };
  const std::vector<Step> order = stage_order(p, 0, 4);
  CHECK(leading_forwards(order) == 6);
  CHECK(a2a_overlap_pairs(order) == std::vector<std::size_t>{5, 7, 9});
  p.moe_a2a_overlap = false;
  CHECK(leading_forwards(stage_order(p, 0, 4)) == 5);
}

TEST_CASE("expert all-to-all overlap: spans that wait on each other, or have nothing to hide, are not merged") {
  StepProgram prog;
  prog.works.resize(2);  // work 0: compute; work 1: an all-to-all
  prog.works[1].collective = CollectiveOp::all_to_all;
  prog.ops.resize(4);
  prog.ops[1].kind = OpKind::collective;
  prog.ops[1].category = OpCategory::ep;
  prog.ops[1].work = 1;
  prog.ops[3] = prog.ops[1];
  // [0, 2) forward with an all-to-all, [2, 4) backward with one: merged as backward segment,
  // forward attention, backward all-to-all, forward all-to-all.
  CHECK(a2a_overlap_order(prog, {0, 2}, {2, 4}) == std::vector<int>{2, 0, 3, 1});
  prog.ops[2].deps = {1};  // the backward waits for the forward
  CHECK(a2a_overlap_order(prog, {0, 2}, {2, 4}).empty());
  prog.ops[2].deps.clear();
  prog.ops[3] = StepOp{};  // nothing to hide in the backward
  CHECK(a2a_overlap_order(prog, {0, 2}, {2, 4}).empty());
}

// Simulated: in the merged pair the backward's combine runs while the forward's attention computes,
// so the exposed all-to-all time falls and the step gets shorter; the work is the same.
TEST_CASE("expert all-to-all overlap, simulated: the all-to-alls run under the other micro-batch's compute") {
  const ModelSpec m = two_layer_moe();
  const ClusterSpec c = load_cluster("h100-sxm-80gb");
  Plan p = ep_plan(4);
  SimOptions keep;
  keep.keep_timeline = true;
  const SimulatedStep plain = simulate_step(m, p, job(4), c, keep);
  p.moe_a2a_overlap = true;
  const SimulatedStep merged = simulate_step(m, p, job(4), c, keep);
  auto timing = [](const SimulatedStep& s, const std::string& name) {
    for (std::size_t i = 0; i < s.program.ops.size(); ++i)
      if (s.program.name(i) == name) return s.timings[i];
    FAIL("no op " << name);
    return sim::TaskTiming{};
  };
  const auto combine = timing(merged, "bwd.L1.mb0.ep_combine_bwd");
  const auto attention = timing(merged, "fwd.L0.mb1.qkv");
  CHECK(combine.start_seconds < attention.end_seconds);  // concurrent
  CHECK(timing(plain, "fwd.L0.mb1.qkv").start_seconds >= timing(plain, "bwd.L1.mb0.ep_combine_bwd").end_seconds);
  const double plain_ep = plain.result.exposed_comm_s.at("ep");
  const double merged_ep = merged.result.exposed_comm_s.at("ep");
  CAPTURE(plain_ep);
  CAPTURE(merged_ep);
  CHECK(merged_ep < 0.75 * plain_ep);
  CHECK(merged.result.step_time_s < plain.result.step_time_s);
  CHECK(merged.program.model_flops_per_step == doctest::Approx(plain.program.model_flops_per_step).epsilon(1e-12));
}

// Every interleaved layout the overlap accepts simulates (no stage waits on itself through its
// neighbours): pp 2..8, vpp 2..4, from pp micro-batches (all warm-up: nothing merges) up, with
// the all-to-alls on their own stream.
TEST_CASE("expert all-to-all overlap: interleaved pipelines of every shape simulate without a deadlock") {
  ModelSpec m = two_layer_moe();
  m.n_layers = 24;
  const ClusterSpec c = load_cluster("h100-sxm-80gb");
  for (const int pp : {2, 3, 4, 8})
    for (const int vpp : {2, 3})
      for (const int per_pp : {1, 2, 3, 5}) {
        if (m.n_layers % (pp * vpp) != 0) continue;
        Plan p = ep_plan(2);
        p.mesh.dp_replicate = 2;
        p.mesh.pp = pp;
        p.mesh.vpp = vpp;
        p.schedule = PipelineSchedule::interleaved_1f1b;
        p.moe_a2a_overlap = true;
        Job j = job(per_pp * pp);
        j.global_batch = 2 * per_pp * pp;
        CAPTURE(pp);
        CAPTURE(vpp);
        CAPTURE(per_pp);
        SimOptions exact;
        exact.exact = true;
        CHECK_NOTHROW((void)simulate_step(m, p, j, c, exact));
      }
}

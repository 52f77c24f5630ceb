// The lowered step: the shapes and bytes of one layer's ops, hand-derived.
#include <doctest/doctest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "workload/eager_ops.hpp"
#include "workload/step_program.hpp"

using namespace meshplan;

namespace {

// A GPT-style block small enough to derive by hand: h = 1024, 8 heads of 128, 4h GELU MLP.
ModelSpec gpt(PosEmb pos) {
  ModelSpec m;
  m.name = "gpt-test";
  m.n_layers = 2;
  m.d_model = 1024;
  m.n_heads = m.n_kv_heads = 8;
  m.head_dim = 128;
  m.ffn_hidden = 4096;
  m.mlp = MlpKind::gelu;
  m.vocab = 50304;
  m.pos_emb = pos;
  m.norm = NormKind::layernorm;
  m.max_seq_len = 2048;
  return m;
}

Plan single_gpu() {
  Plan p;
  p.runtime = Runtime::megatron;
  p.sharding = Sharding::none;
  return p;
}

Op find(const StepProgram& prog, const std::string& name) {
  for (std::size_t i = 0; i < prog.ops.size(); ++i)
    if (prog.name(i) == name) return prog.op(i);
  FAIL("no op named " << name);
  return {};
}

constexpr double kSeq = 2048, kBatch = 2, kHeads = 8, kHeadDim = 128, kHidden = 1024;
const Job kJob{2048, 2, 2, 1};

}  // namespace

TEST_CASE("RoPE rotates q and k only in RoPE models: 2e t (q + kv) bytes, two kernels") {
  const Plan p = single_gpu();
  const StepProgram with_rope = lower_step(gpt(PosEmb::rope), p, kJob);
  const StepProgram with_learned = lower_step(gpt(PosEmb::learned), p, kJob);
  const Op& rope = find(with_rope, "fwd.L0.mb0.qkv");
  const Op& learned = find(with_learned, "fwd.L0.mb0.qkv");
  const double tokens = kSeq * kBatch;
  CHECK(rope.memory_bound_bytes - learned.memory_bound_bytes == doctest::Approx(2 * 2 * tokens * (kHidden + kHidden)));
  CHECK(rope.kernels - learned.kernels == 2);
}

TEST_CASE("unfused attention: QK^T and PV as batched GEMMs over every pair, softmax and dropout in HBM") {
  Plan fused = single_gpu();
  fused.dropout = true;
  Plan unfused = fused;
  unfused.flash_attention = false;
  const ModelSpec m = gpt(PosEmb::learned);
  const StepProgram pf = lower_step(m, fused, kJob);
  const StepProgram pu = lower_step(m, unfused, kJob);
  const double bh = kBatch * kHeads;
  const double scores = bh * kSeq * kSeq;
  const double e = 2;  // bf16

  const Op& f = find(pf, "fwd.L0.mb0.qkv");
  const Op& u = find(pu, "fwd.L0.mb0.qkv");
  CHECK(f.attention.size() == 1);
  CHECK(u.attention.empty());
  REQUIRE(u.gemms.size() == f.gemms.size() + 2);
  const GemmShape qk = u.gemms[u.gemms.size() - 2], pv = u.gemms.back();
  CHECK((qk.m == 2048 && qk.n == 2048 && qk.k == 128 && qk.batch == 16));
  CHECK((pv.m == 2048 && pv.n == 128 && pv.k == 2048 && pv.batch == 16));
  // softmax read + write (2e), dropout read + write + 1-byte mask (2e + 1)
  CHECK(u.memory_bound_bytes - f.memory_bound_bytes == doctest::Approx(scores * (4 * e + 1)));
  // The GPU multiplies every pair (4 b h s^2 d); the model counts the causal half (2 b h s^2 d).
  const double every_pair = 4 * bh * kSeq * kSeq * kHeadDim;
  CHECK(u.hardware_flops - f.hardware_flops == doctest::Approx(every_pair / 2));
  CHECK(u.model_flops == doctest::Approx(f.model_flops));

  const Op& fb = find(pf, "bwd.L0.mb0.attn");
  const Op& ub = find(pu, "bwd.L0.mb0.attn");
  CHECK(ub.gemms.size() == fb.gemms.size() + 4);
  // dropout backward (read grad + mask, write: 2e + 1) and softmax backward (read y, dy; write: 3e)
  CHECK(ub.memory_bound_bytes - fb.memory_bound_bytes == doctest::Approx(scores * (5 * e + 1)));
  // Four GEMMs of 2 b h s^2 d each, against FA2's 2.5 x the causal forward.
  CHECK(ub.hardware_flops - fb.hardware_flops == doctest::Approx(2 * every_pair - 2.5 * every_pair / 2));
  CHECK(ub.model_flops == doctest::Approx(fb.model_flops));
}

TEST_CASE("Megatron selective recompute of unfused attention reruns the score GEMMs and the softmax") {
  Plan p = single_gpu();
  p.flash_attention = false;
  p.ac = AcMode::selective_attn;
  const StepProgram prog = lower_step(gpt(PosEmb::learned), p, kJob);
  const Op& rc = find(prog, "recompute.L0.mb0");
  CHECK(rc.category == OpCategory::recompute);
  CHECK(rc.gemms.size() == 2);
  CHECK(rc.memory_bound_bytes == doctest::Approx(kBatch * kHeads * kSeq * kSeq * 2 * 2));
  CHECK(rc.hardware_flops == doctest::Approx(4 * kBatch * kHeads * kSeq * kSeq * kHeadDim));
  CHECK(rc.model_flops == 0);
}

TEST_CASE("the fused kernel generation reaches the attention shape") {
  Plan p = single_gpu();
  p.flash_attention_version = 1;
  const StepProgram prog = lower_step(gpt(PosEmb::rope), p, kJob);
  const Op& f = find(prog, "fwd.L0.mb0.qkv");
  REQUIRE(f.attention.size() == 1);
  CHECK(f.attention.front().flash_version == 1);
}

TEST_CASE("FP8 linears: the GEMMs change dtype and every input is quantized (weights once per step under TE)") {
  Plan bf16 = single_gpu();
  Plan te = bf16;
  te.fp8 = Fp8Recipe::te_delayed;
  Plan tao = bf16;
  tao.fp8 = Fp8Recipe::torchao_tensorwise;
  tao.compile = true;  // torchao's fused casts (eager ones: test_compute, "quantize kernels per recipe")
  const ModelSpec m = gpt(PosEmb::learned);
  const Job two_microbatches{2048, 4, 2, 2};
  const StepProgram pb = lower_step(m, bf16, two_microbatches);
  const StepProgram pt = lower_step(m, te, two_microbatches);
  const StepProgram pa = lower_step(m, tao, two_microbatches);
  const double tokens = kSeq * kBatch, h = kHidden, f = 4096, e = 2, q = 1;
  // MLP forward: up (tokens x h -> f) and down (tokens x f -> h). Transformer Engine's fused
  // cast-transpose writes a row-wise and a transposed copy (e + 2q) and, under delayed scaling,
  // rolls the 1024-long amax history of 3 tensors per linear; torchao's dynamic scaling reads each
  // tensor for its amax before the one-copy cast (2e + q), weights on every micro-batch.
  const double te_inputs = (e + 2 * q) * (tokens * h + tokens * f) + 2 * 3 * (2 * 1024 * 4 + 8);
  const double te_weights = (e + 2 * q) * (h * f + f * h);
  const double tao_inputs = (2 * e + q) * (tokens * h + tokens * f);
  const double tao_weights = (2 * e + q) * (h * f + f * h);
  for (int mb : {0, 1}) {
    const std::string name = "fwd.L0.mb" + std::to_string(mb) + ".mlp";
    const Op& b = find(pb, name);
    const Op& t = find(pt, name);
    const Op& a = find(pa, name);
    CHECK_FALSE(b.low_precision_gemms);
    CHECK(t.low_precision_gemms);
    CHECK(t.gemms.size() == b.gemms.size());
    // The casts are their own kernels (priced at copy bandwidth); the element-wise bytes are unchanged.
    CHECK(b.cast_bytes == 0);
    CHECK(t.cast_bytes == doctest::Approx(te_inputs + (mb == 0 ? te_weights : 0.0)));
    CHECK(a.cast_bytes == doctest::Approx(tao_inputs + tao_weights));
    CHECK(t.memory_bound_bytes == doctest::Approx(b.memory_bound_bytes));
  }
  // Backward quantizes each output gradient and its transpose: (e + 2q) per element.
  const Op& bb = find(pb, "bwd.L0.mb0.mlp");
  const Op& tb = find(pt, "bwd.L0.mb0.mlp");
  CHECK(tb.cast_bytes - bb.cast_bytes == doctest::Approx((e + 2 * q) * (tokens * f + tokens * h)));
  // torchao also casts the saved bf16 input and the weight again (amax read + one copy each).
  const Op& ab = find(pa, "bwd.L0.mb0.mlp");
  CHECK(ab.cast_bytes - bb.cast_bytes ==
        doctest::Approx((2 * e + 2 * q) * (tokens * f + tokens * h) + tao_inputs + tao_weights));
  // The LM head and the attention kernel stay in the compute dtype.
  CHECK_FALSE(find(pt, "fwd.head_loss.mb0").low_precision_gemms);
  CHECK(find(pt, "fwd.L0.mb0.qkv").attention.size() == 1);
}

TEST_CASE("eager PyTorch runs RMSNorm, RoPE and the SwiGLU gate op by op; compile and Megatron fuse them") {
  // A Llama-style block: RMSNorm, RoPE, SwiGLU of width 4096; the generic (PyTorch) runtime.
  ModelSpec m = gpt(PosEmb::rope);
  m.norm = NormKind::rmsnorm;
  m.mlp = MlpKind::swiglu;
  Plan eager = single_gpu();
  eager.runtime = Runtime::generic;
  Plan compiled = eager;
  compiled.compile = true;
  const StepProgram e = lower_step(m, eager, kJob);
  const StepProgram c = lower_step(m, compiled, kJob);
  const double tokens = kSeq * kBatch;
  const double norm = tokens * kHidden;          // elements one norm reads
  const double rope = tokens * (kHidden + kHidden);  // q and k (8 heads each)
  const double gate = tokens * 4096;             // SwiGLU inner width
  // Per element, bf16 in and fp32 math: RMSNorm 36 forward / 72 backward against the fused 4 / 8;
  // RoPE 20 / 20 against 4 / 8; the gate 10 / 18 against 6 / 12 (docs/compute.md).
  auto extra = [&](const char* op) {
    return find(e, op).memory_bound_bytes - find(c, op).memory_bound_bytes;
  };
  // Forward: without TP the QKV op also carries the output projection and the second norm.
  CHECK(extra("fwd.L0.mb0.qkv") == doctest::Approx(2 * (36 - 4) * norm + (20 - 4) * rope));
  CHECK(extra("bwd.L0.mb0.qkv") == doctest::Approx((72 - 8) * norm + (20 - 8) * rope));
  CHECK(extra("fwd.L0.mb0.mlp") == doctest::Approx((10 - 6) * gate));
  CHECK(extra("bwd.L0.mb0.mlp") == doctest::Approx((18 - 12) * gate));
  // Backward: the second norm sits with the attention output projection.
  CHECK(extra("bwd.L0.mb0.attn") == doctest::Approx((72 - 8) * norm));
  // Megatron's fused kernels are never charged the eager sequence.
  Plan megatron = single_gpu();
  Plan megatron_compiled = megatron;
  megatron_compiled.compile = true;
  CHECK(find(lower_step(m, megatron, kJob), "fwd.L0.mb0.qkv").memory_bound_bytes ==
        doctest::Approx(find(lower_step(m, megatron_compiled, kJob), "fwd.L0.mb0.qkv").memory_bound_bytes));
}

TEST_CASE("FSDP2 copies each all-gathered unit out of its flat buffer on the compute stream; FSDP1 does not") {
  ModelSpec m = gpt(PosEmb::learned);
  Plan p;
  p.runtime = Runtime::torchtitan_fsdp2;
  p.mesh.dp_shard = 8;
  p.sharding = Sharding::zero3;
  p.reshard_after_forward = true;
  const StepProgram prog = lower_step(m, p, kJob);
  // One block: QKV 3h^2 + out h^2 + MLP 2 x 4h^2 = 12h^2 weights, 4h + h + 4h + h biases (+ 2 x 2h
  // LayerNorm weights and biases if present); bf16 gathered, read once and written once.
  const Op& fwd = find(prog, "fsdp_copy_out.fwd.L0.mb0");
  // The model's last block stays gathered from its forward (torchtitan's default policy); the
  // one before it is gathered again for backward.
  const Op& bwd = find(prog, "fsdp_copy_out.bwd.L0.mb0");
  for (const Op& o : prog.expanded()) CHECK(o.name != "fsdp_copy_out.bwd.L1.mb0");
  const Op& ag = find(prog, "fsdp_ag.fwd.L0.mb0");
  CHECK(fwd.stream == StreamKind::compute);
  CHECK(fwd.memory_bound_bytes == doctest::Approx(2 * ag.bytes));
  CHECK(bwd.memory_bound_bytes == doctest::Approx(2 * ag.bytes));
  CHECK(ag.bytes >= 2 * 12 * kHidden * kHidden);
  CHECK(ag.bytes < 2 * 12.1 * kHidden * kHidden);
  Plan fsdp1 = p;
  fsdp1.runtime = Runtime::composer_fsdp1;
  for (const Op& o : lower_step(m, fsdp1, kJob).expanded()) CHECK(o.name.find("copy_out") == std::string::npos);
}

TEST_CASE("the loss: Megatron's vocab-parallel cross-entropy, torch's log_softmax, or one fused pass") {
  const ModelSpec m = gpt(PosEmb::learned);
  Plan megatron = single_gpu();
  Plan torch_ce = megatron;
  torch_ce.runtime = Runtime::generic;
  Plan fused = megatron;
  fused.fused_cross_entropy = true;
  const double logits = kSeq * kBatch * 50304;
  // Megatron: cast to fp32 (e + 4), max (4), subtract (8), exp (8), sum (4), divide (8) = e + 36
  // bytes per logit forward; torch: the cast and log_softmax, e + 8; backward both e + 12; fused:
  // 2e, 2e (two passes over each row forward, one read and one write backward).
  CHECK(find(lower_step(m, megatron, kJob), "fwd.head_loss.mb0").memory_bound_bytes == doctest::Approx(38 * logits));
  CHECK(find(lower_step(m, megatron, kJob), "fwd.head_loss.mb0").kernels == 6);
  CHECK(find(lower_step(m, torch_ce, kJob), "fwd.head_loss.mb0").memory_bound_bytes == doctest::Approx(10 * logits));
  CHECK(find(lower_step(m, fused, kJob), "fwd.head_loss.mb0").memory_bound_bytes == doctest::Approx(4 * logits));
  CHECK(find(lower_step(m, megatron, kJob), "bwd.head_loss.mb0").memory_bound_bytes == doctest::Approx(14 * logits));
  CHECK(find(lower_step(m, torch_ce, kJob), "bwd.head_loss.mb0").memory_bound_bytes == doctest::Approx(14 * logits));
  CHECK(find(lower_step(m, fused, kJob), "bwd.head_loss.mb0").memory_bound_bytes == doctest::Approx(4 * logits));
}

TEST_CASE("LayerNorm as PyTorch's kernels: eager runtimes mark each norm's bytes with the width; fused ones do not") {
  const ModelSpec m = gpt(PosEmb::learned);
  Plan eager = single_gpu();
  eager.runtime = Runtime::generic;
  const double norm_fwd = 2 * 2.0 * kSeq * kBatch * 1024;  // read + write one bf16 activation
  const StepProgram prog = lower_step(m, eager, kJob);
  // Forward: the block's first norm with the QKV GEMM, the second with the output projection (one
  // op here: no TP or CP between them); backward twice the bytes of each, in the ops that hold
  // their forward's backward.
  const Op& qkv = find(prog, "fwd.L0.mb0.qkv");
  CHECK(qkv.layernorm.bytes == doctest::Approx(2 * norm_fwd));
  CHECK(qkv.layernorm.width == 1024);
  CHECK(qkv.layernorm.pass == Pass::forward);
  CHECK(qkv.layernorm.bytes < qkv.memory_bound_bytes);
  double fwd = 0, bwd = 0;
  for (const Op& o : prog.expanded()) {
    if (o.name.rfind("fwd.L0.", 0) == 0) fwd += o.layernorm.bytes;
    if (o.name.rfind("bwd.L0.", 0) == 0) {
      bwd += o.layernorm.bytes;
      if (o.layernorm.bytes > 0) CHECK(o.layernorm.pass == Pass::backward);
    }
  }
  CHECK(fwd == doctest::Approx(2 * norm_fwd));
  CHECK(bwd == doctest::Approx(4 * norm_fwd));
  // Megatron's fused norms (apex, Transformer Engine) and torch.compile's generated kernels are
  // priced with the other element-wise bytes.
  Plan compiled = eager;
  compiled.compile = true;
  for (const Plan& p : {single_gpu(), compiled})
    for (const Op& o : lower_step(m, p, kJob).expanded()) CHECK(o.layernorm.bytes == 0);
}

namespace {
int index_of(const StepProgram& prog, const std::string& name) {
  for (std::size_t i = 0; i < prog.ops.size(); ++i)
    if (prog.name(i) == name) return static_cast<int>(i);
  FAIL("no op named " << name);
  return -1;
}
bool depends_on(const Op& op, int dep) {
  for (int d : op.deps)
    if (d == dep) return true;
  return false;
}
}  // namespace

TEST_CASE("Megatron-DeepSpeed: blocking pipeline sends, fp32 accumulation per micro-batch, fp32 all-reduce after the flush") {
  const ModelSpec m = gpt(PosEmb::learned);  // 2 layers: one per stage
  Plan p = single_gpu();
  p.mesh.pp = 2;
  p.mesh.dp_replicate = 4;
  p.sharding = Sharding::zero1;
  p.reduce_dtype = Dtype::fp32;
  Plan ds = p;
  ds.deepspeed_engine = true;
  const Job job{2048, 2 * 4 * 4, 2, 4};  // 4 micro-batches per step
  const StepProgram mg = lower_step(m, p, job);
  const StepProgram dsp = lower_step(m, ds, job);
  // One block's parameters (no biases): QKV 3h^2, out h^2, MLP 8h^2, two norm weights 2h.
  const double h = kHidden;
  const double block = 12 * h * h + 2 * h;
  // BF16_Optimizer: 18 bytes per parameter after each micro-batch's backward (stage 1 owns one
  // block, the final norm and the head, V x h).
  const Op& acc = find(dsp, "bf16_optimizer.accumulate.v1.mb2");
  CHECK(acc.stream == StreamKind::compute);
  CHECK(acc.memory_bound_bytes == doctest::Approx(18 * (block + h + 50304 * h)));
  for (const Op& o : mg.expanded()) CHECK(o.name.find("bf16_optimizer") == std::string::npos);
  // The fp32 gradients are all-reduced (not reduce-scattered) once the stage has flushed.
  const Op& ar = find(dsp, "dp_ar.L1");
  CHECK(ar.collective == CollectiveOp::all_reduce);
  CHECK(ar.bytes == doctest::Approx(4 * block));
  CHECK(depends_on(ar, index_of(dsp, "bf16_optimizer.accumulate.v1.mb3")));
  // A send blocks the sender: stage 0's next forward waits for the send of the previous one.
  const int sent = index_of(dsp, "pp.send_act.v0.mb0");
  CHECK(depends_on(find(dsp, "fwd.embed.mb1"), sent));
  CHECK_FALSE(depends_on(find(mg, "fwd.embed.mb1"), index_of(mg, "pp.send_act.v0.mb0")));
}

// An async-TP matmul of tp 8, by hand: the output projection of a sequence-parallel block (the
// attention's 1024 wide output over 8 ranks, 128 input columns each) runs as 8 GEMMs of 4096 / 8
// rows, one per ring step, beside its reduce-scatter of the whole 4096 x 1024 tensor. torch's
// micro-pipelined TP (torchtitan) then sums the 8 partial chunks a rank received, stacked, in one
// reduction kernel: e t h bytes read (8 chunks of t h / 8) and e t h / 8 written. Transformer Engine's userbuffers
// (Megatron) reduce inside the communication kernels: no such op.
TEST_CASE("async TP of tp 8: the projection as 8 row chunks beside its reduce-scatter; torch sums the partials") {
  const ModelSpec m = gpt(PosEmb::learned);
  for (const Runtime rt : {Runtime::megatron, Runtime::torchtitan_fsdp2}) {
    CAPTURE(rt);
    Plan p = single_gpu();
    p.runtime = rt;
    p.mesh.tp = 8;
    p.sequence_parallel = true;
    p.async_tp = true;
    const StepProgram prog = lower_step(m, p, kJob, LowerOptions{.op_names = true});
    const Op proj = find(prog, "fwd.L0.mb0.proj");
    const double tokens = kSeq * kBatch;
    REQUIRE(proj.gemms.size() == 8);
    for (const GemmShape& g : proj.gemms) {
      CHECK(g.m == tokens / 8);
      CHECK(g.n == kHidden);
      CHECK(g.k == kHidden / 8);
    }
    const Op rs = find(prog, "fwd.L0.mb0.tp_attn_out");
    CHECK(rs.bytes == doctest::Approx(2 * tokens * kHidden));
    bool summed = false;
    for (std::size_t i = 0; i < prog.ops.size(); ++i) summed = summed || prog.name(i) == "fwd.L0.mb0.tp_attn_out.sum";
    CHECK(summed == (rt == Runtime::torchtitan_fsdp2));
    if (!summed) continue;
    const Op sum = find(prog, "fwd.L0.mb0.tp_attn_out.sum");
    CHECK(sum.memory_bound_bytes == doctest::Approx(2 * tokens * kHidden * (1 + 1.0 / 8)));
    CHECK(sum.kernels == 1);
    CHECK(sum.stream == StreamKind::compute);
    // It waits for the reduce-scatter (the copies) and the MLP's all-gather follows it.
    const auto ix = [&](const char* name) {
      for (std::size_t i = 0; i < prog.ops.size(); ++i)
        if (prog.name(i) == name) return static_cast<int>(i);
      return -1;
    };
    const std::vector<int> deps(sum.deps.begin(), sum.deps.end());
    CHECK(std::find(deps.begin(), deps.end(), ix("fwd.L0.mb0.tp_attn_out")) != deps.end());
    CHECK(std::find(deps.begin(), deps.end(), ix("fwd.L0.mb0.proj")) != deps.end());
  }
}

// torch's ring attention (torchtitan's context parallelism) merges each step's block output into
// an fp32 accumulator and accumulates dQ, dK, dV in fp32 per step. cp 8, bf16, by hand, eager:
// forward per output element (2 + 4) + 7 (2 + 36) + (4 + 2) = 278 bytes, 2 + 7 x 9 + 2 = 67
// launches; backward per query element 4 + 8 (2 + 8) + (4 + 2) = 90 bytes, per key/value element
// of a chunk 4 + 8 (2 + 16) + (4 + 2) = 154 for each of dK and dV, 3 + 8 x 4 + 3 = 38 launches.
// Compiled (each step's merge one fused pass): forward 6 + 7 (2 + 8) + 6 = 82 bytes, 2 + 7 x 2 + 2
// = 18 launches; backward 90 and 4 + 8 (2 + 8) + 6 = 90 per key/value element, 3 + 8 x 3 + 3 = 30.
TEST_CASE("torch's ring attention: each step's output merged in fp32, the gradients accumulated in fp32") {
  const RingMergeCost fwd = ring_attention_merge(1000, 250, 8, 2, false, false);
  CHECK(fwd.bytes == doctest::Approx(278 * 1000));
  CHECK(fwd.kernels == 67);
  const RingMergeCost bwd = ring_attention_merge(1000, 250, 8, 2, true, false);
  CHECK(bwd.bytes == doctest::Approx(90 * 1000 + 2 * 154 * 250));
  CHECK(bwd.kernels == 38);
  const RingMergeCost fused_fwd = ring_attention_merge(1000, 250, 8, 2, false, true);
  CHECK(fused_fwd.bytes == doctest::Approx(82 * 1000));
  CHECK(fused_fwd.kernels == 18);
  const RingMergeCost fused_bwd = ring_attention_merge(1000, 250, 8, 2, true, true);
  CHECK(fused_bwd.bytes == doctest::Approx(90 * 1000 + 2 * 90 * 250));
  CHECK(fused_bwd.kernels == 30);
  // In the lowered step: torchtitan's CP attention op carries it over the rank's 2048 / 8 query
  // tokens of its 8 heads of 128 (and the kv chunk of as many tokens); Megatron's does not.
  ModelSpec m = gpt(PosEmb::rope);
  m.n_kv_heads = 2;
  auto attention_op = [&](Runtime rt, const char* name) {
    Plan p = single_gpu();
    p.runtime = rt;
    p.mesh.cp = 8;
    return find(lower_step(m, p, kJob, LowerOptions{.op_names = true}), name);
  };
  const double q = kBatch * kSeq / 8 * kHeads * kHeadDim, kv = kBatch * kSeq / 8 * 2 * kHeadDim;
  for (const char* name : {"fwd.L0.mb0.attn", "bwd.L0.mb0.attn"}) {
    CAPTURE(name);
    const bool backward = name[0] == 'b';
    const Op torch = attention_op(Runtime::torchtitan_fsdp2, name);
    const Op te = attention_op(Runtime::megatron, name);
    const RingMergeCost merge = ring_attention_merge(q, kv, 8, 2, backward, false);
    CHECK(torch.memory_bound_bytes - te.memory_bound_bytes == doctest::Approx(merge.bytes));
    CHECK(torch.kernels - te.kernels == merge.kernels);
  }
}

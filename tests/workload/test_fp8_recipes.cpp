// What Transformer Engine's FP8 recipes add to a step, checked by hand: FP8 attention
// (Plan::fp8_attention, Megatron --fp8-dot-product-attention) with the casts around the kernel,
// the FP8 Q, K, V and O it saves, the curve it is priced on and the plan key's refusals; and
// delayed scaling's amax all-reduce.
#include <doctest/doctest.h>

#include <array>
#include <cmath>
#include <string>
#include <vector>

#include "cost/compute_cost.hpp"
#include "sim/step_simulator.hpp"
#include "spec/cluster_loader.hpp"
#include "spec/error.hpp"
#include "spec/model_spec.hpp"
#include "spec/plan.hpp"
#include "spec/placement.hpp"
#include "spec/plan_toml.hpp"
#include <toml++/toml.h>
#include "workload/activation_memory.hpp"
#include "workload/layer_kernels.hpp"
#include "workload/stage_params.hpp"
#include "workload/step_program.hpp"

using namespace meshplan;

namespace {

// Two dense layers: d 2048, 16 heads of 128 (no GQA), SwiGLU 8192: the head width the Blackwell
// FP8 attention curves are measured at.
ModelSpec small_dense() {
  ModelSpec m;
  m.name = "dense2";
  m.n_layers = 2;
  m.d_model = 2048;
  m.n_heads = m.n_kv_heads = 16;
  m.head_dim = 128;
  m.mlp = MlpKind::swiglu;
  m.ffn_hidden = 8192;
  m.vocab = 32000;
  m.pos_emb = PosEmb::rope;
  m.norm = NormKind::rmsnorm;
  m.max_seq_len = 16384;
  return m;
}

Plan te_plan(Fp8Recipe recipe, bool fp8_attention) {
  Plan p;
  p.runtime = Runtime::megatron;
  p.sharding = Sharding::zero1;
  p.param_dtype = p.compute_dtype = Dtype::bf16;
  p.reduce_dtype = Dtype::fp32;
  p.dropout = false;
  p.fp8 = recipe;
  p.fp8_attention = fp8_attention;
  return p;
}

// Seq 16384 (long enough that kernel time, not launch overhead, sets every op's time), global
// batch 1, micro-batch 1, grad-accum 1.
const Job kJob{16384, 1, 1, 1};

// Q, K, V and O of one micro-batch: 16384 tokens x 16 heads x 128.
constexpr double kElems = 16384.0 * 16 * 128;

double attention_cast_bytes_of(const StepProgram& prog, const char* prefix, bool low_precision_attention) {
  double bytes = 0;
  for (const Op& op : prog.expanded()) {
    if (op.attention.empty() || op.name.rfind(prefix, 0) != 0) continue;
    CHECK(op.low_precision_attention == low_precision_attention);
    bytes += op.cast_bytes;
  }
  return bytes;
}

}  // namespace

TEST_CASE("FP8 attention casts Q, K, V in and O out (forward), dO in and dQ, dK, dV out (backward), by hand") {
  const ModelSpec m = small_dense();
  const StepProgram off = lower_step(m, te_plan(Fp8Recipe::te_current, false), kJob);
  const StepProgram on = lower_step(m, te_plan(Fp8Recipe::te_current, true), kJob);
  // Current scaling reads each 16-bit tensor twice (amax, then the cast) and writes 1 byte: 5 bytes
  // per element in; an output reads 1 byte and writes 2: 3 bytes. Forward: Q, K, V in, O out =
  // 5 x 3 + 3 = 18 bytes per element of one tensor; backward: dO in, dQ, dK, dV out = 5 + 3 x 3 = 14.
  const double fwd = 18 * kElems, bwd = 14 * kElems;
  CHECK(attention_cast_bytes_of(on, "fwd.", true) - attention_cast_bytes_of(off, "fwd.", false) ==
        doctest::Approx(2 * fwd));  // two layers
  CHECK(attention_cast_bytes_of(on, "bwd.", true) - attention_cast_bytes_of(off, "bwd.", false) ==
        doctest::Approx(2 * bwd));

  AttentionShape a;
  a.heads = a.kv_heads = 16;
  a.seq_q = a.seq_kv = 16384;
  a.head_dim = 128;
  // MXFP8 writes a 1-byte E8M0 scale per 32 elements and needs no amax pass: in 2 + 1 + 1/32.
  const double in = 2 + 1 + 1.0 / 32, out = 1 + 1.0 / 32 + 2;
  CHECK(attention_cast_bytes(a, Pass::forward, 2, quant_recipe(Fp8Recipe::mxfp8)) ==
        doctest::Approx((3 * in + out) * kElems));
  CHECK(attention_cast_bytes(a, Pass::backward, 2, quant_recipe(Fp8Recipe::mxfp8)) ==
        doctest::Approx((in + 3 * out) * kElems));
}

TEST_CASE("FP8 attention saves its FP8 Q, K, V and O: 1 byte per element instead of 2") {
  const ModelSpec m = small_dense();
  const MicroBatchShape mb{16384, 1};
  const double saved_16 = block_activations(m, te_plan(Fp8Recipe::te_delayed, false), mb).attention_bytes;
  const double saved_8 = block_activations(m, te_plan(Fp8Recipe::te_delayed, true), mb).attention_bytes;
  CHECK(saved_16 - saved_8 == doctest::Approx(4 * kElems));  // Q, K, V, O at 2 -> 1 byte
  // MXFP8 adds its block scales: 1 + 1/32 bytes.
  const double saved_mx = block_activations(m, te_plan(Fp8Recipe::mxfp8, true), mb).attention_bytes;
  const double saved_mx16 = block_activations(m, te_plan(Fp8Recipe::mxfp8, false), mb).attention_bytes;
  CHECK(saved_mx16 - saved_mx == doctest::Approx(4 * kElems * (1 - 1.0 / 32)));
}

TEST_CASE("FP8 attention is priced on the profile's MXFP8 cuDNN curve, and the step gains exactly that") {
  const ClusterSpec c = load_cluster("gb200");
  const ModelSpec m = small_dense();
  SimOptions keep;
  keep.keep_timeline = true;
  const SimulatedStep off = simulate_step(m, te_plan(Fp8Recipe::mxfp8, false), kJob, c, keep);
  const SimulatedStep on = simulate_step(m, te_plan(Fp8Recipe::mxfp8, true), kJob, c, keep);
  REQUIRE(off.program.ops.size() == on.program.ops.size());

  AttentionShape a;
  a.heads = a.kv_heads = 16;
  a.seq_q = a.seq_kv = 16384;
  a.head_dim = 128;
  a.backend = AttentionBackend::transformer_engine;
  int checked = 0;
  for (std::size_t i = 0; i < on.program.ops.size(); ++i) {
    const Op op = on.program.op(i);
    if (op.attention.empty()) continue;
    const Pass pass = op.attention_pass;
    const KernelEstimate k16 = attention_time(c, a, pass, Dtype::bf16);
    const KernelEstimate k8 = attention_time(c, a, pass, Dtype::mxfp8);
    CHECK(k8.curve_dtype == Dtype::mxfp8);
    CHECK(k8.attention_kernel == AttentionKernel::cudnn);
    CHECK_FALSE(k8.curve_fallback);
    const double cast_bytes = op.cast_bytes - off.program.work(i).cast_bytes;
    const KernelEstimate cast = cast_time(c, cast_bytes);
    const double expected = (k16.seconds - k16.launch_seconds) - (k8.seconds - k8.launch_seconds) -
                            (cast.seconds - cast.launch_seconds);
    const double d_off = off.timings[i].end_seconds - off.timings[i].start_seconds;
    const double d_on = on.timings[i].end_seconds - on.timings[i].start_seconds;
    CAPTURE(op.name);
    CHECK(d_off - d_on == doctest::Approx(expected).epsilon(1e-9));
    ++checked;
  }
  CHECK(checked == 4);  // the forward and backward of 2 layers (no recompute)
}

TEST_CASE("fp8_attention refused without a Transformer Engine FP8 recipe, naming the key") {
  const std::string base =
      "[model]\nname = \"llama3.1-8b\"\n[cluster]\nprofile = \"h100-sxm-80gb\"\ngpus = 8\n"
      "[layout]\ndp_replicate = 8\n[sharding]\nstrategy = \"zero1\"\n[batch]\nseq_len = 4096\n"
      "global_batch = 8\nmicro_batch = 1\n[runtime]\nname = \"megatron\"\n";
  auto read = [](const std::string& text) { return read_plan_toml("p.toml", toml::parse(text)); };
  for (const char* recipe : {"none", "torchao-tensorwise", "nvfp4"}) {
    CAPTURE(recipe);
    try {
      (void)read(base + "[precision]\nfp8 = \"" + recipe + "\"\nfp8_attention = true\n");
      FAIL("accepted");
    } catch (const InputError& e) {
      CHECK(e.key().find("fp8_attention") != std::string::npos);
    }
  }
  const RunConfig ok = read(base + "[precision]\nfp8 = \"te-delayed\"\nfp8_attention = true\n");
  CHECK(ok.plan.fp8_attention);
  // Written back only when set, so plans without it stay byte-identical.
  CHECK(to_plan_toml(ok).find("fp8_attention = true") != std::string::npos);
  const RunConfig plain = read(base + "[precision]\nfp8 = \"te-delayed\"\n");
  CHECK(to_plan_toml(plain).find("fp8_attention") == std::string::npos);
}

TEST_CASE("delayed scaling all-reduces the amaxes once per chunk, micro-batch and pass over the stage, by hand") {
  ModelSpec m = small_dense();
  m.n_layers = 4;
  Plan p = te_plan(Fp8Recipe::te_delayed, false);
  p.mesh.pp = 2;
  p.mesh.tp = 2;
  p.mesh.dp_replicate = 2;
  p.schedule = PipelineSchedule::interleaved_1f1b;
  p.mesh.vpp = 2;  // 4 chunks of 1 layer
  const Job j{2048, 8, 1, 4};  // 4 micro-batches per data-parallel rank
  const StepProgram prog = lower_step(m, p, j);
  int fwd = 0, bwd = 0;
  for (const Op& op : prog.expanded()) {
    if (op.category != OpCategory::amax) continue;
    CHECK(op.kind == OpKind::collective);
    CHECK(op.collective == CollectiveOp::all_reduce);
    CHECK(op.group == GroupKind::stage);
    CHECK(op.stream == StreamKind::amax);
    // One layer per chunk: QKV, output projection, fused fc1 and fc2 = 4 FP8 GEMMs; 3 fp32 amaxes
    // each forward, 2 backward.
    const bool is_fwd = op.name.rfind("fwd.", 0) == 0;
    CHECK(op.bytes == doctest::Approx(4 * (is_fwd ? 3 : 2) * 4.0));
    (is_fwd ? fwd : bwd) += 1;
  }
  // Per stage: 2 chunks x 4 micro-batches, each forward and backward; 2 stages.
  CHECK(fwd == 2 * 2 * 4);
  CHECK(bwd == 2 * 2 * 4);
  // Current scaling computes each tensor's own amax locally: no reduction.
  const StepProgram current = lower_step(m, te_plan(Fp8Recipe::te_current, false), Job{2048, 1, 1, 1});
  for (const Op& op : current.expanded()) CHECK(op.category != OpCategory::amax);
  // The stage group is every rank of one pipeline stage.
  CHECK(group_shape(p.mesh, MeshGroup::stage).n_ranks == 4);
  CHECK(group_shape(p.mesh, MeshGroup::stage).stride == 1);
}

namespace {

// What a step leaves allocated per stage and term: the sum of every op's allocations and frees
// (the simulator applies each once, at its op's start or end), so the timeline's allocation after
// the step minus the one before it.
std::vector<std::array<double, kMemoryTerms>> net_allocation(const StepProgram& prog) {
  std::vector<std::array<double, kMemoryTerms>> net(static_cast<std::size_t>(prog.n_stages));
  for (const Op& op : prog.expanded())
    for (const auto* changes : {&op.at_start, &op.at_end})
      for (const auto& [term, bytes] : *changes)
        net[static_cast<std::size_t>(op.stage)][static_cast<std::size_t>(term)] += bytes;
  return net;
}

// torchtitan with torchao's float8 linears on 8-way FSDP2: two micro-batches, so a unit is
// gathered in forward, again in backward, and the second micro-batch reuses what the first freed.
Plan torchao_fsdp_plan(bool fp8_all_gather) {
  Plan p;
  p.runtime = Runtime::torchtitan_fsdp2;
  p.sharding = Sharding::zero3;
  p.mesh.dp_shard = 8;
  p.param_dtype = p.compute_dtype = Dtype::bf16;
  p.reduce_dtype = Dtype::fp32;
  p.fp8 = Fp8Recipe::torchao_tensorwise;
  p.fp8_all_gather = fp8_all_gather;
  return p;
}

}  // namespace

TEST_CASE("float8 all-gather: every gathered unit is freed, so a step ends with the allocation it began with") {
  ModelSpec m = small_dense();
  m.n_layers = 8;
  const Job job{4096, 16, 1, 2};
  const ParamCounts pc = param_counts(m);
  for (const bool reshard : {true, false})
    for (const int pp : {1, 2}) {
      CAPTURE(reshard);
      CAPTURE(pp);
      Plan p = torchao_fsdp_plan(true);
      p.reshard_after_forward = reshard;
      p.mesh.pp = pp;
      p.mesh.dp_shard = 8 / pp;
      const StepProgram prog = lower_step(m, p, job);
      for (const auto& stage : net_allocation(prog))
        for (const MemoryTerm t : {MemoryTerm::unsharded_params, MemoryTerm::activations, MemoryTerm::recompute,
                                   MemoryTerm::reduce_buffers, MemoryTerm::host}) {
          CAPTURE(static_cast<int>(t));
          // A leak of one unit's norms (16 bits each, 1 byte freed) is 2 x 2048 bytes.
          CHECK(std::abs(stage[static_cast<std::size_t>(t)]) < 1.0);
        }
      // The all-gather sends what it allocates: the linears in 1 byte, the norms in bf16.
      const double unit = block_params_per_rank(m, p);
      const double expected = 1.0 * (unit - static_cast<double>(pc.norm_per_layer)) + 2.0 * pc.norm_per_layer;
      int gathers = 0;
      for (const Op& op : prog.expanded()) {
        if (op.category != OpCategory::fsdp_all_gather || op.name.find(".L") == std::string::npos) continue;
        CAPTURE(op.name);
        CHECK(op.bytes == doctest::Approx(expected).epsilon(1e-12));
        ++gathers;
      }
      CHECK(gathers > 0);
    }
  // Without float8 all-gather the unit is all bf16, and the step ends where it began too.
  for (const auto& stage : net_allocation(lower_step(m, torchao_fsdp_plan(false), job)))
    CHECK(std::abs(stage[static_cast<std::size_t>(MemoryTerm::unsharded_params)]) < 1.0);
}

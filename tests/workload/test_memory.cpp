// Memory model against hand-derived values and published formulas.
#include <doctest/doctest.h>

#include <cmath>

#include "spec/cluster_spec.hpp"
#include "workload/activation_memory.hpp"
#include "workload/device_fit.hpp"
#include "workload/memory_estimate.hpp"

using namespace meshplan;

namespace {

// GPT-3 175B as in Korthikanti et al. 2022 Table 3 (h 12288, a 96, L 96, s 2048, V 51200).
ModelSpec gpt3_175b() {
  ModelSpec m;
  m.name = "gpt3-175b";
  m.n_layers = 96;
  m.d_model = 12288;
  m.n_heads = 96;
  m.n_kv_heads = 96;
  m.head_dim = 128;
  m.ffn_hidden = 4 * 12288;
  m.mlp = MlpKind::gelu;
  m.vocab = 51200;
  m.tied_embeddings = true;
  m.pos_emb = PosEmb::learned;
  m.norm = NormKind::layernorm;
  m.linear_bias = true;
  m.norm_bias = true;
  m.max_seq_len = 2048;
  return m;
}

ModelSpec llama3_8b() {
  ModelSpec m;
  m.name = "llama3.1-8b";
  m.n_layers = 32;
  m.d_model = 4096;
  m.n_heads = 32;
  m.n_kv_heads = 8;
  m.head_dim = 128;
  m.ffn_hidden = 14336;
  m.mlp = MlpKind::swiglu;
  m.vocab = 128256;
  m.max_seq_len = 8192;
  return m;
}

// Megatron as in the paper: unfused attention, dropout on, 16-bit activations.
Plan korthikanti_plan(int tp, bool sp, AcMode ac) {
  Plan p;
  p.runtime = Runtime::megatron;
  p.mesh.tp = tp;
  p.sequence_parallel = sp;
  p.flash_attention = false;
  p.dropout = true;
  p.ac = ac;
  p.sharding = Sharding::none;
  return p;
}

ClusterSpec test_cluster(double hbm_bytes) {
  ClusterSpec c;
  c.name = "test";
  c.gpu.hbm_bytes = hbm_bytes;
  c.framework.cuda_context_bytes = 0;
  c.framework.nccl_buffer_bytes_per_group = 0;
  c.framework.allocator_reserve_fraction = 0;
  return c;
}

constexpr double s = 2048, b = 1, h = 12288, a = 96;

}  // namespace

TEST_CASE("Korthikanti eq. 1: no parallelism, no recompute: sbh(34 + 5as/h)") {
  const auto m = gpt3_175b();
  const double expected = s * b * h * (34 + 5 * a * s / h);
  const double got = block_activations(m, korthikanti_plan(1, false, AcMode::none), {2048, 1}).total();
  CHECK(got == doctest::Approx(expected).epsilon(0.01));
}

TEST_CASE("Korthikanti eq. 2: TP without SP: sbh(10 + 24/t + 5as/(ht))") {
  const auto m = gpt3_175b();
  for (int t : {2, 4, 8}) {
    const double expected = s * b * h * (10 + 24.0 / t + 5 * a * s / (h * t));
    const double got = block_activations(m, korthikanti_plan(t, false, AcMode::none), {2048, 1}).total();
    CHECK(got == doctest::Approx(expected).epsilon(0.01));
  }
}

TEST_CASE("Korthikanti eq. 4: TP + SP: sbh(34 + 5as/h)/t") {
  const auto m = gpt3_175b();
  const double expected = s * b * h * (34 + 5 * a * s / h) / 8;
  const double got = block_activations(m, korthikanti_plan(8, true, AcMode::none), {2048, 1}).total();
  CHECK(got == doctest::Approx(expected).epsilon(0.01));
}

TEST_CASE("Korthikanti eq. 6: TP + SP + selective recompute: 34 sbh / t") {
  const auto m = gpt3_175b();
  const double got = saved_block_bytes(m, korthikanti_plan(8, true, AcMode::selective_attn), {2048, 1}, 0);
  CHECK(got == doctest::Approx(34 * s * b * h / 8).epsilon(0.01));
}

TEST_CASE("Full recompute keeps 2sbh per layer") {
  const auto m = gpt3_175b();
  const double got = saved_block_bytes(m, korthikanti_plan(1, false, AcMode::full), {2048, 1}, 5);
  CHECK(got == doctest::Approx(2 * s * b * h).epsilon(0.01));
}

TEST_CASE("FlashAttention removes the s^2 term; only the fp32 log-sum-exp remains") {
  auto m = gpt3_175b();
  Plan p = korthikanti_plan(1, false, AcMode::none);
  p.flash_attention = true;
  p.dropout = false;
  // 34 - 2 dropout masks = 32 sbh, plus 4 bytes per head per token.
  const double expected = 32 * s * b * h + 4 * a * s * b;
  CHECK(block_activations(m, p, {2048, 1}).total() == doctest::Approx(expected).epsilon(0.001));
}

TEST_CASE("Llama-3 block (GQA, SwiGLU, flash, no dropout), hand-derived") {
  const auto m = llama3_8b();
  Plan p;
  p.runtime = Runtime::torchtitan_fsdp2;
  const double S = 8192, H = 4096, F = 14336, KV = 1024;
  // Eager RMSNorm saves its fp32 upcast (4SH) and the bf16 normalized output (2SH), twice per block;
  // QKV input 2SH; Q 2SH; K,V 2*2S*KV; O 2SH; MLP input 2SH; 4 x 2SF; lse 4*32*S.
  const double rest = 2 * S * H + 2 * S * H + 4 * S * KV + 2 * S * H + 2 * S * H + 8 * S * F + 4 * 32 * S;
  CHECK(block_activations(m, p, {8192, 1}).total() == doctest::Approx(2 * 6 * S * H + rest).epsilon(1e-9));
  // torch.compile fuses the norm: it saves only its bf16 input.
  p.compile = true;
  CHECK(block_activations(m, p, {8192, 1}).total() == doctest::Approx(2 * 2 * S * H + rest).epsilon(1e-9));
}

TEST_CASE("fp32 weights under autocast: fp32 residual stream and the cached bf16 weights at the end of forward") {
  const auto m = llama3_8b();
  Plan p;
  p.runtime = Runtime::generic;
  p.mesh.dp_shard = 8;
  p.sharding = Sharding::zero3;
  p.compile = true;  // fused norms, so the block input is the only residual term that changes
  p.ac = AcMode::full;
  const Job j{8192, 8, 1, 1};
  const ClusterSpec c = test_cluster(80e9);
  const MemoryEstimate mixed = estimate_memory(m, p, j, c);
  p.param_dtype = Dtype::fp32;
  const MemoryEstimate autocast = estimate_memory(m, p, j, c);
  // Full AC keeps the block input: 4 bytes per element instead of 2, for all 32 blocks.
  const double S = 8192, H = 4096;
  CHECK(saved_block_bytes(m, p, {8192, 1}, 0) == doctest::Approx(4 * S * H));
  const StageMemory& st = autocast.stages.front();
  CHECK(st.peak_phase == "end of forward (autocast cache)");
  // The cache holds a bf16 copy of every block weight and the head: 2 bytes per parameter.
  const ParamCounts pc = param_counts(m);
  const double cached = 2.0 * (pc.per_layer() * m.n_layers + pc.lm_head + pc.final_norm);
  CHECK(st.breakdown.unsharded_params > cached);
  CHECK(st.breakdown.unsharded_params < cached + 4.0 * 3 * pc.per_layer());  // + the gathered fp32 units
  CHECK(st.breakdown.recompute == 0);
  CHECK(st.breakdown.reduce_buffers == 0);
  // Backward has not started: the saved block inputs and the loss forward's tensors, nothing else.
  CHECK(st.breakdown.activations == doctest::Approx(32 * 4 * S * H + loss_forward_peak_bytes(m, p, {8192, 1})));
  CHECK(mixed.stages.front().peak_phase == "forward->backward");
}

TEST_CASE("Persistent state is 16 P / N with AdamW under FSDP, in every mixed-precision mode") {
  const auto m = llama3_8b();
  const auto c = test_cluster(1e15);
  Job j{8192, 16, 1, 2};  // grad accumulation keeps the fp32 grads alive through forward
  for (Dtype reduce : {Dtype::fp32, Dtype::bf16}) {
    Plan p;
    p.runtime = Runtime::composer_fsdp1;
    p.mesh.dp_shard = 8;
    p.reduce_dtype = reduce;
    const auto e = estimate_memory(m, p, j, c);
    const auto& br = e.stages.at(0).breakdown;
    CHECK(br.params + br.grads + br.optimizer ==
          doctest::Approx(16.0 * static_cast<double>(n_params(m)) / 8).epsilon(1e-9));
  }
}

TEST_CASE("PURE vs DEFAULT changes only the reduce buffer, by the fp32 upcast of one unit") {
  const auto m = llama3_8b();
  const auto c = test_cluster(1e15);
  Job j{8192, 8, 1, 1};
  Plan def;
  def.runtime = Runtime::composer_fsdp1;
  def.mesh.dp_shard = 8;
  def.reduce_dtype = Dtype::fp32;
  Plan pure = def;
  pure.reduce_dtype = Dtype::bf16;
  const auto ed = estimate_memory(m, def, j, c).stages.at(0);
  const auto ep = estimate_memory(m, pure, j, c).stages.at(0);
  CHECK(ed.breakdown.params == ep.breakdown.params);
  CHECK(ed.breakdown.optimizer == ep.breakdown.optimizer);
  CHECK(ed.breakdown.activations == ep.breakdown.activations);
  const double unit = static_cast<double>(param_counts(m).per_layer());
  // DEFAULT: 4U upcast copy + 4U/N fp32 shard; PURE reduces in place + 2U/N bf16 shard.
  CHECK(fsdp_reduce_buffer_bytes(def, unit) - fsdp_reduce_buffer_bytes(pure, unit) ==
        doctest::Approx(4 * unit + (4 - 2) * unit / 8).epsilon(1e-9));
  // The peak is the loss's backward, where the group holding the head ([norm, output]: G) is
  // being reduced: the same difference over G.
  REQUIRE(ed.peak_moment == "loss backward");
  const ParamCounts pc = param_counts(m);
  const double g = static_cast<double>(pc.lm_head + pc.final_norm);
  CHECK(ed.breakdown.reduce_buffers - ep.breakdown.reduce_buffers ==
        doctest::Approx(4 * g + (4 - 2) * g / 8).epsilon(1e-9));
}

TEST_CASE("Reentrant checkpointing never uses less memory than non-reentrant") {
  const auto m = llama3_8b();
  const auto c = test_cluster(1e15);
  Job j{8192, 8, 1, 1};
  for (AcMode ac : {AcMode::full, AcMode::selective_layer, AcMode::selective_op}) {
    Plan p;
    p.mesh.dp_shard = 8;
    p.ac = ac;
    p.ac_every_n = 2;
    Plan r = p;
    r.ac_reentrant = true;
    // At the loss's backward (this peak) nothing is recomputed yet: equal there, more after.
    CHECK(estimate_memory(m, r, j, c).stages[0].peak_bytes >= estimate_memory(m, p, j, c).stages[0].peak_bytes);
    CHECK(recompute_working_bytes(m, r, {8192, 8}) > recompute_working_bytes(m, p, {8192, 8}));
  }
}

TEST_CASE("Full AC never raises activation memory; selective lies in between") {
  const auto m = llama3_8b();
  const MicroBatchShape mb{8192, 2};
  Plan none, full, sel;
  full.ac = AcMode::full;
  sel.ac = AcMode::selective_layer;
  sel.ac_every_n = 2;
  double sum_none = 0, sum_full = 0, sum_sel = 0;
  for (int l = 0; l < m.n_layers; ++l) {
    sum_none += saved_block_bytes(m, none, mb, l);
    sum_full += saved_block_bytes(m, full, mb, l);
    sum_sel += saved_block_bytes(m, sel, mb, l);
  }
  CHECK(sum_full < sum_sel);
  CHECK(sum_sel < sum_none);
  // Every second block checkpointed: half the blocks keep everything, half their input.
  const double all = block_activations(m, none, mb).total();
  const double input = block_activations(m, none, mb).block_input_bytes;
  CHECK(sum_sel == doctest::Approx(16 * all + 16 * input).epsilon(1e-9));
}

TEST_CASE("SHARD_GRAD_OP keeps the whole unsharded bf16 model (2 P) between forward and backward") {
  const auto m = llama3_8b();
  const auto c = test_cluster(1e15);
  Plan p;
  p.runtime = Runtime::composer_fsdp1;
  p.sharding = Sharding::zero2;
  p.reshard_after_forward = false;
  p.mesh.dp_shard = 8;
  const auto st = estimate_memory(m, p, Job{2048, 8, 1, 1}, c).stages.at(0);
  CHECK(st.breakdown.unsharded_params == doctest::Approx(2.0 * static_cast<double>(n_params(m))).epsilon(1e-9));
}

TEST_CASE("HSDP shards state within the shard group only") {
  const auto m = llama3_8b();
  const auto c = test_cluster(1e15);
  Plan full;
  full.mesh.dp_shard = 64;
  Plan hsdp;
  hsdp.mesh.dp_shard = 8;
  hsdp.mesh.dp_replicate = 8;
  Job j{8192, 64, 1, 1};
  const auto ef = estimate_memory(m, full, j, c).stages.at(0).breakdown;
  const auto eh = estimate_memory(m, hsdp, j, c).stages.at(0).breakdown;
  CHECK(eh.params == doctest::Approx(8 * ef.params).epsilon(1e-9));
}

TEST_CASE("Megatron distributed optimizer: 6 + 12/d bytes per parameter") {
  const auto m = gpt3_175b();
  const auto c = test_cluster(1e15);
  Plan p;
  p.runtime = Runtime::megatron;
  p.sharding = Sharding::zero1;
  p.mesh.dp_replicate = 8;
  p.mesh.dp_shard = 1;
  p.mesh.tp = 8;
  p.mesh.pp = 16;
  const auto st = estimate_memory(m, p, Job{2048, 1536, 1, 192}, c).stages.at(1);
  const auto& br = st.breakdown;
  CHECK(br.params + br.grads + br.optimizer == doctest::Approx((6 + 12.0 / 8) * st.params_per_rank).epsilon(1e-9));
}

TEST_CASE("Pipeline micro-batches in flight: 1F1B, interleaved (Korthikanti eq. 8 factor), GPipe") {
  Plan p;
  p.mesh.pp = 8;
  p.schedule = PipelineSchedule::one_f_one_b;
  CHECK(microbatches_in_flight(p, 0, 64) == 8);
  CHECK(microbatches_in_flight(p, 7, 64) == 1);
  CHECK(microbatches_in_flight(p, 0, 4) == 4);
  p.schedule = PipelineSchedule::interleaved_1f1b;
  p.mesh.vpp = 4;
  // First stage holds pp * (1 + (pp-1)/(pp*v)) layers' worth, in units of its L/pp layers.
  CHECK(microbatches_in_flight(p, 0, 64) == doctest::Approx(8 * (1 + 7.0 / 32)).epsilon(1e-12));
  p.schedule = PipelineSchedule::gpipe;
  CHECK(microbatches_in_flight(p, 3, 64) == 64);
}

TEST_CASE("Activation offload moves saved tensors to the host and keeps at most two blocks on the GPU") {
  const auto m = llama3_8b();
  const auto c = test_cluster(1e15);
  Plan p;
  p.mesh.dp_shard = 8;
  Plan off = p;
  off.act_offload = true;
  Job j{8192, 8, 1, 1};
  const auto base = estimate_memory(m, p, j, c).stages.at(0);
  const auto moved = estimate_memory(m, off, j, c).stages.at(0);
  const double block = block_activations(m, p, {8192, 1}).total();
  CHECK(moved.host_bytes == doctest::Approx(32 * block).epsilon(1e-9));
  // The peak is the loss's backward: on its own stream the offload may still be copying the last
  // block out (one block on the GPU); the copies back start after it, two blocks during a block's
  // backward.
  REQUIRE(moved.peak_moment == "loss backward");
  CHECK(base.breakdown.activations - moved.breakdown.activations == doctest::Approx(31 * block).epsilon(1e-9));
}

TEST_CASE("Breakdown adds up to the peak, and fit compares with capacity") {
  const auto m = llama3_8b();
  Plan p;
  p.mesh.dp_shard = 8;
  Job j{8192, 8, 1, 1};
  auto c = test_cluster(80e9);
  c.framework.cuda_context_bytes = 0.5e9;
  c.framework.nccl_buffer_bytes_per_group = 0.2e9;
  c.framework.allocator_reserve_fraction = 0.1;
  const auto e = estimate_memory(m, p, j, c);
  const auto& st = e.stages.at(0);
  CHECK(st.breakdown.total() == doctest::Approx(st.peak_bytes).epsilon(1e-12));
  CHECK(st.breakdown.comm_buffers == doctest::Approx(0.2e9));
  CHECK(st.breakdown.framework == doctest::Approx(0.5e9 + 0.1 * st.allocated_peak_bytes).epsilon(1e-9));
  CHECK(e.needed_bytes == doctest::Approx(st.allocated_peak_bytes + 0.2e9 + 0.5e9).epsilon(1e-12));
  CHECK(e.fits == (e.needed_bytes <= 80e9));
  CHECK(e.headroom_bytes == doctest::Approx(80e9 - st.peak_bytes).epsilon(1e-12));
  auto tiny = test_cluster(1e9);
  CHECK_FALSE(estimate_memory(m, p, j, tiny).fits);
}

// The rule of workload/device_fit.hpp by hand: stage 1 needs 11 + 0.5 + 1 = 12.5 (more than stage
// 0's 10 + 1 + 1 = 12) although stage 0's peak with the reserve is the larger, 14.
TEST_CASE("device fit: the stage needing the most allocated + CUDA context + NCCL buffers decides; tight without the reserve") {
  const std::vector<StageDemand> stages = {{0, 10, 1, 14}, {1, 11, 0.5, 13}};
  const DeviceFit roomy = device_fit(stages, 1, 14);
  CHECK(roomy.stage == 1);
  CHECK(roomy.needed_bytes == 12.5);
  CHECK(roomy.reserve_peak_bytes == 14);
  CHECK(roomy.fits());
  CHECK_FALSE(roomy.tight());
  const DeviceFit tight = device_fit(stages, 1, 13);
  CHECK(tight.fits());
  CHECK(tight.tight());
  const DeviceFit over = device_fit(stages, 1, 12.4);
  CHECK_FALSE(over.fits());
  CHECK_FALSE(over.tight());
}

// The closed form on a device between what a step allocates (with the CUDA context and NCCL
// buffers) and its peak with the allocator's 10 % reserve: it fits, tightly; a byte less than the
// allocations and it does not.
TEST_CASE("memory: a step fits while its allocations fit, tight when only the allocator's reserve does not") {
  const auto m = llama3_8b();
  Plan p;
  p.mesh.dp_shard = 8;
  const Job j{8192, 8, 1, 1};
  auto c = test_cluster(1e15);
  c.framework.cuda_context_bytes = 0.5e9;
  c.framework.nccl_buffer_bytes_per_group = 0.2e9;
  c.framework.allocator_reserve_fraction = 0.1;
  const double allocated = estimate_memory(m, p, j, c).stages.at(0).allocated_peak_bytes;
  const double needed = allocated + 0.7e9;
  c.gpu.hbm_bytes = needed + 0.05 * allocated;  // half the reserve
  const MemoryEstimate tight = estimate_memory(m, p, j, c);
  CHECK(tight.needed_bytes == doctest::Approx(needed).epsilon(1e-12));
  CHECK(tight.fits);
  CHECK(tight.tight);
  CHECK(tight.headroom_bytes == doctest::Approx(-0.05 * allocated).epsilon(1e-9));
  c.gpu.hbm_bytes = needed + 0.1 * allocated + 1e6;  // the whole reserve and a megabyte
  const MemoryEstimate roomy = estimate_memory(m, p, j, c);
  CHECK(roomy.fits);
  CHECK_FALSE(roomy.tight);
  c.gpu.hbm_bytes = needed - 1e6;
  const MemoryEstimate over = estimate_memory(m, p, j, c);
  CHECK_FALSE(over.fits);
  CHECK_FALSE(over.tight);
}

TEST_CASE("the allocator's reserve never exceeds the device: it frees its cache and retries first") {
  const auto m = llama3_8b();
  Plan p;
  p.runtime = Runtime::torchtitan_fsdp2;
  p.mesh.dp_shard = 8;
  const Job j{8192, 8, 1, 1};
  ClusterSpec c = test_cluster(1e15);
  c.framework.allocator_reserve_fraction = 0.2;
  c.framework.cuda_context_bytes = 0.5e9;
  const StageMemory roomy = estimate_memory(m, p, j, c).stages.front();
  CHECK(roomy.reserved_peak_bytes == doctest::Approx(1.2 * roomy.allocated_peak_bytes));
  // A device 10% larger than the allocations: the reserve is what is left after the context.
  c.gpu.hbm_bytes = 1.1 * roomy.allocated_peak_bytes + 0.5e9;
  const StageMemory tight = estimate_memory(m, p, j, c).stages.front();
  CHECK(tight.allocated_peak_bytes == doctest::Approx(roomy.allocated_peak_bytes));
  CHECK(tight.reserved_peak_bytes == doctest::Approx(1.1 * roomy.allocated_peak_bytes));
  // Allocations beyond the device: reserved = allocated (the run does not fit).
  c.gpu.hbm_bytes = 0.5 * roomy.allocated_peak_bytes;
  CHECK(estimate_memory(m, p, j, c).stages.front().reserved_peak_bytes == doctest::Approx(roomy.allocated_peak_bytes));
}

TEST_CASE("DeepSpeed-style fp16 model + fp32 master without FSDP: 2 + 2 + 12/d bytes per parameter") {
  const auto m = llama3_8b();
  Plan p;
  p.runtime = Runtime::generic;
  p.mesh.dp_replicate = 8;
  p.sharding = Sharding::zero1;
  p.param_dtype = p.compute_dtype = p.reduce_dtype = Dtype::fp16;
  const StageMemory st = estimate_memory(m, p, Job{512, 8, 1, 1}, test_cluster(1e15)).stages.front();
  const double P = st.params_per_rank;
  REQUIRE(st.peak_phase == "optimizer step");
  CHECK(st.breakdown.params == doctest::Approx(2 * P));
  CHECK(st.breakdown.grads == doctest::Approx(2 * P));
  // fp32 master + both moments sharded 8 ways, plus foreach AdamW's temporary (one fp32 tensor
  // per local master weight): (4 + 8 + 4) / 8 = 2 bytes per parameter.
  CHECK(st.breakdown.optimizer == doctest::Approx(16 * P / 8));
  CHECK(st.allocated_peak_bytes == doctest::Approx(6 * P));
}

TEST_CASE("optimizer_implementation: foreach adds one state-dtype copy of the local params at the step, fused none") {
  const auto m = llama3_8b();
  Plan p;
  p.runtime = Runtime::generic;  // foreach by default
  p.mesh.dp_replicate = 8;
  p.sharding = Sharding::zero1;
  p.param_dtype = p.compute_dtype = p.reduce_dtype = Dtype::fp16;
  const Job j{512, 8, 1, 1};
  const StageMemory dflt = estimate_memory(m, p, j, test_cluster(1e15)).stages.front();
  p.optimizer_impl = OptimizerImpl::foreach;
  const StageMemory fe = estimate_memory(m, p, j, test_cluster(1e15)).stages.front();
  p.optimizer_impl = OptimizerImpl::fused;
  const StageMemory fu = estimate_memory(m, p, j, test_cluster(1e15)).stages.front();
  const double P = fu.params_per_rank;
  CHECK(dflt.breakdown.optimizer == doctest::Approx(fe.breakdown.optimizer));
  // fp32 master + moments over 8 ranks: (4 + 8) / 8 bytes per parameter; foreach + 4 / 8.
  CHECK(fu.breakdown.optimizer == doctest::Approx(12 * P / 8));
  CHECK(fe.breakdown.optimizer - fu.breakdown.optimizer == doctest::Approx(4 * P / 8));
  // torchtitan fused by default; foreach on request.
  p.runtime = Runtime::torchtitan_fsdp2;
  p.optimizer_impl = OptimizerImpl::framework;
  const double tt = estimate_memory(m, p, j, test_cluster(1e15)).stages.front().breakdown.optimizer;
  p.optimizer_impl = OptimizerImpl::foreach;
  CHECK(estimate_memory(m, p, j, test_cluster(1e15)).stages.front().breakdown.optimizer > tt);
}

TEST_CASE("Loss forward: log_softmax holds the fp32 logits it reads and the fp32 log-probs it writes") {
  const auto m = llama3_8b();
  Plan p;
  p.runtime = Runtime::torchtitan_fsdp2;  // eager RMSNorm: the final norm saves 4 + 2 bytes per element
  const double S = 8192, H = 4096, V = 128256;
  // final-norm input 6SH + head input 2SH + fp32 logits 4SV + fp32 log-probs 4SV
  // = 201,326,592 + 67,108,864 + 4,202,692,608 + 4,202,692,608 = 8,673,820,672 bytes.
  CHECK(loss_forward_peak_bytes(m, p, {8192, 1}) == doctest::Approx(8673820672.0).epsilon(1e-12));
  CHECK(loss_forward_peak_bytes(m, p, {8192, 1}) == doctest::Approx(6 * S * H + 2 * S * H + 8 * S * V).epsilon(1e-12));
  // Four bytes per logit more than what the forward leaves saved (the log-probs).
  CHECK(loss_forward_peak_bytes(m, p, {8192, 1}) - loss_saved_bytes(m, p, {8192, 1}) == doctest::Approx(4 * S * V));
  // Loss-parallel TP splits both vocab-wide tensors; SP the final-norm input.
  p.mesh.tp = 8;
  p.sequence_parallel = true;
  CHECK(loss_forward_peak_bytes(m, p, {8192, 1}) == doctest::Approx(6 * S * H / 8 + 2 * S * H + 8 * S * V / 8).epsilon(1e-12));
}

TEST_CASE("Block backward working set: the incoming gradient plus the widest MLP or attention gradients") {
  const auto m = llama3_8b();
  Plan p;
  const double S = 8192, F = 14336, Q = 4096, KV = 1024;
  // SwiGLU: d(silu(gate)) and d(up), 2 x 2SF = 469,762,048, beat attention's dO+dQ+dK+dV
  // (2S(2Q + 2KV) = 167,772,160); plus the incoming 2SH = 67,108,864: 536,870,912 bytes.
  CHECK(block_backward_working_bytes(m, p, {8192, 1}) == doctest::Approx(536870912.0).epsilon(1e-12));
  CHECK(2 * S * (2 * Q + 2 * KV) < 4 * S * F);
  // GPT-3 (GELU 4h MLP, MHA): one inner gradient 2s*4h ties with attention's 2s*4h; plus 2sh.
  const auto g = gpt3_175b();
  CHECK(block_backward_working_bytes(g, p, {2048, 1}) == doctest::Approx(10 * s * h).epsilon(1e-12));
  // Megatron TP 8 + SP: the inner width splits by t, the incoming gradient is sequence-sharded.
  const Plan mp = korthikanti_plan(8, true, AcMode::full);
  CHECK(block_backward_working_bytes(g, mp, {2048, 1}) == doctest::Approx(10 * s * h / 8).epsilon(1e-12));
}

TEST_CASE("Pipeline stage outputs: kept per micro-batch in flight outside Megatron, plus the first block's gradients") {
  const auto m = llama3_8b();
  const auto c = test_cluster(1e15);
  Plan p;
  p.runtime = Runtime::generic;  // e.g. DeepSpeed's PipelineEngine: pipe buffers hold the outputs
  p.sharding = Sharding::none;
  p.mesh.pp = 2;
  p.ac = AcMode::full;
  p.compile = true;
  p.param_offload = true;  // state on the host, so the forward->backward moment is the peak
  const double S = 4096, H = 4096, F = 14336;
  CHECK(pipeline_boundary_bytes(m, p, {4096, 1}, 2) == doctest::Approx(2 * 2 * S * H));
  const Job j{4096, 8, 1, 8};
  const StageMemory st0 = estimate_memory(m, p, j, c).stages.at(0);
  REQUIRE(st0.microbatches_in_flight == 2);
  REQUIRE(st0.peak_phase == "forward->backward");
  // 2 micro-batches x 16 block inputs (2SH each) + 2 stage outputs (2SH each) + the first block's
  // backward gradients (2SH + 2 x 2SF).
  CHECK(st0.breakdown.activations == doctest::Approx(2 * 16 * 2 * S * H + 2 * 2 * S * H + 2 * S * H + 4 * S * F).epsilon(1e-12));
  // Megatron frees a sent output's data (deallocate_pipeline_outputs).
  p.runtime = Runtime::megatron;
  CHECK(pipeline_boundary_bytes(m, p, {4096, 1}, 2) == 0);
  // Interleaved 1F1B, pp 4, v 2, 16 micro-batches: stage 0 holds (2*3 + 1*4 + 1) = 11
  // chunk-micro-batches, and both of its chunks send: 11 outputs of 2SH more than Megatron keeps.
  p.mesh.pp = 4;
  p.mesh.vpp = 2;
  p.schedule = PipelineSchedule::interleaved_1f1b;
  const Job j16{4096, 16, 1, 16};
  const double megatron_act = estimate_memory(m, p, j16, c).stages.at(0).breakdown.activations;
  p.runtime = Runtime::generic;
  const StageMemory gen0 = estimate_memory(m, p, j16, c).stages.at(0);
  REQUIRE(gen0.microbatches_in_flight == doctest::Approx(5.5));
  CHECK(gen0.breakdown.activations - megatron_act == doctest::Approx(11 * 2 * S * H).epsilon(1e-12));
}

TEST_CASE("Per-op SAC: eager caches the down projection's output, torch.compile saves only what backward reads") {
  const auto m = llama3_8b();
  Plan p;
  p.ac = AcMode::selective_op;
  const double S = 8192, H = 4096, F = 14336;
  const MicroBatchShape mb{8192, 1};
  const double eager = saved_block_bytes(m, p, mb, 0);
  // block input 2SH; wq 2SQ, wv 2S*KV, w1 2SF, w2 2SH; attention out 2SQ; lse 4*32*S.
  CHECK(eager == doctest::Approx(2 * S * H + 2 * S * 4096 + 2 * S * 1024 + 2 * S * F + 2 * S * H + 2 * S * 4096 + 4 * 32 * S).epsilon(1e-12));
  // Recompute rebuilds what backward reads and was not saved: w2's cached output is not part of it.
  CHECK(recompute_working_bytes(m, p, mb) ==
        doctest::Approx(block_activations(m, p, mb).total() - (eager - 2 * S * H - 2 * S * H)).epsilon(1e-12));
  Plan c = p;
  c.compile = true;
  CHECK(eager - saved_block_bytes(m, c, mb, 0) == doctest::Approx(2 * S * H).epsilon(1e-12));
  // Under TP + SP: w2's rowwise output is the full-width partial sum (2SH), and eager also caches
  // the two reduce-scatter outputs (2 x 2SH/t); compiled, neither is kept.
  p.mesh.tp = c.mesh.tp = 2;
  p.sequence_parallel = c.sequence_parallel = true;
  CHECK(saved_block_bytes(m, p, mb, 0) - saved_block_bytes(m, c, mb, 0) == doctest::Approx(2 * S * H + 2 * 2 * S * H / 2).epsilon(1e-12));
}

TEST_CASE("float8 all-gather: block linears in 1 byte, norms, embedding and head in 16 bits") {
  const auto m = llama3_8b();
  const auto c = test_cluster(1e15);
  Plan p;
  p.runtime = Runtime::generic;
  p.sharding = Sharding::zero2;
  p.reshard_after_forward = false;
  p.mesh.dp_replicate = 8;
  p.mesh.dp_shard = 1;
  p.compute_dtype = p.param_dtype = p.state_dtype = Dtype::bf16;
  p.fp8 = Fp8Recipe::torchao_tensorwise;
  p.fp8_all_gather = true;
  const ParamCounts pc = param_counts(m);
  const double linears = static_cast<double>(pc.attention_per_layer + pc.mlp_per_layer) * m.n_layers;
  const double norms = static_cast<double>(pc.norm_per_layer) * m.n_layers + static_cast<double>(pc.final_norm);
  const double root = static_cast<double>(pc.embedding + pc.lm_head);
  const auto st = estimate_memory(m, p, Job{8192, 8, 1, 1}, c).stages.at(0);
  CHECK(st.breakdown.unsharded_params == doctest::Approx(1.0 * linears + 2.0 * (norms + root)).epsilon(1e-12));
}

TEST_CASE("Fused cross-entropy keeps the bf16 logits and a log-sum-exp, and writes one bf16 gradient") {
  const auto m = llama3_8b();
  Plan p;
  p.runtime = Runtime::torchtitan_fsdp2;  // eager RMSNorm: the final norm saves 4 + 2 bytes per element
  const double S = 8192, H = 4096, V = 128256;
  Plan fused = p;
  fused.fused_cross_entropy = true;
  // torch: fp32 log-probs 4SV saved, two fp32 gradients 8SV in backward, the fp32 upcast 4SV in forward.
  // fused: bf16 logits 2SV + fp32 lse 4S saved, one bf16 gradient 2SV, nothing more in forward.
  CHECK(loss_saved_bytes(m, fused, {8192, 1}) == doctest::Approx(6 * S * H + 2 * S * H + 2 * S * V + 4 * S).epsilon(1e-12));
  CHECK(loss_backward_working_bytes(m, fused, {8192, 1}) == doctest::Approx(2 * S * V).epsilon(1e-12));
  CHECK(loss_forward_peak_bytes(m, fused, {8192, 1}) == doctest::Approx(loss_saved_bytes(m, fused, {8192, 1})));
  CHECK(loss_saved_bytes(m, p, {8192, 1}) - loss_saved_bytes(m, fused, {8192, 1}) == doctest::Approx(2 * S * V - 4 * S));
  CHECK(loss_backward_working_bytes(m, p, {8192, 1}) == doctest::Approx(8 * S * V).epsilon(1e-12));
}

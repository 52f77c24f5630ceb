// Multi-token prediction (DeepSeek-V3 §2.2, Megatron-Core multi_token_prediction.py) through the
// lowering, the memory model and the simulator: one module's FLOPs for DeepSeek-V3's dims against
// a hand count, and a 61-layer DeepSeek-V3 with its module on (pp 16, vpp 1), (pp 4, vpp 4) and
// (pp 4, vpp 2) under Megatron-Bridge's ceil(L / stages) layout: the stages' layers, and the
// module's work, parameters and memory on the last stage only.
#include <doctest/doctest.h>

#include <fmt/format.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "sim/step_simulator.hpp"
#include "spec/cluster_loader.hpp"
#include "spec/model_loader.hpp"
#include "spec/pipeline_split.hpp"
#include "workload/activation_memory.hpp"
#include "workload/memory_estimate.hpp"
#include "workload/stage_params.hpp"
#include "workload/step_program.hpp"

using namespace meshplan;

namespace {

ModelSpec deepseek_v3(int mtp) {
  ModelSpec m = load_model("deepseek-v3");
  m.n_mtp_layers = mtp;
  return m;
}

// Megatron, bf16, no TP, EP, CP or recompute: every GEMM of a stage is its rank's.
Plan megatron_pp(int pp, int vpp, const ModelSpec& m) {
  Plan p;
  p.runtime = Runtime::megatron;
  p.mesh.pp = pp;
  p.mesh.vpp = vpp;
  p.schedule = vpp > 1 ? PipelineSchedule::interleaved_1f1b : PipelineSchedule::one_f_one_b;
  p.sharding = Sharding::none;
  p.param_dtype = p.compute_dtype = Dtype::bf16;
  p.reduce_dtype = Dtype::fp32;
  p.ac = AcMode::none;
  const auto split = megatron_split_for(m.n_layers, pp, vpp, m.n_mtp_layers);
  REQUIRE(split);
  p.pipeline_split = *split;
  return p;
}

// One module's forward FLOPs per token, by hand from DeepSeek-V3's config (2 FLOPs per
// multiply-add): the MLA projections (q_a 7168 -> 1536, q_b 1536 -> 128 x (128 + 64), kv_a
// 7168 -> 512 + 64, kv_b 512 -> 128 x (128 + 128), o 128 x 128 -> 7168), causal attention over
// s tokens (QK^T over 192, PV over 128, half the pairs), the router (7168 -> 256), 8 routed and
// 1 shared SwiGLU expert of 2048 (three 7168 x 2048 matrices each), the projection eh_proj
// (2 x 7168 -> 7168) and the shared head (7168 -> 129280).
double mtp_forward_flops_per_token(double s) {
  const double h = 7168, n = 128, ql = 1536, kvl = 512, nope = 128, rope = 64, dv = 128, v = 129280;
  const double mla = h * ql + ql * n * (nope + rope) + h * (kvl + rope) + kvl * n * (nope + dv) + n * dv * h;
  const double attention = n * (s / 2) * (nope + rope) + n * (s / 2) * dv;
  const double router = h * 256;
  const double experts = (8 + 1) * 3 * h * 2048;
  const double eh_proj = 2 * h * h;
  const double head = h * v;
  return 2 * (mla + attention + router + experts + eh_proj + head);
}

double flops_of_stage(const StepProgram& prog, int stage) {
  double f = 0;
  for (const Op& op : prog.expanded())
    if (op.stage == stage) f += op.model_flops;
  return f;
}

std::vector<int> repeat(int n, int layers) { return std::vector<int>(static_cast<std::size_t>(n), layers); }
std::vector<int> cat(std::vector<int> a, const std::vector<int>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

}  // namespace

TEST_CASE("one multi-token-prediction module of DeepSeek-V3: its FLOPs by hand, forward and backward") {
  const Job j{4096, 1, 1, 1};
  const ModelSpec with = deepseek_v3(1), without = deepseek_v3(0);
  const Plan p = megatron_pp(1, 1, with);
  const StepProgram a = lower_step(with, p, j), b = lower_step(without, p, j);
  // Forward once, backward twice (data and weight gradients; attention's backward counted as twice
  // its forward, the MFU convention): 3 x the forward.
  const double hand = 3 * mtp_forward_flops_per_token(4096) * 4096;
  CHECK(a.model_flops_per_step - b.model_flops_per_step == doctest::Approx(hand).epsilon(1e-12));
  // Per token, in multiply-adds: MLA 187.1 M, attention 83.9 M, router 1.8 M, experts 396.4 M,
  // eh_proj 102.8 M, head 926.7 M: 1.699 G, x 2 x 3 = 10.19 GFLOP.
  CHECK(hand / 4096 == doctest::Approx(3 * 2 * (187.1e6 + 83.9e6 + 1.8e6 + 396.4e6 + 102.8e6 + 926.7e6)).epsilon(1e-3));
  // The per-token count that simulate's MFU divides by grows by the module's parameters (6N),
  // its attention (12 x heads x head width x s, no causal discount) and its logits (6 d V).
  const ParamCounts c = param_counts(with);
  const double mtp_active = static_cast<double>(n_active_params(with) - n_active_params(without));
  CHECK(mtp_active == doctest::Approx(static_cast<double>(c.mtp) - 248.0 * 3 * 7168 * 2048));
  CHECK(model_flops_per_token(with, 4096) - model_flops_per_token(without, 4096) ==
        doctest::Approx(6 * mtp_active + 12.0 * 128 * 160 * 4096 + 6.0 * 7168 * 129280).epsilon(1e-12));
}

TEST_CASE("a 61-layer DeepSeek-V3 with its MTP module on the ceil(L / stages) layout: the module on the last stage") {
  const ModelSpec with = deepseek_v3(1), without = deepseek_v3(0);
  const ClusterSpec cl = load_cluster("h100-sxm-80gb");
  const ParamCounts c = param_counts(with);
  struct Case {
    int pp, vpp;
    std::string layout;            // Megatron's --pipeline-model-parallel-layout for it
    std::vector<int> chunks;       // decoder layers per virtual stage, in model order
    std::vector<int> rank_layers;  // per pipeline rank, all its chunks
  };
  for (const Case& k : {Case{16, 1, "Et*4|(t*4|)*14tmL", cat(repeat(15, 4), {1}), cat(repeat(15, 4), {1})},
                        Case{4, 4, "Et*4|(t*4|)*14tmL", cat(repeat(15, 4), {1}), {16, 16, 16, 13}},
                        Case{4, 2, "Et*8|(t*8|)*6t*5mL", cat(repeat(7, 8), {5}), {16, 16, 16, 13}}}) {
    CAPTURE(k.pp);
    CAPTURE(k.vpp);
    const Plan p = megatron_pp(k.pp, k.vpp, with);
    CHECK(p.pipeline_split.chunk_layers == k.chunks);
    CHECK(p.pipeline_split.mtp_chunk == k.pp * k.vpp - 1);
    CHECK(format_pipeline_layout(layout_of(p.pipeline_split)) == k.layout);
    // Two rounds of pp micro-batches of one 4096-token sequence.
    const Job j{4096, 2 * k.pp, 1, 2 * k.pp};
    const double tokens = 4096.0 * j.grad_accum;
    LowerOptions named;
    named.op_names = true;
    const StepProgram a = lower_step(with, p, j, named), b = lower_step(without, p, j, named);
    // The module's work is all on the last stage: its ops, and the difference in FLOPs.
    int mtp_ops = 0;
    for (const Op& op : a.expanded())
      if (op.name.find("mtp1") != std::string::npos || op.name.find(".L61.") != std::string::npos) {
        ++mtp_ops;
        CHECK(op.stage == k.pp - 1);
      }
    CHECK(mtp_ops > 0);
    for (int s = 0; s + 1 < k.pp; ++s) CHECK(flops_of_stage(a, s) == flops_of_stage(b, s));
    CHECK(flops_of_stage(a, k.pp - 1) - flops_of_stage(b, k.pp - 1) ==
          doctest::Approx(3 * mtp_forward_flops_per_token(4096) * tokens).epsilon(1e-12));
    // The memory model: the stages' decoder layers, the module on the last; its parameters there
    // (the block, eh_proj's 2 d^2 and three norms: ParamCounts::mtp) and the embedding copy it
    // reads the shifted tokens from.
    const MemoryEstimate ea = estimate_memory(with, p, j, cl), eb = estimate_memory(without, p, j, cl);
    REQUIRE(ea.stages.size() == static_cast<std::size_t>(k.pp));
    for (int r = 0; r < k.pp; ++r) {
      CAPTURE(r);
      const StageMemory& sa = ea.stages[static_cast<std::size_t>(r)];
      const StageMemory& sb = eb.stages[static_cast<std::size_t>(r)];
      CHECK(sa.n_layers == k.rank_layers[static_cast<std::size_t>(r)]);
      const bool last = r == k.pp - 1;
      CHECK(sa.mtp_layers == (last ? 1 : 0));
      const double extra = last ? static_cast<double>(c.mtp + c.embedding) : 0.0;
      CHECK(sa.params_per_rank - sb.params_per_rank == doctest::Approx(extra).epsilon(1e-12));
      if (!last) CHECK(sa.peak_bytes == sb.peak_bytes);
    }
    // Its activations: the block's saved tensors and its inputs for every micro-batch its chunk
    // holds at the loss's backward, and one more head's saved logits. The module's chunk is the
    // model's last: on the last stage each micro-batch's backward there follows its forward at
    // once, so it holds one micro-batch, whatever vpp. Without the module, an interleaved last
    // stage peaks at a block's backward instead (its last chunk holds one layer and the loss), a
    // moment at least as large as its loss's backward: there the difference is at most that sum.
    const StageMemory& la = ea.stages.back();
    const StageMemory& lb = eb.stages.back();
    const MicroBatchShape mbs{4096, 1};
    const double module_at_loss =
        saved_block_bytes(with, p, mbs, 61) + mtp_input_saved_bytes(with, p, mbs) + loss_saved_bytes(with, p, mbs);
    const double added = la.breakdown.activations - lb.breakdown.activations;
    CHECK(la.microbatches_in_flight >= 1);
    CHECK(la.peak_moment == "loss backward");
    if (lb.peak_moment == "loss backward") {
      CHECK(added == doctest::Approx(module_at_loss).epsilon(1e-9));
    } else {
      CHECK(k.vpp > 1);
      CHECK(added > 0);
      CHECK(added <= module_at_loss * (1 + 1e-9));
    }
    // The inputs by hand: the two norms' inputs (d each) and the projection's 2d-wide input, bf16.
    CHECK(mtp_input_saved_bytes(with, p, mbs) == 2.0 * 4096 * (7168 + 7168 + 2 * 7168));
    // Simulated: the last stage computes longer, the others as without the module (to the
    // interference of communication the shifted timeline overlaps differently: 1e-5), and the
    // timeline's peak on the last stage is the closed form's (interleaved: within the 2 % the
    // closed form's whole-stage count of micro-batches in flight allows, docs/memory.md).
    const StepResult ra = simulate_step(with, p, j, cl).result, rb = simulate_step(without, p, j, cl).result;
    REQUIRE(ra.stages.size() == static_cast<std::size_t>(k.pp));
    for (int s = 0; s + 1 < k.pp; ++s)
      CHECK(ra.stages[static_cast<std::size_t>(s)].compute_busy_seconds ==
            doctest::Approx(rb.stages[static_cast<std::size_t>(s)].compute_busy_seconds).epsilon(1e-5));
    const double mtp_compute = ra.stages.back().compute_busy_seconds - rb.stages.back().compute_busy_seconds;
    CHECK(mtp_compute > 0);
    CHECK(ra.stages.back().peak_bytes == doctest::Approx(la.peak_bytes).epsilon(k.vpp == 1 ? 1e-9 : 0.02));
    CHECK(ra.step_time_s >= rb.step_time_s);
  }
}

// FSDP's root unit and activation offload, against hand-derived byte counts (issue #16).
#include <doctest/doctest.h>

#include <string>

#include "sim/step_simulator.hpp"
#include "spec/cluster_loader.hpp"
#include "spec/model_loader.hpp"
#include "workload/activation_memory.hpp"
#include "workload/memory_estimate.hpp"
#include "workload/step_program.hpp"

using namespace meshplan;

namespace {

// Bytes the all-gathers of micro-batch 0 move in forward and in backward (each op's bytes are the
// unsharded group in the gather dtype).
struct Gathered {
  double forward = 0, backward = 0;
};

Gathered gathered_bytes(const StepProgram& prog) {
  Gathered g;
  for (const Op& o : prog.expanded()) {
    if (o.category != OpCategory::fsdp_all_gather || o.name.find(".mb0") == std::string::npos) continue;
    (o.name.rfind("fsdp_ag.fwd", 0) == 0 ? g.forward : g.backward) += o.bytes;
  }
  return g;
}

Plan fsdp8(Runtime r) {
  Plan p;
  p.runtime = r;
  p.mesh.dp_shard = 8;
  p.sharding = Sharding::zero3;
  p.reshard_after_forward = true;
  p.root_unsharded = false;
  return p;
}

}  // namespace

TEST_CASE("Llama-8B FSDP on 8 GPUs gathers every parameter per forward, and again in backward when resharded") {
  const ModelSpec m = load_model("llama3.1-8b");
  const ParamCounts pc = param_counts(m);
  const double all = static_cast<double>(pc.per_layer()) * 32 + static_cast<double>(pc.embedding + pc.final_norm + pc.lm_head);
  const double head_group = static_cast<double>(pc.final_norm + pc.lm_head);
  const Job j{8192, 8, 1, 1};
  // bf16 all-gathers: 2 bytes per parameter of the 32 blocks, the embedding, the norm and the head.
  // Composer FSDP2 with every group resharded after forward gathers all of them again in backward.
  const Gathered resharded = gathered_bytes(lower_step(m, fsdp8(Runtime::composer_fsdp2), j));
  CHECK(resharded.forward == doctest::Approx(2 * all).epsilon(1e-12));
  CHECK(resharded.backward == doctest::Approx(2 * all).epsilon(1e-12));
  // torchtitan keeps [norm, output] and the last block gathered from forward to backward.
  const Gathered titan = gathered_bytes(lower_step(m, fsdp8(Runtime::torchtitan_fsdp2), j));
  CHECK(titan.forward == doctest::Approx(2 * all).epsilon(1e-12));
  CHECK(titan.backward == doctest::Approx(2 * (all - head_group - static_cast<double>(pc.per_layer()))).epsilon(1e-12));
  // FSDP1's root unit (embedding, norm, head) stays gathered through the micro-batch: once.
  Plan root = fsdp8(Runtime::composer_fsdp1);
  root.root_unsharded = true;
  const Gathered fsdp1 = gathered_bytes(lower_step(m, root, j));
  CHECK(fsdp1.forward == doctest::Approx(2 * all).epsilon(1e-12));
  CHECK(fsdp1.backward == doctest::Approx(2 * static_cast<double>(pc.per_layer()) * 32).epsilon(1e-12));
}

TEST_CASE("activation offload with AC off keeps at most two layers' saved activations on the GPU") {
  const ModelSpec m = load_model("llama3.1-8b");
  const ClusterSpec c = load_cluster("h100-sxm-80gb");
  const Job j{8192, 8, 1, 1};
  for (Runtime r : {Runtime::torchtitan_fsdp2, Runtime::composer_fsdp1}) {
    CAPTURE(static_cast<int>(r));
    Plan p = fsdp8(r);
    p.ac = AcMode::none;
    Plan off = p;
    off.act_offload = true;
    const MicroBatchShape mb{8192, 1};
    const double layer = saved_block_bytes(m, p, mb, 0);
    const auto on_gpu = simulate_step(m, p, j, c).result.stages.at(0);
    const auto offloaded = simulate_step(m, off, j, c).result.stages.at(0);
    // Beyond the loss's tensors and one block's backward gradients, at most two layers of
    // saved activations; all 32 layers' worth sits in pinned host memory at its peak.
    const double loss = loss_saved_bytes(m, p, mb) + loss_backward_working_bytes(m, p, mb);
    const double block_grads = block_backward_working_bytes(m, p, mb);
    CHECK(offloaded.breakdown.activations <= 2 * layer + std::max(loss, block_grads) + 1);
    CHECK(on_gpu.breakdown.activations >= 32 * layer);
    CHECK(offloaded.host_bytes == doctest::Approx(32 * layer).epsilon(1e-9));
    // The closed form says the same.
    const auto est = estimate_memory(m, off, j, c).stages.at(0);
    CHECK(est.peak_bytes == doctest::Approx(offloaded.peak_bytes).epsilon(0.02));
    CHECK(est.host_bytes == doctest::Approx(32 * layer).epsilon(1e-9));
  }
}

// The planner spends its simulation budget on distinct plans: settings that lower to the same
// step (Megatron's selective attention recompute under FlashAttention recomputes nothing) share
// one row, and no two rows predict the same tokens/s and memory at the same layout.
#include <doctest/doctest.h>

#include <algorithm>
#include <fmt/format.h>
#include <set>
#include <tuple>

#include "plan/planner.hpp"
#include "plan/step_fingerprint.hpp"
#include "spec/cluster_loader.hpp"
#include "spec/model_loader.hpp"
#include "spec/pipeline_split.hpp"

using namespace meshplan;

namespace {

PlanRequest megatron_8b_on_8() {
  PlanRequest rq;
  rq.model = load_model("llama3.1-8b");
  rq.cluster = load_cluster("h100-sxm-80gb");
  rq.n_gpus = 8;
  rq.global_batch_tokens = 1LL << 20;
  rq.runtime = Runtime::megatron;
  return rq;
}

// Qwen3-30B-A3B on 64 H100, 4Mi tokens of 4096 (issue 32's expert-parallel search).
PlanRequest qwen3_30b_on_64(Runtime runtime) {
  PlanRequest rq;
  rq.model = load_model("qwen3-30b-a3b");
  rq.cluster = load_cluster("h100-sxm-80gb");
  rq.n_gpus = 64;
  rq.seq_len = 4096;
  rq.global_batch_tokens = 4LL << 20;
  rq.runtime = runtime;
  return rq;
}

Plan megatron_plan(AcMode ac) {
  Plan p;
  p.runtime = Runtime::megatron;
  p.sharding = Sharding::zero1;
  p.grad_sync_every_microbatch = false;
  p.sequence_parallel = true;
  p.mesh.tp = 2;
  p.mesh.pp = 2;
  p.mesh.dp_replicate = 2;
  p.ac = ac;
  return p;
}

Job job(std::int64_t micro_batch) {
  Job j;
  j.seq_len = 8192;
  j.global_batch = 16;
  j.micro_batch = micro_batch;
  j.grad_accum = 8 / micro_batch;
  return j;
}

}  // namespace

TEST_CASE("the fingerprint sees what the simulator sees: twins equal, real differences not") {
  const ModelSpec m = load_model("llama3.1-8b");
  const ClusterSpec c = load_cluster("h100-sxm-80gb");
  REQUIRE(megatron_plan(AcMode::none).flash_attention);
  // With FlashAttention nothing of the attention core is saved, so selective recompute of it
  // recomputes nothing: the same ops, the same memory.
  const auto none = program_fingerprint(m, megatron_plan(AcMode::none), job(1), c);
  CHECK(none == program_fingerprint(m, megatron_plan(AcMode::selective_attn), job(1), c));
  CHECK(memory_fingerprint(m, megatron_plan(AcMode::none), job(1), c) ==
        memory_fingerprint(m, megatron_plan(AcMode::selective_attn), job(1), c));
  // Full recompute repeats every block's forward; two micro-batches per step change the shapes.
  CHECK(none != program_fingerprint(m, megatron_plan(AcMode::full), job(1), c));
  CHECK(none != program_fingerprint(m, megatron_plan(AcMode::none), job(2), c));
  CHECK(memory_fingerprint(m, megatron_plan(AcMode::none), job(1), c) !=
        memory_fingerprint(m, megatron_plan(AcMode::full), job(1), c));
  // Without FlashAttention selective recompute does recompute the attention core.
  Plan eager_none = megatron_plan(AcMode::none), eager_sel = megatron_plan(AcMode::selective_attn);
  eager_none.flash_attention = eager_sel.flash_attention = false;
  CHECK(program_fingerprint(m, eager_none, job(1), c) != program_fingerprint(m, eager_sel, job(1), c));
}

TEST_CASE("plan --runtime megatron: one row per distinct prediction, twins named in the row") {
  const PlanSearch s = search_plans(megatron_8b_on_8());
  REQUIRE(s.ranked.size() >= 10);
  std::set<std::tuple<int, int, int, int, int, int, std::int64_t, double, double>> seen;
  bool merged_selective = false;
  for (std::size_t i = 0; i < 10; ++i) {
    const PlanCandidate& r = s.ranked[i];
    const Mesh& mesh = r.plan.mesh;
    CAPTURE(i);
    // No two rows at one layout predict the same tokens/s and peak memory.
    CHECK(seen.insert({mesh.pp, mesh.vpp, mesh.dp_replicate, mesh.dp_shard, mesh.cp, mesh.tp, r.job.micro_batch,
                       r.result.tokens_per_s_per_gpu, r.peak_bytes})
              .second);
    REQUIRE_FALSE(r.equivalent_plans.empty());
    CHECK(r.equivalent_plans.front().ac == r.plan.ac);
    for (const Plan& e : r.equivalent_plans) {
      CHECK(e.mesh.world() == mesh.world());
      if (r.plan.ac == AcMode::none && e.ac == AcMode::selective_attn) merged_selective = true;
    }
  }
  CHECK(merged_selective);
  CHECK(s.merged > 0);
  // The winner is compared with a different plan, never its twin.
  CHECK(s.why_winner.find("by 0.0%") == std::string::npos);
  CHECK(s.ranked[0].result.tokens_per_s_per_gpu > s.ranked[1].result.tokens_per_s_per_gpu);
}

TEST_CASE("a search without twins lists each row's own setting alone") {
  PlanRequest rq = megatron_8b_on_8();
  rq.runtime = Runtime::torchtitan_fsdp2;  // AC none / selective-op / full all lower differently
  const PlanSearch s = search_plans(rq);
  REQUIRE_FALSE(s.ranked.empty());
  for (const PlanCandidate& r : s.ranked) CHECK(r.equivalent_plans.size() == 1);
  CHECK(s.merged == 0);
  CHECK(s.dropped.empty());
}

TEST_CASE("plan --runtime megatron: uneven pipelines carry the split rule Megatron needs") {
  // Llama-3.1-405B's 126 layers on pp 16: Megatron runs them only with the embedding and the loss
  // counted as layers ((126 + 2) / 16 = 8 per stage, 7 on the first and last); DeepSeek-V3's 61 on
  // pp 16 only with a layout, ceil(61 / 16) = 4 per stage and 1 on the last; on pp 32, where
  // 2 x 31 = 62 > 61, Megatron-Bridge's H100 shape: 1 with the embedding, 2 x 30, the loss alone.
  for (const auto& [name, layers] : {std::pair{"llama3.1-405b", 126}, std::pair{"deepseek-v3", 61}}) {
    const std::string model_name = name;  // CAPTURE cannot name a structured binding in clang 14
    CAPTURE(model_name);
    const ModelSpec m = load_model(name);
    for (int pp : {16, 32}) {
      CAPTURE(pp);
      const auto split = megatron_split_for(m.n_layers, pp, 1, m.n_mtp_layers);
      REQUIRE(split);
      const auto chunks = split_pipeline(m.n_layers, pp, 1, *split);
      REQUIRE(chunks);
      int total = 0;
      for (int c : *chunks) total += c;
      CHECK(total == layers);
      if (layers == 126) CHECK((split->embedding_as_layer && split->loss_as_layer));
      if (layers == 61 && pp == 16) CHECK(chunks->back() == 1);
      if (layers == 61 && pp == 32) CHECK((chunks->front() == 1 && chunks->back() == 0));
    }
  }
  PlanRequest rq;
  rq.model = load_model("deepseek-v3");
  rq.cluster = load_cluster("h100-sxm-80gb");
  rq.n_gpus = 1024;
  rq.seq_len = 4096;
  rq.global_batch_tokens = 16LL << 20;
  rq.runtime = Runtime::megatron;
  rq.top_k = 4;
  rq.simulate_budget = 4;
  const PlanSearch s = search_plans(rq);
  REQUIRE_FALSE(s.ranked.empty());
  bool uneven = false;
  for (const PlanCandidate& r : s.ranked) {
    const int chunks = r.plan.mesh.pp * r.plan.mesh.vpp;
    if (chunks > 1 && 61 % chunks != 0) {
      uneven = true;
      CHECK(r.plan.pipeline_split.given());  // the emitter can write it
    }
  }
  CHECK(uneven);
}

TEST_CASE("plan: where pp does not divide the layers, the ceil(L / stages) layout is simulated beside the runtime's "
          "split and kept only where it is faster") {
  // 13 layers and a 256k vocabulary on d 1024: the head and loss weigh about ten layers, so on pp 3
  // the last stage is the slowest and Megatron-Bridge's layout 5, 5, 3 (the head with the fewest
  // layers) should beat Megatron's own split with the embedding and the loss counted as layers,
  // 4, 5, 4 ((13 + 2) / 3). Whichever simulates faster is the one ranked.
  ModelSpec m;
  m.name = "odd13";
  m.n_layers = 13;
  m.d_model = 1024;
  m.n_heads = m.n_kv_heads = 16;
  m.head_dim = 64;
  m.mlp = MlpKind::swiglu;
  m.ffn_hidden = 4096;
  m.vocab = 256000;
  m.pos_emb = PosEmb::rope;
  m.norm = NormKind::rmsnorm;
  m.max_seq_len = 4096;
  PlanRequest rq;
  rq.model = m;
  rq.cluster = load_cluster("h100-sxm-80gb");
  rq.n_gpus = 3;
  rq.seq_len = 4096;
  rq.global_batch = 12;
  rq.runtime = Runtime::megatron;
  rq.top_k = 100;
  rq.simulate_budget = 100;
  const PlanSearch s = search_plans(rq);
  CHECK(s.uneven_tried > 0);
  int pp3 = 0, ceil_kept = 0;
  for (const PlanCandidate& c : s.ranked) {
    // (pp 3 x vpp 2 runs 13 layers only as 1, 3, 3, 3, 3 and the loss alone: no other split.)
    if (c.plan.mesh.pp != 3 || c.plan.mesh.vpp != 1) continue;
    ++pp3;
    const bool ceil = c.plan.pipeline_split.chunk_layers == std::vector<int>{5, 5, 3};
    if (ceil) ++ceil_kept;
    else CHECK((c.plan.pipeline_split.embedding_as_layer && c.plan.pipeline_split.loss_as_layer));
    // The other split of the same plan, simulated here: never faster than the one ranked.
    Plan other = c.plan;
    other.pipeline_split = {};
    if (ceil) {
      other.pipeline_split.embedding_as_layer = other.pipeline_split.loss_as_layer = true;
    } else {
      set_layout(other.pipeline_split, *ceil_split_layout(13, 3));
    }
    CHECK(c.result.tokens_per_s_per_gpu >=
          simulate_steady_state(m, other, c.job, rq.cluster).tokens_per_s_per_gpu);
  }
  CHECK(pp3 > 0);
  // The head-heavy last stage: 3 layers + head beat 4 + head, by 2.5-5 % at every micro-batch and
  // recompute setting simulated.
  CHECK(ceil_kept == pp3);
  CHECK(s.uneven_kept == ceil_kept);
  CHECK(std::any_of(s.notes.begin(), s.notes.end(),
                    [](const std::string& n) { return n.rfind("uneven pipelines: ", 0) == 0; }));
}

TEST_CASE("MoE: expert-parallel layouts reach the simulated set, and the winner is at least FSDP 64 x EP 8") {
  // Issue 32: Qwen3-30B-A3B on 64 H100, 4Mi tokens of 4096: the search picked EP 1 at 8,246
  // tokens/s/GPU (8,572 with a budget of 200) while FSDP 64 x EP 8 (micro-batch 1) simulates
  // 8,607.5: the prune charged EP its all-to-alls and credited it nothing. Since the trained
  // router's load imbalance is priced (docs/compute.md, "Router load imbalance": the most-loaded
  // of 8 ranks receives 1.2 x the mean) that plan simulates 7,589.9 (torchtitan's defaults,
  // zero3; 8,381 before), and the search's winner is EP 2 (8,309).
  const PlanSearch s = search_plans(qwen3_30b_on_64(PlanRequest{}.runtime));
  REQUIRE_FALSE(s.ranked.empty());
  CHECK(s.ranked.front().result.tokens_per_s_per_gpu >= 7589.9);
  CHECK(s.ranked.front().plan.mesh.ep > 1);
  // Every ep degree that has a feasible plan has its best one simulated: 1, 2, 4, ..., 64 (128
  // experts, 64 data-parallel ranks to borrow).
  std::set<int> eps;
  for (const PlanCandidate& c : s.ranked) eps.insert(c.plan.mesh.ep);
  CHECK(eps == std::set<int>{1, 2, 4, 8, 16, 32, 64});
}

TEST_CASE("a token target is approximate: the nearest whole number of sequences a layout admits, said in a note") {
  auto has_note = [](const PlanSearch& s, const std::string& what) {
    return std::any_of(s.notes.begin(), s.notes.end(), [&](const std::string& n) { return n.find(what) != std::string::npos; });
  };
  PlanRequest rq;
  rq.model = load_model("llama3.1-70b");
  rq.cluster = load_cluster("h100-sxm-80gb");
  rq.n_gpus = 256;
  rq.seq_len = 8192;
  rq.global_batch_tokens = 4'000'000;  // 4M: 488.28 sequences
  rq.simulate_budget = 4;
  rq.top_k = 4;
  // llm-foundry on 256 GPUs: data parallel over 256 / tp ranks, so 488 has no layout; 480 (= 32 x
  // 15, FSDP 32 x TP 8) is the nearest count that has one (512 is 23.7 sequences further).
  rq.runtime = Runtime::composer_fsdp1;
  const PlanSearch f = search_plans(rq);
  CHECK(f.global_batch == 480);
  REQUIRE_FALSE(f.ranked.empty());
  CHECK(f.ranked.front().job.global_batch == 480);
  CHECK(has_note(f, "4000000 tokens per step is 488.28 sequences of 8192: planned with 480 (3932160 tokens, -1.70%), "
                    "the nearest count a layout admits (488 does not divide over any)"));
  CHECK(has_note(f, "4Mi (4194304 tokens) is 512 whole sequences"));
  // torchtitan admits 488 itself (pipeline and context parallel take up the rest): the nearest.
  rq.runtime = Runtime::torchtitan_fsdp2;
  const PlanSearch t = search_plans(rq);
  CHECK(t.global_batch == 488);
  CHECK(has_note(t, "planned with 488 (3997696 tokens, -0.06%); 4Mi"));
  // Whole sequences: no rounding, no note.
  rq.global_batch_tokens = 4LL << 20;
  const PlanSearch w = search_plans(rq);
  CHECK(w.global_batch == 512);
  CHECK_FALSE(has_note(w, "sequences of 8192: planned with"));
}

// Issue 33: the closed-form prune never cuts a plan the simulator ranks in the top 10. Llama 3.1 8B
// on 16 H100 under torchtitan (617 feasible plans): with the first 20 by the estimate alone, ranks
// 2, 4, 5, 8, 9 and 10 of the search that simulates every plan were missing (the estimate misranks
// VPP 2 and CP 4 layouts by up to the largest simulated / estimated ratio); the second round
// simulates every plan whose estimate, times that ratio (+5 %), could reach the verified rows.
TEST_CASE("pruning: the verified rows are those a search simulating every plan ranks there") {
  PlanRequest rq;
  rq.model = load_model("llama3.1-8b");
  rq.cluster = load_cluster("h100-sxm-80gb");
  rq.n_gpus = 16;
  rq.global_batch_tokens = 1LL << 20;
  rq.runtime = Runtime::torchtitan_fsdp2;
  PlanRequest every = rq;
  every.simulate_budget = 100000;
  const PlanSearch all = search_plans(every);
  REQUIRE(all.ranked.size() >= 10);
  CHECK(all.ranked.size() + static_cast<std::size_t>(all.merged) + all.dropped.size() ==
        static_cast<std::size_t>(all.feasible));
  auto top = [](const PlanSearch& s, std::size_t n) {
    std::vector<double> v;
    for (std::size_t i = 0; i < n && i < s.ranked.size(); ++i) v.push_back(s.ranked[i].result.tokens_per_s_per_gpu);
    return v;
  };
  rq.verified_rows = 10;
  const PlanSearch ten = search_plans(rq);
  CHECK(top(ten, 10) == top(all, 10));
  CHECK(ten.ranked.size() < all.ranked.size() / 2);  // a fraction of the simulations
  rq.verified_rows = 1;  // the default: the winner
  const PlanSearch one = search_plans(rq);
  CHECK(top(one, 1) == top(all, 1));
}

// A Megatron MoE winner with its experts spread gets Megatron-Core's expert all-to-all overlap
// simulated beside it as a note (the search does not switch it on: the model overstates its gain,
// docs/validation.md); a dense winner gets none.
TEST_CASE("plan --runtime megatron: the winner's expert all-to-all overlap and fused MoE kernels, simulated as notes") {
  const PlanRequest rq = qwen3_30b_on_64(Runtime::megatron);
  const PlanSearch s = search_plans(rq);
  REQUIRE_FALSE(s.ranked.empty());
  REQUIRE(s.ranked.front().plan.mesh.ep > 1);
  CHECK_FALSE(s.ranked.front().plan.moe_a2a_overlap);
  auto note = std::find_if(s.notes.begin(), s.notes.end(), [](const std::string& n) {
    return n.rfind("rank 1 with Megatron-Core's expert all-to-all overlap", 0) == 0;
  });
  REQUIRE(note != s.notes.end());
  // The figure quoted is the winner simulated with the overlap, faster than without.
  Plan with = s.ranked.front().plan;
  with.moe_a2a_overlap = true;
  const double faster = simulate_steady_state(rq.model, with, s.ranked.front().job, rq.cluster).tokens_per_s_per_gpu;
  CHECK(faster > s.ranked.front().result.tokens_per_s_per_gpu);
  CHECK(note->find(fmt::format("{:.1f} tokens/s/GPU", faster)) != std::string::npos);
  const PlanSearch dense = search_plans(megatron_8b_on_8());
  CHECK(std::none_of(dense.notes.begin(), dense.notes.end(),
                     [](const std::string& n) { return n.find("all-to-all overlap") != std::string::npos; }));
  // Megatron-Core's fused MoE kernels likewise: fewer launches per MoE layer, the winner simulated
  // with both; a dense winner and torchtitan's MoE (its own kernels) get no such note.
  auto fusion_note = [](const PlanSearch& ps) {
    return std::find_if(ps.notes.begin(), ps.notes.end(), [](const std::string& n) {
      return n.rfind("rank 1 with Megatron-Core's fused MoE kernels", 0) == 0;
    });
  };
  const auto fused_note = fusion_note(s);
  REQUIRE(fused_note != s.notes.end());
  Plan fused = s.ranked.front().plan;
  fused.moe_permute_fusion = fused.moe_router_fusion = true;
  const double fused_rate = simulate_steady_state(rq.model, fused, s.ranked.front().job, rq.cluster).tokens_per_s_per_gpu;
  CHECK(fused_rate > s.ranked.front().result.tokens_per_s_per_gpu);
  CHECK(fused_note->find(fmt::format("{:.1f} tokens/s/GPU", fused_rate)) != std::string::npos);
  CHECK(fusion_note(dense) == dense.notes.end());
  const PlanSearch titan = search_plans(qwen3_30b_on_64(Runtime::torchtitan_fsdp2));
  CHECK(fusion_note(titan) == titan.notes.end());
}

#include "workload/runtime_choices.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "spec/limits.hpp"
#include "spec/offload_modules.hpp"
#include "spec/runtimes.hpp"
#include "workload/activation_memory.hpp"

namespace meshplan {

bool fits_device(const ModelSpec& m, const Plan& p, const Job& j, const ClusterSpec& c) {
  const MemoryEstimate e = estimate_memory(m, p, j, c);
  return e.gpu_memory_bytes > 0 && e.fits;
}

namespace {

struct Recompute {
  AcMode ac;
  bool offload;
  std::string name;
  int every_n = 1;
};

// Full recompute of every n-th block, fewest first: Megatron's --recompute-granularity full
// --recompute-method block --recompute-num-layers k (k of each stage's layers; the memory and the
// recompute FLOPs depend on how many, not which) and torchtitan's selective "n".
void add_partial_layers(std::vector<Recompute>& out, std::string_view how) {
  for (int n : {8, 6, 4, 3, 2})
    out.push_back({AcMode::selective_layer, false, fmt::format("full recompute of 1 layer in {} ({})", n, how), n});
}

// The framework's recompute options, least first: its registry row (spec/runtimes.cpp), each
// "1 layer in n" rung expanded over the n tried.
std::vector<Recompute> recompute_ladder(const Plan& p) {
  std::vector<Recompute> out = {{AcMode::none, false, "none"}};
  for (const RecomputeRung& r : runtime_info(p).recompute) {
    if (r.ac == AcMode::selective_layer) add_partial_layers(out, r.name);
    else out.push_back({r.ac, r.offload, std::string(r.name)});
  }
  return out;
}

struct OffloadScope {
  Plan::OffloadModules modules;  // none set: every saved tensor
  std::string name;
};

// Megatron's offload options, least first: its fine-grained modules, largest share of the saved
// bytes first, one more at a time (the fewest modules that relieve the most memory), then whole
// layers. Modules that save nothing under the plan (expert ones on a dense model) are skipped.
std::vector<OffloadScope> offload_ladder(const ModelSpec& m, const Plan& p, const Job& j) {
  const MicroBatchShape mb{j.seq_len / std::max(1, p.mesh.cp), std::max<std::int64_t>(1, j.micro_batch)};
  const int block = std::max(0, m.n_layers - 1);  // a MoE block where the model has any
  std::vector<std::pair<double, int>> sizes;
  const auto names = offload_module_names();
  for (int i = 0; i < static_cast<int>(names.size()); ++i) {
    Plan one = p;
    one.act_offload = true;
    one.offload_modules = {};
    one.offload_modules.*(names[static_cast<std::size_t>(i)].second) = true;
    const double bytes = offloaded_block_bytes(m, one, mb, block);
    if (bytes > 0) sizes.push_back({bytes, i});
  }
  std::stable_sort(sizes.begin(), sizes.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  std::vector<OffloadScope> out;
  OffloadScope acc;
  for (const auto& [bytes, i] : sizes) {
    const auto& [name, flag] = names[static_cast<std::size_t>(i)];
    acc.modules.*flag = true;
    acc.name += (acc.name.empty() ? "" : ", ") + std::string(name);
    out.push_back({acc.modules, "fine-grained offload of " + acc.name});
  }
  out.push_back({{}, "whole layers"});
  return out;
}

// Sharding from the framework's default up. Only Megatron-family runtimes choose it independently
// of the mesh (DDP, distributed optimizer, Megatron-FSDP optim_grads_params over the same
// data-parallel ranks; ZeRO-2 is not modeled for them); the FSDP trainers' sharding follows their
// mesh, so their default is their only option.
std::vector<Sharding> sharding_ladder(const Plan& p) {
  if (!runtime_traits(p).sharding_by_distributed_optimizer) return {p.sharding};
  std::vector<Sharding> out;
  for (Sharding s : {Sharding::none, Sharding::zero1, Sharding::zero3})
    if (s >= p.sharding) out.push_back(s);
  // DeepSpeed's pipeline engine takes ZeRO-0/1 only.
  if (p.deepspeed_engine && p.mesh.pp > 1) std::erase_if(out, [](Sharding s) { return s > Sharding::zero1; });
  return out;
}

// Megatron-FSDP and ZeRO-3 shard over the whole data-parallel group: written as dp_shard.
Plan with_sharding(Plan p, Sharding s) {
  if (s == p.sharding) return p;
  p.sharding = s;
  if (s == Sharding::zero3 && p.mesh.dp_shard == 1) std::swap(p.mesh.dp_shard, p.mesh.dp_replicate);
  p.reshard_after_forward = s == Sharding::zero3;
  return p;
}

// Micro-batch sizes to try, largest first: the divisors of the per-rank batch (Composer: its own
// halving search from the device batch); Megatron-family with pipelines, which has no default: 1,
// the most micro-batches and so the smallest bubble.
bool is_composer(const Plan& p) { return runtime_traits(p).device_batch_over_world; }

// Sequences one rank processes per step: global / dp (Composer: global / world, its device batch).
std::int64_t per_rank_batch(const Plan& p, const Job& j) {
  const std::int64_t ranks = is_composer(p) ? std::max<std::int64_t>(1, p.mesh.world()) : std::max(1, p.mesh.dp());
  return j.global_batch / ranks;
}

std::vector<std::int64_t> micro_batch_ladder(const Plan& p, const Job& j) {
  const std::int64_t per_rank = std::max<std::int64_t>(1, per_rank_batch(p, j));
  if (runtime_traits(p).micro_batch_required && p.mesh.pp > 1) return {1};
  std::vector<std::int64_t> out;
  if (is_composer(p)) {
    for (std::int64_t mb = per_rank; mb >= 1; mb /= 2) out.push_back(mb);
    return out;
  }
  for (std::int64_t mb = per_rank; mb >= 1; --mb)
    if (per_rank % mb == 0) out.push_back(mb);
  return out;
}

// The job with micro-batch `mb`, or false when the runtime cannot run it (the interleaved
// schedule needs a multiple of pp micro-batches; the simulator's bound on layers x micro-batches).
bool with_micro_batch(const ModelSpec& m, const Plan& p, Job& j, std::int64_t mb, bool composer) {
  const std::int64_t per_rank = per_rank_batch(p, j);
  const std::int64_t accum = composer ? (per_rank + mb - 1) / mb : per_rank / mb;
  if (accum < 1) return false;
  if (p.schedule == PipelineSchedule::interleaved_1f1b && p.mesh.pp > 1 && accum % p.mesh.pp != 0) return false;
  if (static_cast<std::int64_t>(m.n_layers) * accum > limits::kMaxLayerMicrobatches) return false;
  j.micro_batch = mb;
  j.grad_accum = accum;
  return true;
}

}  // namespace

RuntimeChoices resolve_runtime_choices(RunConfig& rc, const ClusterSpec& c) {
  RuntimeChoices out;
  LeftToRuntime left = rc.left_to_runtime;
  rc.left_to_runtime = {};
  if (left.moe_dispatcher) {
    // Megatron-Core's flex dispatcher runs HybridEP where one NVLink domain spans hosts (GB200 /
    // GB300 NVL72, the system it was written for) and DeepEP elsewhere.
    const bool multi_host_nvlink = c.node.nvlink_domain_gpus > c.node.gpus_per_node;
    rc.plan.moe_dispatcher = multi_host_nvlink ? MoeDispatcher::hybridep : MoeDispatcher::deepep;
    out.assumptions.push_back(fmt::format("flex dispatcher backend not stated: {} ({})", to_string(rc.plan.moe_dispatcher),
                                          multi_host_nvlink ? fmt::format("an NVLink domain of {} GPUs spans hosts on {}",
                                                                          c.node.nvlink_domain_gpus, c.name)
                                                            : fmt::format("NVLink within one host on {}", c.name)));
    left.moe_dispatcher = false;
  }
  if (!left.any()) return out;
  const Plan given = rc.plan;
  const Job given_job = rc.job;
  const bool composer = is_composer(given);
  const std::vector<Sharding> shardings = left.sharding ? sharding_ladder(given) : std::vector<Sharding>{given.sharding};
  const std::vector<Recompute> recomputes =
      left.recompute ? recompute_ladder(given)
                     : std::vector<Recompute>{{given.ac, given.act_offload, "", given.ac_every_n}};
  const std::vector<std::int64_t> mbs =
      left.micro_batch ? micro_batch_ladder(given, given_job) : std::vector<std::int64_t>{given_job.micro_batch};
  for (Sharding s : shardings) {
    for (const Recompute& r : recomputes) {
      Plan base = with_sharding(given, s);
      base.ac = r.ac;
      base.ac_every_n = r.every_n;
      base.act_offload = r.offload;
      // The offload scope is resolved only where the row offloads and does not say what.
      const std::vector<OffloadScope> scopes = left.offload_scope && base.act_offload
                                                   ? offload_ladder(rc.model, base, given_job)
                                                   : std::vector<OffloadScope>{{base.offload_modules, ""}};
      for (const OffloadScope& scope : scopes) {
        for (std::int64_t mb : mbs) {
          Plan p = base;
          p.offload_modules = scope.modules;
          Job j = given_job;
          if (left.micro_batch && !with_micro_batch(rc.model, p, j, mb, composer)) continue;
          if (!fits_device(rc.model, p, j, c)) continue;
          if (left.offload_scope && p.act_offload)
            out.assumptions.push_back(fmt::format("activation offload scope not stated: {} (Megatron-Core's least "
                                                  "that fits on {})", scope.name, c.name));
          if (left.sharding)
            out.assumptions.push_back(
                s == given.sharding
                    ? fmt::format("sharding not stated: {} (the framework default; its allocated peak fits on {})",
                                  to_string(s), c.name)
                    : fmt::format("sharding not stated: {} (the allocated peak of the framework default {} does not "
                                  "fit on {})",
                                  to_string(s), to_string(given.sharding), c.name));
          if (left.recompute)
            out.assumptions.push_back(fmt::format("activation recompute not stated: {} (the least that fits on {})",
                                                  r.name, c.name));
          if (left.micro_batch)
            out.assumptions.push_back(
                runtime_traits(given).micro_batch_required && given.mesh.pp > 1
                    ? fmt::format("micro_batch not stated: 1 (Megatron has no default, the flag is required; with "
                                  "pipelines 1, the most micro-batches and the smallest bubble, fits), grad_accum {}",
                                  j.grad_accum)
                    : fmt::format("micro_batch not stated: {} (the largest that fits{}), grad_accum {}", j.micro_batch,
                                  composer ? ", Composer's halving search" : " and divides the per-rank batch",
                                  j.grad_accum));
          rc.plan = p;
          rc.job = j;
          return out;
        }
      }
    }
  }
  std::vector<std::string> what;
  if (left.sharding) what.push_back("sharding");
  if (left.recompute) what.push_back("activation recompute");
  if (left.micro_batch) what.push_back("micro-batch");
  if (left.offload_scope) what.push_back("activation offload scope");
  std::string list;
  for (const auto& w : what) list += (list.empty() ? "" : ", ") + w;
  out.no_fit = fmt::format("no resolution of the unstated {} fits on {}", list, c.name);
  return out;
}

}  // namespace meshplan

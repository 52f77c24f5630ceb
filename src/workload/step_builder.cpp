#include "workload/step_builder.hpp"

#include <algorithm>
#include <stdexcept>

#include "spec/pipeline_split.hpp"
#include "spec/runtime_traits.hpp"
#include "workload/stage_params.hpp"

namespace meshplan::lowering {

Op make_op(int stage, std::string name, StreamKind stream, OpCategory cat, OpKind kind) {
  Op o;
  o.name = std::move(name);
  o.stage = stage;
  o.stream = stream;
  o.category = cat;
  o.kind = kind;
  return o;
}

Op Builder::compute_op(int stage, std::string name, OpCategory cat) const {
  return make_op(stage, std::move(name), StreamKind::compute, cat, OpKind::compute);
}

Op Builder::collective_op(int stage, std::string name, StreamKind stream, OpCategory cat, CollectiveOp c, GroupKind g,
                          double bytes) const {
  Op o = make_op(stage, std::move(name), stream, cat, OpKind::collective);
  o.collective = c;
  o.group = g;
  o.bytes = bytes;
  return o;
}

int Builder::chain(Op&& op, int& prev, int& first, std::vector<int>& pending_deps) {
  op.deps.reserve(op.deps.size() + (prev >= 0 ? 1 : 0) + pending_deps.size());
  if (prev >= 0) op.deps.push_back(prev);
  op.deps.insert(op.deps.end(), pending_deps.begin(), pending_deps.end());
  pending_deps.clear();
  const int id = add(std::move(op));
  if (first < 0) first = id;
  prev = id;
  return id;
}

StageParams Builder::stage_params_of(int stage) const {
  int dense = 0, mtp = 0;
  for (int c = 0; c < s_.v; ++c) {
    dense += dense_layers_in(m_, chunk_first(c * s_.pp + stage), chunk_layers(c * s_.pp + stage));
    if (c * s_.pp + stage == s_.mtp_chunk) mtp = s_.n_mtp;
  }
  return stage_params(m_, p_, stage, stage_layers(stage), dense, mtp);
}

void Builder::set_up_step() {
  StepShape& s = s_;
  s.pp = std::max(1, p_.mesh.pp);
  s.v = chunks_per_stage(p_);
  n_vstages_ = s.pp * s.v;
  SplitError why;
  const auto split = split_pipeline(m_.n_layers, s.pp, s.v, p_.pipeline_split, &why);
  if (!split)
    throw std::invalid_argument(
        fmt::format("{} layers do not split into {} pipeline chunks: {}", m_.n_layers, n_vstages_, why.reason));
  s.chunk_layers = *split;
  s.chunk_first.assign(static_cast<std::size_t>(n_vstages_), 0);
  for (int c = 1; c < n_vstages_; ++c)
    s.chunk_first[static_cast<std::size_t>(c)] = s.chunk_first[static_cast<std::size_t>(c - 1)] + chunk_layers(c - 1);
  s.mtp_chunk = mtp_chunk_of(p_.pipeline_split, n_vstages_, m_.n_mtp_layers);
  s.n_mtp = s.mtp_chunk >= 0 ? m_.n_mtp_layers : 0;
  // The modules read the last decoder layer's output: their chunk ends with it or comes after it.
  if (s.mtp_chunk >= 0 && chunk_first(s.mtp_chunk) + chunk_layers(s.mtp_chunk) != m_.n_layers)
    throw std::invalid_argument(fmt::format("the multi-token-prediction layers sit in pipeline chunk {}, before the "
                                            "last decoder layer", s.mtp_chunk));
  s.mtp_input_saved = s.n_mtp > 0 ? mtp_input_saved_bytes(m_, p_, MicroBatchShape{d_.s_local, d_.b}) : 0.0;
  s.microbatches = std::max<std::int64_t>(1, j_.grad_accum);
  s.per_run = microbatches_per_run(s.microbatches, j_.pp_microbatches, s.pp);
  if (s.v > 1 && (s.per_run % s.pp != 0 || s.microbatches % s.per_run != 0))
    throw std::invalid_argument(fmt::format(
        "the interleaved schedule needs micro-batches per schedule ({}) divisible by pp ({})", s.per_run, s.pp));

  s.reduce_b = bytes_per_element(p_.reduce_dtype);
  s.unit = block_params_per_rank(m_, p_);
  s.fsdp = fsdp_units(p_, traits_);
  s.reshard = p_.reshard_after_forward;
  s.prefetch_two = p_.backward_prefetch == BackwardPrefetch::backward_pre || traits_.fsdp_always_prefetches_backward;
  // FSDP1's knobs (torch/distributed/fsdp: under limit_all_gathers an all-gather issued while two
  // reshard events are queued in _FreeEventQueue waits for the older; _forward_prefetch_limit /
  // _backward_prefetch_limit units ahead).
  const bool knobs = traits_.fsdp1_prefetch_knobs;
  s.limit_gathers = !knobs || p_.limit_all_gathers;
  const int bwd_depth = knobs && !s.limit_gathers ? std::max(1, p_.backward_prefetch_limit) : 1;
  s.bwd_window = s.prefetch_two ? 1 + bwd_depth : 1;
  // The limiter does not cap how far ahead the hook issues, it makes the gathers wait (fsdp_gather_forward).
  s.fwd_prefetch = knobs && p_.forward_prefetch ? std::max(1, p_.forward_prefetch_limit) : 0;
  s.hsdp = p_.mesh.dp_replicate > 1 && p_.mesh.dp_shard * p_.mesh.cp > 1;
  s.dp_all = p_.mesh.dp_replicate * p_.mesh.dp_shard * p_.mesh.cp;
  s.mbs = MicroBatchShape{d_.s_local, d_.b};
  s.block_grads = block_backward_working_bytes(m_, p_, s.mbs);
  s.stage_output = pipeline_boundary_bytes(m_, p_, s.mbs, 1.0);
  s.logits_upcast = loss_forward_peak_bytes(m_, p_, s.mbs) - loss_saved_bytes(m_, p_, s.mbs);
  s.recompute_working = recompute_working_bytes(m_, p_, s.mbs);
  s.modules_freed = recompute_modules_freed_bytes(m_, p_, s.mbs);
  s.saved_of_block.resize(static_cast<std::size_t>(m_.n_layers + m_.n_mtp_layers));
  for (int layer = 0; layer < m_.n_layers + m_.n_mtp_layers; ++layer)
    s.saved_of_block[static_cast<std::size_t>(layer)] = saved_block_bytes(m_, p_, s.mbs, layer);
  s.autocast_cache_per_layer = autocast_fp32_weights(p_) ? d_.e * s.unit : 0.0;
  s.act_p2p = d_.e * static_cast<double>(d_.tokens) * static_cast<double>(d_.h) / d_.sp_split;
  s.state = state_bytes_per_param(p_, j_);
  s.root = root_gathering(p_);
  s.unit_gathered = fsdp_unit_gathered_bytes(m_, p_);
  s.offload_stream = runtime_traits(p_).offload_on_copy_stream;
}

int Builder::add(Op&& op) {
  const OpWork& work = op;
  SmallVector<std::uint32_t, 2>& same_hash = works_by_hash_[work_hash(work)];
  const auto known = std::find_if(same_hash.begin(), same_hash.end(), [&](std::uint32_t w) { return prog_.works[w] == work; });
  const std::uint32_t index = known != same_hash.end() ? *known : static_cast<std::uint32_t>(prog_.works.size());
  if (known == same_hash.end()) {
    prog_.works.push_back(work);
    same_hash.push_back(index);
  }
  StepOp& stored = prog_.ops.emplace_back();  // in place: a StepOp is 144 bytes
  static_cast<OpSchedule&>(stored) = std::move(static_cast<OpSchedule&>(op));
  stored.work = index;
  if (options_.op_names) prog_.names.push_back(std::move(op.name));
  return static_cast<int>(prog_.ops.size() - 1);
}

StepProgram Builder::build() {
  set_up_step();
  prog_.n_stages = s_.pp;
  prog_.n_microbatches = s_.microbatches;
  prog_.tokens_per_step = static_cast<double>(j_.global_batch) * static_cast<double>(j_.seq_len);
  // The first stage's ops per layer size the array for every stage (ops per layer and micro-batch
  // range from 8 to over 40 with the recipe, so no fixed guess fits; the array is the largest a
  // simulation holds, and one too small doubles it). Per layer, as stages may hold unequal layers.
  for (OpTable* t : links_.tables()) *t = OpTable(n_vstages_, s_.microbatches);
  lower_stage(0);
  const std::size_t first = prog_.ops.size();
  const std::size_t first_layers = static_cast<std::size_t>(std::max(1, stage_layers(0)));
  const std::size_t all_layers = static_cast<std::size_t>(std::max(1, m_.n_layers + m_.n_mtp_layers));
  prog_.ops.reserve(std::max(first * static_cast<std::size_t>(s_.pp), first * all_layers / first_layers) * 17 / 16 + 64);
  for (int stage = 1; stage < s_.pp; ++stage) lower_stage(stage);
  wire_pipeline();
  for (const OpTable* firsts : {&links_.fwd_first, &links_.bwd_first})
    firsts->for_each([&](int, std::int64_t, int first) { prog_.pass_first_ops.push_back(first); });
  std::sort(prog_.pass_first_ops.begin(), prog_.pass_first_ops.end());
  links_.bwd_first.for_each([&](int, std::int64_t, int first) { prog_.backward_first_ops.push_back(first); });
  std::sort(prog_.backward_first_ops.begin(), prog_.backward_first_ops.end());
  for (const auto& o : prog_.ops) prog_.model_flops_per_step += prog_.work(o).model_flops;
  return std::move(prog_);
}

}  // namespace meshplan::lowering

// One pipeline stage's step in its schedule's order: per micro-batch and model chunk, the embedding,
// the blocks (with what FSDP, recompute and offload add around each), the LM head and loss, and the
// memory each op allocates and frees. What each concern adds lives in its own file (step_builder.hpp).
#include <algorithm>
#include <map>

#include "workload/stage_params.hpp"
#include "workload/step_builder.hpp"

namespace meshplan::lowering {

namespace {
// torch's cross-entropy (`.float()` or autocast, log_softmax, nll_loss) moves e + 8 bytes per logit
// forward (the cast, log_softmax's fp32 read and write) and e + 12 backward (the two fp32 gradients
// and the cast back); a fused kernel reads and writes each logit's row once: 2e each way
// (docs/compute.md, "The loss").
constexpr double kTorchLossForwardBytesBeyondLogit = 8.0;
constexpr double kTorchLossBackwardBytesBeyondLogit = 12.0;
// Launches, one per aten op. torch forward: cast, log_softmax, nll_loss, the mean; backward: the
// mean's and nll_loss's backward (fill, scatter), log_softmax's backward, the cast back. Fused: the
// cross-entropy kernel and the mean (forward), their two backwards.
constexpr int kTorchLossForwardKernels = 4, kTorchLossBackwardKernels = 5;
constexpr int kFusedLossKernels = 2;
// Megatron's vocab-parallel cross-entropy forward, op by op over the fp32 logits: the cast
// (e + 4), the max (4), the subtraction of it (4 + 4), exp in place (4 + 4), the sum (4) and the
// division that leaves the softmax for backward (4 + 4): e + 36 bytes per logit, in six launches
// (the max and the sum all-reduce a value per token over TP: negligible bytes). Its backward
// scales the saved softmax by the output gradient (4 + 4) and casts back (4 + e): e + 12 bytes,
// torch's figure.
constexpr double kVocabParallelLossForwardBytesBeyondLogit = 36.0;
constexpr int kVocabParallelLossForwardKernels = 6;
// Embedding: the row gather forward; backward the zero-fill of the table's gradient and the
// scatter-add of the rows.
constexpr int kEmbeddingForwardKernels = 1, kEmbeddingBackwardKernels = 2;
}  // namespace

Op Builder::host_copy(int stage, std::string name, bool to_device, double bytes) const {
  Op o = make_op(stage, std::move(name), StreamKind::host_copy, OpCategory::offload, OpKind::host_copy);
  o.host_to_device = to_device;
  o.bytes = bytes;
  return o;
}

// Transformer Engine's delayed scaling (reduce_amax) all-reduces the amaxes the FP8 region recorded
// when it ends: Megatron-Core wraps each model chunk's TransformerBlock in one fp8_autocast under
// this recipe (Composer the whole model), so once per chunk and micro-batch after its forward, and
// once after its backward, over the amax-reduction group (tp x cp x dp: every rank of the stage).
// Each FP8 GEMM records 3 amaxes forward (input, weight, output) and 2 backward (output and input
// gradients), fp32; a block's FP8 GEMMs are its attention projections, the MLP's fused fc1 and
// fc2, and with experts fc1 and fc2 per local expert (GroupedLinear) and per shared expert block.
// The reduction is synchronous: what follows on the compute stream waits for it. Activation
// recompute does not reduce.
int Builder::amax_reduction(int stage, int vstage, std::int64_t mb, Pass pass, int last) {
  if (p_.fp8 != Fp8Recipe::te_delayed || !low_precision() || last < 0) return last;
  double gemms = 0;
  for (int li = 0; li < chunk_blocks(vstage); ++li) {
    const int layer = chunk_first(vstage) + li;
    const bool moe = m_.moe.is_moe_layer(layer);
    const double mlp = moe ? 2.0 * static_cast<double>(d_.local_experts) + (m_.moe.n_shared_experts > 0 ? 2.0 : 0.0) : 2.0;
    gemms += static_cast<double>(k_.pre_attention.size() + k_.post_attention.size()) + mlp;
  }
  const bool fwd = pass == Pass::forward;
  const char* dir = fwd ? "fwd" : "bwd";
  const double bytes = gemms * (fwd ? 3.0 : 2.0) * 4.0;
  Op op = collective_op(stage, op_name("{}.amax.v{}.mb{}", dir, vstage, mb), StreamKind::amax, OpCategory::amax,
                        CollectiveOp::all_reduce, GroupKind::stage, bytes);
  op.deps = {last};
  const int id = add(std::move(op));
  // The scales are updated from the reduced amaxes before the next FP8 kernel: a zero-work
  // join on the compute stream carries the wait.
  Op join = compute_op(stage, op_name("{}.amax_join.v{}.mb{}", dir, vstage, mb), OpCategory::compute);
  join.deps = {id};
  return add(std::move(join));
}

int Builder::embedding(int stage, std::int64_t mb, Pass pass) {
  const bool fwd = pass == Pass::forward;
  Op emb = compute_op(stage, fwd ? op_name("fwd.embed.mb{}", mb) : op_name("bwd.embed.mb{}", mb), OpCategory::compute);
  // Read and write one row of h per token.
  emb.memory_bound_bytes = 2 * d_.e * static_cast<double>(d_.tokens) * static_cast<double>(d_.h);
  emb.kernels = fwd ? kEmbeddingForwardKernels : kEmbeddingBackwardKernels;
  return add(std::move(emb));
}

void Builder::lower_stage(int stage) {
  StageState st;
  st.stage = stage;
  st.begin = prog_.ops.size();
  st.row_of_layer.assign(static_cast<std::size_t>(m_.n_layers + s_.n_mtp), -1);
  int rows = 0;
  for (int c = 0; c < s_.v; ++c) {
    const int vstage = c * s_.pp + stage;
    for (int k = 0; k < chunk_blocks(vstage); ++k)  // blocks from n_layers on: MTP modules'
      st.row_of_layer[static_cast<std::size_t>(chunk_first(vstage) + k)] = rows++;
  }
  for (OpTable* t : {&st.fwd_end_of_layer, &st.bwd_end_of_layer, &st.rs_of_layer, &st.offload_d2h_of_layer})
    *t = OpTable(rows, s_.microbatches);
  st.first = stage == 0;
  st.last = stage == s_.pp - 1;
  const std::vector<Step> order = stage_steps(p_, stage, s_.microbatches, s_.per_run);
  const StageParams sp = stage_params_of(stage);
  if (s_.root.one_root) {
    st.root_params = sp.root;
  } else {
    st.embed_params = sp.root - sp.head_group;
    st.head_params = sp.head_group;
  }
  gather_updated_params(st);
  std::vector<OpSpan> spans;
  spans.reserve(order.size());
  for (const Step& step : order) {
    const int begin = static_cast<int>(prog_.ops.size());
    if (step.forward) forward_chunk(st, step);
    else backward_chunk(st, step);
    spans.push_back({begin, static_cast<int>(prog_.ops.size())});
  }
  all_reduce_after_flush(st);
  optimizer_step(st);
  if (p_.moe_a2a_overlap) overlap_expert_all_to_alls(st, order, spans);
}

// Reissues the merged pairs of steps (workload/a2a_overlap.hpp) once the stage is lowered: the
// ops move, so every dependency on them and every pipeline link is renumbered.
void Builder::overlap_expert_all_to_alls(const StageState& st, const std::vector<Step>& order,
                                         const std::vector<OpSpan>& spans) {
  const int begin = static_cast<int>(st.begin);
  const int end = static_cast<int>(prog_.ops.size());
  std::vector<int> issue(static_cast<std::size_t>(end - begin));  // new position -> old index
  for (int i = begin; i < end; ++i) issue[static_cast<std::size_t>(i - begin)] = i;
  bool moved = false;
  for (const std::size_t i : a2a_overlap_pairs(order)) {
    const OpSpan& a = spans[i];
    const OpSpan& b = spans[i + 1];
    const bool a_forward = order[i].forward;
    const std::vector<int> merged = a2a_overlap_order(prog_, a_forward ? a : b, a_forward ? b : a);
    if (merged.empty()) continue;
    std::copy(merged.begin(), merged.end(), issue.begin() + (a.begin - begin));
    moved = true;
  }
  if (!moved) return;
  std::vector<int> renumbered(issue.size());  // old index - begin -> new index
  for (std::size_t k = 0; k < issue.size(); ++k) renumbered[static_cast<std::size_t>(issue[k] - begin)] = begin + static_cast<int>(k);
  auto renumber = [&](int& id) {
    if (id >= begin && id < end) id = renumbered[static_cast<std::size_t>(id - begin)];
  };
  std::vector<StepOp> ops;
  ops.reserve(issue.size());
  for (const int old : issue) ops.push_back(std::move(prog_.ops[static_cast<std::size_t>(old)]));
  for (StepOp& op : ops)
    for (int& d : op.deps) renumber(d);
  std::move(ops.begin(), ops.end(), prog_.ops.begin() + begin);
  if (!prog_.names.empty()) {
    std::vector<std::string> names;
    names.reserve(issue.size());
    for (const int old : issue) names.push_back(std::move(prog_.names[static_cast<std::size_t>(old)]));
    std::move(names.begin(), names.end(), prog_.names.begin() + begin);
  }
  for (OpTable* links : links_.tables()) links->for_each_op(renumber);
}

double Builder::loss_vocab() const {
  return p_.loss_parallel ? static_cast<double>(d_.vocab_local) : static_cast<double>(m_.vocab);
}

bool Builder::gather_logits(int stage, std::int64_t mb, Op& head) {
  if (loss_vocab() <= static_cast<double>(d_.vocab_local)) return false;
  Op gemm = compute_op(stage, op_name("fwd.head.mb{}", mb), OpCategory::compute);
  gemm.gemms = std::move(head.gemms);
  gemm.hardware_flops = head.hardware_flops;
  gemm.model_flops = head.model_flops;
  gemm.kernels = 1;
  gemm.deps = std::move(head.deps);
  head.gemms.clear();
  head.hardware_flops = head.model_flops = 0;
  const double gathered = d_.e * static_cast<double>(d_.tokens) * static_cast<double>(m_.vocab);
  Op ag = tp_collective(stage, op_name("tp_ag_logits.mb{}", mb), CollectiveOp::all_gather, gathered);
  ag.deps = {add(std::move(gemm))};
  // The gathered logits live until the loss has read them (loss_saved_bytes keeps what it saves).
  ag.at_start.push_back({MemoryTerm::activations, gathered});
  head.at_end.push_back({MemoryTerm::activations, -gathered});
  head.deps = {add(std::move(ag))};
  return true;
}

// The model's head and loss, then one per multi-token-prediction module: Megatron-Core's
// GPTModel._postprocess runs the shared output layer over each module's hidden states and takes
// its cross-entropy, each the same work as the model's own.
int Builder::forward_head(StageState& st, std::int64_t mb, int last, double& autocast_cached) {
  std::vector<int> gathered;
  int id = last;
  for (int depth = 0; depth <= s_.n_mtp; ++depth) {
    Op head = compute_op(
        st.stage, depth == 0 ? op_name("fwd.head_loss.mb{}", mb) : op_name("fwd.mtp{}.head_loss.mb{}", depth, mb),
        OpCategory::compute);
    head.gemms = {{d_.tokens, d_.vocab_local, d_.h, 1}};
    const bool vocab_parallel = runtime_traits(p_).vocab_parallel_cross_entropy;
    head.memory_bound_bytes =
        static_cast<double>(d_.tokens) * loss_vocab() *
        (p_.fused_cross_entropy ? 2 * d_.e
                                : d_.e + (vocab_parallel ? kVocabParallelLossForwardBytesBeyondLogit
                                                         : kTorchLossForwardBytesBeyondLogit));
    head.kernels = p_.fused_cross_entropy ? kFusedLossKernels
                                          : (vocab_parallel ? kVocabParallelLossForwardKernels : kTorchLossForwardKernels);
    head.hardware_flops = gemm_flops(head.gemms);
    head.model_flops = head.hardware_flops;
    // A chunk that holds only the loss (Megatron's --account-for-loss-in-pipeline-split) starts here.
    if (id >= 0) head.deps = {id};
    else after_blocking_send(st, head.deps);
    if (depth == 0) {
      fsdp_gather_group(st, s_.root.one_root ? kRoot : kHead, mb, false, gathered);
      head.deps.insert(head.deps.end(), gathered.begin(), gathered.end());
    }
    gather_logits(st.stage, mb, head);
    head.at_end.push_back({MemoryTerm::activations, loss_saved_bytes(m_, p_, s_.mbs)});
    // log_softmax reads fp32 logits while it writes the log-probs (loss_forward_peak_bytes).
    head.at_start.push_back({MemoryTerm::activations, s_.logits_upcast});
    head.at_end.push_back({MemoryTerm::activations, -s_.logits_upcast});
    if (s_.autocast_cache_per_layer > 0 && depth == 0) {
      const double head_cast = d_.e * static_cast<double>(d_.vocab_local) * static_cast<double>(d_.h);
      head.at_start.push_back({MemoryTerm::unsharded_params, head_cast});
      autocast_cached += head_cast;
    }
    id = add(std::move(head));
  }
  if (!s_.root.one_root && !s_.root.head_kept && s_.reshard) fsdp_release_group(st, kHead, id);
  return id;
}

// One pipeline chunk's forward in issue order (FSDP gathers and forward prefetch, each layer with
// its saved activations and their offload, the embedding and head ends): the order of the ops is
// the schedule, so it reads top to bottom.
void Builder::forward_chunk(StageState& st, const Step& step) {
  const int stage = st.stage;
  const int vstage = step.chunk * s_.pp + stage;
  const std::int64_t mb = step.mb;
  const int l0 = chunk_first(vstage);
  // torchtitan under PP gathers a unit once per schedule run, not per micro-batch (fsdp_lowering).
  const bool run_first = mb % s_.per_run == 0;
  double autocast_cached = 0;
  std::vector<int> entry_deps;
  if (st.first && step.chunk == 0) {
    std::vector<int> gathered;
    fsdp_gather_group(st, s_.root.one_root ? kRoot : kEmbed, mb, false, gathered);
    const int id = embedding(stage, mb, Pass::forward);
    after_blocking_send(st, op_at(id).deps);
    op_at(id).deps.insert(op_at(id).deps.end(), gathered.begin(), gathered.end());
    if (!s_.root.one_root && s_.reshard) fsdp_release_group(st, kEmbed, id);
    entry_deps.push_back(id);
    links_.fwd_first.set(vstage, mb, id);
  }
  int last = -1;
  // All-gathers FSDP1's forward_prefetch issued ahead of their unit: the gather and what the
  // unit then waits for.
  std::map<int, std::pair<int, std::vector<int>>> prefetched;
  for (int li = 0; li < chunk_blocks(vstage); ++li) {
    const int layer = l0 + li;  // from n_layers on, a multi-token-prediction module's block
    std::vector<int> deps = entry_deps;
    entry_deps.clear();
    if (last >= 0) deps.push_back(last);
    if (li == 0) after_blocking_send(st, deps);
    if (const int d2h = st.offload_d2h_of_layer.find(st.row(layer - 2), mb); d2h >= 0 && s_.offload_stream)
      deps.push_back(d2h);
    // FULL_SHARD gathers before every forward; SHARD_GRAD_OP too, since it frees the
    // gathered unit after each backward.
    int ag = -1;
    if (s_.fsdp && (!defers_fsdp_sync() || run_first)) {
      if (auto it = prefetched.find(layer); it != prefetched.end()) {
        ag = it->second.first;
        deps.insert(deps.end(), it->second.second.begin(), it->second.second.end());
        prefetched.erase(it);
      } else {
        ag = fsdp_gather_forward(st, layer, layer, mb, deps);
      }
      // The pre-forward hook issues the next units' gathers before this unit's kernels.
      for (int k = 1; k <= s_.fwd_prefetch && li + k < chunk_blocks(vstage); ++k) {
        if (prefetched.count(layer + k) != 0) continue;
        std::vector<int> waits;
        const int id = fsdp_gather_forward(st, layer + k, layer, mb, waits);
        prefetched[layer + k] = {id, std::move(waits)};
      }
    }
    if (auto it = st.param_gather_of_layer.find(layer); it != st.param_gather_of_layer.end() && mb == 0)
      deps.push_back(it->second);
    if (layer >= m_.n_layers) {
      // The module's input projection runs before its block.
      const auto [pf, pe] = mtp_input_forward(stage, layer, mb, std::move(deps));
      if (!links_.fwd_first.contains(vstage, mb)) links_.fwd_first.set(vstage, mb, pf);
      deps = {pe};
    }
    auto [f, e] = layer_forward(stage, layer, mb, false, deps);
    if (!links_.fwd_first.contains(vstage, mb)) links_.fwd_first.set(vstage, mb, f);
    if (s_.autocast_cache_per_layer > 0) {
      op_at(f).at_start.push_back({MemoryTerm::unsharded_params, s_.autocast_cache_per_layer});
      autocast_cached += s_.autocast_cache_per_layer;
    }
    // Saved activations are allocated as the layer's forward completes.
    StepOp& end = op_at(e);
    const double saved = s_.saved(layer);
    end.at_end.push_back({MemoryTerm::activations, saved});
    if (s_.fsdp && s_.reshard && ag >= 0 && !kept_gathered(layer))
      end.at_end.push_back({MemoryTerm::unsharded_params, -s_.unit_gathered});
    st.fwd_end_of_layer.set(st.row(layer), mb, e);
    last = e;
    if (p_.act_offload) {
      // The saved tensors (or the listed submodules' share) move to pinned host memory: freed on
      // the GPU once copied.
      const double moved = offloaded_block_bytes(m_, p_, s_.mbs, layer);
      Op d2h = host_copy(stage, op_name("offload.d2h.L{}.mb{}", layer, mb), false, moved);
      d2h.deps = {e};
      d2h.at_end.push_back({MemoryTerm::activations, -moved});
      d2h.at_end.push_back({MemoryTerm::host, moved});
      const int id = add(std::move(d2h));
      st.offload_d2h_of_layer.set(st.row(layer), mb, id);
      // save_on_cpu's pack is a blocking copy: the next layer waits for it. On its own stream the
      // copy overlaps the next layer, and the one after waits for it (two layers in flight).
      if (!s_.offload_stream) last = id;
    }
  }
  if (chunk_blocks(vstage) > 0) last = amax_reduction(stage, vstage, mb, Pass::forward, last);
  // A chunk that holds only the embedding ends with it.
  if (last < 0 && !entry_deps.empty()) last = entry_deps.back();
  if (st.last && step.chunk == s_.v - 1) last = forward_head(st, mb, last, autocast_cached);
  if (!links_.fwd_first.contains(vstage, mb)) links_.fwd_first.set(vstage, mb, last);
  // autocast's weight cache is cleared when the forward's autocast region exits.
  if (autocast_cached > 0) op_at(last).at_end.push_back({MemoryTerm::unsharded_params, -autocast_cached});
  links_.fwd_last.set(vstage, mb, last);
  if (vstage < n_vstages_ - 1) {
    // The chunk's output is kept until its backward (0 under Megatron).
    op_at(last).at_end.push_back({MemoryTerm::activations, s_.stage_output});
    links_.fwd_send.set(vstage, mb,
                        send(st, p2p_send(stage, op_name("pp.send_act.v{}.mb{}", vstage, mb), p2p_bytes(vstage, true), last)));
  }
}

// The losses' backward in the forward's order: the model's head, then each multi-token-prediction
// module's (forward_head); the block gathers of backward start once they are done.
int Builder::backward_head(StageState& st, int vstage, std::int64_t mb) {
  const int group = s_.root.one_root ? kRoot : kHead;
  const GemmShape g{d_.tokens, d_.vocab_local, d_.h, 1};
  // Cross-entropy backward materialises fp32 gradients over the vocab while it runs.
  const double working = loss_backward_working_bytes(m_, p_, s_.mbs);
  int first = -1, id = -1;
  for (int depth = 0; depth <= s_.n_mtp; ++depth) {
    Op head = compute_op(
        st.stage, depth == 0 ? op_name("bwd.head_loss.mb{}", mb) : op_name("bwd.mtp{}.head_loss.mb{}", depth, mb),
        OpCategory::compute);
    head.gemms = {dgrad(g), wgrad(g)};
    head.memory_bound_bytes = static_cast<double>(d_.tokens) * loss_vocab() *
                              (p_.fused_cross_entropy ? 2 * d_.e : d_.e + kTorchLossBackwardBytesBeyondLogit);
    head.kernels = p_.fused_cross_entropy ? kFusedLossKernels : kTorchLossBackwardKernels;
    head.hardware_flops = gemm_flops(head.gemms);
    head.model_flops = head.hardware_flops;
    if (depth == 0) {
      head.deps = {links_.fwd_last.at(vstage, mb)};
      after_blocking_send(st, head.deps);
      std::vector<int> gathered;
      fsdp_gather_group(st, group, mb, true, gathered);
      head.deps.insert(head.deps.end(), gathered.begin(), gathered.end());
    } else {
      head.deps = {id};
    }
    head.at_start.push_back({MemoryTerm::activations, working});
    head.at_end.push_back({MemoryTerm::activations, -loss_saved_bytes(m_, p_, s_.mbs) - working});
    id = add(std::move(head));
    if (first < 0) first = id;
  }
  links_.bwd_first.set(vstage, mb, first);
  st.root_bwd_first = first;
  // The root unit's backward ends with the embedding's (on a stage that has it).
  const bool group_done = group == kHead || !st.first;
  if (group_done) {
    if (!defers_fsdp_sync() || fsdp_run_last(mb)) fsdp_release_group(st, group, id);
    if (fsdp_syncs(mb)) fsdp_reduce_group(st, group, mb, first, id);
  }
  return id;
}

int Builder::selective_recompute(int stage, int layer, std::int64_t mb, const std::vector<int>& deps) {
  Op rc = compute_op(stage, op_name("recompute.L{}.mb{}", layer, mb), OpCategory::recompute);
  if (p_.ac == AcMode::selective_op) {
    // Every second matmul (wk, wo, w3 / down) and the element-wise ops are recomputed.
    Gemms all = k_.pre_attention;
    all.insert(all.end(), k_.post_attention.begin(), k_.post_attention.end());
    all.insert(all.end(), k_.mlp.begin(), k_.mlp.end());
    for (std::size_t i = 1; i < all.size(); i += 2) rc.gemms.push_back(all[i]);
    rc.memory_bound_bytes = k_.pre_attention_bytes + k_.post_attention_bytes + k_.mlp_bytes;
    add_layernorm(rc, Pass::forward, 2);
    rc.kernels = k_.pre_kernels + k_.mlp_kernels;
    rc.hardware_flops = gemm_flops(rc.gemms);
    quantize_forward(rc, rc.gemms, mb);
  } else {
    rc.hardware_flops = add_core_attention(rc, Pass::forward, attention_of(layer));
  }
  rc.deps.assign(deps.begin(), deps.end());
  rc.at_start.push_back({MemoryTerm::recompute, s_.recompute_working});
  return add(std::move(rc));
}

void Builder::backward_layer(StageState& st, const Step& step, int vstage, int layer, bool chunk_last_layer, int& last) {
  const int stage = st.stage;
  const std::int64_t mb = step.mb;
  const bool last_mb = mb == s_.microbatches - 1;
  const bool run_last = mb % s_.per_run == s_.per_run - 1 || last_mb;
  auto mark_first = [&](int id) {
    if (!links_.bwd_first.contains(vstage, mb)) links_.bwd_first.set(vstage, mb, id);
  };
  std::vector<int> deps;
  if (last >= 0) deps.push_back(last);
  if (chunk_last_layer) after_blocking_send(st, deps);
  if (s_.fsdp && s_.reshard && !kept_gathered(layer)) fsdp_gather_backward(st, layer, mb, last, deps);
  if (p_.act_offload) {
    const double saved = offloaded_block_bytes(m_, p_, s_.mbs, layer);
    Op h2d = host_copy(stage, op_name("offload.h2d.L{}.mb{}", layer, mb), true, saved);
    if (s_.offload_stream) {
      // One layer of look-ahead: the copy back waits until the layer two later is done.
      if (const int end = st.bwd_end_of_layer.find(st.row(layer + 2), mb); end >= 0) h2d.deps = {end};
      else if (st.bwd_gate >= 0) h2d.deps = {st.bwd_gate};
    } else if (last >= 0) {
      h2d.deps = {last};
    }
    h2d.at_start.push_back({MemoryTerm::activations, saved});
    h2d.at_start.push_back({MemoryTerm::host, -saved});
    deps.push_back(add(std::move(h2d)));
  }
  if (s_.fsdp) fsdp_wait_previous_reduce(st, layer, mb, deps);
  const bool checkpointed =
      p_.ac == AcMode::full || (p_.ac == AcMode::selective_layer && layer % std::max(1, p_.ac_every_n) == 0);
  const bool selective = p_.ac == AcMode::selective_op || (p_.ac == AcMode::selective_attn && !p_.flash_attention);
  if (checkpointed) {
    auto [rf, re] = layer_forward(stage, layer, mb, true, deps);
    op_at(rf).at_start.push_back({MemoryTerm::recompute, s_.recompute_working});
    mark_first(rf);
    deps = {re};
  } else if (selective) {
    const int id = selective_recompute(stage, layer, mb, deps);
    mark_first(id);
    deps = {id};
  }
  if (!checkpointed) {
    const auto [mf, me] = recompute_modules(stage, layer, mb, deps);
    if (mf >= 0) {
      mark_first(mf);
      deps = {me};
    }
  }
  // Recomputed submodules hold their outputs again until the block's backward consumes them.
  const double modules_bytes = checkpointed ? 0.0 : s_.modules_freed;
  auto [bf, be] = layer_backward(stage, layer, mb, deps);
  mark_first(bf);
  if (modules_bytes > 0) op_at(bf).at_start.push_back({MemoryTerm::recompute, modules_bytes});
  // The block's own gradient tensors live while its backward runs.
  op_at(bf).at_start.push_back({MemoryTerm::activations, s_.block_grads});
  StepOp& end = op_at(be);
  end.at_end.push_back({MemoryTerm::activations, -s_.saved(layer) - s_.block_grads});
  if (checkpointed || selective) end.at_end.push_back({MemoryTerm::recompute, -s_.recompute_working});
  if (modules_bytes > 0) end.at_end.push_back({MemoryTerm::recompute, -modules_bytes});
  if (s_.fsdp && (!defers_fsdp_sync() || run_last))
    end.at_end.push_back({MemoryTerm::unsharded_params, -s_.unit_gathered});  // resharded after backward
  st.bwd_end_of_layer.set(st.row(layer), mb, be);
  last = be;
  // Gradient reduction of this unit.
  const bool sync = fsdp_syncs(mb);
  if (s_.fsdp && sync && s_.dp_all > 1) fsdp_reduce(st, layer, mb, bf, be);
  else add_grads(be, s_.unit);
  if (!s_.fsdp && last_mb && s_.dp_all > 1 && !traits_.fp32_grad_accumulation) dp_reduce(stage, layer, be);
  // A multi-token-prediction module's input projection, after its block.
  if (layer >= m_.n_layers) last = mtp_input_backward(st, layer, mb, last);
}

void Builder::backward_chunk(StageState& st, const Step& step) {
  const int stage = st.stage;
  const int vstage = step.chunk * s_.pp + stage;
  const std::int64_t mb = step.mb;
  const int l0 = chunk_first(vstage);
  const int n_chunk_layers = chunk_blocks(vstage);
  int last = -1;
  st.root_bwd_first = -1;
  if (st.last && step.chunk == s_.v - 1) last = backward_head(st, vstage, mb);
  st.bwd_gate = last;
  for (int li = n_chunk_layers - 1; li >= 0; --li) backward_layer(st, step, vstage, l0 + li, li == n_chunk_layers - 1, last);
  if (n_chunk_layers > 0) last = amax_reduction(stage, vstage, mb, Pass::backward, last);
  if (st.first && step.chunk == 0) {
    const int group = s_.root.one_root ? kRoot : kEmbed;
    std::vector<int> gathered;
    fsdp_gather_group(st, group, mb, true, gathered);
    const int id = embedding(stage, mb, Pass::backward);
    if (last >= 0) {
      op_at(id).deps = {last};
    } else {
      // A chunk that holds only the embedding: its backward starts with the embedding's.
      after_blocking_send(st, op_at(id).deps);
      links_.bwd_first.set(vstage, mb, id);
    }
    op_at(id).deps.insert(op_at(id).deps.end(), gathered.begin(), gathered.end());
    if (!defers_fsdp_sync() || fsdp_run_last(mb)) fsdp_release_group(st, group, id);
    if (fsdp_syncs(mb)) fsdp_reduce_group(st, group, mb, group == kRoot && st.root_bwd_first >= 0 ? st.root_bwd_first : id, id);
    last = id;
  }
  if (traits_.fp32_grad_accumulation) last = hp_grad_accumulate(stage, vstage, mb, n_chunk_layers, last);
  links_.bwd_last.set(vstage, mb, last);
  release_pending_reduce(st);
  if (vstage < n_vstages_ - 1) op_at(last).at_end.push_back({MemoryTerm::activations, -s_.stage_output});
  if (vstage > 0)
    links_.bwd_send.set(vstage, mb,
                        send(st, p2p_send(stage, op_name("pp.send_grad.v{}.mb{}", vstage, mb), p2p_bytes(vstage, false), last)));
}

}  // namespace meshplan::lowering

#include "plan/step_fingerprint.hpp"

#include <bit>
#include <string_view>

#include "spec/digest128.hpp"
#include "workload/memory_estimate.hpp"
#include "workload/step_program.hpp"

namespace meshplan {
namespace {

// The digest (spec/digest128.hpp) with the field types a step holds.
struct Hasher : Digest128 {
  StepFingerprint fingerprint() const { return StepFingerprint{h}; }
  void num(std::int64_t v) { word(static_cast<std::uint64_t>(v)); }
  // Doubles by bit pattern: equal bits are the same input, whatever they mean.
  void num(double v) { word(std::bit_cast<std::uint64_t>(v)); }
  template <typename E>
    requires std::is_enum_v<E>
  void num(E e) {
    word(static_cast<std::uint64_t>(e));
  }
  void num(bool b) { word(b ? 1 : 0); }
  void num(int v) { word(static_cast<std::uint64_t>(static_cast<std::int64_t>(v))); }
  // Lists carry their length, so [a][b, c] and [a, b][c] differ.
  template <typename List, typename Each>
  void list(const List& l, Each&& each) {
    num(static_cast<std::int64_t>(l.size()));
    for (const auto& x : l) each(*this, x);
  }
};

void add(Hasher& h, const GemmShape& g) {
  h.num(g.m), h.num(g.n), h.num(g.k), h.num(g.batch), h.num(g.group), h.num(static_cast<double>(g.group_cv));
}

void add(Hasher& h, const AttentionShape& a) {
  h.num(a.batch), h.num(a.heads), h.num(a.kv_heads), h.num(a.seq_q), h.num(a.seq_kv), h.num(a.head_dim);
  h.num(a.causal), h.num(a.flash_version);
  h.num(static_cast<int>(a.backend)), h.num(static_cast<int>(a.kernel)), h.num(a.cudnn_version), h.num(a.window);
}

void add_changes(Hasher& h, const MemoryChanges& changes) {
  h.list(changes, [](Hasher& x, const auto& c) { x.num(c.first), x.num(c.second); });
}

// Every field of an op's work and of its schedule (names are kept apart, for traces). A field added to
// either must be added here, or two plans that differ only in it would be merged: the size checks
// below fail the build when one changes, as a reminder.
void add(Hasher& h, const OpWork& w) {
#if defined(__x86_64__) && defined(__GLIBCXX__)  // the size below is libstdc++ on x86-64's
  static_assert(sizeof(OpWork) == 352, "OpWork changed: digest its new fields in step_fingerprint.cpp, then update this size");
#endif
  h.list(w.gemms, [](Hasher& x, const GemmShape& g) { add(x, g); });
  h.list(w.attention, [](Hasher& x, const AttentionShape& a) { add(x, a); });
  h.num(w.attention_pass), h.num(w.memory_bound_bytes), h.num(w.cast_bytes), h.num(w.kernels),
      h.num(w.graphed_kernels), h.num(w.graph_replays),
      h.num(w.layernorm.bytes), h.num(w.layernorm.width), h.num(w.layernorm.pass),
      h.num(w.low_precision_gemms), h.num(w.low_precision_attention);
  h.num(w.model_flops), h.num(w.hardware_flops);
  h.num(w.collective), h.num(w.group), h.num(w.bytes), h.num(w.host_to_device);
  h.num(w.a2a_dedup_top_k), h.num(w.a2a_dedup_experts);
}

void add(Hasher& h, const StepOp& op) {
#if defined(__x86_64__) && defined(__GLIBCXX__)
  static_assert(sizeof(StepOp) == 144, "StepOp changed: digest its new fields in step_fingerprint.cpp, then update this size");
#endif
  h.num(op.stage), h.num(op.stream), h.num(op.category), h.num(op.kind), h.num(op.host_sync), h.num(static_cast<std::int64_t>(op.work));
  h.list(op.deps, [](Hasher& x, int d) { x.num(d); });
  add_changes(h, op.at_start);
  add_changes(h, op.at_end);
}

void add(Hasher& h, const MemoryBreakdown& b) {
  h.num(b.params), h.num(b.grads), h.num(b.optimizer), h.num(b.unsharded_params), h.num(b.reduce_buffers);
  h.num(b.activations), h.num(b.recompute), h.num(b.comm_buffers), h.num(b.framework);
}

}  // namespace

StepFingerprint combine(const StepFingerprint& a, const StepFingerprint& b) {
  Hasher h;
  h.h = a.h;
  h.word(b.h[0]);
  h.word(b.h[1]);
  return h.fingerprint();
}

StepFingerprint program_fingerprint(const ModelSpec& m, const Plan& p, const Job& j, const ClusterSpec& c) {
  const StepProgram prog =
      lower_step(m, p, j, LowerOptions{.op_names = false, .moe_router_load_cv = c.framework.moe_router_load_cv});
  Hasher h;
  const Mesh& mesh = p.mesh;
  h.num(mesh.pp), h.num(mesh.vpp), h.num(mesh.dp_replicate), h.num(mesh.dp_shard), h.num(mesh.cp), h.num(mesh.tp);
  h.num(mesh.ep);
  h.num(p.compute_dtype), h.num(p.fp8);
  // What the host thread's costs and synchronizations read (cost/host_cost.cpp).
  h.num(p.runtime), h.num(p.deepspeed_engine), h.num(p.compile), h.num(p.cuda_graphs);
  h.list(prog.pass_first_ops, [](Hasher& x, int i) { x.num(i); });
  h.list(prog.backward_first_ops, [](Hasher& x, int i) { x.num(i); });
  h.num(j.seq_len), h.num(j.global_batch), h.num(j.micro_batch), h.num(j.grad_accum), h.num(j.pp_microbatches);
  h.num(prog.n_stages), h.num(prog.n_microbatches), h.num(prog.model_flops_per_step), h.num(prog.tokens_per_step);
  h.list(prog.works, [](Hasher& x, const OpWork& w) { add(x, w); });
  h.list(prog.ops, [](Hasher& x, const StepOp& op) { add(x, op); });
  return h.fingerprint();
}

StepFingerprint memory_fingerprint(const ModelSpec& m, const Plan& p, const Job& j, const ClusterSpec& c) {
  const MemoryEstimate est = estimate_memory(m, p, j, c);
  Hasher h;
  h.num(est.gpu_memory_bytes), h.num(est.headroom_bytes), h.num(est.fits);
  h.list(est.stages, [](Hasher& x, const StageMemory& s) {
    x.num(s.stage), x.num(s.first_layer), x.num(s.n_layers), x.num(s.params_per_rank);
    x.num(s.microbatches_in_flight), x.text(s.peak_phase);
    add(x, s.breakdown);
    x.num(s.peak_bytes), x.num(s.allocated_peak_bytes), x.num(s.reserved_peak_bytes), x.num(s.host_bytes);
  });
  return h.fingerprint();
}

}  // namespace meshplan

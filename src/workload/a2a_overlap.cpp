#include "workload/a2a_overlap.hpp"

#include <array>

namespace meshplan {
namespace {

bool is_expert_all_to_all(const StepProgram& prog, std::size_t i) {
  const StepOp& op = prog.ops[i];
  return op.kind == OpKind::collective && op.category == OpCategory::ep && prog.work(op).collective == CollectiveOp::all_to_all;
}

// The span as alternating tokens: compute segment, all-to-all, segment, ..., segment (segments
// may be empty).
std::vector<std::vector<int>> tokens_of(const StepProgram& prog, OpSpan s) {
  std::vector<std::vector<int>> t(1);
  for (int i = s.begin; i < s.end; ++i) {
    if (is_expert_all_to_all(prog, static_cast<std::size_t>(i))) {
      t.push_back({i});
      t.emplace_back();
    } else {
      t.back().push_back(i);
    }
  }
  return t;
}

bool waits_on(const StepProgram& prog, OpSpan waiter, OpSpan on) {
  for (int i = waiter.begin; i < waiter.end; ++i)
    for (const int d : prog.ops[static_cast<std::size_t>(i)].deps)
      if (d >= on.begin && d < on.end) return true;
  return false;
}

}  // namespace

std::vector<std::size_t> a2a_overlap_pairs(const std::vector<Step>& order) {
  std::vector<std::size_t> pairs;
  for (std::size_t i = 0; i + 1 < order.size();) {
    const Step& a = order[i];
    const Step& b = order[i + 1];
    if (a.steady && b.steady && a.forward != b.forward && a.mb != b.mb) {
      pairs.push_back(i);
      i += 2;
    } else {
      ++i;
    }
  }
  return pairs;
}

std::vector<int> a2a_overlap_order(const StepProgram& prog, OpSpan forward, OpSpan backward) {
  if (waits_on(prog, forward, backward) || waits_on(prog, backward, forward)) return {};
  const auto f = tokens_of(prog, forward);
  const auto b = tokens_of(prog, backward);
  if (f.size() == 1 || b.size() == 1) return {};
  std::vector<int> out;
  out.reserve(static_cast<std::size_t>(forward.end - forward.begin + backward.end - backward.begin));
  std::size_t fi = 0, bi = 0;
  auto take = [&out](const std::vector<std::vector<int>>& tokens, std::size_t& i) {
    out.insert(out.end(), tokens[i].begin(), tokens[i].end());
    ++i;
  };
  // Tokens alternate segment / all-to-all, so positions fix the roles: forward 1 and 3 are one
  // layer's dispatch and combine, 2 its MLP, 4 the next layer's attention; backward 1 and 3 the
  // combine's and the dispatch's backward, 2 the MLP's backward, 4 the attention's.
  // The backward's lead first (the loss's backward, recompute), as Megatron-Core runs the
  // post-process backward before the layers; then the forward up to its first dispatch.
  take(b, bi);
  take(f, fi);
  constexpr std::array<bool, 8> kCycleIsForward = {false, true, false, false, true, true, false, true};
  for (std::size_t k = 0; fi < f.size() && bi < b.size(); k = (k + 1) % kCycleIsForward.size())
    kCycleIsForward[k] ? take(f, fi) : take(b, bi);
  while (fi < f.size()) take(f, fi);
  while (bi < b.size()) take(b, bi);
  return out;
}

}  // namespace meshplan

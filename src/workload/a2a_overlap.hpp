#pragma once
// Megatron-Core's expert all-to-all overlap (--overlap-moe-expert-parallel-comm; its combined
// 1F1B schedule): a forward and a backward of different micro-batches that the pipeline schedule
// runs back to back become one merged step. Layer by layer, each one's all-to-alls go on the
// communication stream while the other's compute runs, in the order Megatron-Core issues them
// (models/common/model_chunk_schedule_plan.py, TransformerLayerSchedulePlan.run):
//   compute stream   forward attention | backward MLP     | forward MLP       | backward attention
//   comm stream      backward combine  | forward dispatch | backward dispatch | forward combine
// The backward's ops before its first combine (the loss's backward, recompute) go first, as
// Megatron-Core runs the post-process backward before the layers.
// Nothing is added or removed: the same ops are issued in another order (docs/models.md).
#include <optional>
#include <utility>
#include <vector>

#include "workload/pipeline_schedule.hpp"
#include "workload/step_program.hpp"

namespace meshplan {

// A contiguous run of op indices [begin, end): the ops one schedule step issued.
struct OpSpan {
  int begin = 0, end = 0;
};

// The schedule steps that merge: a forward next to a backward of another micro-batch, both in the
// steady state (1F1B's alternating middle, not the last warm-up forward beside the first
// cool-down backward; without a pipeline, each backward with the next micro-batch's forward),
// pairs taken left to right. Indices into `order`, first of each pair.
std::vector<std::size_t> a2a_overlap_pairs(const std::vector<Step>& order);

// The merged issue order of two adjacent spans (`first` directly before `second` in `ops`), one
// a forward and one a backward: each cut at its expert all-to-alls into segments, the two
// interleaved as above, each keeping its own order. Empty when they cannot merge: one waits for
// the other, or either has no all-to-all to hide.
std::vector<int> a2a_overlap_order(const StepProgram& prog, OpSpan forward, OpSpan backward);

}  // namespace meshplan

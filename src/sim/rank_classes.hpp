#pragma once
// Ranks that run alike under `simulate --full`. There every rank has its own links, streams and host
// thread, and ranks meet only where a collective waits for all its members and where a pipeline
// send reaches the rank at the same position of the next stage. Two positions within a stage run
// alike when their ranks have the same speeds stage by stage and, for every kind of group, their
// groups hold ranks of the same classes: the coarsest such partition (found by refinement, as
// colour refinement finds a graph's equitable partition) lets one representative stand for each
// class, with each collective gated on the representatives of the classes its group holds. The
// times are those of the whole cluster: a collective starts at the latest arrival among its
// members, and members of one class arrive together. One slow GPU among 16,384 is a few classes,
// not 16,384 ranks; with no per-GPU speeds every position is one class.
#include <array>
#include <cstdint>
#include <vector>

#include "spec/plan.hpp"
#include "workload/step_program.hpp"

namespace meshplan {

// The groups of one kind within a stage, over classes: each class's group instance, and each
// instance's member classes (ascending, each once).
struct ClassGroups {
  std::vector<std::uint32_t> instance_of;             // by class
  std::vector<std::vector<std::uint32_t>> members;    // by instance
};

struct RankClasses {
  std::int64_t ranks_per_stage = 1;                   // world / pp
  std::vector<std::uint32_t> class_of;                // by position within a stage
  std::vector<std::int64_t> representative;           // by class: its first position (class 0 holds position 0)
  std::array<ClassGroups, kGroupKinds> groups;
  std::size_t size() const { return representative.size(); }
};

// `rank_speed` by global rank (pp outermost: rank = stage x ranks_per_stage + position); empty =
// every rank at 1.
RankClasses rank_classes(const Mesh& mesh, const std::vector<double>& rank_speed);

}  // namespace meshplan

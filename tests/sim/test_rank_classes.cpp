// Ranks that run alike under --full: classes found by hand, and the grouped simulation against
// the one with every rank its own class.
#include <doctest/doctest.h>

#include <vector>

#include "sim/rank_classes.hpp"
#include "sim/step_simulator.hpp"
#include "spec/cluster_loader.hpp"
#include "spec/model_loader.hpp"

using namespace meshplan;

namespace {

const ClassGroups& groups_of(const RankClasses& rc, GroupKind g) { return rc.groups[static_cast<std::size_t>(g)]; }

}  // namespace

TEST_CASE("rank classes: every rank alike without per-GPU speeds, at any size") {
  Mesh m;
  m.pp = 16;
  m.tp = 8;
  m.dp_shard = 128;
  const RankClasses rc = rank_classes(m, {});
  CHECK(rc.ranks_per_stage == 1024);
  REQUIRE(rc.size() == 1);
  CHECK(rc.representative[0] == 0);
  CHECK(groups_of(rc, GroupKind::tp).members == std::vector<std::vector<std::uint32_t>>{{0}});
}

TEST_CASE("rank classes by hand: tp 2 x dp_shard 4, rank 3 slow") {
  // Ranks 0..7, TP innermost: TP groups {0,1} {2,3} {4,5} {6,7}; FSDP groups {0,2,4,6} {1,3,5,7}.
  // Rank 3 is slow. Its TP mate 2 waits for it at every TP collective; its FSDP mates 1, 5, 7 at
  // every FSDP one; 0, 4, 6 meet it only through those: four classes, first ranks 0, 1, 2, 3.
  Mesh m;
  m.tp = 2;
  m.dp_shard = 4;
  std::vector<double> speed(8, 1.0);
  speed[3] = 0.8;
  const RankClasses rc = rank_classes(m, speed);
  REQUIRE(rc.size() == 4);
  CHECK(rc.representative == std::vector<std::int64_t>{0, 1, 2, 3});
  CHECK(rc.class_of == std::vector<std::uint32_t>{0, 1, 2, 3, 0, 1, 0, 1});
  // Over classes: the TP group of class 0 holds classes {0, 1}, of class 2 {2, 3}; the FSDP group
  // of class 0 holds {0, 2}, of class 1 {1, 3}.
  const ClassGroups& tp = groups_of(rc, GroupKind::tp);
  CHECK(tp.members[tp.instance_of[0]] == std::vector<std::uint32_t>{0, 1});
  CHECK(tp.instance_of[0] == tp.instance_of[1]);
  CHECK(tp.members[tp.instance_of[3]] == std::vector<std::uint32_t>{2, 3});
  const ClassGroups& fsdp = groups_of(rc, GroupKind::fsdp);
  CHECK(fsdp.members[fsdp.instance_of[0]] == std::vector<std::uint32_t>{0, 2});
  CHECK(fsdp.members[fsdp.instance_of[3]] == std::vector<std::uint32_t>{1, 3});
  CHECK(fsdp.instance_of[1] == fsdp.instance_of[3]);
}

TEST_CASE("rank classes by hand: FSDP alone, three slow GPUs among 1,024 are two classes") {
  // One FSDP group of 1,024: the slow ranks and the rest each see a group of both kinds. A class
  // waits for the latest member of each group; how many members of a class the group holds does
  // not change when that is.
  Mesh m;
  m.dp_shard = 1024;
  std::vector<double> speed(1024, 1.0);
  for (int r : {5, 77, 900}) speed[static_cast<std::size_t>(r)] = 0.9;
  const RankClasses rc = rank_classes(m, speed);
  REQUIRE(rc.size() == 2);
  CHECK(rc.representative == std::vector<std::int64_t>{0, 5});
}

TEST_CASE("rank classes by hand: a pipeline tells positions apart by their speeds stage by stage") {
  // pp 2 x tp 2: stage 0 holds ranks 0, 1, stage 1 ranks 2, 3. Rank 3 (stage 1, position 1) slow:
  // position 1's speeds are (1, 0.8), position 0's (1, 1): two classes, and the TP group holds both.
  Mesh m;
  m.pp = 2;
  m.tp = 2;
  const RankClasses rc = rank_classes(m, {1, 1, 1, 0.8});
  REQUIRE(rc.size() == 2);
  CHECK(rc.ranks_per_stage == 2);
  CHECK(rc.class_of == std::vector<std::uint32_t>{0, 1});
  // Position 1 slow in both stages is still two classes; both positions slow in stage 0 are alike.
  CHECK(rank_classes(m, {1, 0.8, 1, 0.8}).size() == 2);
  CHECK(rank_classes(m, {0.8, 0.8, 1, 1}).size() == 1);
}

TEST_CASE("--full: ranks simulated once per class give the times of every rank simulated on its own") {
  // The expanded run gives every rank a speed of its own (1 + k x 1e-12: each its own class, times
  // within 1e-10 of speed 1); the grouped run has the same slow rank and every other at exactly 1.
  const auto c = load_cluster("h100-sxm-80gb");
  const auto model = load_model("llama3.1-8b");
  struct Case {
    Plan p;
    Job j;
    std::int64_t slow;
  };
  std::vector<Case> cases;
  {
    Plan p;
    p.runtime = Runtime::torchtitan_fsdp2;
    p.sharding = Sharding::zero3;
    p.mesh.dp_shard = 4;
    p.mesh.tp = 2;
    p.sequence_parallel = true;
    p.ac = AcMode::full;
    cases.push_back({p, Job{4096, 8, 1, 2}, 3});
  }
  {
    Plan p;
    p.runtime = Runtime::megatron;
    p.sharding = Sharding::zero1;
    p.mesh.pp = 2;
    p.mesh.tp = 2;
    p.mesh.dp_replicate = 4;
    p.sequence_parallel = true;
    cases.push_back({p, Job{4096, 16, 1, 4}, 13});
  }
  {
    Plan p;
    p.runtime = Runtime::torchtitan_fsdp2;
    p.sharding = Sharding::zero3;
    p.mesh.dp_shard = 2;
    p.mesh.dp_replicate = 2;  // HSDP
    p.mesh.cp = 2;
    cases.push_back({p, Job{16384, 4, 1, 1}, 6});
  }
  for (const Case& k : cases) {
    const std::int64_t world = k.p.mesh.world();
    CAPTURE(world);
    SimOptions grouped{.full = true};
    grouped.rank_speed.assign(static_cast<std::size_t>(world), 1.0);
    grouped.rank_speed[static_cast<std::size_t>(k.slow)] = 0.8;
    SimOptions expanded = grouped;
    for (std::int64_t r = 0; r < world; ++r)
      if (r != k.slow) expanded.rank_speed[static_cast<std::size_t>(r)] = 1 + 1e-12 * static_cast<double>(r);
    const std::int64_t per_stage = world / k.p.mesh.pp;
    CHECK(rank_classes(k.p.mesh, expanded.rank_speed).size() == static_cast<std::size_t>(per_stage));
    CHECK(rank_classes(k.p.mesh, grouped.rank_speed).size() < static_cast<std::size_t>(per_stage));
    const StepResult a = simulate_step(model, k.p, k.j, c, grouped).result;
    const StepResult b = simulate_step(model, k.p, k.j, c, expanded).result;
    const StepResult ideal = simulate_step(model, k.p, k.j, c, SimOptions{.full = true}).result;
    CHECK(a.step_time_s > ideal.step_time_s * 1.01);  // the slow rank shows
    CHECK(a.step_time_s == doctest::Approx(b.step_time_s).epsilon(1e-9));
    for (const auto& [name, seconds] : b.breakdown_s)
      CHECK(a.breakdown_s.at(name) == doctest::Approx(seconds).epsilon(1e-9).scale(b.step_time_s));
    CHECK(a.stages[0].peak_bytes == doctest::Approx(b.stages[0].peak_bytes).epsilon(1e-9));
  }
}

// The engine against hand-worked schedules.
#include <doctest/doctest.h>

#include <iterator>
#include <stdexcept>

#include "sim/engine.hpp"
#include "sim/max_min_share.hpp"

using namespace meshplan::sim;

namespace {
Task work(StreamId s, double seconds, std::vector<TaskId> deps = {}, int owner = 0) {
  Task t;
  t.name = "work";
  t.stream = s;
  t.kind = TaskKind::work;
  t.work_seconds = seconds;
  t.deps = std::move(deps);
  t.owner = owner;
  return t;
}
Task flow(StreamId s, double bytes, std::vector<LinkId> links, double latency = 0, int owner = 0) {
  Task t;
  t.name = "flow";
  t.stream = s;
  t.kind = TaskKind::flow;
  t.bytes = bytes;
  t.links = std::move(links);
  t.latency_seconds = latency;
  t.owner = owner;
  return t;
}
}  // namespace

TEST_CASE("a stream runs its tasks one at a time in issue order") {
  Engine e;
  const auto s = e.add_stream("compute");
  const auto a = e.add_task(work(s, 1.5));
  const auto b = e.add_task(work(s, 2.0));
  const auto r = e.run();
  CHECK(r.makespan_seconds == doctest::Approx(3.5));
  CHECK(r.timings[static_cast<size_t>(a)].end_seconds == doctest::Approx(1.5));
  CHECK(r.timings[static_cast<size_t>(b)].start_seconds == doctest::Approx(1.5));
}

TEST_CASE("streams overlap; dependencies cross streams") {
  Engine e;
  const auto s1 = e.add_stream("compute");
  const auto s2 = e.add_stream("comm");
  const auto a = e.add_task(work(s1, 2.0));
  e.add_task(work(s2, 1.0));
  const auto c = e.add_task(work(s2, 1.0, {a}));  // waits for a, not only for its stream
  const auto r = e.run();
  CHECK(r.timings[static_cast<size_t>(c)].start_seconds == doctest::Approx(2.0));
  CHECK(r.makespan_seconds == doctest::Approx(3.0));
}

TEST_CASE("flows on one link share it fairly and speed up when one ends") {
  Engine e;
  const auto l = e.add_link({"nic", 100.0});
  const auto s1 = e.add_stream("a");
  const auto s2 = e.add_stream("b");
  const auto f1 = e.add_task(flow(s1, 100, {l}));
  const auto f2 = e.add_task(flow(s2, 300, {l}));
  const auto r = e.run();
  // Both at 50 B/s until f1 is done at t=2; f2 then has 200 B left at 100 B/s.
  CHECK(r.timings[static_cast<size_t>(f1)].end_seconds == doctest::Approx(2.0));
  CHECK(r.timings[static_cast<size_t>(f2)].end_seconds == doctest::Approx(4.0));
}

TEST_CASE("latency is paid before bytes move; a cap limits a flow") {
  Engine e;
  const auto l = e.add_link({"nvlink", 100.0});
  const auto s1 = e.add_stream("a");
  const auto s2 = e.add_stream("b");
  const auto f1 = e.add_task(flow(s1, 100, {l}, 1.0));
  Task capped = flow(s2, 100, {l});
  capped.max_rate_bytes_per_s = 10;
  const auto f2 = e.add_task(capped);
  const auto r = e.run();
  // f2 alone at 10 B/s for 1 s (f1 in latency), then f1 gets the other 90 B/s: 100/90 s.
  CHECK(r.timings[static_cast<size_t>(f1)].end_seconds == doctest::Approx(1.0 + 100.0 / 90.0));
  CHECK(r.timings[static_cast<size_t>(f2)].end_seconds == doctest::Approx(10.0));
}

TEST_CASE("compute slows by the interference factor while its rank communicates") {
  Engine e(EngineOptions{1.0});
  const auto l = e.add_link({"nic", 100.0});
  const auto sc = e.add_stream("compute");
  const auto sn = e.add_stream("comm");
  const auto w = e.add_task(work(sc, 1.0));
  e.add_task(flow(sn, 100, {l}));
  const auto r = e.run();
  // Half speed for the flow's 1 s (0.5 s of work done), then full speed: 1.5 s.
  CHECK(r.timings[static_cast<size_t>(w)].end_seconds == doctest::Approx(1.5));
}

TEST_CASE("memory events follow task starts and ends") {
  Engine e;
  const auto s = e.add_stream("compute");
  Task a = work(s, 1.0);
  a.at_start = {{7, 10}};
  e.add_task(a);
  Task b = work(s, 1.0);
  b.at_end = {{7, -10}};
  e.add_task(b);
  const auto r = e.run();
  REQUIRE(r.memory.size() == 2);
  CHECK(r.memory[0].time_seconds == 0.0);
  CHECK(r.memory[0].delta_bytes == 10);
  CHECK(r.memory[1].time_seconds == doctest::Approx(2.0));
  CHECK(r.memory[1].delta_bytes == -10);
}

// A stored task keeps where each of its lists begins in the engine's shared pools and ends where
// the next task's begins (the last one's at the pool's end): tasks with empty lists between full
// ones, and a last task with lists, must each see only their own entries.
TEST_CASE("each task sees only its own dependencies, links and memory changes") {
  Engine e;
  const auto fast = e.add_link({"fast", 100.0});
  const auto slow = e.add_link({"slow", 10.0});
  const auto s = e.add_stream("compute");
  const auto n = e.add_stream("comm");
  Task a = work(s, 1.0);
  a.at_start = {{1, 10}, {2, 20}};
  a.at_end = {{1, -10}};
  const auto ta = e.add_task(a);
  const auto tb = e.add_task(work(s, 1.0));  // no lists at all: an empty range between full ones
  Task c = flow(n, 100, {slow}, 0.0);          // after b: its one link is `slow`, not `fast`
  c.deps = {tb};
  c.at_end = {{3, 5}};
  const auto tc = e.add_task(c);
  Task d = flow(n, 100, {fast});  // the last task: its lists end at the pools' ends
  d.deps = {ta};
  d.at_start = {{4, 7}};
  d.at_end = {{4, -7}, {2, -20}};
  const auto td = e.add_task(d);
  const auto r = e.run();
  // a 0-1, b 1-2; d waits for a and for c's slot on `comm`: c runs 2-12 on the 10 B/s link, d
  // 12-13 on the 100 B/s one.
  CHECK(r.timings[static_cast<size_t>(tb)].end_seconds == doctest::Approx(2.0));
  CHECK(r.timings[static_cast<size_t>(tc)].end_seconds == doctest::Approx(12.0));
  CHECK(r.timings[static_cast<size_t>(td)].start_seconds == doctest::Approx(12.0));
  CHECK(r.timings[static_cast<size_t>(td)].end_seconds == doctest::Approx(13.0));
  struct Expected {
    double time_seconds;
    int tag;
    double delta_bytes;
  };
  const Expected expected[] = {{0, 1, 10}, {0, 2, 20}, {1, 1, -10}, {12, 3, 5}, {12, 4, 7}, {13, 4, -7}, {13, 2, -20}};
  REQUIRE(r.memory.size() == std::size(expected));
  for (std::size_t i = 0; i < std::size(expected); ++i) {
    CAPTURE(i);
    CHECK(r.memory[i].time_seconds == doctest::Approx(expected[i].time_seconds));
    CHECK(r.memory[i].tag == expected[i].tag);
    CHECK(r.memory[i].delta_bytes == expected[i].delta_bytes);
  }
  CHECK(r.timings[static_cast<size_t>(ta)].end_seconds == doctest::Approx(1.0));
}

TEST_CASE("a flow over a dead link is reported, not hung") {
  Engine e;
  const auto l = e.add_link({"dead", 0.0});
  const auto s = e.add_stream("comm");
  e.add_task(flow(s, 100, {l}));
  CHECK_THROWS_AS(e.run(), std::logic_error);
}

TEST_CASE("max-min fairness: the bottleneck link decides, the rest is redistributed") {
  std::vector<Link> links = {{"L1", 10.0}, {"L2", 4.0}};
  std::vector<LinkId> a = {0}, b = {0, 1}, c = {1};
  std::vector<FlowDemand> flows = {{&a, 1e30}, {&b, 1e30}, {&c, 1e30}};
  std::vector<double> rates;
  max_min_share(links, flows, rates);
  CHECK(rates[0] == doctest::Approx(8.0));
  CHECK(rates[1] == doctest::Approx(2.0));
  CHECK(rates[2] == doctest::Approx(2.0));
}

TEST_CASE("same inputs, same schedule") {
  auto build = [] {
    Engine e(EngineOptions{0.2});
    const auto l = e.add_link({"nic", 50.0});
    const auto s1 = e.add_stream("a");
    const auto s2 = e.add_stream("b");
    for (int i = 0; i < 20; ++i) {
      e.add_task(work(s1, 0.1 * (i % 3 + 1)));
      e.add_task(flow(s2, 10.0 * (i % 4 + 1), {l}, 0.01));
    }
    return e.run();
  };
  const auto r1 = build();
  const auto r2 = build();
  REQUIRE(r1.timings.size() == r2.timings.size());
  for (size_t i = 0; i < r1.timings.size(); ++i) CHECK(r1.timings[i].end_seconds == r2.timings[i].end_seconds);
}

TEST_CASE("an issue thread releases each task once its issue is past: host-bound kernels wait for it") {
  // Issues of 1 s each release kernels of 0.5 s on one stream: kernel i starts when issue i ends
  // (i + 1 s), not when its stream frees (i + 0.5 s); the thread never waits for the GPU.
  Engine e;
  const auto s = e.add_stream("compute");
  const auto th = e.add_issue_thread();
  std::vector<TaskId> kernels;
  for (int i = 0; i < 3; ++i) kernels.push_back(e.add_task(work(s, 0.5)));
  for (TaskId k : kernels) e.add_issue(th, 1.0, std::span(&k, 1), {});
  const auto r = e.run();
  REQUIRE(r.issue_timings.size() == 3);
  for (std::size_t i = 0; i < 3; ++i) {
    CHECK(r.issue_timings[i].start_seconds == doctest::Approx(static_cast<double>(i)));
    CHECK(r.issue_timings[i].end_seconds == doctest::Approx(static_cast<double>(i) + 1));
    CHECK(r.timings[static_cast<std::size_t>(kernels[i])].start_seconds == doctest::Approx(static_cast<double>(i) + 1));
  }
  CHECK(r.makespan_seconds == doctest::Approx(3.5));
}

TEST_CASE("an issue thread runs ahead of a slow GPU and waits only at a blocking point") {
  // Kernels of 2 s issued in 0.25 s each: the thread is done with the first two by 0.5 s, while
  // they run 0.25-2.25 s and 2.25-4.25 s. Its third issue blocks until both have finished (4.25 s),
  // then takes 0.25 s: the third kernel runs 4.5-6.5 s. The fourth issue of the thread ends at
  // 5 s, after the other thread's at 3 s: the join they both release starts at 5 s.
  Engine e;
  const auto s = e.add_stream("compute");
  const auto th = e.add_issue_thread();
  const auto other = e.add_issue_thread();
  const auto k0 = e.add_task(work(s, 2.0));
  const auto k1 = e.add_task(work(s, 2.0));
  const auto k2 = e.add_task(work(s, 2.0));
  Task join;
  join.stream = kNoStream;
  join.work_seconds = 0.5;
  const auto j = e.add_task(join);
  e.add_issue(th, 0.25, std::span(&k0, 1), {});
  e.add_issue(th, 0.25, std::span(&k1, 1), {});
  const std::vector<TaskId> both{k0, k1};
  e.add_issue(th, 0.25, std::span(&k2, 1), both);
  e.add_issue(other, 3.0, std::span(&j, 1), {});
  e.add_issue(th, 0.5, std::span(&j, 1), {});
  const auto r = e.run();
  CHECK(r.issue_timings[1].end_seconds == doctest::Approx(0.5));
  CHECK(r.timings[static_cast<std::size_t>(k0)].start_seconds == doctest::Approx(0.25));
  CHECK(r.timings[static_cast<std::size_t>(k1)].start_seconds == doctest::Approx(2.25));
  CHECK(r.issue_timings[2].start_seconds == doctest::Approx(4.25));
  CHECK(r.timings[static_cast<std::size_t>(k2)].start_seconds == doctest::Approx(4.5));
  CHECK(r.issue_timings[3].end_seconds == doctest::Approx(3.0));
  CHECK(r.issue_timings[4].end_seconds == doctest::Approx(5.0));  // after the blocking issue
  CHECK(r.timings[static_cast<std::size_t>(j)].start_seconds == doctest::Approx(5.0));
  CHECK(r.makespan_seconds == doctest::Approx(6.5));
}

TEST_CASE("an issue waiting on what a later issue of its own thread releases is a deadlock") {
  Engine e;
  const auto s = e.add_stream("compute");
  const auto th = e.add_issue_thread();
  const auto a = e.add_task(work(s, 1.0));
  const auto b = e.add_task(work(s, 1.0));
  e.add_issue(th, 0.1, std::span(&a, 1), std::span(&b, 1));
  e.add_issue(th, 0.1, std::span(&b, 1), {});
  CHECK_THROWS_AS(e.run(), std::logic_error);
  Engine bad;
  CHECK_THROWS_AS(bad.add_issue(0, 1.0, {}, {}), std::logic_error);  // no such thread
  Task gate;
  gate.kind = TaskKind::gate;  // only add_issue makes them
  CHECK_THROWS_AS(bad.add_task(gate), std::logic_error);
}

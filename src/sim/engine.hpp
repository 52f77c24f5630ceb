#pragma once
// Discrete-event engine: owns simulated time, the event heap and the running tasks; knows
// nothing about GPUs or NCCL. A task is either fixed work at unit speed (compute, latency) or
// bytes moved over links whose bandwidth is shared max-min fairly among the flows crossing them.
// Streams run their tasks one at a time in issue order; dependencies cross streams.
// This is the only mutable state of a simulation (design.md §5, SimGrid's engine/model split).
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace meshplan::sim {

using TaskId = std::int32_t;
using StreamId = std::int32_t;
using LinkId = std::int32_t;
using ThreadId = std::int32_t;

// A task on no stream starts as soon as its dependencies finish (barriers, joins).
constexpr StreamId kNoStream = -1;

struct Link {
  std::string name;
  double bandwidth_bytes_per_s = 0;
};

// Memory a task allocates (+) or frees (-), with the report term it belongs to.
struct MemoryChange {
  int tag = 0;  // the caller's memory term
  double bytes = 0;
};

enum class TaskKind {
  work,  // `work_seconds` at unit speed; slowed while the owner's communication runs
  flow,  // `bytes` over `links`, after `latency_seconds`
  gate,  // made by add_issue for what an issue waits on: opens when its dependencies finish
};

// What a caller describes; the engine copies it into flat arrays, so one Task can be refilled
// and added again without reallocating its vectors.
struct Task {
  std::string name;
  std::string category;             // report bucket: "compute", "fsdp_all_gather", ...
  StreamId stream = 0;
  TaskKind kind = TaskKind::work;
  double work_seconds = 0;
  double bytes = 0;
  double latency_seconds = 0;       // paid before the bytes move (flows only)
  double max_rate_bytes_per_s = std::numeric_limits<double>::infinity();  // algorithm cap
  std::vector<LinkId> links;        // links the flow crosses (each counted once)
  std::vector<TaskId> deps;         // must finish before this task starts
  int owner = 0;                    // rank whose compute/communication interfere
  std::vector<MemoryChange> at_start;  // allocations (+) and frees (-) when the task starts
  std::vector<MemoryChange> at_end;    // ... and when it ends

  // Every field back to its default above, keeping the lists' buffers (a caller adding tens of
  // thousands of tasks refills one).
  void reset();
};

struct TaskTiming {
  double start_seconds = 0;
  double end_seconds = 0;
};

struct EngineOptions {
  // While a rank's communication runs, its compute runs at 1 / (1 + factor) speed (profile value).
  double interference_factor = 0;
};

struct MemoryEvent {
  double time_seconds = 0;
  int owner = 0;
  double delta_bytes = 0;
  int tag = 0;
};

struct RunResult {
  double makespan_seconds = 0;
  std::vector<TaskTiming> timings;     // indexed by TaskId
  std::vector<TaskTiming> issue_timings;  // by issue, in the order add_issue was called
  std::vector<MemoryEvent> memory;     // in time order
  std::int64_t events_processed = 0;
};

class Engine {
public:
  explicit Engine(EngineOptions options = {});

  // Sizes the flat task arrays once: tasks, and their dependencies, links and memory changes in all.
  struct Sizes {
    std::size_t tasks = 0, deps = 0, links = 0, memory_changes = 0, issues = 0;
  };
  void reserve_tasks(const Sizes& n);
  LinkId add_link(Link link);
  StreamId add_stream(std::string name);
  // Tasks on a stream run in the order they were added; deps may name tasks added later
  // (pipeline stages wait on each other). A cycle is reported by run() as a deadlock.
  TaskId add_task(const Task& task);

  const std::vector<std::string>& stream_names() const { return stream_names_; }

  // An issuing thread (a host thread launching kernels): it spends each issue's seconds in turn,
  // and what an issue releases may start only once the thread is past it. No engine event is
  // spent on an issue: the thread's clock runs ahead of the tasks, and a released task that is
  // otherwise ready before its issue ends sleeps until then.
  ThreadId add_issue_thread();
  // Appends an issue to thread th: once the thread is past the issues before it and every task in
  // `waits` has finished, it spends `seconds`; then each task in `released` may start (a task
  // released by several issues, once the last of them is past).
  void add_issue(ThreadId th, double seconds, std::span<const TaskId> released, std::span<const TaskId> waits);

  // Runs every task to completion. Throws std::logic_error on a dependency cycle (deadlock).
  RunResult run();

private:
  class Run;  // one run's state (engine.cpp)
  TaskId append_task(const Task& task);  // add_task without its check (add_issue's gates)
  // A task as the engine keeps it (56 bytes; a step holds one per op and rank): its lists are ranges of
  // the shared pools below, appended in task order, so each list is stored as where it begins
  // and ends where the next task's (or the pool) begins.
  struct StoredTask {
    StreamId stream = 0;
    TaskKind kind = TaskKind::work;
    int owner = 0;
    double amount = 0;  // work: seconds at unit speed; flow: bytes
    double latency_seconds = 0;
    double max_rate_bytes_per_s = 0;
    std::uint32_t links = 0, deps = 0, at_start = 0, at_end = 0;
  };
  static_assert(sizeof(void*) != 8 || sizeof(StoredTask) == 56);
  std::size_t index_of(const StoredTask& t) const { return static_cast<std::size_t>(&t - tasks_.data()); }
  // The end of list `member` of task t: the next task's begin, or the pool's size after the last.
  std::uint32_t next_begin(const StoredTask& t, std::uint32_t StoredTask::*member, std::size_t pool_size) const {
    const std::size_t next = index_of(t) + 1;
    return next < tasks_.size() ? tasks_[next].*member : static_cast<std::uint32_t>(pool_size);
  }
  std::span<const LinkId> links_of(const StoredTask& t) const {
    return {link_pool_.data() + t.links, link_pool_.data() + next_begin(t, &StoredTask::links, link_pool_.size())};
  }
  std::span<const TaskId> deps_of(const StoredTask& t) const {
    return {dep_pool_.data() + t.deps, dep_pool_.data() + next_begin(t, &StoredTask::deps, dep_pool_.size())};
  }
  std::span<const MemoryChange> changes_at_start(const StoredTask& t) const {
    return {memory_pool_.data() + t.at_start, memory_pool_.data() + t.at_end};
  }
  std::span<const MemoryChange> changes_at_end(const StoredTask& t) const {
    return {memory_pool_.data() + t.at_end,
            memory_pool_.data() + next_begin(t, &StoredTask::at_start, memory_pool_.size())};
  }
  // Names only feed error messages, and most callers leave them empty: kept sparse.
  std::string name_of(TaskId id) const;

  EngineOptions options_;
  std::vector<Link> links_;
  std::vector<std::string> stream_names_;
  std::vector<std::vector<TaskId>> stream_tasks_;
  std::vector<TaskId> floating_;
  std::vector<StoredTask> tasks_;
  std::vector<LinkId> link_pool_;
  std::vector<TaskId> dep_pool_;
  std::vector<MemoryChange> memory_pool_;
  std::vector<std::pair<TaskId, std::string>> names_;  // ascending TaskId
  // Issue threads: each issue's seconds, its gate (the task its waits open; -1 none), its thread,
  // the next issue of that thread, and what it releases (released_pool_ from released_begin to
  // the next issue's).
  struct Issue {
    double seconds = 0;
    TaskId gate = -1;
    ThreadId thread = 0;
    std::uint32_t next = 0;  // kNoIssue at the thread's last
    std::uint32_t released_begin = 0;
  };
  static constexpr std::uint32_t kNoIssue = 0xffffffffu;
  std::vector<Issue> issues_;
  std::vector<TaskId> released_pool_;
  std::vector<std::pair<std::uint32_t, std::uint32_t>> threads_;  // first and last issue
  std::vector<std::pair<TaskId, std::uint32_t>> gate_issue_;      // ascending gate TaskId
};

}  // namespace meshplan::sim

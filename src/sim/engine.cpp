#include "sim/engine.hpp"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <queue>
#include <stdexcept>
#include <utility>

#include "sim/max_min_share.hpp"

namespace meshplan::sim {

void Task::reset() {
  name.clear();
  category.clear();
  stream = 0;
  kind = TaskKind::work;
  work_seconds = 0;
  bytes = 0;
  latency_seconds = 0;
  max_rate_bytes_per_s = std::numeric_limits<double>::infinity();
  links.clear();
  deps.clear();
  owner = 0;
  at_start.clear();
  at_end.clear();
}

Engine::Engine(EngineOptions options) : options_(options) {}

LinkId Engine::add_link(Link link) {
  links_.push_back(std::move(link));
  return static_cast<LinkId>(links_.size() - 1);
}

StreamId Engine::add_stream(std::string name) {
  stream_names_.push_back(std::move(name));
  stream_tasks_.emplace_back();
  return static_cast<StreamId>(stream_names_.size() - 1);
}

void Engine::reserve_tasks(const Sizes& n) {
  tasks_.reserve(n.tasks);
  dep_pool_.reserve(n.deps);
  link_pool_.reserve(n.links);
  memory_pool_.reserve(n.memory_changes);
  issues_.reserve(n.issues);
  released_pool_.reserve(n.issues);
}

TaskId Engine::add_task(const Task& task) {
  if (task.kind == TaskKind::gate) throw std::logic_error("task '" + task.name + "': gates are made by add_issue");
  return append_task(task);
}

TaskId Engine::append_task(const Task& task) {
  if (task.stream < kNoStream || task.stream >= static_cast<StreamId>(stream_tasks_.size()))
    throw std::logic_error("task '" + task.name + "' names an unknown stream");
  const auto id = static_cast<TaskId>(tasks_.size());
  for (LinkId l : task.links)
    if (l < 0 || l >= static_cast<LinkId>(links_.size()))
      throw std::logic_error("task '" + task.name + "' crosses an unknown link");
  if (task.stream == kNoStream) {
    floating_.push_back(id);
  } else {
    stream_tasks_[static_cast<std::size_t>(task.stream)].push_back(id);
  }
  auto append = [](auto& pool, const auto& items) {
    const auto begin = static_cast<std::uint32_t>(pool.size());
    pool.insert(pool.end(), items.begin(), items.end());
    return begin;
  };
  StoredTask& t = tasks_.emplace_back();
  t.stream = task.stream;
  t.kind = task.kind;
  t.owner = task.owner;
  t.amount = task.kind == TaskKind::flow ? task.bytes : task.work_seconds;
  t.latency_seconds = task.latency_seconds;
  t.max_rate_bytes_per_s = task.max_rate_bytes_per_s;
  t.links = append(link_pool_, task.links);
  t.deps = append(dep_pool_, task.deps);
  t.at_start = append(memory_pool_, task.at_start);
  t.at_end = append(memory_pool_, task.at_end);
  if (!task.name.empty()) names_.emplace_back(id, task.name);
  return id;
}

ThreadId Engine::add_issue_thread() {
  threads_.emplace_back(kNoIssue, kNoIssue);
  return static_cast<ThreadId>(threads_.size() - 1);
}

void Engine::add_issue(ThreadId th, double seconds, std::span<const TaskId> released, std::span<const TaskId> waits) {
  if (th < 0 || static_cast<std::size_t>(th) >= threads_.size()) throw std::logic_error("an issue names an unknown thread");
  Issue issue;
  issue.seconds = seconds;
  issue.thread = th;
  issue.next = kNoIssue;
  issue.released_begin = static_cast<std::uint32_t>(released_pool_.size());
  if (!waits.empty()) {
    Task gate;
    gate.stream = kNoStream;
    gate.kind = TaskKind::gate;
    gate.deps.assign(waits.begin(), waits.end());
    issue.gate = append_task(gate);
    gate_issue_.emplace_back(issue.gate, static_cast<std::uint32_t>(issues_.size()));
  }
  released_pool_.insert(released_pool_.end(), released.begin(), released.end());
  const auto id = static_cast<std::uint32_t>(issues_.size());
  auto& [first, last] = threads_[static_cast<std::size_t>(th)];
  if (last == kNoIssue) first = id;
  else issues_[last].next = id;
  last = id;
  issues_.push_back(issue);
}

std::string Engine::name_of(TaskId id) const {
  auto it = std::lower_bound(names_.begin(), names_.end(), id, [](const auto& n, TaskId i) { return n.first < i; });
  return it != names_.end() && it->first == id ? it->second : std::string();
}

namespace {

// sleeping: ready but for its issue, which ends later (an event wakes it then).
enum class Phase : std::uint8_t { waiting, sleeping, latency, active, done };

// One per task (one per op and simulated rank of a step, and its gates and barriers): 32 bytes.
struct Running {
  double remaining = 0;    // seconds of work, seconds of latency, or bytes
  double rate = 0;         // per second
  double updated_at = 0;
  std::uint32_t version = 0;  // the issue number of the task's latest event (0: none yet)
  Phase phase = Phase::waiting;
};
static_assert(sizeof(Running) == 32);

// 16 bytes, so the heap's sifts move half of what they did. An event whose number is not its
// task's latest is stale; numbers rise in issue order and break ties in time deterministically.
struct Event {
  double time;
  std::uint32_t seq;
  TaskId task;
  bool operator>(const Event& o) const { return time != o.time ? time > o.time : seq > o.seq; }
};
static_assert(sizeof(Event) == 16);

}  // namespace

// One run of the engine: every task's progress, the event heap and the incremental rate state
// (SimGrid's lazy updates: only what an event touches is recomputed). The engine's tasks, links
// and streams are read through e_.
class Engine::Run {
public:
  explicit Run(const Engine& e)
      : e_(e), n_(e.tasks_.size()), st_(n_), unfinished_deps_(n_, 0), dependents_begin_(n_ + 1, 0),
        stream_head_(e.stream_tasks_.size(), 0), flows_on_link_(e.links_.size()), link_seen_(e.links_.size(), 0),
        collected_(n_, 0), not_before_(n_, 0.0), thread_(e.threads_.size()),
        slowed_(1.0 / (1.0 + e.options_.interference_factor)) {
    result_.timings.assign(n_, {});
    result_.issue_timings.assign(e.issues_.size(), {});
    for (std::size_t th = 0; th < e.threads_.size(); ++th) thread_[th].cursor = e.threads_[th].first;
    result_.memory.reserve(e.memory_pool_.size());
    index_dependents();
  }

  RunResult run() {
    for (std::size_t th = 0; th < thread_.size(); ++th) walk(th);
    for (std::size_t s = 0; s < e_.stream_tasks_.size(); ++s) try_start(static_cast<StreamId>(s));
    for (TaskId id : e_.floating_)
      if (unfinished_deps_[static_cast<std::size_t>(id)] == 0 && st_[static_cast<std::size_t>(id)].phase == Phase::waiting)
        start_floating(id);
    update_rates();
    while (!heap_.empty()) {
      const Event ev = heap_.top();
      heap_.pop();
      Running& r = st_[static_cast<std::size_t>(ev.task)];
      if (ev.seq != r.version || (r.phase != Phase::latency && r.phase != Phase::active && r.phase != Phase::sleeping))
        continue;
      ++result_.events_processed;
      now_ = ev.time;
      if (r.phase == Phase::sleeping) {  // its issue is over: it starts
        r.phase = Phase::waiting;
        start(ev.task);
        update_rates();
        continue;
      }
      const StoredTask& t = e_.tasks_[static_cast<std::size_t>(ev.task)];
      r.remaining = 0;
      r.updated_at = now_;
      if (r.phase == Phase::latency && t.amount > 0) {
        r.phase = Phase::active;  // latency paid; now the bytes move
        r.remaining = t.amount;
        r.rate = 0;
        r.version = next_seq();  // no event until the share sets its rate
        activate_flow(ev.task);
      } else {
        finish(ev.task);
      }
      update_rates();
    }
    if (finished_ != n_) throw_deadlock();
    result_.makespan_seconds = now_;
    return std::move(result_);
  }

private:
  // Dependents of task d: dependents_[dependents_begin_[d] .. dependents_begin_[d + 1]), in the
  // order the tasks naming d were added (one flat array instead of a vector per task).
  void index_dependents() {
    int max_owner = 0;
    for (std::size_t i = 0; i < n_; ++i) {
      max_owner = std::max(max_owner, e_.tasks_[i].owner);
      for (TaskId d : e_.deps_of(e_.tasks_[i])) {
        if (d < 0 || static_cast<std::size_t>(d) >= n_ || static_cast<std::size_t>(d) == i)
          throw std::logic_error("task '" + e_.name_of(static_cast<TaskId>(i)) + "' depends on an unknown task");
        ++unfinished_deps_[i];
        ++dependents_begin_[static_cast<std::size_t>(d) + 1];
      }
    }
    // An issue releases its tasks: one more dependency each, which the thread's walk counts off.
    for (TaskId r : e_.released_pool_) {
      if (r < 0 || static_cast<std::size_t>(r) >= n_) throw std::logic_error("an issue releases an unknown task");
      ++unfinished_deps_[static_cast<std::size_t>(r)];
    }
    for (std::size_t i = 0; i < n_; ++i) dependents_begin_[i + 1] += dependents_begin_[i];
    dependents_.resize(e_.dep_pool_.size());
    std::vector<std::uint32_t> fill(dependents_begin_.begin(), dependents_begin_.end() - 1);
    for (std::size_t i = 0; i < n_; ++i)
      for (TaskId d : e_.deps_of(e_.tasks_[i]))
        dependents_[fill[static_cast<std::size_t>(d)]++] = Dependent{static_cast<TaskId>(i), e_.tasks_[i].stream};
    const auto owners = static_cast<std::size_t>(max_owner + 1);
    owner_flows_.assign(owners, 0);
    owner_work_.resize(owners);
  }

  static void erase_one(std::vector<TaskId>& v, TaskId id) {
    auto it = std::find(v.begin(), v.end(), id);
    if (it != v.end()) {
      *it = v.back();
      v.pop_back();
    }
  }

  std::uint32_t next_seq() {
    if (seq_ > std::numeric_limits<std::uint32_t>::max())
      throw std::logic_error("simulation too long: over 2^32 engine events in one step");
    return static_cast<std::uint32_t>(seq_++);
  }

  void advance(TaskId id) {
    Running& r = st_[static_cast<std::size_t>(id)];
    r.remaining = std::max(0.0, r.remaining - r.rate * (now_ - r.updated_at));
    r.updated_at = now_;
  }

  void schedule(TaskId id) {
    Running& r = st_[static_cast<std::size_t>(id)];
    r.version = next_seq();
    if (r.rate <= 0) return;  // stalled: rescheduled when rates change
    heap_.push({now_ + r.remaining / r.rate, r.version, id});
  }

  void set_rate(TaskId id, double rate) {
    Running& r = st_[static_cast<std::size_t>(id)];
    if (r.rate == rate && r.version != 0) return;
    advance(id);
    r.rate = rate;
    schedule(id);
  }

  void activate_flow(TaskId id) {
    const auto task_links = e_.links_of(e_.tasks_[static_cast<std::size_t>(id)]);
    if (task_links.empty()) fresh_.push_back(id);  // only its cap limits it
    for (LinkId l : task_links) {
      flows_on_link_[static_cast<std::size_t>(l)].push_back(id);
      dirty_links_.push_back(l);
    }
  }

  void deactivate_flow(TaskId id) {
    for (LinkId l : e_.links_of(e_.tasks_[static_cast<std::size_t>(id)])) {
      erase_one(flows_on_link_[static_cast<std::size_t>(l)], id);
      dirty_links_.push_back(l);
    }
  }

  void start(TaskId id) {
    const StoredTask& t = e_.tasks_[static_cast<std::size_t>(id)];
    Running& r = st_[static_cast<std::size_t>(id)];
    result_.timings[static_cast<std::size_t>(id)].start_seconds = now_;
    for (const auto& ch : e_.changes_at_start(t)) result_.memory.push_back({now_, t.owner, ch.bytes, ch.tag});
    r.updated_at = now_;
    const auto owner = static_cast<std::size_t>(t.owner);
    if (t.kind == TaskKind::flow) {
      if (owner_flows_[owner]++ == 0) dirty_owners_.push_back(t.owner);
      if (t.latency_seconds > 0) {
        r.phase = Phase::latency;
        r.remaining = t.latency_seconds;
        fresh_.push_back(id);
      } else {
        r.phase = Phase::active;
        r.remaining = t.amount;
        activate_flow(id);
      }
    } else {
      r.phase = Phase::active;
      r.remaining = t.amount;
      owner_work_[owner].push_back(id);
      fresh_.push_back(id);
    }
  }

  // A stream's head starts once every dependency has finished; only streams whose head or whose
  // dependencies changed need a look.
  void try_start(StreamId s) {
    const auto su = static_cast<std::size_t>(s);
    if (stream_head_[su] >= e_.stream_tasks_[su].size()) return;
    const TaskId id = e_.stream_tasks_[su][stream_head_[su]];
    // The small dependency counts first: most looks find the head still waiting on one.
    if (unfinished_deps_[static_cast<std::size_t>(id)] > 0 || st_[static_cast<std::size_t>(id)].phase != Phase::waiting)
      return;
    start_when_issued(id);
  }

  // A task with nothing left to wait for but its issue's end: starts now, or sleeps until then.
  void start_when_issued(TaskId id) {
    const auto u = static_cast<std::size_t>(id);
    if (not_before_[u] <= now_) {
      start(id);
      return;
    }
    Running& r = st_[u];
    r.phase = Phase::sleeping;
    r.version = next_seq();
    heap_.push({not_before_[u], r.version, id});
  }

  // A floating task: a gate opens (and its thread walks on), anything else starts when issued.
  void start_floating(TaskId id) {
    const StoredTask& t = e_.tasks_[static_cast<std::size_t>(id)];
    if (t.kind != TaskKind::gate) {
      start_when_issued(id);
      return;
    }
    Running& r = st_[static_cast<std::size_t>(id)];
    r.phase = Phase::done;
    result_.timings[static_cast<std::size_t>(id)] = {now_, now_};
    ++finished_;
    const auto it = std::lower_bound(e_.gate_issue_.begin(), e_.gate_issue_.end(), id,
                                     [](const auto& g, TaskId v) { return g.first < v; });
    const std::uint32_t issue = it->second;
    const auto th = static_cast<std::size_t>(e_.issues_[issue].thread);
    if (thread_[th].cursor == issue) walk(th);  // the thread was waiting on it
  }

  // Thread th issues on from where it is, as far as its gates let it: each issue starts when the
  // one before it ended, or when its gate opened if that was later, and lasts its seconds.
  void walk(std::size_t th) {
    ThreadState& s = thread_[th];
    while (s.cursor != kNoIssue) {
      const Issue& issue = e_.issues_[s.cursor];
      if (issue.gate >= 0) {
        const auto g = static_cast<std::size_t>(issue.gate);
        if (st_[g].phase != Phase::done) return;  // its opening walks on
        s.clock = std::max(s.clock, result_.timings[g].end_seconds);
      }
      TaskTiming& timing = result_.issue_timings[s.cursor];
      timing.start_seconds = s.clock;
      s.clock += issue.seconds;
      timing.end_seconds = s.clock;
      for (std::uint32_t k = issue.released_begin, end = released_end(s.cursor); k < end; ++k) {
        const TaskId r = e_.released_pool_[k];
        const auto u = static_cast<std::size_t>(r);
        not_before_[u] = std::max(not_before_[u], s.clock);
        if (--unfinished_deps_[u] > 0) continue;
        const StreamId stream = e_.tasks_[u].stream;
        if (stream != kNoStream) try_start(stream);
        else start_floating(r);
      }
      s.cursor = issue.next;
    }
  }

  // Where issue i's released tasks end in the pool: where the next issue's begin.
  std::uint32_t released_end(std::uint32_t i) const {
    return i + 1 < e_.issues_.size() ? e_.issues_[i + 1].released_begin
                                     : static_cast<std::uint32_t>(e_.released_pool_.size());
  }

  // A task done: its end, its frees, and a look at the streams it and its dependents sit on.
  void finish(TaskId id) {
    Running& r = st_[static_cast<std::size_t>(id)];
    const StoredTask& t = e_.tasks_[static_cast<std::size_t>(id)];
    const bool was_moving = r.phase == Phase::active && t.kind == TaskKind::flow;
    r.phase = Phase::done;
    result_.timings[static_cast<std::size_t>(id)].end_seconds = now_;
    for (const auto& ch : e_.changes_at_end(t)) result_.memory.push_back({now_, t.owner, ch.bytes, ch.tag});
    const auto owner = static_cast<std::size_t>(t.owner);
    if (t.kind == TaskKind::flow) {
      if (was_moving) deactivate_flow(id);
      if (--owner_flows_[owner] == 0) dirty_owners_.push_back(t.owner);
    } else {
      erase_one(owner_work_[owner], id);
    }
    ++finished_;
    candidates_.clear();
    if (t.stream != kNoStream) {
      ++stream_head_[static_cast<std::size_t>(t.stream)];
      candidates_.push_back(t.stream);
    }
    const auto task_index = static_cast<std::size_t>(id);
    for (std::uint32_t k = dependents_begin_[task_index]; k < dependents_begin_[task_index + 1]; ++k) {
      const auto [d, stream] = dependents_[k];
      const auto du = static_cast<std::size_t>(d);
      // Only a dependent left waiting on nothing can start: its stream is worth a look only
      // then (a stream whose head still waits gains nothing from it).
      if (--unfinished_deps_[du] > 0) continue;
      if (stream != kNoStream) {
        candidates_.push_back(stream);
      } else {
        start_floating(d);  // a floating task (a collective's barrier, a gate) needs no stream slot
      }
    }
    if (candidates_.size() > 1) {  // mostly the task's own stream alone
      std::sort(candidates_.begin(), candidates_.end());
      candidates_.erase(std::unique(candidates_.begin(), candidates_.end()), candidates_.end());
    }
    for (StreamId s : candidates_) try_start(s);
  }

  // New rates for what the last event touched: flows in the link components it changed
  // (max-min), work tasks of owners whose communication started or stopped (interference),
  // and freshly started tasks. The working vectors live across events: no allocation per event.
  void update_rates() {
    if (!dirty_links_.empty()) share_dirty_components();
    for (int o : dirty_owners_) {
      const double rate = owner_flows_[static_cast<std::size_t>(o)] > 0 ? slowed_ : 1.0;
      for (TaskId w : owner_work_[static_cast<std::size_t>(o)]) set_rate(w, rate);
    }
    for (TaskId id : fresh_) {
      const StoredTask& t = e_.tasks_[static_cast<std::size_t>(id)];
      if (st_[static_cast<std::size_t>(id)].phase == Phase::latency) {
        set_rate(id, 1.0);
      } else if (t.kind == TaskKind::flow) {
        set_rate(id, t.max_rate_bytes_per_s);
      } else if (t.kind == TaskKind::work) {
        const double rate = owner_flows_[static_cast<std::size_t>(t.owner)] > 0 ? slowed_ : 1.0;
        set_rate(id, rate);
      }
    }
    dirty_links_.clear();
    dirty_owners_.clear();
    fresh_.clear();
  }

  // Every flow reachable from a dirty link through shared links, re-shared by max-min; `queue_`
  // ends up holding each link seen once, so it also says which marks to clear.
  void share_dirty_components() {
    // The common event: one flow started or ended on one link, which it leaves empty or holds
    // alone (MaxMinShare's one-flow case).
    if (dirty_links_.size() == 1) {
      const auto& on_link = flows_on_link_[static_cast<std::size_t>(dirty_links_.front())];
      if (on_link.empty()) return;
      if (on_link.size() == 1) {
        const StoredTask& t = e_.tasks_[static_cast<std::size_t>(on_link.front())];
        const auto task_links = e_.links_of(t);
        if (task_links.size() == 1) {
          set_rate(on_link.front(),
                   lone_flow_rate(&e_.links_[static_cast<std::size_t>(task_links.front())], t.max_rate_bytes_per_s));
          return;
        }
      }
    }
    component_.clear();
    queue_.assign(dirty_links_.begin(), dirty_links_.end());
    for (LinkId l : queue_) link_seen_[static_cast<std::size_t>(l)] = 1;
    for (std::size_t qi = 0; qi < queue_.size(); ++qi) {
      for (TaskId f : flows_on_link_[static_cast<std::size_t>(queue_[qi])]) {
        if (collected_[static_cast<std::size_t>(f)]) continue;
        collected_[static_cast<std::size_t>(f)] = 1;
        component_.push_back(f);
        for (LinkId l2 : e_.links_of(e_.tasks_[static_cast<std::size_t>(f)])) {
          if (link_seen_[static_cast<std::size_t>(l2)]) continue;
          link_seen_[static_cast<std::size_t>(l2)] = 1;
          queue_.push_back(l2);
        }
      }
    }
    for (LinkId l : queue_) link_seen_[static_cast<std::size_t>(l)] = 0;
    std::sort(component_.begin(), component_.end());  // deterministic order
    for (TaskId f : component_) {
      collected_[static_cast<std::size_t>(f)] = 0;
      const StoredTask& t = e_.tasks_[static_cast<std::size_t>(f)];
      solver_.add_flow(e_.links_of(t), t.max_rate_bytes_per_s);
    }
    solver_.solve(e_.links_, shares_);
    for (std::size_t k = 0; k < component_.size(); ++k) set_rate(component_[k], shares_[k]);
  }

  [[noreturn]] void throw_deadlock() const {
    for (std::size_t s = 0; s < e_.stream_tasks_.size(); ++s) {
      if (stream_head_[s] < e_.stream_tasks_[s].size()) {
        throw std::logic_error("simulation deadlock: stream '" + e_.stream_names_[s] + "' waits on task '" +
                               e_.name_of(e_.stream_tasks_[s][stream_head_[s]]) + "' whose dependencies never finish");
      }
    }
    throw std::logic_error("simulation deadlock");
  }

  const Engine& e_;
  const std::size_t n_;
  RunResult result_;
  std::vector<Running> st_;
  std::vector<int> unfinished_deps_;
  std::vector<std::uint32_t> dependents_begin_;
  // A dependent with its stream beside it: finishing a task touches only this array, not the
  // dependents' task records (a cache miss each on a step of 10^5 tasks).
  struct Dependent {
    TaskId task;
    StreamId stream;
  };
  std::vector<Dependent> dependents_;
  std::vector<std::size_t> stream_head_;
  std::vector<std::vector<TaskId>> flows_on_link_;  // flows moving bytes
  std::vector<int> owner_flows_;                    // flows (any phase) per owner
  std::vector<std::vector<TaskId>> owner_work_;     // running work tasks per owner
  std::priority_queue<Event, std::vector<Event>, std::greater<>> heap_;
  std::uint64_t seq_ = 1;  // 0 is no event
  double now_ = 0;
  std::size_t finished_ = 0;
  std::vector<LinkId> dirty_links_;
  std::vector<int> dirty_owners_;
  std::vector<TaskId> fresh_;  // started or phase-changed: need a first rate
  std::vector<StreamId> candidates_;
  MaxMinShare solver_;
  std::vector<double> shares_;
  std::vector<TaskId> component_;
  std::vector<char> link_seen_;
  std::vector<char> collected_;
  std::vector<double> not_before_;  // when the issues releasing a task are past
  struct ThreadState {
    std::uint32_t cursor = kNoIssue;  // the next issue
    double clock = 0;                 // when the issue before it ended
  };
  std::vector<ThreadState> thread_;
  std::vector<LinkId> queue_;
  const double slowed_;
};

RunResult Engine::run() { return Run(*this).run(); }

}  // namespace meshplan::sim

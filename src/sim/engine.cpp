#include "sim/engine.hpp"

#include <algorithm>
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

void Engine::reserve_tasks(std::size_t n, std::size_t items_per_task) {
  tasks_.reserve(n);
  dep_pool_.reserve(n * items_per_task);
  link_pool_.reserve(n);
  memory_pool_.reserve(n);
}

TaskId Engine::add_task(const Task& task) {
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
    return Range{begin, static_cast<std::uint32_t>(pool.size())};
  };
  StoredTask& t = tasks_.emplace_back();
  t.stream = task.stream;
  t.kind = task.kind;
  t.owner = task.owner;
  t.work_seconds = task.work_seconds;
  t.bytes = task.bytes;
  t.latency_seconds = task.latency_seconds;
  t.max_rate_bytes_per_s = task.max_rate_bytes_per_s;
  t.links = append(link_pool_, task.links);
  t.deps = append(dep_pool_, task.deps);
  t.at_start = append(memory_pool_, task.at_start);
  t.at_end = append(memory_pool_, task.at_end);
  if (!task.name.empty()) names_.emplace_back(id, task.name);
  return id;
}

std::string Engine::name_of(TaskId id) const {
  auto it = std::lower_bound(names_.begin(), names_.end(), id, [](const auto& n, TaskId i) { return n.first < i; });
  return it != names_.end() && it->first == id ? it->second : std::string();
}

namespace {

enum class Phase { waiting, latency, active, done };

struct Running {
  Phase phase = Phase::waiting;
  double remaining = 0;    // seconds of work, seconds of latency, or bytes
  double rate = 0;         // per second
  double updated_at = 0;
  std::uint32_t version = 0;
};

struct Event {
  double time;
  std::uint64_t seq;  // issue order breaks ties deterministically
  TaskId task;
  std::uint32_t version;
  bool operator>(const Event& o) const { return time != o.time ? time > o.time : seq > o.seq; }
};

}  // namespace

RunResult Engine::run() {
  const std::size_t n = tasks_.size();
  RunResult result;
  result.timings.assign(n, {});
  result.memory.reserve(memory_pool_.size());
  std::vector<Running> st(n);
  std::vector<int> unfinished_deps(n, 0);
  // Dependents of task d: dependents[dependents_begin[d] .. dependents_begin[d + 1]), in the
  // order the tasks naming d were added (one flat array instead of a vector per task).
  std::vector<std::uint32_t> dependents_begin(n + 1, 0);
  int max_owner = 0;
  for (std::size_t i = 0; i < n; ++i) {
    max_owner = std::max(max_owner, tasks_[i].owner);
    for (TaskId d : deps_of(tasks_[i])) {
      if (d < 0 || static_cast<std::size_t>(d) >= n || static_cast<std::size_t>(d) == i)
        throw std::logic_error("task '" + name_of(static_cast<TaskId>(i)) + "' depends on an unknown task");
      ++unfinished_deps[i];
      ++dependents_begin[static_cast<std::size_t>(d) + 1];
    }
  }
  for (std::size_t i = 0; i < n; ++i) dependents_begin[i + 1] += dependents_begin[i];
  std::vector<TaskId> dependents(dep_pool_.size());
  {
    std::vector<std::uint32_t> fill(dependents_begin.begin(), dependents_begin.end() - 1);
    for (std::size_t i = 0; i < n; ++i)
      for (TaskId d : deps_of(tasks_[i])) dependents[fill[static_cast<std::size_t>(d)]++] = static_cast<TaskId>(i);
  }
  const auto owners = static_cast<std::size_t>(max_owner + 1);
  std::vector<std::size_t> stream_head(stream_tasks_.size(), 0);
  // Incremental state: only what an event touches is recomputed (SimGrid's lazy updates).
  std::vector<std::vector<TaskId>> flows_on_link(links_.size());  // flows moving bytes
  std::vector<int> owner_flows(owners, 0);                         // flows (any phase) per owner
  std::vector<std::vector<TaskId>> owner_work(owners);             // running work tasks per owner
  std::priority_queue<Event, std::vector<Event>, std::greater<>> heap;
  std::uint64_t seq = 0;
  double now = 0;
  std::size_t finished = 0;
  std::vector<LinkId> dirty_links;
  std::vector<int> dirty_owners;
  std::vector<TaskId> fresh;  // started or phase-changed: need a first rate

  auto erase_one = [](std::vector<TaskId>& v, TaskId id) {
    auto it = std::find(v.begin(), v.end(), id);
    if (it != v.end()) {
      *it = v.back();
      v.pop_back();
    }
  };
  auto advance = [&](TaskId id) {
    Running& r = st[static_cast<std::size_t>(id)];
    r.remaining = std::max(0.0, r.remaining - r.rate * (now - r.updated_at));
    r.updated_at = now;
  };
  auto schedule = [&](TaskId id) {
    Running& r = st[static_cast<std::size_t>(id)];
    ++r.version;
    if (r.rate <= 0) return;  // stalled: rescheduled when rates change
    heap.push({now + r.remaining / r.rate, seq++, id, r.version});
  };
  auto set_rate = [&](TaskId id, double rate) {
    Running& r = st[static_cast<std::size_t>(id)];
    if (r.rate == rate && r.version != 0) return;
    advance(id);
    r.rate = rate;
    schedule(id);
  };
  auto activate_flow = [&](TaskId id) {
    const auto task_links = links_of(tasks_[static_cast<std::size_t>(id)]);
    if (task_links.empty()) fresh.push_back(id);  // only its cap limits it
    for (LinkId l : task_links) {
      flows_on_link[static_cast<std::size_t>(l)].push_back(id);
      dirty_links.push_back(l);
    }
  };
  auto deactivate_flow = [&](TaskId id) {
    for (LinkId l : links_of(tasks_[static_cast<std::size_t>(id)])) {
      erase_one(flows_on_link[static_cast<std::size_t>(l)], id);
      dirty_links.push_back(l);
    }
  };

  auto start = [&](TaskId id) {
    const StoredTask& t = tasks_[static_cast<std::size_t>(id)];
    Running& r = st[static_cast<std::size_t>(id)];
    result.timings[static_cast<std::size_t>(id)].start_seconds = now;
    for (const auto& ch : changes(t.at_start)) result.memory.push_back({now, t.owner, ch.bytes, ch.tag});
    r.updated_at = now;
    const auto owner = static_cast<std::size_t>(t.owner);
    if (t.kind == TaskKind::flow) {
      if (owner_flows[owner]++ == 0) dirty_owners.push_back(t.owner);
      if (t.latency_seconds > 0) {
        r.phase = Phase::latency;
        r.remaining = t.latency_seconds;
        fresh.push_back(id);
      } else {
        r.phase = Phase::active;
        r.remaining = t.bytes;
        activate_flow(id);
      }
    } else {
      r.phase = Phase::active;
      r.remaining = t.work_seconds;
      owner_work[owner].push_back(id);
      fresh.push_back(id);
    }
  };

  // A stream's head starts once every dependency has finished; only streams whose head or whose
  // dependencies changed need a look.
  auto try_start = [&](StreamId s) {
    const auto su = static_cast<std::size_t>(s);
    if (stream_head[su] >= stream_tasks_[su].size()) return;
    const TaskId id = stream_tasks_[su][stream_head[su]];
    // The small dependency counts first: most looks find the head still waiting on one.
    if (unfinished_deps[static_cast<std::size_t>(id)] > 0 || st[static_cast<std::size_t>(id)].phase != Phase::waiting)
      return;
    start(id);
  };

  // New rates for what the last event touched: flows in the link components it changed
  // (max-min), work tasks of owners whose communication started or stopped (interference),
  // and freshly started tasks. The working vectors live across events: no allocation per event.
  MaxMinShare solver;
  std::vector<double> shares;
  std::vector<TaskId> component;
  std::vector<char> link_seen(links_.size(), 0);
  std::vector<char> collected(n, 0);
  std::vector<LinkId> queue;
  const double slowed = 1.0 / (1.0 + options_.interference_factor);
  auto update_rates = [&]() {
    if (!dirty_links.empty()) {
      component.clear();
      // Every flow reachable from a dirty link through shared links; `queue` ends up holding
      // each link seen once, so it also says which marks to clear.
      queue.assign(dirty_links.begin(), dirty_links.end());
      for (LinkId l : queue) link_seen[static_cast<std::size_t>(l)] = 1;
      for (std::size_t qi = 0; qi < queue.size(); ++qi) {
        for (TaskId f : flows_on_link[static_cast<std::size_t>(queue[qi])]) {
          if (collected[static_cast<std::size_t>(f)]) continue;
          collected[static_cast<std::size_t>(f)] = 1;
          component.push_back(f);
          for (LinkId l2 : links_of(tasks_[static_cast<std::size_t>(f)])) {
            if (link_seen[static_cast<std::size_t>(l2)]) continue;
            link_seen[static_cast<std::size_t>(l2)] = 1;
            queue.push_back(l2);
          }
        }
      }
      for (LinkId l : queue) link_seen[static_cast<std::size_t>(l)] = 0;
      std::sort(component.begin(), component.end());  // deterministic order
      for (TaskId f : component) {
        collected[static_cast<std::size_t>(f)] = 0;
        const StoredTask& t = tasks_[static_cast<std::size_t>(f)];
        solver.add_flow(links_of(t), t.max_rate_bytes_per_s);
      }
      solver.solve(links_, shares);
      for (std::size_t k = 0; k < component.size(); ++k) set_rate(component[k], shares[k]);
    }
    for (int o : dirty_owners) {
      const double rate = owner_flows[static_cast<std::size_t>(o)] > 0 ? slowed : 1.0;
      for (TaskId w : owner_work[static_cast<std::size_t>(o)]) set_rate(w, rate);
    }
    for (TaskId id : fresh) {
      const StoredTask& t = tasks_[static_cast<std::size_t>(id)];
      if (st[static_cast<std::size_t>(id)].phase == Phase::latency) {
        set_rate(id, 1.0);
      } else if (t.kind == TaskKind::flow) {
        set_rate(id, t.max_rate_bytes_per_s);
      } else if (t.kind == TaskKind::work) {
        const double rate = owner_flows[static_cast<std::size_t>(t.owner)] > 0 ? slowed : 1.0;
        set_rate(id, rate);
      }
    }
    dirty_links.clear();
    dirty_owners.clear();
    fresh.clear();
  };

  for (std::size_t s = 0; s < stream_tasks_.size(); ++s) try_start(static_cast<StreamId>(s));
  for (TaskId id : floating_)
    if (unfinished_deps[static_cast<std::size_t>(id)] == 0) start(id);
  update_rates();
  std::vector<StreamId> candidates;
  while (!heap.empty()) {
    const Event ev = heap.top();
    heap.pop();
    Running& r = st[static_cast<std::size_t>(ev.task)];
    if (ev.version != r.version || (r.phase != Phase::latency && r.phase != Phase::active)) continue;
    ++result.events_processed;
    now = ev.time;
    const StoredTask& t = tasks_[static_cast<std::size_t>(ev.task)];
    r.remaining = 0;
    r.updated_at = now;
    if (r.phase == Phase::latency && t.bytes > 0) {
      r.phase = Phase::active;  // latency paid; now the bytes move
      r.remaining = t.bytes;
      r.rate = 0;
      ++r.version;
      activate_flow(ev.task);
    } else {
      const bool was_moving = r.phase == Phase::active && t.kind == TaskKind::flow;
      r.phase = Phase::done;
      result.timings[static_cast<std::size_t>(ev.task)].end_seconds = now;
      for (const auto& ch : changes(t.at_end)) result.memory.push_back({now, t.owner, ch.bytes, ch.tag});
      const auto owner = static_cast<std::size_t>(t.owner);
      if (t.kind == TaskKind::flow) {
        if (was_moving) deactivate_flow(ev.task);
        if (--owner_flows[owner] == 0) dirty_owners.push_back(t.owner);
      } else {
        erase_one(owner_work[owner], ev.task);
      }
      ++finished;
      candidates.clear();
      if (t.stream != kNoStream) {
        ++stream_head[static_cast<std::size_t>(t.stream)];
        candidates.push_back(t.stream);
      }
      const auto task_index = static_cast<std::size_t>(ev.task);
      for (std::uint32_t k = dependents_begin[task_index]; k < dependents_begin[task_index + 1]; ++k) {
        const TaskId d = dependents[k];
        const auto du = static_cast<std::size_t>(d);
        --unfinished_deps[du];
        if (tasks_[du].stream != kNoStream) {
          candidates.push_back(tasks_[du].stream);
        } else if (unfinished_deps[du] == 0) {
          start(d);  // a floating task (e.g. a collective's barrier) needs no stream slot
        }
      }
      std::sort(candidates.begin(), candidates.end());
      candidates.erase(std::unique(candidates.begin(), candidates.end()), candidates.end());
      for (StreamId s : candidates) try_start(s);
    }
    update_rates();
  }
  if (finished != n) {
    for (std::size_t s = 0; s < stream_tasks_.size(); ++s) {
      if (stream_head[s] < stream_tasks_[s].size()) {
        throw std::logic_error("simulation deadlock: stream '" + stream_names_[s] + "' waits on task '" +
                               name_of(stream_tasks_[s][stream_head[s]]) + "' whose dependencies never finish");
      }
    }
    throw std::logic_error("simulation deadlock");
  }
  result.makespan_seconds = now;
  return result;
}

}  // namespace meshplan::sim

#include "sim/engine.hpp"

#include <algorithm>
#include <queue>
#include <stdexcept>
#include <utility>

#include "sim/max_min_share.hpp"

namespace meshplan::sim {

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

TaskId Engine::add_task(Task task) {
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
  tasks_.push_back(std::move(task));
  return id;
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
  std::vector<Running> st(n);
  std::vector<int> unfinished_deps(n, 0);
  std::vector<std::vector<TaskId>> dependents(n);
  int max_owner = 0;
  for (std::size_t i = 0; i < n; ++i) {
    max_owner = std::max(max_owner, tasks_[i].owner);
    for (TaskId d : tasks_[i].deps) {
      if (d < 0 || static_cast<std::size_t>(d) >= n || static_cast<std::size_t>(d) == i)
        throw std::logic_error("task '" + tasks_[i].name + "' depends on an unknown task");
      ++unfinished_deps[i];
      dependents[static_cast<std::size_t>(d)].push_back(static_cast<TaskId>(i));
    }
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
    if (tasks_[static_cast<std::size_t>(id)].links.empty()) fresh.push_back(id);  // only its cap limits it
    for (LinkId l : tasks_[static_cast<std::size_t>(id)].links) {
      flows_on_link[static_cast<std::size_t>(l)].push_back(id);
      dirty_links.push_back(l);
    }
  };
  auto deactivate_flow = [&](TaskId id) {
    for (LinkId l : tasks_[static_cast<std::size_t>(id)].links) {
      erase_one(flows_on_link[static_cast<std::size_t>(l)], id);
      dirty_links.push_back(l);
    }
  };

  auto start = [&](TaskId id) {
    const Task& t = tasks_[static_cast<std::size_t>(id)];
    Running& r = st[static_cast<std::size_t>(id)];
    result.timings[static_cast<std::size_t>(id)].start_seconds = now;
    for (const auto& ch : t.at_start) result.memory.push_back({now, t.owner, ch.bytes, ch.tag});
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
    if (st[static_cast<std::size_t>(id)].phase != Phase::waiting || unfinished_deps[static_cast<std::size_t>(id)] > 0)
      return;
    start(id);
  };

  // New rates for what the last event touched: flows in the link components it changed
  // (max-min), work tasks of owners whose communication started or stopped (interference),
  // and freshly started tasks.
  std::vector<FlowDemand> demands;
  std::vector<double> shares;
  std::vector<TaskId> component;
  std::vector<char> link_seen(links_.size(), 0);
  std::vector<char> collected(n, 0);
  std::vector<LinkId> seen_links;
  auto update_rates = [&]() {
    component.clear();
    seen_links.clear();
    // Every flow reachable from a dirty link through shared links.
    std::vector<LinkId> queue = dirty_links;
    for (LinkId l : queue) link_seen[static_cast<std::size_t>(l)] = 1;
    seen_links = queue;
    for (std::size_t qi = 0; qi < queue.size(); ++qi) {
      for (TaskId f : flows_on_link[static_cast<std::size_t>(queue[qi])]) {
        if (collected[static_cast<std::size_t>(f)]) continue;
        collected[static_cast<std::size_t>(f)] = 1;
        component.push_back(f);
        for (LinkId l2 : tasks_[static_cast<std::size_t>(f)].links) {
          if (link_seen[static_cast<std::size_t>(l2)]) continue;
          link_seen[static_cast<std::size_t>(l2)] = 1;
          seen_links.push_back(l2);
          queue.push_back(l2);
        }
      }
    }
    for (LinkId l : seen_links) link_seen[static_cast<std::size_t>(l)] = 0;
    std::sort(component.begin(), component.end());  // deterministic order
    demands.clear();
    for (TaskId f : component) {
      collected[static_cast<std::size_t>(f)] = 0;
      const Task& t = tasks_[static_cast<std::size_t>(f)];
      demands.push_back({&t.links, t.max_rate_bytes_per_s});
    }
    max_min_share(links_, demands, shares);
    for (std::size_t k = 0; k < component.size(); ++k) set_rate(component[k], shares[k]);
    for (int o : dirty_owners) {
      const double rate = owner_flows[static_cast<std::size_t>(o)] > 0 ? 1.0 / (1.0 + options_.interference_factor) : 1.0;
      for (TaskId w : owner_work[static_cast<std::size_t>(o)]) set_rate(w, rate);
    }
    for (TaskId id : fresh) {
      const Task& t = tasks_[static_cast<std::size_t>(id)];
      if (st[static_cast<std::size_t>(id)].phase == Phase::latency) {
        set_rate(id, 1.0);
      } else if (t.kind == TaskKind::flow) {
        set_rate(id, t.max_rate_bytes_per_s);
      } else if (t.kind == TaskKind::work) {
        const double rate = owner_flows[static_cast<std::size_t>(t.owner)] > 0 ? 1.0 / (1.0 + options_.interference_factor) : 1.0;
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
    const Task& t = tasks_[static_cast<std::size_t>(ev.task)];
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
      for (const auto& ch : t.at_end) result.memory.push_back({now, t.owner, ch.bytes, ch.tag});
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
      for (TaskId d : dependents[static_cast<std::size_t>(ev.task)]) {
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
        const Task& t = tasks_[static_cast<std::size_t>(stream_tasks_[s][stream_head[s]])];
        throw std::logic_error("simulation deadlock: stream '" + stream_names_[s] + "' waits on task '" +
                               t.name + "' whose dependencies never finish");
      }
    }
    throw std::logic_error("simulation deadlock");
  }
  result.makespan_seconds = now;
  return result;
}

}  // namespace meshplan::sim

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
  if (task.stream < 0 || task.stream >= static_cast<StreamId>(stream_tasks_.size()))
    throw std::logic_error("task '" + task.name + "' names an unknown stream");
  const auto id = static_cast<TaskId>(tasks_.size());
  for (LinkId l : task.links)
    if (l < 0 || l >= static_cast<LinkId>(links_.size()))
      throw std::logic_error("task '" + task.name + "' crosses an unknown link");
  stream_tasks_[static_cast<std::size_t>(task.stream)].push_back(id);
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
  for (std::size_t i = 0; i < n; ++i) {
    for (TaskId d : tasks_[i].deps) {
      if (d < 0 || static_cast<std::size_t>(d) >= n || static_cast<std::size_t>(d) == i)
        throw std::logic_error("task '" + tasks_[i].name + "' depends on an unknown task");
      ++unfinished_deps[i];
      dependents[static_cast<std::size_t>(d)].push_back(static_cast<TaskId>(i));
    }
  }
  std::vector<std::size_t> stream_head(stream_tasks_.size(), 0);
  std::vector<TaskId> running;  // tasks in latency or active phase
  std::priority_queue<Event, std::vector<Event>, std::greater<>> heap;
  std::uint64_t seq = 0;
  double now = 0;
  std::size_t finished = 0;

  auto schedule = [&](TaskId id) {
    Running& r = st[static_cast<std::size_t>(id)];
    ++r.version;
    if (r.rate <= 0) return;  // stalled: rescheduled when rates change
    heap.push({now + r.remaining / r.rate, seq++, id, r.version});
  };

  auto start = [&](TaskId id) {
    const Task& t = tasks_[static_cast<std::size_t>(id)];
    Running& r = st[static_cast<std::size_t>(id)];
    result.timings[static_cast<std::size_t>(id)].start_seconds = now;
    for (const auto& ch : t.at_start) result.memory.push_back({now, t.owner, ch.bytes, ch.tag});
    r.updated_at = now;
    if (t.kind == TaskKind::flow && t.latency_seconds > 0) {
      r.phase = Phase::latency;
      r.remaining = t.latency_seconds;
    } else {
      r.phase = Phase::active;
      r.remaining = t.kind == TaskKind::flow ? t.bytes : t.work_seconds;
    }
    running.push_back(id);
  };

  // A stream's head starts once every dependency has finished.
  auto try_start_streams = [&]() {
    bool started = true;
    while (started) {
      started = false;
      for (std::size_t s = 0; s < stream_tasks_.size(); ++s) {
        if (stream_head[s] >= stream_tasks_[s].size()) continue;
        const TaskId id = stream_tasks_[s][stream_head[s]];
        Running& r = st[static_cast<std::size_t>(id)];
        if (r.phase != Phase::waiting || unfinished_deps[static_cast<std::size_t>(id)] > 0) continue;
        start(id);
        started = true;
      }
    }
  };

  // Rates of every running task: latency and work at unit speed (work slowed by interference
  // while its owner communicates), flows by max-min fair share of their links.
  std::vector<FlowDemand> demands;
  std::vector<double> shares;
  auto recompute_rates = [&]() {
    std::vector<int> owners_communicating;
    demands.clear();
    std::vector<TaskId> flow_ids;
    for (TaskId id : running) {
      const Task& t = tasks_[static_cast<std::size_t>(id)];
      if (t.kind != TaskKind::flow) continue;
      owners_communicating.push_back(t.owner);
      if (st[static_cast<std::size_t>(id)].phase == Phase::active) {
        demands.push_back({&t.links, t.max_rate_bytes_per_s});
        flow_ids.push_back(id);
      }
    }
    std::sort(owners_communicating.begin(), owners_communicating.end());
    max_min_share(links_, demands, shares);
    for (std::size_t k = 0; k < flow_ids.size(); ++k) {
      Running& r = st[static_cast<std::size_t>(flow_ids[k])];
      if (r.rate != shares[k]) {
        r.rate = shares[k];
        schedule(flow_ids[k]);
      }
    }
    for (TaskId id : running) {
      const Task& t = tasks_[static_cast<std::size_t>(id)];
      Running& r = st[static_cast<std::size_t>(id)];
      double rate = 0;
      if (r.phase == Phase::latency) {
        rate = 1.0;
      } else if (t.kind == TaskKind::work) {
        const bool contended =
            std::binary_search(owners_communicating.begin(), owners_communicating.end(), t.owner);
        rate = contended ? 1.0 / (1.0 + options_.interference_factor) : 1.0;
      } else {
        continue;  // flows handled above
      }
      if (r.rate != rate || r.version == 0) {
        r.rate = rate;
        schedule(id);
      }
    }
  };

  auto advance_to = [&](double t) {
    for (TaskId id : running) {
      Running& r = st[static_cast<std::size_t>(id)];
      r.remaining = std::max(0.0, r.remaining - r.rate * (t - r.updated_at));
      r.updated_at = t;
    }
    now = t;
  };

  try_start_streams();
  recompute_rates();
  while (!heap.empty()) {
    const Event ev = heap.top();
    heap.pop();
    Running& r = st[static_cast<std::size_t>(ev.task)];
    if (ev.version != r.version || (r.phase != Phase::latency && r.phase != Phase::active)) continue;
    ++result.events_processed;
    advance_to(ev.time);
    const Task& t = tasks_[static_cast<std::size_t>(ev.task)];
    if (r.phase == Phase::latency && t.bytes > 0) {
      r.phase = Phase::active;  // latency paid; now the bytes move
      r.remaining = t.bytes;
      r.rate = 0;
      ++r.version;
    } else {
      r.phase = Phase::done;
      r.remaining = 0;
      result.timings[static_cast<std::size_t>(ev.task)].end_seconds = now;
      for (const auto& ch : t.at_end) result.memory.push_back({now, t.owner, ch.bytes, ch.tag});
      running.erase(std::find(running.begin(), running.end(), ev.task));
      ++finished;
      ++stream_head[static_cast<std::size_t>(t.stream)];
      for (TaskId d : dependents[static_cast<std::size_t>(ev.task)]) --unfinished_deps[static_cast<std::size_t>(d)];
      try_start_streams();
    }
    recompute_rates();
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

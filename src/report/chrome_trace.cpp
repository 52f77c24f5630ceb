#include "report/chrome_trace.hpp"

#include <fmt/format.h>

#include <set>
#include <utility>

namespace meshplan {

namespace {

// Every event of the trace, in file order, handed to `emit` one at a time: the whole trace is never
// a JSON tree in memory (a 3,072-GPU row's trace is ~2 million events, 222 MB of text, and its
// tree took 4 GB).
template <typename Emit>
void for_each_event(const StepProgram& program, const std::vector<sim::TaskTiming>& timings,
                    const std::vector<sim::TaskTiming>& host_timings, Emit&& emit) {
  std::set<std::pair<int, int>> tracks;
  const int host_tid = kStreamKinds;  // after every GPU stream
  for (std::size_t i = 0; i < program.ops.size(); ++i) {
    const StepOp& op = program.ops[i];
    const auto& t = timings.at(i);
    const int tid = static_cast<int>(op.stream);
    tracks.insert({op.stage, tid});
    // Microseconds, as the format expects; zero-length ops (joins) are kept for completeness.
    emit(nlohmann::json{{"name", program.name(i)},
                        {"cat", std::string(to_string(op.category))},
                        {"ph", "X"},
                        {"pid", op.stage},
                        {"tid", tid},
                        {"ts", t.start_seconds * 1e6},
                        {"dur", (t.end_seconds - t.start_seconds) * 1e6}});
    if (i < host_timings.size() && host_timings[i].end_seconds > host_timings[i].start_seconds) {
      const auto& h = host_timings[i];
      tracks.insert({op.stage, host_tid});
      emit(nlohmann::json{{"name", program.name(i)},
                          {"cat", "host"},
                          {"ph", "X"},
                          {"pid", op.stage},
                          {"tid", host_tid},
                          {"ts", h.start_seconds * 1e6},
                          {"dur", (h.end_seconds - h.start_seconds) * 1e6}});
    }
  }
  for (const auto& [pid, tid] : tracks) {
    emit(nlohmann::json{{"name", "process_name"}, {"ph", "M"}, {"pid", pid}, {"tid", tid},
                        {"args", {{"name", fmt::format("stage {}", pid)}}}});
    emit(nlohmann::json{{"name", "thread_name"}, {"ph", "M"}, {"pid", pid}, {"tid", tid},
                        {"args", {{"name", tid == host_tid ? std::string("host")
                                                           : std::string(to_string(static_cast<StreamKind>(tid)))}}}});
  }
}

}  // namespace

nlohmann::json chrome_trace(const StepProgram& program, const std::vector<sim::TaskTiming>& timings,
                            const std::vector<sim::TaskTiming>& host_timings) {
  nlohmann::json events = nlohmann::json::array();
  for_each_event(program, timings, host_timings, [&](nlohmann::json e) { events.push_back(std::move(e)); });
  return {{"traceEvents", events}, {"displayTimeUnit", "ms"}};
}

std::string chrome_trace_text(const StepProgram& program, const std::vector<sim::TaskTiming>& timings,
                              const std::vector<sim::TaskTiming>& host_timings) {
  // chrome_trace(...).dump() + "\n" written event by event: a compact dump joins an array's
  // elements with commas and an object's keys in sorted order (displayTimeUnit, traceEvents).
  std::string out = R"({"displayTimeUnit":"ms","traceEvents":[)";
  out.reserve(out.size() + 110 * (program.ops.size() + host_timings.size()));
  bool first = true;
  for_each_event(program, timings, host_timings, [&](const nlohmann::json& e) {
    if (!first) out += ',';
    first = false;
    out += e.dump();
  });
  out += "]}\n";
  return out;
}

}  // namespace meshplan

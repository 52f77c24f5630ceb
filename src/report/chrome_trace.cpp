#include "report/chrome_trace.hpp"

#include <fmt/format.h>

#include <set>
#include <utility>

namespace meshplan {

nlohmann::json chrome_trace(const StepProgram& program, const std::vector<sim::TaskTiming>& timings,
                            const std::vector<sim::TaskTiming>& host_timings) {
  nlohmann::json events = nlohmann::json::array();
  std::set<std::pair<int, int>> tracks;
  const int host_tid = kStreamKinds;  // after every GPU stream
  for (std::size_t i = 0; i < program.ops.size(); ++i) {
    const Op& op = program.ops[i];
    const auto& t = timings.at(i);
    const int tid = static_cast<int>(op.stream);
    tracks.insert({op.stage, tid});
    // Microseconds, as the format expects; zero-length ops (joins) are kept for completeness.
    events.push_back({{"name", op.name},
                      {"cat", std::string(to_string(op.category))},
                      {"ph", "X"},
                      {"pid", op.stage},
                      {"tid", tid},
                      {"ts", t.start_seconds * 1e6},
                      {"dur", (t.end_seconds - t.start_seconds) * 1e6}});
    if (i < host_timings.size() && host_timings[i].end_seconds > host_timings[i].start_seconds) {
      const auto& h = host_timings[i];
      tracks.insert({op.stage, host_tid});
      events.push_back({{"name", op.name},
                        {"cat", "host"},
                        {"ph", "X"},
                        {"pid", op.stage},
                        {"tid", host_tid},
                        {"ts", h.start_seconds * 1e6},
                        {"dur", (h.end_seconds - h.start_seconds) * 1e6}});
    }
  }
  for (const auto& [pid, tid] : tracks) {
    events.push_back({{"name", "process_name"}, {"ph", "M"}, {"pid", pid}, {"tid", tid},
                      {"args", {{"name", fmt::format("stage {}", pid)}}}});
    events.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", pid}, {"tid", tid},
                      {"args", {{"name", tid == host_tid ? std::string("host")
                                                         : std::string(to_string(static_cast<StreamKind>(tid)))}}}});
  }
  return {{"traceEvents", events}, {"displayTimeUnit", "ms"}};
}

}  // namespace meshplan

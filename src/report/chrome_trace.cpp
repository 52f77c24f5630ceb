#include "report/chrome_trace.hpp"

#include <fmt/format.h>

#include <set>
#include <utility>

namespace meshplan {

nlohmann::json chrome_trace(const StepProgram& program, const std::vector<sim::TaskTiming>& timings) {
  nlohmann::json events = nlohmann::json::array();
  std::set<std::pair<int, int>> tracks;
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
  }
  for (const auto& [pid, tid] : tracks) {
    events.push_back({{"name", "process_name"}, {"ph", "M"}, {"pid", pid}, {"tid", tid},
                      {"args", {{"name", fmt::format("stage {}", pid)}}}});
    events.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", pid}, {"tid", tid},
                      {"args", {{"name", std::string(to_string(static_cast<StreamKind>(tid)))}}}});
  }
  return {{"traceEvents", events}, {"displayTimeUnit", "ms"}};
}

}  // namespace meshplan

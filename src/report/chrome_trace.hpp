#pragma once
// Chrome trace-event JSON of a simulated step (opens in Perfetto / chrome://tracing):
// one process per pipeline stage, one thread per stream, one complete ("X") event per op, and a
// "host" thread with the CPU's issue of every op when host timings are given.
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "sim/engine.hpp"
#include "workload/step_program.hpp"

namespace meshplan {

nlohmann::json chrome_trace(const StepProgram& program, const std::vector<sim::TaskTiming>& timings,
                            const std::vector<sim::TaskTiming>& host_timings = {});

// The same trace as text, chrome_trace(...).dump() + "\n" byte for byte, built one event at a
// time (what --trace writes: no JSON tree of the whole trace in memory).
std::string chrome_trace_text(const StepProgram& program, const std::vector<sim::TaskTiming>& timings,
                              const std::vector<sim::TaskTiming>& host_timings = {});

}  // namespace meshplan

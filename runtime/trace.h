#pragma once
// Chrome trace (chrome://tracing, Perfetto) of a real run: one process row
// per rank ("rank 2 - stage 1"), one slice per action, all ranks on one
// clock (each rank's zero is taken right after a common barrier).
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "planner/plan.h"
#include "runtime/executor.h"
#include "runtime/schedule/schedule.h"

namespace pd {

// A rank's events as compact JSON (what it sends to the rank that writes the file).
nlohmann::json trace_events_json(const std::vector<ActionSpan>& events);
// Writes the trace; ranks_events[r] is trace_events_json of rank r.
void write_chrome_trace(const std::string& path, const std::vector<nlohmann::json>& ranks_events,
                        const std::vector<int>& stage_of_rank);

// The measured timeline drawn as `simulate --svg` draws the simulated one
// (runtime/simulator/timeline_svg.h): the first `minibatches` minibatches
// (flush schedules: batches; 0: a default of a few) of ranks_events.
void write_run_timeline_svg(const std::string& path, const Plan& plan, const ScheduleOptions& schedule,
                            const std::vector<nlohmann::json>& ranks_events, int64_t minibatches);

}  // namespace pd

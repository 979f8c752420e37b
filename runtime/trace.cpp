#include "runtime/trace.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include <sstream>

#include "core/atomic_file.h"
#include "core/error.h"
#include "runtime/simulator/timeline_svg.h"

namespace pd {

nlohmann::json trace_events_json(const std::vector<ActionSpan>& events) {
  nlohmann::json out = nlohmann::json::array();
  for (const ActionSpan& e : events) out.push_back({e.name, e.item, e.start_s, e.end_s, e.cpu_s});
  return out;
}

void write_chrome_trace(const std::string& path, const std::vector<nlohmann::json>& ranks_events,
                        const std::vector<int>& stage_of_rank) {
  nlohmann::json events = nlohmann::json::array();
  for (size_t r = 0; r < ranks_events.size(); ++r) {
    const int pid = static_cast<int>(r);
    events.push_back({{"name", "process_name"}, {"ph", "M"}, {"pid", pid},
                      {"args", {{"name", cat("rank ", r, " - stage ", stage_of_rank[r])}}}});
    events.push_back({{"name", "process_sort_index"}, {"ph", "M"}, {"pid", pid}, {"args", {{"sort_index", pid}}}});
    for (const auto& e : ranks_events[r]) {
      const std::string name = e[0].get<std::string>();
      const int64_t item = e[1].get<int64_t>();
      const double start = e[2].get<double>(), end = e[3].get<double>();
      nlohmann::json ev = {{"name", item >= 0 && (name == "F" || name == "B" || name == "W") ? cat(name, item) : name},
                           {"cat", name}, {"ph", "X"}, {"pid", pid}, {"tid", 0},
                           {"ts", start * 1e6}, {"dur", (end - start) * 1e6}};
      if (item >= 0) ev["args"]["item"] = item;
      if (e.size() > 4) ev["args"]["cpu_ms"] = e[4].get<double>() * 1e3;
      events.push_back(std::move(ev));
    }
  }
  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp);
    if (!f) throw UserError(cat("cannot write the trace to ", path));
    f << nlohmann::json{{"traceEvents", events}, {"displayTimeUnit", "ms"}}.dump();
    if (!f) throw RuntimeFailure(cat("writing ", tmp, " failed"));
  }
  std::filesystem::rename(tmp, path);
}

namespace {
// A measured span as the simulator's trace event; false for spans the
// picture does not draw (optimizer steps, waits, evaluation).
bool to_trace_event(const nlohmann::json& e, int rank, int64_t items_per_batch, TraceEvent& out) {
  const std::string name = e[0].get<std::string>();
  const int64_t item = e[1].get<int64_t>();
  if (name == "F") out.kind = ActionKind::Forward;
  else if (name == "B") out.kind = ActionKind::Backward;
  else if (name == "W") out.kind = ActionKind::BackwardWeight;
  else if (name == "allreduce") out.kind = ActionKind::AllReduce;
  else return false;
  out.rank = rank;
  // F/B/W items are minibatch * items_per_batch + microbatch; an
  // all-reduce's is its round.
  const bool compute = out.kind != ActionKind::AllReduce;
  out.minibatch = compute ? item / items_per_batch : item;
  out.microbatch = compute ? static_cast<int>(item % items_per_batch) : 0;
  out.start_s = e[2].get<double>();
  out.end_s = e[3].get<double>();
  return true;
}
}  // namespace

void write_run_timeline_svg(const std::string& path, const Plan& plan, const ScheduleOptions& schedule,
                            const std::vector<nlohmann::json>& ranks_events, int64_t minibatches) {
  const int64_t items_per_batch = std::max(1, schedule.microbatches);
  std::vector<TraceEvent> events;
  for (size_t r = 0; r < ranks_events.size(); ++r)
    for (const auto& e : ranks_events[r]) {
      TraceEvent ev{};
      if (to_trace_event(e, static_cast<int>(r), items_per_batch, ev)) events.push_back(ev);
    }
  std::sort(events.begin(), events.end(), [](const TraceEvent& a, const TraceEvent& b) { return a.start_s < b.start_s; });
  TimelineSvgOptions svg;
  svg.flush = schedule.microbatches > 1;  // label microbatches within their batch
  svg.worker_stages = Schedule(plan, schedule).stages_by_worker();
  const int workers = static_cast<int>(ranks_events.size());
  svg.minibatches = std::min(minibatches > 0 ? minibatches : 2 * steps_per_period(schedule.kind, workers),
                             schedule.minibatches);
  svg.title = cat("measured: ", schedule_title(schedule), ", plan ", plan.config.empty() ? std::string("?") : plan.config,
                  ", first ", steps_phrase(schedule, svg.minibatches));
  std::ostringstream out;
  write_timeline_svg(out, plan, events, svg);
  write_file_atomically(path, out.str());
}

}  // namespace pd

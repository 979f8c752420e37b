#include "runtime/trace.h"

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "core/error.h"

namespace pd {

nlohmann::json trace_events_json(const std::vector<ActionSpan>& events) {
  nlohmann::json out = nlohmann::json::array();
  for (const ActionSpan& e : events) out.push_back({e.name, e.item, e.start_s, e.end_s});
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
      if (item >= 0) ev["args"] = {{"item", item}};
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

}  // namespace pd

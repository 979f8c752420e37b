// Cluster topology: levels innermost first; ranks are numbered so that the
// workers of one innermost group are consecutive.
#include "planner/topology.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <fstream>
#include <limits>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/checked.h"
#include "core/error.h"
#include "core/input_file.h"

namespace pd {
namespace {

// Smallest level whose groups contain both ranks (levels.size() when none).
size_t common_level(const Topology& t, int a, int b) {
  long long group = 1;
  for (size_t l = 0; l < t.levels.size(); ++l) {
    group *= t.levels[l].count;
    if (a / group == b / group) return l;
  }
  return t.levels.size();
}

}  // namespace

int Topology::total_workers() const {
  long long total = 1;
  for (const auto& l : levels) total *= l.count;
  return levels.empty() ? 0 : int(total);
}

double Topology::bandwidth_between(int rank_a, int rank_b) const {
  if (rank_a == rank_b) return std::numeric_limits<double>::infinity();
  size_t l = common_level(*this, rank_a, rank_b);
  PD_CHECK(l < levels.size(), "ranks ", rank_a, " and ", rank_b, " are outside the topology");
  return levels[l].bandwidth_GBps;
}

double Topology::group_bandwidth(const std::vector<int>& ranks) const {
  double slowest = std::numeric_limits<double>::infinity();
  for (size_t i = 1; i < ranks.size(); ++i) slowest = std::min(slowest, bandwidth_between(ranks[0], ranks[i]));
  return slowest;
}

double Topology::group_allreduce_GBps(const std::vector<int>& ranks, bool cores_busy) const {
  size_t widest = 0;
  for (size_t i = 1; i < ranks.size(); ++i) widest = std::max(widest, common_level(*this, ranks[0], ranks[i]));
  PD_CHECK(widest < levels.size(), "the group's ranks are outside the topology");
  if (ranks.size() < 2) return 0.0;
  const TopologyLevel& l = levels[widest];
  return cores_busy && l.allreduce_busy_GBps > 0 ? l.allreduce_busy_GBps : l.allreduce_GBps;
}

namespace {
CommCpuCost level_comm_cpu(const TopologyLevel& l) {
  return {l.comm_cpu_us_per_message * 1e-6, l.comm_cpu_GBps > 0 ? 1.0 / (l.comm_cpu_GBps * 1e9) : 0.0};
}
}  // namespace

CommCpuCost Topology::comm_cpu_between(int rank_a, int rank_b) const {
  if (rank_a == rank_b) return {};
  size_t l = common_level(*this, rank_a, rank_b);
  PD_CHECK(l < levels.size(), "ranks ", rank_a, " and ", rank_b, " are outside the topology");
  return level_comm_cpu(levels[l]);
}

CommCpuCost Topology::group_comm_cpu(const std::vector<int>& ranks) const {
  size_t widest = 0;
  for (size_t i = 1; i < ranks.size(); ++i) widest = std::max(widest, common_level(*this, ranks[0], ranks[i]));
  PD_CHECK(widest < levels.size(), "the group's ranks are outside the topology");
  return ranks.size() > 1 ? level_comm_cpu(levels[widest]) : CommCpuCost{};
}

double Topology::latency_between(int rank_a, int rank_b, bool cores_busy) const {
  if (rank_a == rank_b) return 0;
  size_t l = common_level(*this, rank_a, rank_b);
  PD_CHECK(l < levels.size(), "ranks ", rank_a, " and ", rank_b, " are outside the topology");
  const TopologyLevel& level = levels[l];
  return (cores_busy && level.latency_busy_us > 0 ? level.latency_busy_us : level.latency_us) * 1e-6;
}

double Topology::group_latency(const std::vector<int>& ranks) const {
  double largest = 0;
  for (size_t i = 1; i < ranks.size(); ++i) largest = std::max(largest, latency_between(ranks[0], ranks[i]));
  return largest;
}

Topology flat_topology(int workers, double bandwidth_GBps) {
  if (workers <= 0) throw UserError(cat("--workers must be at least 1, got ", workers));
  if (!(bandwidth_GBps > 0) || !std::isfinite(bandwidth_GBps))
    throw UserError(cat("--bandwidth must be a positive number of GB/s, got ", bandwidth_GBps));
  Topology t;
  t.levels.push_back({workers, bandwidth_GBps});
  return t;
}

uint64_t parse_size(const std::string& s) {
  std::string text = s;
  text.erase(std::remove_if(text.begin(), text.end(), [](unsigned char c) { return std::isspace(c); }), text.end());
  size_t unit_at = 0;
  while (unit_at < text.size() && (std::isdigit(static_cast<unsigned char>(text[unit_at])) || text[unit_at] == '.' ||
                                   text[unit_at] == 'e' && unit_at + 1 < text.size() &&
                                       std::isdigit(static_cast<unsigned char>(text[unit_at + 1]))))
    ++unit_at;
  std::string number = text.substr(0, unit_at), unit = text.substr(unit_at);
  for (auto& c : unit) c = char(std::tolower(static_cast<unsigned char>(c)));
  double scale = 0;
  const std::pair<const char*, double> units[] = {
      {"", 1},       {"b", 1},         {"kb", 1e3},      {"mb", 1e6},      {"gb", 1e9},     {"tb", 1e12},
      {"kib", 1024.}, {"mib", 1048576.}, {"gib", 1073741824.}, {"tib", 1099511627776.}};
  for (auto [name, value] : units)
    if (unit == name) scale = value;
  char* end = nullptr;
  double v = number.empty() ? -1 : std::strtod(number.c_str(), &end);
  if (scale == 0 || number.empty() || *end != '\0' || !std::isfinite(v) || v < 0 || v * scale > 1.8e19)
    throw UserError(cat("'", s, "' is not a size: use bytes (4000000000) or a suffix (4GB, 16GiB, 512MB)"));
  return uint64_t(std::llround(v * scale));
}

Topology topology_from_json(const nlohmann::json& j, const std::string& where) {
  if (!j.is_object() || !j.contains("levels") || !j["levels"].is_array() || j["levels"].empty())
    throw UserError(cat(where, ": expected {\"levels\": [{\"count\": N, \"bandwidth_GBps\": B}, ...]}"));
  checked::known_keys(j, {"levels", "worker_memory_bytes", "source"}, where);
  Topology t;
  int64_t total = 1;
  constexpr int64_t kMaxWorkers = int64_t{1} << 24;
  for (size_t i = 0; i < j["levels"].size(); ++i) {
    const auto& level = j["levels"][i];
    const std::string at = cat(where, ": levels[", i, "]");
    if (!level.is_object()) throw UserError(cat(at, " must be {\"count\": N, \"bandwidth_GBps\": B}"));
    checked::known_keys(level,
                        {"count", "bandwidth_GBps", "latency_us", "allreduce_GBps", "comm_cpu_GBps",
                         "comm_cpu_us_per_message", "allreduce_busy_GBps", "latency_busy_us"},
                        at);
    if (!level.contains("count") || !level.contains("bandwidth_GBps"))
      throw UserError(cat(at, " needs \"count\" and \"bandwidth_GBps\""));
    const int count = checked::integer_as<int>(level["count"], {at, "count"}, 1, kMaxWorkers);
    const double bandwidth = checked::number(level["bandwidth_GBps"], {at, "bandwidth_GBps (10^9 bytes/s)"}, 1e-9, 1e9);
    const double latency_us =
        level.contains("latency_us") ? checked::number(level["latency_us"], {at, "latency_us (microseconds per message)"}, 0, 1e9)
                                     : 0.0;
    const double allreduce_GBps =
        level.contains("allreduce_GBps")
            ? checked::number(level["allreduce_GBps"], {at, "allreduce_GBps (all-reduce bus bandwidth, 10^9 bytes/s)"}, 1e-9, 1e9)
            : 0.0;
    const double comm_cpu_GBps =
        level.contains("comm_cpu_GBps")
            ? checked::number(level["comm_cpu_GBps"], {at, "comm_cpu_GBps (bytes per CPU second of the communication threads, 10^9)"}, 1e-9, 1e9)
            : 0.0;
    const double comm_cpu_us =
        level.contains("comm_cpu_us_per_message")
            ? checked::number(level["comm_cpu_us_per_message"], {at, "comm_cpu_us_per_message (CPU microseconds per message)"}, 0, 1e9)
            : 0.0;
    const double allreduce_busy_GBps =
        level.contains("allreduce_busy_GBps")
            ? checked::number(level["allreduce_busy_GBps"],
                              {at, "allreduce_busy_GBps (all-reduce bus bandwidth with the cores busy, 10^9 bytes/s)"},
                              1e-9, 1e9)
            : 0.0;
    if (allreduce_busy_GBps > 0 && allreduce_GBps == 0)
      throw UserError(cat(at, ": allreduce_busy_GBps is the all-reduce measured again with the cores busy; "
                              "give allreduce_GBps (measured on idle cores) too"));
    const double latency_busy_us =
        level.contains("latency_busy_us")
            ? checked::number(level["latency_busy_us"], {at, "latency_busy_us (microseconds per message with the cores busy)"}, 0, 1e9)
            : 0.0;
    t.levels.push_back(
        {count, bandwidth, latency_us, allreduce_GBps, comm_cpu_GBps, comm_cpu_us, allreduce_busy_GBps, latency_busy_us});
    total *= count;
    if (total > kMaxWorkers) throw UserError(cat(where, ": more than ", kMaxWorkers, " workers"));
  }
  if (j.contains("worker_memory_bytes")) {
    const auto& m = j["worker_memory_bytes"];
    if (m.is_string()) t.worker_memory_bytes = parse_size(m.get<std::string>());
    else t.worker_memory_bytes = checked::integer_as<uint64_t>(m, {where, "worker_memory_bytes (bytes, or a size such as \"80GB\")"}, 0, checked::kMaxCount);
  }
  return t;
}

Topology read_topology(const std::string& path) {
  return topology_from_json(read_json_file(path, "the topology file"), path);
}

}  // namespace pd

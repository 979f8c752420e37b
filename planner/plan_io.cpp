// plan.json (docs/design.md §5): writer, reader and consistency checks.
#include <cmath>
#include <limits>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <type_traits>

#include <nlohmann/json.hpp>

#include "core/atomic_file.h"
#include "core/checked.h"
#include "core/error.h"
#include "core/input_file.h"
#include "planner/plan.h"

namespace pd {
namespace {

using nlohmann::json;

json topology_to_json(const Topology& t) {
  json levels = json::array();
  for (const auto& l : t.levels) {
    json level = {{"count", l.count}, {"bandwidth_GBps", l.bandwidth_GBps}};
    if (l.latency_us > 0) level["latency_us"] = l.latency_us;
    if (l.allreduce_GBps > 0) level["allreduce_GBps"] = l.allreduce_GBps;
    if (l.allreduce_busy_GBps > 0) level["allreduce_busy_GBps"] = l.allreduce_busy_GBps;
    if (l.latency_busy_us > 0) level["latency_busy_us"] = l.latency_busy_us;
    if (l.comm_cpu_GBps > 0) level["comm_cpu_GBps"] = l.comm_cpu_GBps;
    if (l.comm_cpu_us_per_message > 0) level["comm_cpu_us_per_message"] = l.comm_cpu_us_per_message;
    levels.push_back(level);
  }
  return {{"levels", levels}, {"worker_memory_bytes", t.worker_memory_bytes}};
}

// A plan's numbers are counts, indices, times and sizes: integers exact and
// in range, every number finite and >= 0 (core/checked.h).
template <class T>
T convert(const json& v, const checked::Field& f) {
  if constexpr (std::is_same_v<T, double>) {
    return checked::number(v, f, 0, 1e300);
  } else if constexpr (std::is_integral_v<T>) {
    const uint64_t most = std::min<uint64_t>(std::numeric_limits<T>::max(), uint64_t(checked::kMaxCount));
    return checked::integer_as<T>(v, f, 0, int64_t(most));
  } else if constexpr (std::is_same_v<T, std::string>) {
    return checked::string(v, f);
  } else {
    if (!v.is_array()) throw f.error("a list", v.dump());
    T out;
    for (size_t i = 0; i < v.size(); ++i)
      out.push_back(convert<typename T::value_type>(v[i], {f.where, cat(f.name, "[", i, "]")}));
    return out;
  }
}

template <class T>
T field(const json& j, const char* key, const std::string& where) {
  if (!j.is_object()) throw UserError(cat(where, " must be a JSON object"));
  auto it = j.find(key);
  if (it == j.end()) throw UserError(cat(where, ": missing \"", key, "\""));
  return convert<T>(*it, {where, key});
}

template <class T>
T optional_field(const json& j, const char* key, const T& fallback, const std::string& where) {
  return j.is_object() && j.contains(key) ? field<T>(j, key, where) : fallback;
}

// A field holding one of a closed set (planner/plan_kinds.h).
template <class E>
E kind_field(const json& j, const char* key, const char* fallback, const std::string& where,
             std::optional<E> (*parse)(std::string_view), const char* allowed) {
  const std::string text = optional_field<std::string>(j, key, fallback, where);
  if (std::optional<E> value = parse(text)) return *value;
  throw UserError(cat(where, ": \"", key, "\" must be ", allowed, ", got '", text, "'"));
}

}  // namespace

int Plan::workers() const {
  int total = 0;
  for (const auto& s : stages) total += s.replicas;
  return total;
}

int Plan::stage_of_rank(int rank) const {
  for (const auto& s : stages)
    for (int r : s.ranks)
      if (r == rank) return s.index;
  throw UserError(cat("rank ", rank, " is not part of the plan (", workers(), " workers)"));
}

std::string stage_fingerprint(const Plan& p) {
  std::string text = cat("batch ", p.profile.batch_size);
  for (const auto& s : p.stages) {
    text += cat("|", s.first_layer, "-", s.last_layer, " x", s.replicas);
    for (int n : s.nodes) text += cat("n", n);
    for (int l : s.recompute_layers) text += cat("r", l);
  }
  uint64_t h = 1469598103934665603ull;  // FNV-1a
  for (unsigned char c : text) h = (h ^ c) * 1099511628211ull;
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(h));
  return hex;
}

std::vector<bool> recompute_flags(const PlanStage& s) {
  if (s.recompute_layers.empty()) return {};
  std::vector<bool> flags(size_t(s.last_layer - s.first_layer + 1), false);
  for (int l : s.recompute_layers) flags[size_t(l - s.first_layer)] = true;
  return flags;
}

bool Plan::predictions_stale() const { return !predictions_for.empty() && predictions_for != stage_fingerprint(*this); }

std::string config_string(const std::vector<int>& replicas) {
  std::string out;
  for (size_t i = 0; i < replicas.size(); ++i) out += (i ? "-" : "") + std::to_string(replicas[i]);
  return out;
}

// A baseline that does not fit in worker memory is null (NaN in memory).
static json baseline_to_json(double seconds) { return std::isnan(seconds) ? json(nullptr) : json(seconds); }
static double baseline_from_json(const json& b, const char* key, const std::string& source) {
  if (b.contains(key) && b[key].is_null()) return std::numeric_limits<double>::quiet_NaN();
  return optional_field<double>(b, key, 0, source + ": baselines");
}

json plan_to_json(const Plan& p) {
  json stages = json::array();
  for (const auto& s : p.stages) {
    json stage = {{"index", s.index},
                  {"layers", {s.first_layer, s.last_layer}},
                  {"layer_names", s.layer_names},
                  {"replicas", s.replicas},
                  {"ranks", s.ranks},
                  {"compute_s", s.compute_s},
                  {"forward_s", s.forward_s},
                  {"backward_s", s.backward_s},
                  {"sync_s", s.sync_s},
                  {"transfer_s", s.transfer_s},
                  {"time_s", s.time_s},
                  {"output_bytes", s.output_bytes},
                  {"parameter_bytes", s.parameter_bytes},
                  {"memory_bytes", s.memory_bytes},
                  {"in_flight", s.in_flight}};
    if (s.optimizer_s > 0) stage["optimizer_s"] = s.optimizer_s;
    if (!s.nodes.empty()) stage["nodes"] = s.nodes;
    if (!s.recompute_layers.empty()) {
      stage["recompute_layers"] = s.recompute_layers;
      stage["recompute_s"] = s.recompute_s;
    }
    stages.push_back(std::move(stage));
  }
  json out = {{"format", p.format},
          {"profile",
           {{"path", p.profile.path},
            {"sha256", p.profile.sha256},
            {"model", p.profile.model},
            {"batch_size", p.profile.batch_size},
            {"device", p.profile.device}}},
          {"topology", topology_to_json(p.topology)},
          {"cost_model", to_string(p.cost_model)},
          {"schedule", p.schedule},
          {"config", p.config},
          {"noam", p.noam},
          {"state_space", p.state_space ? to_string(*p.state_space) : ""},
          {"stages", std::move(stages)},
          {"predicted",
           {{"time_per_minibatch_s", p.time_per_minibatch_s},
            {"throughput_samples_per_s", p.throughput_samples_per_s},
            {"speedup_vs_single", p.speedup_vs_single},
            {"speedup_vs_data_parallel", p.speedup_vs_data_parallel},
            {"bottleneck_stage", p.bottleneck_stage},
            {"by", to_string(p.predicted_by)},
            {"closed_form_s", p.closed_form_s},
            {"closed_form_bound_s", p.closed_form_bound_s},
            {"shared_cores_bound_s", p.shared_cores_bound_s},
            {"for_stages", p.predictions_for.empty() ? stage_fingerprint(p) : p.predictions_for}}},
          {"baselines", {{"single_worker_s", baseline_to_json(p.single_worker_s)},
                         {"data_parallel_s", baseline_to_json(p.data_parallel_s)}}}};
  if (p.microbatches > 0) out["microbatches"] = p.microbatches;
  if (p.virtual_stages > 0) out["virtual_stages"] = p.virtual_stages;
  if (p.batch > 0) out["batch"] = p.batch;
  if (!p.ties.empty()) {
    json ties = json::array();
    for (const PlanTie& t : p.ties)
      ties.push_back({{"parameter", t.parameter}, {"bytes", t.bytes}, {"stages", t.stages}, {"exchange_s", t.exchange_s}});
    out["tie_groups"] = std::move(ties);
  }
  return out;
}

Plan plan_from_json(const json& j, const std::string& source) {
  if (!j.is_object()) throw UserError(cat(source, ": a plan must be a JSON object"));
  checked::known_keys(j,
                      {"format", "profile", "topology", "cost_model", "schedule", "microbatches", "virtual_stages",
                       "batch", "config", "noam", "state_space", "stages", "predicted", "baselines", "tie_groups"},
                      source);
  Plan p;
  p.format = field<std::string>(j, "format", source);
  if (p.format != "pipedream-plan/1")
    throw UserError(cat(source, ": \"format\" must be \"pipedream-plan/1\", got '", p.format, "'"));
  if (j.contains("profile")) {
    const json& prof = j["profile"];
    std::string where = source + ": profile";
    checked::known_keys(prof, {"path", "sha256", "model", "batch_size", "device"}, where);
    p.profile.path = optional_field<std::string>(prof, "path", "", where);
    p.profile.sha256 = optional_field<std::string>(prof, "sha256", "", where);
    p.profile.model = optional_field<std::string>(prof, "model", "", where);
    p.profile.device = optional_field<std::string>(prof, "device", "", where);
    p.profile.batch_size = optional_field<int>(prof, "batch_size", 0, where);
  }
  if (j.contains("topology")) p.topology = topology_from_json(j["topology"], source + ": topology");
  p.cost_model = kind_field(j, "cost_model", "paper", source, parse_cost_model, "\"paper\" or \"pipedream\"");
  // Whoever runs the plan resolves the name (runtime/schedule's registry).
  p.schedule = optional_field<std::string>(j, "schedule", "1f1b-rr", source);
  if (p.schedule.empty()) throw UserError(cat(source, ": \"schedule\" must name a schedule"));
  p.microbatches = optional_field<int>(j, "microbatches", 0, source);
  p.virtual_stages = optional_field<int>(j, "virtual_stages", 0, source);
  p.batch = optional_field<int64_t>(j, "batch", 0, source);
  p.config = optional_field<std::string>(j, "config", "", source);
  p.noam = optional_field<int>(j, "noam", 1, source);
  if (const std::string space = optional_field<std::string>(j, "state_space", "", source); !space.empty())
    p.state_space = kind_field(j, "state_space", "", source, parse_state_space_kind,
                               "\"chain\", \"antichain\" or \"topological-prefix\" (or \"\": not recorded)");
  if (!j.contains("stages") || !j["stages"].is_array() || j["stages"].empty())
    throw UserError(cat(source, ": \"stages\" must be a non-empty array"));
  std::vector<int> replicas;
  for (size_t i = 0; i < j["stages"].size(); ++i) {
    const json& js = j["stages"][i];
    std::string where = cat(source, ": stages[", i, "]");
    checked::known_keys(js,
                        {"index", "layers", "layer_names", "nodes", "replicas", "ranks", "compute_s", "forward_s",
                         "backward_s", "sync_s", "optimizer_s", "transfer_s", "time_s", "output_bytes",
                         "parameter_bytes", "memory_bytes", "in_flight", "recompute_layers", "recompute_s"},
                        where);
    PlanStage s;
    s.index = optional_field<int>(js, "index", int(i), where);
    if (s.index != int(i)) throw UserError(cat(where, ": \"index\" must be ", i, ", got ", s.index));
    auto layers = field<std::vector<int>>(js, "layers", where);
    if (layers.size() != 2 || layers[0] > layers[1] || layers[0] < 0)
      throw UserError(cat(where, ": \"layers\" must be [first, last] with first <= last"));
    s.first_layer = layers[0];
    s.last_layer = layers[1];
    s.layer_names = optional_field<std::vector<std::string>>(js, "layer_names", {}, where);
    s.nodes = optional_field<std::vector<int>>(js, "nodes", {}, where);
    s.replicas = field<int>(js, "replicas", where);
    s.ranks = field<std::vector<int>>(js, "ranks", where);
    if (s.replicas < 1) throw UserError(cat(where, ": \"replicas\" must be at least 1, got ", s.replicas));
    if (int(s.ranks.size()) != s.replicas)
      throw UserError(cat(where, ": \"replicas\" (", s.replicas, ") must equal the number of \"ranks\" (", s.ranks.size(),
                          ")"));
    s.compute_s = optional_field<double>(js, "compute_s", 0, where);
    s.forward_s = optional_field<double>(js, "forward_s", 0, where);
    s.backward_s = optional_field<double>(js, "backward_s", 0, where);
    s.sync_s = optional_field<double>(js, "sync_s", 0, where);
    s.optimizer_s = optional_field<double>(js, "optimizer_s", 0, where);
    if (!(s.optimizer_s >= 0) || !std::isfinite(s.optimizer_s))
      throw UserError(cat(where, ": \"optimizer_s\" must be a number of seconds >= 0, got ", s.optimizer_s));
    s.transfer_s = optional_field<double>(js, "transfer_s", 0, where);
    s.time_s = optional_field<double>(js, "time_s", 0, where);
    s.output_bytes = optional_field<uint64_t>(js, "output_bytes", 0, where);
    s.parameter_bytes = optional_field<uint64_t>(js, "parameter_bytes", 0, where);
    s.memory_bytes = optional_field<uint64_t>(js, "memory_bytes", 0, where);
    s.in_flight = optional_field<int>(js, "in_flight", 1, where);
    s.recompute_layers = optional_field<std::vector<int>>(js, "recompute_layers", {}, where);
    for (size_t k = 0; k < s.recompute_layers.size(); ++k) {
      const int l = s.recompute_layers[k];
      if (l < s.first_layer || l > s.last_layer || (k > 0 && l <= s.recompute_layers[k - 1]))
        throw UserError(cat(where, ": \"recompute_layers\" must list layers of the stage (", s.first_layer, "..",
                            s.last_layer, ") in ascending order, each once; got ", l));
    }
    s.recompute_s = optional_field<double>(js, "recompute_s", 0, where);
    if (!(s.recompute_s >= 0) || !std::isfinite(s.recompute_s))
      throw UserError(cat(where, ": \"recompute_s\" must be a number of seconds >= 0, got ", s.recompute_s));
    if (i > 0 && s.first_layer != int64_t{p.stages.back().last_layer} + 1)
      throw UserError(cat(where, ": \"layers\" must start right after stage ", i - 1, "'s last layer (",
                          int64_t{p.stages.back().last_layer} + 1, "), got ", s.first_layer));
    if (i == 0 && s.first_layer != 0) throw UserError(cat(where, ": the first stage must start at layer 0"));
    replicas.push_back(s.replicas);
    p.stages.push_back(std::move(s));
  }
  int workers = p.workers();
  std::vector<int> seen(workers, 0);
  for (const auto& s : p.stages)
    for (int r : s.ranks) {
      if (r < 0 || r >= workers || seen[r]++)
        throw UserError(cat(source, ": stages[", s.index, "]: rank ", r,
                            " is out of range or repeated (ranks must be 0..", workers - 1, ", each once)"));
    }
  if (p.config.empty()) p.config = config_string(replicas);
  if (p.config != config_string(replicas))
    throw UserError(cat(source, ": \"config\" is '", p.config, "' but the stages' replicas give '",
                        config_string(replicas), "'"));
  if (j.contains("predicted")) {
    const json& pr = j["predicted"];
    std::string where = source + ": predicted";
    checked::known_keys(pr,
                        {"time_per_minibatch_s", "throughput_samples_per_s", "speedup_vs_single",
                         "speedup_vs_data_parallel", "bottleneck_stage", "by", "closed_form_s", "closed_form_bound_s",
                         "shared_cores_bound_s", "for_stages"},
                        where);
    p.time_per_minibatch_s = optional_field<double>(pr, "time_per_minibatch_s", 0, where);
    p.throughput_samples_per_s = optional_field<double>(pr, "throughput_samples_per_s", 0, where);
    p.speedup_vs_single = optional_field<double>(pr, "speedup_vs_single", 0, where);
    p.speedup_vs_data_parallel = optional_field<double>(pr, "speedup_vs_data_parallel", 0, where);
    p.bottleneck_stage = optional_field<int>(pr, "bottleneck_stage", 0, where);
    p.predicted_by = kind_field(pr, "by", "closed form", where, parse_predicted_by,
                                "\"closed form\", \"replay\" or \"shared cores\"");
    p.closed_form_s = optional_field<double>(pr, "closed_form_s", 0, where);
    p.closed_form_bound_s = optional_field<double>(pr, "closed_form_bound_s", 0, where);
    p.shared_cores_bound_s = optional_field<double>(pr, "shared_cores_bound_s", 0, where);
    p.predictions_for = optional_field<std::string>(pr, "for_stages", "", where);
  }
  if (j.contains("baselines")) {
    const json& b = j["baselines"];
    // `plan --baseline straight|equal` adds those plans' times and configs.
    checked::known_keys(b,
                        {"single_worker_s", "data_parallel_s", "straight_s", "straight_config", "equal_s",
                         "equal_config"},
                        source + ": baselines");
    p.single_worker_s = baseline_from_json(b, "single_worker_s", source);
    p.data_parallel_s = baseline_from_json(b, "data_parallel_s", source);
  }
  if (j.contains("tie_groups")) {
    const json& ties = j["tie_groups"];
    if (!ties.is_array()) throw UserError(cat(source, ": \"tie_groups\" must be an array"));
    for (size_t i = 0; i < ties.size(); ++i) {
      const std::string where = cat(source, ": tie_groups[", i, "]");
      checked::known_keys(ties[i], {"parameter", "bytes", "stages", "exchange_s"}, where);
      PlanTie t;
      t.parameter = optional_field<std::string>(ties[i], "parameter", "", where);
      t.bytes = optional_field<uint64_t>(ties[i], "bytes", 0, where);
      t.stages = optional_field<std::vector<int>>(ties[i], "stages", {}, where);
      t.exchange_s = optional_field<double>(ties[i], "exchange_s", 0, where);
      for (int s : t.stages)
        if (s < 0 || s >= int(p.stages.size()))
          throw UserError(cat(where, ": stage ", s, " is not one of the plan's ", p.stages.size(), " stages"));
      p.ties.push_back(std::move(t));
    }
  }
  return p;
}

Plan read_plan(const std::string& path) {
  return plan_from_json(read_json_file(path, "the plan"), path);
}

void write_plan(const Plan& p, const std::string& path) {
  write_file_atomically(path, plan_to_json(p).dump(2) + "\n");
}

}  // namespace pd

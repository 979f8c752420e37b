// Our profile.json format (docs/design.md §4), its writer, and format detection.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <functional>
#include <limits>
#include <regex>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/atomic_file.h"
#include "core/checked.h"
#include "core/error.h"
#include "core/input_file.h"
#include "core/precision_names.h"
#include "profiler/format/profile_graph.h"
#include "profiler/profile.h"

namespace pd {
namespace {

using nlohmann::json;

int line_at(const std::string& text, size_t offset) {
  int line = 1;
  for (size_t i = 0; i < offset && i < text.size(); ++i) line += text[i] == '\n';
  return line;
}

// nlohmann::json keeps no positions; find the line of a node by its id so
// that messages still point into the file.
std::string node_location(const std::string& text, const std::string& source, int id) {
  std::smatch m;
  std::regex pattern("\"id\"\\s*:\\s*" + std::to_string(id) + "(?![0-9.])");
  if (std::regex_search(text, m, pattern)) return cat(source, ":", line_at(text, m.position(0)));
  return source;
}

std::string key_location(const std::string& text, const std::string& source, const std::string& key) {
  size_t at = text.find("\"" + key + "\"");
  return at == std::string::npos ? source : cat(source, ":", line_at(text, at));
}

// Where a field lives, worked out only for an error message: finding a
// node's line searches the whole text, too slow to do for every node.
using Where = std::function<std::string()>;

double number_field(const json& obj, const char* key, const Where& where, bool required) {
  auto it = obj.find(key);
  if (it == obj.end()) {
    if (required) throw UserError(cat(where(), ": missing \"", key, "\""));
    return 0;
  }
  if (!it->is_number() || !std::isfinite(it->get<double>()) || it->get<double>() < 0)
    throw UserError(cat(where(), ": \"", key, "\" must be a non-negative number, got ", it->dump()));
  return it->get<double>();
}

// A count (bytes, iterations) of at most 2^53: 2^70 or 5.5 is an error,
// never a wrapped or truncated number.
int64_t count_field(const json& obj, const char* key, const Where& where, bool required, int64_t max = checked::kMaxCount) {
  auto it = obj.find(key);
  if (it == obj.end()) {
    if (required) throw UserError(cat(where(), ": missing \"", key, "\""));
    return 0;
  }
  return checked::integer(*it, {where(), cat("\"", key, "\"")}, 0, max);
}

uint64_t bytes_field(const json& obj, const char* key, const Where& where, bool required) {
  return static_cast<uint64_t>(count_field(obj, key, where, required));
}

int int_field(const json& obj, const char* key, const Where& where, bool required) {
  return static_cast<int>(count_field(obj, key, where, required, std::numeric_limits<int>::max()));
}

std::string string_field(const json& obj, const char* key, const std::string& fallback, const Where& where) {
  auto it = obj.find(key);
  return it == obj.end() ? fallback : checked::string(*it, {where(), cat("\"", key, "\"")});
}

// "at_batch": [{"batch": 8, "forward_ms": .., "backward_ms": ..}, ...]:
// batches ascending, each below the profile's.
std::vector<BatchTimes> at_batch_field(const json& node, int batch_size, const Where& where) {
  std::vector<BatchTimes> out;
  auto it = node.find("at_batch");
  if (it == node.end()) return out;
  if (!it->is_array())
    throw UserError(cat(where(), ": \"at_batch\" must be an array of {\"batch\", \"forward_ms\", \"backward_ms\"}"));
  for (const json& e : *it) {
    if (!e.is_object())
      throw UserError(cat(where(), ": each \"at_batch\" entry must be an object, got ", e.dump()));
    checked::known_keys(e, {"batch", "forward_ms", "backward_ms"}, where() + ": at_batch");
    BatchTimes t;
    t.batch = int_field(e, "batch", where, true);
    if (t.batch < 1 || t.batch >= batch_size)
      throw UserError(cat(where(), ": \"at_batch\" batch ", t.batch, " must be between 1 and the profile's batch_size ",
                          batch_size, " (exclusive)"));
    if (!out.empty() && t.batch <= out.back().batch)
      throw UserError(cat(where(), ": \"at_batch\" batches must be ascending and distinct (", out.back().batch,
                          " then ", t.batch, ")"));
    t.forward_ms = number_field(e, "forward_ms", where, true);
    t.backward_ms = number_field(e, "backward_ms", where, true);
    out.push_back(t);
  }
  return out;
}

}  // namespace

const BatchTimes* ProfileNode::times_at(int batch) const {
  for (const BatchTimes& t : at_batch)
    if (t.batch == batch) return &t;
  return nullptr;
}

std::vector<int> Profile::measured_microbatch_sizes() const {
  if (nodes.empty()) return {};
  std::vector<int> out;
  for (const BatchTimes& t : nodes.front().at_batch)
    if (std::all_of(nodes.begin(), nodes.end(), [&](const ProfileNode& n) { return n.times_at(t.batch); }))
      out.push_back(t.batch);
  return out;
}

bool Profile::is_chain() const {
  if (edges.size() + 1 != nodes.size()) return false;
  for (size_t i = 0; i < edges.size(); ++i)
    if (edges[i].first != nodes[i].id || edges[i].second != nodes[i + 1].id) return false;
  return true;
}

Profile parse_profile_json(const std::string& text, const std::string& source) {
  check_json_depth(text, source);
  json j;
  try {
    j = json::parse(text);
  } catch (const json::parse_error& e) {
    throw UserError(cat(source, ":", line_at(text, e.byte == 0 ? 0 : e.byte - 1), ": invalid JSON: ", e.what()));
  } catch (const json::exception& e) {  // out_of_range.406: a number such as 1e999
    throw UserError(cat(source, ": invalid JSON: ", e.what()));
  }
  if (!j.is_object()) throw UserError(cat(source, ":1: a profile must be a JSON object"));
  checked::known_keys(j,
                      {"format", "model", "batch_size", "device", "dtype", "precision", "threads",
                       "step_forward_backward_ms", "warmup_iterations", "measured_iterations", "measured_seconds",
                       "host_probe_ms", "nodes", "edges", "tie_groups", "model_argument", "model_spec_file",
                       "model_options"},
                      source);
  Profile p;
  p.source_path = source;
  p.source_kind = ProfileSource::json;
  const Where top = [&] { return source; };
  p.format = string_field(j, "format", "", top);
  if (p.format != "pipedream-profile/1")
    throw UserError(cat(key_location(text, source, "format"), ": expected \"format\": \"pipedream-profile/1\", got '",
                        p.format, "'"));
  p.model = string_field(j, "model", "", top);
  p.model_argument = string_field(j, "model_argument", "", top);
  p.model_spec_file = string_field(j, "model_spec_file", "", top);
  p.model_options = string_field(j, "model_options", "", top);
  p.device = string_field(j, "device", "cpu", top);
  p.dtype = string_field(j, "dtype", "f32", top);
  {
    const std::string precision = string_field(j, "precision", "fp32", top);
    const std::optional<Precision> parsed = parse_precision(precision);
    if (!parsed)
      throw UserError(cat(key_location(text, source, "precision"), ": \"precision\" must be fp32 or bf16, got '",
                          precision, "'"));
    p.precision = *parsed;
  }
  p.batch_size = int_field(j, "batch_size", [&] { return key_location(text, source, "batch_size"); }, true);
  if (p.batch_size <= 0) throw UserError(cat(key_location(text, source, "batch_size"), ": batch_size must be positive"));
  p.threads = j.contains("threads") ? int_field(j, "threads", top, false) : 1;
  p.step_forward_backward_ms = number_field(j, "step_forward_backward_ms", top, false);
  p.warmup_iterations = int_field(j, "warmup_iterations", top, false);
  p.measured_iterations = int_field(j, "measured_iterations", top, false);
  p.measured_seconds = number_field(j, "measured_seconds", top, false);
  p.host_probe_ms = number_field(j, "host_probe_ms", top, false);
  auto nodes = j.find("nodes");
  if (nodes == j.end() || !nodes->is_array())
    throw UserError(cat(source, ": missing \"nodes\" array"));
  for (size_t i = 0; i < nodes->size(); ++i) {
    const json& n = (*nodes)[i];
    std::string where = cat(source, ": nodes[", i, "]");
    if (!n.is_object() || !n.contains("id"))
      throw UserError(cat(where, ": each node needs an integer \"id\""));
    checked::known_keys(n,
                        {"id", "name", "op", "forward_ms", "backward_ms", "forward_p90_ms", "backward_p90_ms",
                         "output_bytes", "activation_bytes", "parameter_bytes", "optimizer_state_bytes",
                         "workspace_bytes", "forward_workspace_bytes", "optimizer_ms", "at_batch",
                         "weight_pass_bytes", "shared_activation_bytes", "weight_workspace_bytes"},
                        where);
    ProfileNode node;
    node.id = checked::integer_as<int>(n["id"], {where, "\"id\""}, 0);
    const Where node_where = [&] { return cat(node_location(text, source, node.id), ": node ", node.id); };
    node.name = string_field(n, "name", cat("node", node.id), node_where);
    node.op = string_field(n, "op", "", node_where);
    node.forward_ms = number_field(n, "forward_ms", node_where, true);
    node.backward_ms = number_field(n, "backward_ms", node_where, true);
    node.forward_p90_ms = number_field(n, "forward_p90_ms", node_where, false);
    node.backward_p90_ms = number_field(n, "backward_p90_ms", node_where, false);
    node.output_bytes = bytes_field(n, "output_bytes", node_where, true);
    node.activation_bytes = bytes_field(n, "activation_bytes", node_where, true);
    node.parameter_bytes = bytes_field(n, "parameter_bytes", node_where, true);
    node.optimizer_state_bytes = bytes_field(n, "optimizer_state_bytes", node_where, false);
    node.workspace_bytes = bytes_field(n, "workspace_bytes", node_where, false);
    node.weight_pass_bytes = bytes_field(n, "weight_pass_bytes", node_where, false);
    node.forward_workspace_bytes = bytes_field(n, "forward_workspace_bytes", node_where, false);
    node.shared_activation_bytes = bytes_field(n, "shared_activation_bytes", node_where, false);
    if (n.contains("weight_workspace_bytes"))
      node.weight_workspace_bytes = bytes_field(n, "weight_workspace_bytes", node_where, true);
    node.optimizer_ms = number_field(n, "optimizer_ms", node_where, false);
    node.at_batch = at_batch_field(n, p.batch_size, node_where);
    node.source_line = int(i) + 1;
    p.nodes.push_back(std::move(node));
  }
  auto edges = j.find("edges");
  std::string edges_where = key_location(text, source, "edges");
  if (edges == j.end()) {
    if (p.nodes.size() > 1) throw UserError(cat(source, ": missing \"edges\" (a chain lists [i, i+1] pairs)"));
  } else {
    if (!edges->is_array()) throw UserError(cat(edges_where, ": \"edges\" must be an array of [from, to] pairs"));
    for (size_t i = 0; i < edges->size(); ++i) {
      const json& e = (*edges)[i];
      if (!e.is_array() || e.size() != 2)
        throw UserError(cat(edges_where, ": each edge must be [from id, to id], got ", e.dump()));
      const checked::Field from{edges_where, cat("edges[", i, "][0]")}, to{edges_where, cat("edges[", i, "][1]")};
      p.edges.emplace_back(checked::integer_as<int>(e[0], from, 0), checked::integer_as<int>(e[1], to, 0));
    }
  }
  if (auto ties = j.find("tie_groups"); ties != j.end()) {
    const std::string where = key_location(text, source, "tie_groups");
    if (!ties->is_array()) throw UserError(cat(where, ": \"tie_groups\" must be an array"));
    for (size_t i = 0; i < ties->size(); ++i) {
      const json& t = (*ties)[i];
      const std::string at = cat(where, ": tie_groups[", i, "]");
      if (!t.is_object() || !t.contains("nodes") || !t["nodes"].is_array() || t["nodes"].size() < 2)
        throw UserError(cat(at, ": needs \"parameter\", \"bytes\" and \"nodes\" (two or more node ids)"));
      checked::known_keys(t, {"parameter", "bytes", "nodes"}, at);
      ProfileTie tie;
      tie.parameter = string_field(t, "parameter", "", [&] { return at; });
      tie.bytes = bytes_field(t, "bytes", [&] { return at; }, true);
      for (size_t k = 0; k < t["nodes"].size(); ++k) {
        const int id = checked::integer_as<int>(t["nodes"][k], {at, cat("nodes[", k, "]")}, 0);
        if (std::none_of(p.nodes.begin(), p.nodes.end(), [&](const ProfileNode& n) { return n.id == id; }))
          throw UserError(cat(at, ": node ", id, " is not in \"nodes\""));
        tie.nodes.push_back(id);
      }
      p.ties.push_back(std::move(tie));
    }
  }
  profile_detail::SourceLocator locate{
      [&](int i) { return node_location(text, source, p.nodes[i].id); },
      [&](int e) { return cat(edges_where, ": edges[", e, "]"); }};
  profile_detail::validate_graph(p, locate, /*reorder_topologically=*/false);
  return p;
}

Profile read_profile(const std::string& path) {
  const std::string text = read_input_file(path, "the profile");
  size_t first = text.find_first_not_of(" \t\r\n");
  if (first == std::string::npos) throw UserError(cat(path, ":1: the profile is empty (no nodes)"));
  // JSON starts with '{'; graph.txt with a node line.
  Profile p = text[first] == '{' ? parse_profile_json(text, path) : parse_graph_txt(text, path);
  p.sha256 = sha256_hex(text);
  return p;
}

bool records_weight_passes(const Profile& p) {
  for (const ProfileNode& n : p.nodes)
    if (n.weight_pass_bytes > 0) return true;
  return false;
}

void write_profile_json(const Profile& p, const std::string& path) {
  json nodes = json::array();
  for (const auto& n : p.nodes) {
    json node = {{"id", n.id},
                 {"name", n.name},
                 {"op", n.op},
                 {"forward_ms", n.forward_ms},
                 {"backward_ms", n.backward_ms},
                 {"output_bytes", n.output_bytes},
                 {"activation_bytes", n.activation_bytes},
                 {"parameter_bytes", n.parameter_bytes},
                 {"optimizer_state_bytes", n.optimizer_state_bytes},
                 {"workspace_bytes", n.workspace_bytes}};
    if (n.optimizer_ms > 0) node["optimizer_ms"] = n.optimizer_ms;
    if (n.weight_pass_bytes > 0) node["weight_pass_bytes"] = n.weight_pass_bytes;
    if (n.forward_workspace_bytes > 0) node["forward_workspace_bytes"] = n.forward_workspace_bytes;
    if (n.shared_activation_bytes > 0) node["shared_activation_bytes"] = n.shared_activation_bytes;
    if (n.weight_workspace_bytes) node["weight_workspace_bytes"] = *n.weight_workspace_bytes;
    if (n.forward_p90_ms > 0 || n.backward_p90_ms > 0) {
      node["forward_p90_ms"] = n.forward_p90_ms;
      node["backward_p90_ms"] = n.backward_p90_ms;
    }
    if (!n.at_batch.empty()) {
      json at = json::array();
      for (const BatchTimes& t : n.at_batch)
        at.push_back({{"batch", t.batch}, {"forward_ms", t.forward_ms}, {"backward_ms", t.backward_ms}});
      node["at_batch"] = std::move(at);
    }
    nodes.push_back(std::move(node));
  }
  json edges = json::array();
  for (auto [a, b] : p.edges) edges.push_back({a, b});
  json j = {{"format", "pipedream-profile/1"},
            {"model", p.model},
            {"batch_size", p.batch_size},
            {"device", p.device},
            {"dtype", p.dtype},
            {"threads", p.threads},
            {"step_forward_backward_ms", p.step_forward_backward_ms},
            {"nodes", std::move(nodes)},
            {"edges", std::move(edges)}};
  if (p.precision != Precision::FP32) j["precision"] = to_string(p.precision);
  if (p.measured_iterations > 0) {
    j["warmup_iterations"] = p.warmup_iterations;
    j["measured_iterations"] = p.measured_iterations;
    j["measured_seconds"] = p.measured_seconds;
  }
  if (p.host_probe_ms > 0) j["host_probe_ms"] = p.host_probe_ms;
  if (!p.model_argument.empty()) j["model_argument"] = p.model_argument;
  if (!p.model_spec_file.empty()) j["model_spec_file"] = p.model_spec_file;
  if (!p.model_options.empty()) j["model_options"] = p.model_options;
  if (!p.ties.empty()) {
    json ties = json::array();
    for (const ProfileTie& t : p.ties) ties.push_back({{"parameter", t.parameter}, {"bytes", t.bytes}, {"nodes", t.nodes}});
    j["tie_groups"] = std::move(ties);
  }
  write_file_atomically(path, j.dump(1) + "\n");
}

}  // namespace pd

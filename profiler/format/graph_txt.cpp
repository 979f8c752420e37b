// PipeDream's graph.txt profiles (msr-fiddle/pipedream's graph format).
#include <cmath>
#include <sstream>
#include <unordered_map>

#include "core/checked.h"
#include "core/error.h"
#include "profiler/format/profile_graph.h"
#include "profiler/profile.h"

namespace pd {
namespace {

std::vector<std::string> split(const std::string& s, const std::string& sep) {
  std::vector<std::string> parts;
  size_t start = 0;
  for (size_t at; (at = s.find(sep, start)) != std::string::npos; start = at + sep.size())
    parts.push_back(s.substr(start, at - start));
  parts.push_back(s.substr(start));
  return parts;
}

std::string trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t\r"), e = s.find_last_not_of(" \t\r");
  return b == std::string::npos ? "" : s.substr(b, e - b + 1);
}

int parse_node_id(const std::string& token, const std::string& where) {
  std::string t = trim(token);
  std::string digits = t.rfind("node", 0) == 0 ? t.substr(4) : t;
  if (digits.empty() || digits.find_first_not_of("0123456789") != std::string::npos || digits.size() > 9)
    throw UserError(cat(where, ": expected a node id like 'node12', got '", t, "'"));
  return std::stoi(digits);
}

// activation_size is a number or, for nodes with several outputs, "[a; b; c]" (summed).
double parse_activation(const std::string& value, const std::string& where) {
  std::string v = trim(value);
  if (v.empty() || v.front() != '[') return profile_detail::parse_non_negative(v, where, "activation_size");
  if (v.back() != ']') throw UserError(cat(where, ": activation_size list is missing ']'"));
  double sum = 0;
  for (const auto& part : split(v.substr(1, v.size() - 2), ";"))
    sum += profile_detail::parse_non_negative(trim(part), where, "activation_size entry");
  return sum;
}

// PipeDream writes sizes as floats ("102760448.000000"); rounded, and at
// most 2^53 so that the cast cannot wrap.
uint64_t bytes_value(double v, const std::string& where, const std::string& key) {
  return static_cast<uint64_t>(checked::rounded(v, {where, key}, 0, checked::kMaxCount));
}

ProfileNode parse_node_line(const std::string& line, const std::string& where) {
  auto parts = split(line, " -- ");
  if (!parts.empty() && trim(parts.back()).rfind("stage_id=", 0) == 0) parts.pop_back();
  if (parts.size() < 3)
    throw UserError(cat(where, ": expected 'nodeN -- description -- forward_compute_time=..., ...'"));
  ProfileNode node;
  node.id = parse_node_id(parts.front(), where);
  std::string description = parts[1];
  for (size_t i = 2; i + 1 < parts.size(); ++i) description += " -- " + parts[i];
  node.name = trim(description);
  bool seen[4] = {false, false, false, false};
  for (const auto& field : split(parts.back(), ", ")) {
    auto eq = field.find('=');
    if (eq == std::string::npos) throw UserError(cat(where, ": expected key=value, got '", trim(field), "'"));
    std::string key = trim(field.substr(0, eq)), value = field.substr(eq + 1);
    if (key == "forward_compute_time") {
      node.forward_ms = profile_detail::parse_non_negative(trim(value), where, key), seen[0] = true;
    } else if (key == "backward_compute_time") {
      node.backward_ms = profile_detail::parse_non_negative(trim(value), where, key), seen[1] = true;
    } else if (key == "activation_size") {
      node.output_bytes = node.activation_bytes = bytes_value(parse_activation(value, where), where, key);
      seen[2] = true;
    } else if (key == "parameter_size") {
      node.parameter_bytes = bytes_value(profile_detail::parse_non_negative(trim(value), where, key), where, key);
      seen[3] = true;
    } else {
      throw UserError(cat(where, ": unknown field '", key, "'"));
    }
  }
  static const char* names[4] = {"forward_compute_time", "backward_compute_time", "activation_size",
                                 "parameter_size"};
  for (int i = 0; i < 4; ++i)
    if (!seen[i]) throw UserError(cat(where, ": missing ", names[i]));
  return node;
}

}  // namespace

Profile parse_graph_txt(const std::string& text, const std::string& source) {
  Profile p;
  p.source_path = source;
  p.source_kind = ProfileSource::graph_txt;
  p.model = source;
  std::vector<int> edge_lines;
  std::istringstream in(text);
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    std::string where = cat(source, ":", number);
    if (trim(line).empty()) continue;
    if (line[0] == '\t') {
      auto ends = split(trim(line), " -- ");
      if (ends.size() != 2) throw UserError(cat(where, ": expected an edge '\\tnodeA -- nodeB'"));
      p.edges.emplace_back(parse_node_id(ends[0], where), parse_node_id(ends[1], where));
      edge_lines.push_back(number);
    } else {
      ProfileNode node = parse_node_line(line, where);
      node.source_line = number;
      p.nodes.push_back(std::move(node));
    }
  }
  profile_detail::SourceLocator locate{
      [&](int i) { return cat(source, ":", p.nodes[i].source_line); },
      [&](int e) { return cat(source, ":", edge_lines[e]); }};
  // PipeDream writes nodes in arbitrary order; plans name layers in a
  // topological order, so that a chain's stages are contiguous ranges.
  profile_detail::validate_graph(p, locate, /*reorder_topologically=*/true);
  return p;
}

}  // namespace pd

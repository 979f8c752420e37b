#include "planner/planning_graph.h"

#include <unordered_map>

#include "core/error.h"

namespace pd {

bool PlanningGraph::is_chain() const {
  for (size_t i = 0; i < nodes.size(); ++i) {
    bool last = i + 1 == nodes.size();
    if (out[i].size() != (last ? 0u : 1u) || (!last && out[i][0] != int(i) + 1)) return false;
    if (in[i].size() != (i == 0 ? 0u : 1u)) return false;
  }
  return true;
}

PlanningGraph build_planning_graph(const Profile& profile) {
  const int n = int(profile.nodes.size());
  std::unordered_map<int, int> index_of;
  for (int i = 0; i < n; ++i) index_of[profile.nodes[i].id] = i;
  std::vector<std::vector<int>> out(n), in(n);
  for (auto [a, b] : profile.edges) {
    out[index_of.at(a)].push_back(index_of.at(b));
    in[index_of.at(b)].push_back(index_of.at(a));
  }
  std::vector<bool> keep(n, true);
  if (profile.source_kind == ProfileSource::graph_txt) {
    // PipeDream's preprocessing: input sources first, then the sinks that
    // only unpack a tuple (sinks are taken after the inputs are gone).
    for (int i = 0; i < n; ++i)
      if (in[i].empty() && profile.nodes[i].name.rfind("Input", 0) == 0) keep[i] = false;
    for (int i = 0; i < n; ++i)
      if (keep[i] && out[i].empty() && profile.nodes[i].name.rfind("__getitem__", 0) == 0) keep[i] = false;
  }
  PlanningGraph g;
  std::vector<int> planned(n, -1);
  for (int i = 0; i < n; ++i) {
    if (!keep[i]) {
      g.dropped.push_back(i);
      continue;
    }
    const ProfileNode& p = profile.nodes[i];
    planned[i] = int(g.nodes.size());
    g.nodes.push_back({i, p.forward_ms / 1000, p.backward_ms / 1000, double(p.output_bytes),
                       double(p.activation_bytes), double(p.parameter_bytes), double(p.optimizer_state_bytes),
                       p.source_line, double(p.workspace_bytes),
                       double(p.forward_workspace_bytes > 0 ? p.forward_workspace_bytes : p.workspace_bytes),
                       double(p.weight_pass_bytes), double(p.shared_activation_bytes)});
  }
  if (g.nodes.empty()) throw UserError(cat(profile.source_path, ": the profile has no layers to plan"));
  g.out.resize(g.nodes.size());
  g.in.resize(g.nodes.size());
  for (int i = 0; i < n; ++i) {
    if (planned[i] < 0) continue;
    for (int o : out[i])
      if (planned[o] >= 0) {
        g.out[planned[i]].push_back(planned[o]);
        g.in[planned[o]].push_back(planned[i]);
      }
  }
  return g;
}

}  // namespace pd

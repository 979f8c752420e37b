// The "equal" baseline: equal compute per stage, no replication.
#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "planner/planner.h"
#include "planner/planning_graph.h"
#include "planner/state_space.h"

namespace pd {

Plan plan_equal_split(const Profile& profile, const Topology& topology) {
  PlanningGraph g = build_planning_graph(profile);
  // Topological prefixes: stages are contiguous in the planning order.
  StateSpace s = build_state_space(g, 1);
  const int n = s.size() - 1, stages = std::min(topology.total_workers(), n);
  const double total = s.compute[n], bandwidth = topology.levels.at(0).bandwidth_GBps * 1e9;
  std::vector<int> cuts = {0};
  for (int t = 1; t < stages; ++t) {
    // First prefix reaching t/stages of the compute, leaving a layer for each later stage.
    int cut = cuts.back() + 1;
    while (cut < n - (stages - t) && s.compute[cut] < total * t / stages) ++cut;
    cuts.push_back(cut);
  }
  cuts.push_back(n);
  Plan plan;
  plan.profile = {profile.source_path, profile.sha256, profile.model, profile.device, profile.batch_size};
  plan.topology = topology;
  plan.cost_model = CostModel::paper;
  plan.state_space = s.kind;
  std::vector<int> replicas;
  for (int t = 0; t < stages; ++t) {
    PlanStage st;
    st.index = t;
    st.replicas = 1;
    st.ranks = {t};
    for (int v : s.stage_nodes(cuts[t], cuts[t + 1])) {
      st.forward_s += g.nodes[v].forward_s, st.backward_s += g.nodes[v].backward_s;
      st.layer_names.push_back(profile.nodes[g.nodes[v].profile_index].name);
    }
    st.compute_s = st.forward_s + st.backward_s;
    st.output_bytes = uint64_t(s.cut_bytes[cuts[t + 1]]);
    st.transfer_s = 2.0 * s.cut_bytes[cuts[t]] / bandwidth;
    st.time_s = std::max(st.compute_s, st.transfer_s);
    st.first_layer = cuts[t];
    st.last_layer = cuts[t + 1] - 1;
    plan.time_per_minibatch_s = std::max(plan.time_per_minibatch_s, st.time_s);
    replicas.push_back(1);
    plan.stages.push_back(std::move(st));
  }
  plan.config = config_string(replicas);
  plan.noam = stages;
  plan.single_worker_s = total;
  return plan;
}

}  // namespace pd

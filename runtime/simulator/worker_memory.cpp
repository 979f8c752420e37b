#include "runtime/simulator/worker_memory.h"

#include <algorithm>

#include "planner/planning_graph.h"
#include "planner/recompute.h"
#include "runtime/schedule/schedule.h"

namespace pd {

std::vector<StageFootprint> stage_footprints(const Plan& plan, const Profile& profile, int microbatches) {
  const PlanningGraph g = build_planning_graph(profile);
  std::vector<int> planned(profile.nodes.size(), -1);  // profile index -> planning node (-1: dropped)
  for (size_t v = 0; v < g.nodes.size(); ++v) planned[size_t(g.nodes[v].profile_index)] = int(v);
  const auto all_nodes = stage_nodes(plan, profile);
  // An item's samples against the profiled batch's (a flush plan of `run
  // --plan auto` is profiled at the microbatch already).
  const int64_t batch = plan.batch > 0 ? plan.batch : profile.batch_size;
  const double share = profile.batch_size > 0 && batch > 0
                           ? double(batch) / std::max(1, microbatches) / double(profile.batch_size)
                           : 1.0 / std::max(1, microbatches);
  std::vector<StageFootprint> out;
  for (size_t s = 0; s < plan.stages.size(); ++s) {
    std::vector<int> nodes, recomputed;
    for (const ProfileNode* n : all_nodes[s])
      if (const int v = planned[size_t(n - profile.nodes.data())]; v >= 0) nodes.push_back(v);
    // A layer index counts the stage's nodes from its first layer (a DAG
    // plan numbers them in `nodes` order, a chain's are the profile's own).
    for (int l : plan.stages[s].recompute_layers) {
      const size_t at = size_t(l - plan.stages[s].first_layer);
      if (l < plan.stages[s].first_layer || at >= all_nodes[s].size()) continue;
      if (const int v = planned[size_t(all_nodes[s][at] - profile.nodes.data())]; v >= 0) recomputed.push_back(v);
    }
    StageFootprint f = stage_footprint(g, nodes, recomputed, plan.stages[s].replicas);
    f.activation_bytes *= share, f.workspace_bytes *= share, f.recompute_bytes *= share;
    f.forward_working_bytes *= share, f.backward_working_bytes *= share, f.input_backward_working_bytes *= share;
    out.push_back(f);
  }
  return out;
}

std::vector<double> predicted_worker_memory(const Plan& plan, const Profile& profile, const SimulationReport& rep) {
  const ScheduleOptions& o = rep.schedule;
  const Schedule schedule(plan, o);
  const std::vector<StageFootprint> stages = stage_footprints(plan, profile, o.microbatches);
  const bool split_measured = schedule.has_weight_passes() && records_weight_passes(profile);
  std::vector<double> out(rep.workers.size(), 0);
  for (const WorkerReport& w : rep.workers) {
    StageFootprint mine;  // its stages together: weights summed, one item's working memory at a time
    for (int c = 0; c < schedule.chunks(); ++c) {
      const StageFootprint& f = stages.at(size_t(schedule.stage_of(w.rank, c)));
      mine.parameter_bytes += f.parameter_bytes, mine.optimizer_state_bytes += f.optimizer_state_bytes;
      mine.replicas = std::max(mine.replicas, f.replicas);
      mine.workspace_bytes = std::max(mine.workspace_bytes, f.workspace_bytes);
      mine.recompute_bytes = std::max(mine.recompute_bytes, f.recompute_bytes);
    }
    // Split B and W with what W keeps measured: the replay's peak holds each
    // item's W context from its B on, which a recomputed layer's activations
    // made again become; the transient is inside it, not on top.
    if (split_measured) mine.recompute_bytes = 0;
    const double versions = std::max<double>(double(schedule.versions_kept()), double(w.peak_weight_versions));
    // A replay that priced each compute's working memory at its time
    // (set_memory_from_profile) holds it in its peak already.
    if (w.peak_working_bytes > 0) {
      mine.workspace_bytes = mine.recompute_bytes = 0;
      out.at(size_t(w.rank)) = worker_memory_bytes(mine, versions, double(w.peak_working_bytes));
      continue;
    }
    out.at(size_t(w.rank)) = worker_memory_bytes(mine, versions, double(w.peak_activation_bytes));
  }
  return out;
}

std::vector<double> predicted_stage_memory(const Plan& plan, const Profile& profile, const ScheduleOptions& schedule) {
  SimulationOptions o;
  o.schedule = schedule;
  // Past the pipeline's fill (a flush schedule's batches each reach its
  // peak; more of them change nothing but the replay's length).
  int64_t workers = 0;
  for (const PlanStage& st : plan.stages) workers += st.replicas;
  o.schedule.minibatches = 4 * workers + 4;
  const Schedule placed(plan, o.schedule);
  set_memory_from_profile(o, plan, profile);
  // The replay gives an item its share of a stage's output: a plan whose
  // profile measured one microbatch (`run --plan auto` with a flush
  // schedule) sends the batch's.
  Plan batch = plan;
  if (plan.batch > 0 && profile.batch_size > 0)
    for (PlanStage& st : batch.stages)
      st.output_bytes = uint64_t(double(st.output_bytes) * double(plan.batch) / double(profile.batch_size));
  const SimulationReport rep = simulate(batch, o);
  const std::vector<double> bytes = predicted_worker_memory(plan, profile, rep);
  std::vector<double> out(plan.stages.size(), 0);
  for (int r = 0; r < placed.workers(); ++r)
    for (int c = 0; c < placed.chunks(); ++c) out.at(size_t(placed.stage_of(r, c))) = bytes.at(size_t(r));
  return out;
}

}  // namespace pd

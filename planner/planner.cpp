// plan_pipeline: picks the cost model, then turns its stages into a Plan.
#include "planner/planner.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <optional>

#include "core/error.h"
#include "core/text.h"
#include "planner/paper_model.h"
#include "planner/pipedream_model.h"
#include "planner/plan_ties.h"
#include "planner/planning_graph.h"
#include "planner/stage_memory.h"

namespace pd {
namespace {

// Ranks are renumbered 0..R-1 in placement order (idle workers of a
// --fewer-workers plan drop out).
void compact_ranks(std::vector<PlannedStage>& stages) {
  std::vector<int> all;
  for (const auto& s : stages) all.insert(all.end(), s.ranks.begin(), s.ranks.end());
  std::sort(all.begin(), all.end());
  for (auto& s : stages)
    for (int& r : s.ranks) r = int(std::lower_bound(all.begin(), all.end(), r) - all.begin());
}

PlanStage to_plan_stage(const Profile& profile, const PlanningGraph& g, const PlannedStage& s, int index) {
  PlanStage out;
  out.index = index;
  out.replicas = int(s.ranks.size());
  out.ranks = s.ranks;
  double params = 0;
  for (int v : s.nodes) {
    const PlanningNode& n = g.nodes[v];
    out.forward_s += n.forward_s;
    out.backward_s += n.backward_s;
    out.optimizer_s += profile.nodes[n.profile_index].optimizer_ms / 1e3;
    params += n.parameter_bytes;
    out.nodes.push_back(profile.nodes[n.profile_index].id);
    out.layer_names.push_back(profile.nodes[n.profile_index].name);
  }
  out.compute_s = out.forward_s + out.backward_s;
  out.parameter_bytes = uint64_t(params);
  out.sync_s = s.sync_s;
  out.transfer_s = s.transfer_s;
  out.time_s = s.time_s;
  out.memory_bytes = uint64_t(s.memory_bytes);
  out.in_flight = s.in_flight;
  for (int v : s.recompute_nodes) out.recompute_layers.push_back(g.nodes[v].profile_index);
  std::sort(out.recompute_layers.begin(), out.recompute_layers.end());
  out.recompute_s = s.recompute_s;
  return out;
}

// What crosses each stage boundary per minibatch: every tensor made before
// it and used after it - skip connections included, forwarded through the
// stages in between (the planner's cut bytes, and what simulate sends).
void set_boundary_bytes(const PlanningGraph& g, const std::vector<PlannedStage>& planned,
                        std::vector<PlanStage>& stages) {
  std::vector<int> stage_of(g.nodes.size(), 0);
  for (size_t s = 0; s < planned.size(); ++s)
    for (int v : planned[s].nodes) stage_of[v] = int(s);
  std::vector<double> crossing(stages.size(), 0);
  for (size_t v = 0; v < g.nodes.size(); ++v) {
    int last_use = stage_of[v];
    for (int o : g.out[v]) last_use = std::max(last_use, stage_of[o]);
    for (int t = stage_of[v]; t < last_use; ++t) crossing[t] += g.nodes[v].output_bytes;
  }
  for (size_t s = 0; s < stages.size(); ++s) stages[s].output_bytes = uint64_t(crossing[s]);
}

// Each stage's in-flight count and memory per worker, from its placement
// (stage_memory.h; with --fewer-workers the planner's check counted
// in-flight over all the topology's workers, an upper bound).
void set_stage_memory(const PlanningGraph& g, const std::vector<PlannedStage>& planned, const PlannerOptions& options,
                      std::vector<PlanStage>& stages) {
  const int weight_versions = options.weight_versions;
  int used = 0, before = 0;
  for (const auto& s : stages) used += s.replicas;
  for (size_t s = 0; s < stages.size(); ++s) {
    StageFootprint f = stage_footprint(g, planned[s].nodes, planned[s].recompute_nodes, stages[s].replicas);
    f.weight_versions = weight_versions;
    stages[s].in_flight = weight_versions > 0 ? 1 : in_flight_1f1b_rr(used, before, f.replicas);
    double held = stages[s].in_flight;
    if (weight_versions > 0) {  // a flushing schedule's items (PlannerOptions::held_minibatches)
      f.workspace_bytes *= options.item_share, f.recompute_bytes *= options.item_share;
      held = options.held_at(stages[s].ranks.empty() ? before : stages[s].ranks.front());
    }
    stages[s].memory_bytes = uint64_t(stage_memory_bytes(f, held));
    before += f.replicas;
  }
}

PlannedPipeline run_model(const PlanningGraph& g, const Topology& topology, const PlannerOptions& options) {
  return options.cost_model == CostModel::pipedream ? plan_pipedream(g, topology, options)
                                                    : plan_paper(g, topology, options);
}

// No plan fits in less: the largest node alone, one minibatch in flight
// (recomputed, when that takes less and recomputation is allowed); under a
// flushing schedule's model, its versions and the fewest items any rank holds.
double smallest_footprint(const PlanningGraph& g, const PlannerOptions& options) {
  const RecomputeMode recompute = options.recompute;
  const bool flushing = options.weight_versions > 0;
  double held = 1;
  if (flushing && !options.held_minibatches.empty())
    held = *std::min_element(options.held_minibatches.begin(), options.held_minibatches.end());
  const double share = flushing ? options.item_share : 1.0;
  double most = 0;
  for (size_t v = 0; v < g.nodes.size(); ++v) {
    const PlanningNode& n = g.nodes[v];
    const StageFootprint plain{n.parameter_bytes, n.optimizer_state_bytes, n.activation_bytes, 1,
                               n.workspace_bytes * share, 0, options.weight_versions};
    double least = stage_memory_bytes(plain, held);
    if (recompute != RecomputeMode::none) {
      double input = 0;
      for (int u : g.in[v]) input += g.nodes[u].output_bytes;
      StageFootprint recomputed = plain;
      recomputed.activation_bytes = input;
      recomputed.recompute_bytes = std::max(0.0, n.activation_bytes - input) * share;
      const double r = stage_memory_bytes(recomputed, held);
      least = recompute == RecomputeMode::automatic ? std::min(least, r) : r;
    }
    most = std::max(most, least);
  }
  return most;
}

bool fits(const PlanningGraph& g, const Topology& topology, const PlannerOptions& options) {
  try {
    run_model(g, topology, options);
    return true;
  } catch (const NoFeasiblePlan&) {
    return false;
  }
}

// The least memory per worker that fits (a plan exists), to 0.05%, searched
// for about two seconds at most: each probe is a whole memory-limited plan.
// Both ends stay true: more_than does not fit (the limit given, or below the
// largest layer alone), fits does.
std::optional<MemoryNeed> least_memory(const PlanningGraph& g, const Topology& topology, PlannerOptions options,
                                       uint64_t below) {
  double everything = 0;
  for (const auto& n : g.nodes)
    everything += 2 * n.parameter_bytes + n.optimizer_state_bytes + 2 * n.activation_bytes + 2 * n.output_bytes +
                  n.workspace_bytes;
  uint64_t lo = std::max(below, uint64_t(std::max(1.0, smallest_footprint(g, options))) - 1);
  uint64_t hi = uint64_t(everything) + 1;
  options.memory_bytes = hi;
  options.explain_infeasible = false;
  if (!fits(g, topology, options)) return std::nullopt;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  while (hi - lo > 1 && double(hi - lo) > 0.0005 * double(lo) && std::chrono::steady_clock::now() < deadline) {
    uint64_t mid = lo + (hi - lo) / 2;
    options.memory_bytes = mid;
    (fits(g, topology, options) ? hi : lo) = mid;
  }
  return MemoryNeed{lo, hi};
}

// The request cannot be met: find the smallest per-worker memory (same
// workers) and the smallest worker count (same memory) that would work.
[[noreturn]] void explain_infeasible(const PlanningGraph& g, const Topology& topology, PlannerOptions options,
                                     const std::string& why) {
  uint64_t limit = options.memory_bytes ? options.memory_bytes : topology.worker_memory_bytes;
  std::string advice;
  uint64_t memory_fits = 0, memory_short = 0;
  int workers_fit = 0;
  if (limit > 0) {
    const std::optional<MemoryNeed> need = least_memory(g, topology, options, limit);
    if (need) memory_fits = need->fits, memory_short = need->more_than;
    if (options.recompute == RecomputeMode::none) {
      if (need)
        advice += cat("; with ", topology.total_workers(), " workers the least memory per worker that fits is ",
                      bytes_text(double(need->fits)), " (--memory ", need->fits, " fits, ", need->more_than,
                      " does not)");
    } else {
      PlannerOptions plain = options;
      plain.recompute = RecomputeMode::none;
      const std::optional<MemoryNeed> without = least_memory(g, topology, plain, limit);
      const auto text = [](const std::optional<MemoryNeed>& n, const std::string& flag) {
        return n ? cat("at least ", bytes_text(double(n->more_than)), " and ", bytes_text(double(n->fits)),
                       " fits (--memory ", n->fits, " fits, ", n->more_than, " does not, --recompute ", flag, ")")
                 : std::string("no size fits");
      };
      if (need || without)
        advice += cat("; with ", topology.total_workers(), " workers the least memory per worker that fits is, ",
                      "with recomputation, ", text(need, to_string(options.recompute)), "; without, ",
                      text(without, "none"));
    }
    options.memory_bytes = limit;
    if (topology.levels.size() == 1) {
      // A few more workers, then multiples (fits is not monotone in workers).
      const int R = topology.total_workers();
      std::vector<int> tries;
      for (int w = R + 1; w <= R + 8; ++w) tries.push_back(w);
      for (int k = 2; k <= 4; ++k) tries.push_back(std::max(k * R, R + 9));
      for (int workers : tries)
        if (fits(g, flat_topology(workers, topology.levels[0].bandwidth_GBps), options)) {
          advice += cat("; with ", bytes_text(double(limit)), " per worker, ", workers, " workers would fit");
          workers_fit = workers;
          break;
        }
    }
  }
  if (advice.empty()) advice = "; no memory limit or worker count up to 4x this one makes it fit";
  throw PlanDoesNotFit(cat(why, advice), memory_fits, memory_short, workers_fit);
}

// --straight puts one worker on each stage and a stage holds one layer or
// more: without --fewer-workers it needs a layer per worker.
void require_a_layer_per_worker(const Profile& profile, const PlanningGraph& g, const Topology& topology,
                                const PlannerOptions& options) {
  const int workers = topology.total_workers(), layers = static_cast<int>(g.nodes.size());
  if (!options.straight || options.fewer_workers || options.stage_replicas > 1 || layers >= workers) return;
  throw UserError(cat("--straight on ", workers, " workers needs ", workers, " stages of one layer or more, but ",
                      profile.model.empty() ? std::string("the model") : profile.model, " has ", layers,
                      layers == 1 ? " layer" : " layers", " to cut between: give --workers ", layers,
                      " or fewer, or --fewer-workers to let the plan leave workers idle"));
}

}  // namespace

Plan plan_pipeline(const Profile& profile, const Topology& topology, const PlannerOptions& options) {
  if (topology.levels.empty() || topology.total_workers() < 1)
    throw UserError("the topology has no workers: give --workers N (N >= 1) or a topology file with levels");
  if (options.activation_compression_ratio && !(*options.activation_compression_ratio > 0))
    throw UserError("--activation-compression-ratio must be positive");
  PD_CHECK(options.weight_versions == 0 || options.cost_model == CostModel::paper,
           "a flushing schedule's memory model is the paper cost model's");
  PlanningGraph g = build_planning_graph(profile);
  require_a_layer_per_worker(profile, g, topology, options);
  PlannedPipeline pipeline;
  try {
    const uint64_t limit = options.memory_bytes ? options.memory_bytes : topology.worker_memory_bytes;
    const double smallest = smallest_footprint(g, options);
    if (options.cost_model == CostModel::paper && limit > 0 && smallest > double(limit))
      throw NoFeasiblePlan(cat("a layer needs ", bytes_text(smallest), " on one worker, more than the ",
                               bytes_text(double(limit)), " memory limit"));
    pipeline = run_model(g, topology, options);
  } catch (const NoFeasiblePlan& e) {
    if (!options.explain_infeasible) throw UserError(e.what());
    explain_infeasible(g, topology, options, e.what());
  }
  compact_ranks(pipeline.stages);
  Plan plan;
  plan.profile = {profile.source_path, profile.sha256, profile.model, profile.device, profile.batch_size};
  plan.topology = topology;
  if (options.memory_bytes) plan.topology.worker_memory_bytes = options.memory_bytes;
  plan.cost_model = options.cost_model;
  plan.state_space = pipeline.state_space;
  std::vector<int> replicas;
  for (size_t s = 0; s < pipeline.stages.size(); ++s) {
    plan.stages.push_back(to_plan_stage(profile, g, pipeline.stages[s], int(s)));
    replicas.push_back(plan.stages.back().replicas);
  }
  set_boundary_bytes(g, pipeline.stages, plan.stages);
  set_stage_memory(g, pipeline.stages, options, plan.stages);
  // Layer ranges: for a chain, positions in profile order; the nodes a
  // PipeDream profile drops (its input, tuple unpacking) join the stage of
  // their neighbour. For a DAG, ranges number the nodes stage by stage and
  // `nodes` says which they are.
  const int total_nodes = int(profile.nodes.size());
  int next = 0;
  for (size_t s = 0; s < plan.stages.size(); ++s) {
    PlanStage& st = plan.stages[s];
    int count = int(st.nodes.size());
    if (s + 1 == plan.stages.size()) count = total_nodes - next;
    else if (s == 0) count += int(g.dropped.size());
    if (pipeline.state_space == StateSpaceKind::chain) {
      // chain positions: the stage's nodes are consecutive in profile order
      int last = 0;
      for (int v : pipeline.stages[s].nodes) last = std::max(last, g.nodes[v].profile_index);
      count = (s + 1 == plan.stages.size() ? total_nodes - 1 : last) - next + 1;
      st.nodes.clear();
    }
    st.first_layer = next;
    st.last_layer = next + std::max(count, 1) - 1;
    if (pipeline.state_space != StateSpaceKind::chain && !st.recompute_layers.empty()) {
      // The ranges number the stage's nodes in `nodes` order.
      std::vector<int> at;
      for (int l : st.recompute_layers) {
        const auto it = std::find(st.nodes.begin(), st.nodes.end(), profile.nodes[size_t(l)].id);
        at.push_back(st.first_layer + int(it - st.nodes.begin()));
      }
      std::sort(at.begin(), at.end());
      st.recompute_layers = at;
    }
    next = st.last_layer + 1;
  }
  plan.config = config_string(replicas);
  plan.noam = (plan.workers() + replicas[0] - 1) / replicas[0];
  double slowest = -1;
  for (const auto& st : plan.stages)
    if (st.time_s > slowest) slowest = st.time_s, plan.bottleneck_stage = st.index;
  plan.single_worker_s = pipeline.single_worker_s;
  plan.data_parallel_s = pipeline.data_parallel_s;
  // Tied parameters split over stages: their gradient exchange, once per step.
  plan.ties = plan_ties(profile, plan);
  set_predicted_time(plan, pipeline.time_per_minibatch_s + slowest_tie_exchange_s(plan), PredictedBy::closed_form);
  return plan;
}

void set_predicted_time(Plan& plan, double seconds, PredictedBy by) {
  plan.time_per_minibatch_s = seconds;
  plan.predicted_by = by;
  if (!(seconds > 0)) return;
  if (plan.profile.batch_size > 0) plan.throughput_samples_per_s = plan.profile.batch_size / seconds;
  auto speedup = [&](double baseline) { return std::isnan(baseline) ? 0.0 : baseline / seconds; };
  plan.speedup_vs_single = speedup(plan.single_worker_s);
  plan.speedup_vs_data_parallel = speedup(plan.data_parallel_s);
}

}  // namespace pd

#pragma once
// The plan format (docs/design.md §5): which layers form each stage, how many
// workers replicate it, and on which ranks. Read by simulate, schedule, run.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "planner/plan_kinds.h"
#include "planner/topology.h"

namespace pd {

struct PlanStage {
  int index = 0;
  int first_layer = 0, last_layer = 0;  // inclusive, in profile node order
  std::vector<std::string> layer_names;
  std::vector<int> nodes;               // profile node ids (DAG profiles)
  int replicas = 1;
  std::vector<int> ranks;
  double compute_s = 0;                 // forward + backward of one minibatch on one worker
  double forward_s = 0, backward_s = 0;
  double sync_s = 0, transfer_s = 0, time_s = 0;
  // The optimizer step per minibatch (the profile's optimizer_ms): not in
  // the planner's cost model (compute_s, time_s), replayed by simulate.
  double optimizer_s = 0;
  // Activation recomputation (docs/design.md §6): the layers (top-level
  // indices in [first_layer, last_layer], ascending) whose activations the
  // stage drops after the forward and recomputes before their backward,
  // and that second forward's time per minibatch (in time_s, not compute_s).
  std::vector<int> recompute_layers;
  double recompute_s = 0;
  uint64_t output_bytes = 0;            // activation sent to the next stage per minibatch
  uint64_t parameter_bytes = 0;
  uint64_t memory_bytes = 0;
  int in_flight = 1;
};

// A tied parameter (the profile's "tie_groups") read in several stages:
// each of them holds a copy (charged in its parameter and optimizer bytes),
// and every optimizer step exchanges its gradient between them
// (runtime/tied_gradients.h), which the prediction and simulate price.
struct PlanTie {
  std::string parameter;
  uint64_t bytes = 0;       // one copy of the gradient
  std::vector<int> stages;  // ascending, two or more
  double exchange_s = 0;    // per optimizer step: the slowest link between the stages
};

struct ProfileRef {
  std::string path, sha256, model, device;
  int batch_size = 0;
};

struct Plan {
  std::string format = "pipedream-plan/1";
  ProfileRef profile;
  Topology topology;
  CostModel cost_model = CostModel::paper;
  // The schedule the plan is for, by name: runtime/schedule's registry
  // (schedule_kind.h) owns the names, which the planner only records.
  std::string schedule = "1f1b-rr";
  // What the schedule was chosen and predicted for (`plan --schedule auto`,
  // `run --plan auto --schedule X`), which `run --plan` takes unless told
  // otherwise: microbatches and virtual stages of a flush schedule, and the
  // minibatch (--batch) they split. 0: not recorded.
  int microbatches = 0, virtual_stages = 0;
  int64_t batch = 0;
  std::string config;  // "7-1"
  int noam = 1;
  std::optional<StateSpaceKind> state_space;  // unset: not recorded ("" in plan.json)
  std::vector<PlanStage> stages;
  std::vector<PlanTie> ties;  // plan.json "tie_groups"
  double time_per_minibatch_s = 0, throughput_samples_per_s = 0;
  // closed_form: the planner's cost model; replay: simulate's time for the
  // plan (runtime/simulator/plan_search.h), the closed form beside it.
  PredictedBy predicted_by = PredictedBy::closed_form;
  double closed_form_s = 0;        // this plan's closed-form time (0: not recorded)
  double closed_form_bound_s = 0;  // no plan of the planner's space has a lower closed form (0: not recorded)
  // `run --plan auto`: the workers share one machine's cores, so a
  // minibatch takes at least its total compute x threads / cores (0: not
  // recorded); predicted_by shared_cores when that bound is the prediction.
  double shared_cores_bound_s = 0;
  double speedup_vs_single = 0, speedup_vs_data_parallel = 0;
  int bottleneck_stage = 0;
  // NaN: the baseline does not fit in worker memory (null in plan.json).
  double single_worker_s = 0, data_parallel_s = 0;

  // The stage structure the predictions above and the stages' costs were
  // computed for (stage_fingerprint; plan.json "predicted": "for_stages").
  // "" when the file does not record it.
  std::string predictions_for;

  int workers() const;  // sum of replicas
  // True when the stages were edited after the predictions were computed:
  // the stored times, memory and speed-ups describe another plan.
  bool predictions_stale() const;
  int stage_of_rank(int rank) const;
};

nlohmann::json plan_to_json(const Plan& p);
// Checks consistency (contiguous layer ranges, ranks 0..R-1 each once,
// replicas == ranks.size()); throws UserError naming the field.
Plan plan_from_json(const nlohmann::json& j, const std::string& source);
Plan read_plan(const std::string& path);
void write_plan(const Plan& p, const std::string& path);  // atomic
std::string config_string(const std::vector<int>& replicas);  // {7,1} -> "7-1"
// A hash of what the predictions depend on: every stage's layers (or nodes)
// and replicas, and the profiled batch size (not which ranks run a stage).
std::string stage_fingerprint(const Plan& p);
// Per layer of the stage's range: whether it is recomputed (empty: none).
std::vector<bool> recompute_flags(const PlanStage& s);

}  // namespace pd

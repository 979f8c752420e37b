#pragma once
// Small pipelines for the runtime tests: an mlp on synthetic data and
// plans built in code.
#include <numeric>
#include <vector>

#include "models/dataset.h"
#include "models/model.h"
#include "planner/plan.h"
#include "runtime/run_spec.h"
#include "runtime/trainer.h"

namespace pd::testing {

// mlp with 8 top-level layers: flatten, fc1, relu1, fc2, relu2, fc3, relu3, fc4.
inline Model small_mlp() { return resolve_model("mlp", "", "hidden=24,depth=3"); }

// ranges: inclusive layer ranges per stage; replicas per stage; ranks in order.
inline Plan make_plan(const std::vector<std::pair<int, int>>& ranges, const std::vector<int>& replicas) {
  Plan p;
  int rank = 0;
  std::vector<int> counts;
  for (size_t i = 0; i < ranges.size(); ++i) {
    PlanStage s;
    s.index = static_cast<int>(i);
    s.first_layer = ranges[i].first;
    s.last_layer = ranges[i].second;
    s.replicas = replicas[i];
    for (int k = 0; k < replicas[i]; ++k) s.ranks.push_back(rank++);
    counts.push_back(replicas[i]);
    p.stages.push_back(s);
  }
  p.config = config_string(counts);
  return p;
}

inline Plan plan_1111() { return make_plan({{0, 1}, {2, 3}, {4, 5}, {6, 7}}, {1, 1, 1, 1}); }
inline Plan plan_211() { return make_plan({{0, 3}, {4, 5}, {6, 7}}, {2, 1, 1}); }

inline RunSpec small_spec(const Plan& plan, const ScheduleKind* kind, WeightPolicy policy, int64_t steps,
                          int microbatches = 1, int64_t batch = 8) {
  RunSpec s;
  s.plan = plan;
  s.schedule.kind = kind;
  s.schedule.policy = policy;
  s.schedule.microbatches = microbatches;
  s.schedule.minibatches = steps;
  s.batch = batch;
  s.seed = 7;
  s.optimizer.lr = 0.05f;
  s.optimizer.momentum = 0.9f;
  s.lr.base_lr = s.optimizer.lr;
  s.lr.total_steps = steps;
  s.evaluate = false;
  return s;
}

inline TrainOptions train_options(const RunSpec& s, int64_t batch, int delay = 0) {
  TrainOptions o;
  o.minibatches = s.steps();
  o.batch = batch;
  o.optimizer = s.optimizer;
  o.seed = s.seed;
  o.gradient_delay = delay;
  o.evaluate = false;
  return o;
}

}  // namespace pd::testing

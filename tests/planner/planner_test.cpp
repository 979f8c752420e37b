// plan_pipeline end to end: the paper's Table 1 row, plan invariants,
// hierarchical topologies, DAG state spaces, infeasible requests.
#include <gtest/gtest.h>

#include <random>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "planner/planner.h"

namespace pd {
namespace {

Profile reference(const std::string& model) {
  return read_profile(std::string(PD_SOURCE_DIR) + "/tests/data/pipedream-profiles/" + model + "/graph.txt");
}

void expect_valid(const Plan& plan, int workers) {
  EXPECT_EQ(plan.workers(), workers);
  std::vector<int> seen(workers, 0);
  for (const auto& s : plan.stages) {
    EXPECT_EQ(int(s.ranks.size()), s.replicas);
    for (int r : s.ranks) ++seen.at(r);
    EXPECT_GE(s.forward_s, 0);
    EXPECT_NEAR(s.compute_s, s.forward_s + s.backward_s, 1e-12);
    EXPECT_LE(s.time_s, plan.time_per_minibatch_s * (1 + 1e-12));
  }
  for (int c : seen) EXPECT_EQ(c, 1);
  // The JSON form passes the reader's consistency checks.
  Plan back = plan_from_json(plan_to_json(plan), "plan");
  EXPECT_EQ(back.config, plan.config);
}

TEST(Planner, Vgg16OnEightWorkersAt10GbitIs7To1) {
  Plan plan = plan_pipeline(reference("vgg16"), flat_topology(8, 1.25), PlannerOptions{});
  EXPECT_EQ(plan.config, "7-1");
  EXPECT_EQ(plan.state_space, StateSpaceKind::antichain);  // a View/Size diamond before the classifier
  EXPECT_EQ(plan.noam, 2);
  expect_valid(plan, 8);
  EXPECT_GT(plan.speedup_vs_data_parallel, 1.0);
  // Stage 0 holds the convolutions, the last stage the classifier.
  EXPECT_EQ(plan.stages.back().last_layer, int(reference("vgg16").nodes.size()) - 1);
  EXPECT_GT(plan.stages[0].output_bytes, 0u);
  EXPECT_EQ(plan.stages.back().output_bytes, 0u);
}

TEST(Planner, StagesCarryWhatTheSimulatorNeeds) {
  Profile p = reference("alexnet");
  Plan plan = plan_pipeline(p, flat_topology(4, 1.25), PlannerOptions{});
  expect_valid(plan, 4);
  double forward = 0, backward = 0, params = 0;
  for (const auto& s : plan.stages) forward += s.forward_s, backward += s.backward_s, params += s.parameter_bytes;
  double want_f = 0, want_b = 0, want_p = 0;
  for (const auto& n : p.nodes)
    if (n.name.rfind("Input", 0) != 0) want_f += n.forward_ms / 1000, want_b += n.backward_ms / 1000, want_p += n.parameter_bytes;
  EXPECT_NEAR(forward, want_f, 1e-9);
  EXPECT_NEAR(backward, want_b, 1e-9);
  EXPECT_NEAR(params, want_p, 1);
  // Replicas of a stage sit on consecutive ranks, stage 0 first.
  int next = 0;
  for (const auto& s : plan.stages)
    for (int r : s.ranks) EXPECT_EQ(r, next++);
}

TEST(Planner, HierarchicalTopologyWithOneServerEqualsFlat) {
  Profile p = reference("vgg16");
  Topology nested;
  nested.levels = {{8, 1.25}, {1, 0.5}};
  Plan flat = plan_pipeline(p, flat_topology(8, 1.25), PlannerOptions{});
  Plan two = plan_pipeline(p, nested, PlannerOptions{});
  EXPECT_DOUBLE_EQ(two.time_per_minibatch_s, flat.time_per_minibatch_s);
  EXPECT_EQ(two.config, flat.config);
}

TEST(Planner, HierarchicalPlansUseEveryWorker) {
  Topology t;
  t.levels = {{4, 150}, {2, 3.125}};
  for (const char* model : {"vgg16", "resnet18"}) {
    Plan plan = plan_pipeline(reference(model), t, PlannerOptions{});
    expect_valid(plan, 8);
    EXPECT_GT(plan.time_per_minibatch_s, 0);
  }
}

TEST(Planner, DagProfilesSayWhichStateSpace) {
  PlannerOptions options;
  Plan plan = plan_pipeline(reference("resnet18"), flat_topology(4, 1.25), options);
  EXPECT_EQ(plan.state_space, StateSpaceKind::antichain);
  expect_valid(plan, 4);
  size_t nodes = 0;
  for (const auto& s : plan.stages) nodes += s.nodes.size();
  EXPECT_GT(nodes, 0u);
  options.max_antichain_states = 10;
  Plan prefix = plan_pipeline(reference("resnet18"), flat_topology(4, 1.25), options);
  EXPECT_EQ(prefix.state_space, StateSpaceKind::topological_prefix);
  expect_valid(prefix, 4);
  // Prefixes are a subset of the down-sets: never better.
  EXPECT_GE(prefix.time_per_minibatch_s, plan.time_per_minibatch_s * (1 - 1e-12));
}

TEST(Planner, StraightPipelinesHaveOneReplicaPerStage) {
  PlannerOptions options;
  options.straight = true;
  Plan plan = plan_pipeline(reference("vgg16"), flat_topology(4, 1.25), options);
  EXPECT_EQ(plan.config, "1-1-1-1");
}

TEST(Planner, InfeasibleRequestsNameWhatWouldWork) {
  PlannerOptions options;
  options.memory_bytes = 1000;
  try {
    plan_pipeline(reference("alexnet"), flat_topology(4, 1.25), options);
    FAIL() << "expected UserError";
  } catch (const PlanDoesNotFit& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("memory"), std::string::npos) << msg;
    EXPECT_NE(msg.find("the least memory per worker that fits is"), std::string::npos) << msg;
    // Both figures are true: the one said to fit does, the one said not to does not.
    ASSERT_GT(e.memory_that_fits, e.memory_that_does_not) << msg;
    options.memory_bytes = e.memory_that_fits;
    EXPECT_NO_THROW(plan_pipeline(reference("alexnet"), flat_topology(4, 1.25), options)) << msg;
    options.memory_bytes = e.memory_that_does_not;
    EXPECT_THROW(plan_pipeline(reference("alexnet"), flat_topology(4, 1.25), options), PlanDoesNotFit) << msg;
  }
  EXPECT_THROW(flat_topology(0, 1.0), UserError);
}

// When nothing fits, the error names the least memory that fits with
// recomputation and without, each with its flags, and each figure is true:
// planning with it succeeds (and with "at least" X, X itself does not fit).
TEST(Planner, InfeasibleRequestsNameTheLeastMemoryWithAndWithoutRecomputation) {
  const Profile vgg = reference("vgg16");
  PlannerOptions options;
  options.memory_bytes = 1000;
  options.recompute = RecomputeMode::automatic;
  std::string msg;
  try {
    plan_pipeline(vgg, flat_topology(4, 1.25), options);
    FAIL() << "expected UserError";
  } catch (const UserError& e) {
    msg = e.what();
  }
  for (const auto& [flag, mode] : {std::pair{std::string("auto"), RecomputeMode::automatic},
                                   std::pair{std::string("none"), RecomputeMode::none}}) {
    const std::string tail = " --recompute " + flag + ")";
    const size_t at = msg.find(tail);
    ASSERT_NE(at, std::string::npos) << msg;
    const size_t from = msg.rfind("--memory ", at) + 9;
    const uint64_t fits = std::stoull(msg.substr(from, at - from));
    const size_t least_at = msg.rfind("at least ", at);
    ASSERT_NE(least_at, std::string::npos) << msg;
    PlannerOptions o = options;
    o.recompute = mode;
    o.memory_bytes = fits;
    EXPECT_NO_THROW(plan_pipeline(vgg, flat_topology(4, 1.25), o)) << flag << ": " << msg;
  }
  // Recomputation lets vgg16 fit in less.
  const size_t with = msg.find("--recompute auto"), without = msg.find("--recompute none");
  const auto number_before = [&](size_t at) {
    const size_t from = msg.rfind("--memory ", at) + 9;
    return std::stoull(msg.substr(from, at - 1 - from));
  };
  EXPECT_LT(number_before(with), number_before(without)) << msg;
}

}  // namespace
}  // namespace pd

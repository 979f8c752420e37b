// The planner on real cluster shapes (issue: planner soundness): every
// PipeDream profile, on flat and two-level topologies (both files in
// configs/topologies among them), with no memory limit and with four limits
// from loose to infeasible. `pipedream plan` (search_plan) must be what
// `pipedream simulate` replays, never slower than one worker or data
// parallelism where they fit, unchanged by a limit that does not bind, and
// never slower with more memory.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "planner/plan.h"
#include "planner/planner.h"
#include "profiler/profile.h"
#include "runtime/simulator/plan_search.h"

namespace pd {
namespace {

const std::string kProfiles = PD_SOURCE_DIR "/tests/data/pipedream-profiles/";

struct NamedTopology {
  std::string name;
  Topology topology;  // no memory limit
};

std::vector<NamedTopology> grid_topologies() {
  auto two_level = [](int inner, double inner_gbps, int outer, double outer_gbps) {
    Topology t;
    t.levels = {{inner, inner_gbps}, {outer, outer_gbps}};
    return t;
  };
  auto from_file = [](const std::string& name) {
    Topology t = read_topology(PD_SOURCE_DIR "/configs/topologies/" + name);
    t.worker_memory_bytes = 0;
    return t;
  };
  return {{"flat 16 x 1.25", flat_topology(16, 1.25)},
          {"flat 8 x 12", flat_topology(8, 12)},
          {"flat 32 x 3.125", flat_topology(32, 3.125)},
          {"4x4-pcie-10gbe", from_file("4x4-pcie-10gbe.json")},
          {"dgx-16x8-25gbe", from_file("dgx-16x8-25gbe.json")},
          {"2 x 8 x 12 | 1.25", two_level(8, 12, 2, 1.25)},
          {"4 x 2 x 150 | 3.125", two_level(2, 150, 4, 3.125)}};
}

struct Outcome {
  bool feasible = false;
  double predicted = 0, replayed = 0, memory = 0;
  std::string config;
};

Outcome plan_and_replay(const Profile& profile, const Topology& topology, uint64_t memory) {
  PlannerOptions options;
  options.memory_bytes = memory;
  Outcome o;
  Plan plan;
  try {
    plan = search_plan(profile, topology, options).plan;
  } catch (const UserError&) {
    return o;
  }
  // As `pipedream simulate --plan plan.json` sees it: through the file format.
  Plan read_back = plan_from_json(plan_to_json(plan), "plan.json");
  o.feasible = true;
  o.predicted = read_back.time_per_minibatch_s;
  o.replayed = replay_time(read_back);
  o.config = plan.config;
  for (const auto& s : plan.stages) o.memory = std::max(o.memory, double(s.memory_bytes));
  const double slack = 1 + 1e-9;
  if (!std::isnan(plan.single_worker_s)) EXPECT_LE(o.predicted, plan.single_worker_s * slack) << "slower than one worker";
  if (!std::isnan(plan.data_parallel_s))
    EXPECT_LE(o.predicted, plan.data_parallel_s * slack) << "slower than data parallelism";
  EXPECT_NEAR(o.replayed / o.predicted, 1.0, 0.05) << "simulate disagrees with the prediction";
  return o;
}

TEST(PlanGrid, PipeDreamProfilesOnFlatAndTwoLevelClustersWithMemoryLimits) {
  int plans = 0, infeasible = 0;
  std::printf("%-9s %-20s %-10s %-26s %12s %12s %8s %10s\n", "model", "topology", "memory", "config", "predicted",
              "simulate", "error", "GB/worker");
  for (const char* model : {"alexnet", "vgg16", "resnet18", "resnet50", "gnmt"}) {
    const Profile profile = read_profile(kProfiles + model + "/graph.txt");
    for (const NamedTopology& nt : grid_topologies()) {
      SCOPED_TRACE(std::string(model) + " on " + nt.name);
      const Outcome unlimited = plan_and_replay(profile, nt.topology, 0);
      ASSERT_TRUE(unlimited.feasible);
      // Loose, exactly what the unlimited plan needs, binding, infeasible.
      const double need = unlimited.memory;
      const std::vector<std::pair<std::string, uint64_t>> limits = {
          {"none", 0}, {"2x need", uint64_t(2 * need)}, {"need", uint64_t(std::ceil(need))},
          {"need/2", uint64_t(need / 2)}, {"1 MB", 1'000'000}};
      std::vector<Outcome> outcomes;
      for (const auto& [label, bytes] : limits) {
        SCOPED_TRACE("memory " + label);
        Outcome o = bytes == 0 ? unlimited : plan_and_replay(profile, nt.topology, bytes);
        if (o.feasible) {
          std::printf("%-9s %-20s %-10s %-26s %9.3f ms %9.3f ms %+7.2f%% %10.2f\n", model, nt.name.c_str(),
                      label.c_str(), o.config.substr(0, 26).c_str(), o.predicted * 1e3, o.replayed * 1e3,
                      100 * (o.replayed / o.predicted - 1), o.memory / 1e9);
          ++plans;
        } else {
          std::printf("%-9s %-20s %-10s %-26s\n", model, nt.name.c_str(), label.c_str(), "(no plan fits)");
          ++infeasible;
        }
        outcomes.push_back(o);
      }
      // A limit at or above what the unlimited plan needs changes nothing.
      for (size_t i : {1, 2}) {
        ASSERT_TRUE(outcomes[i].feasible) << limits[i].first;
        EXPECT_NEAR(outcomes[i].predicted, unlimited.predicted, 1e-9 * unlimited.predicted) << limits[i].first;
      }
      // Less memory is never faster, and what fits with less fits with more.
      for (size_t i = 2; i + 1 < outcomes.size(); ++i) {
        if (outcomes[i + 1].feasible) {
          EXPECT_TRUE(outcomes[i].feasible) << limits[i].first;
          EXPECT_GE(outcomes[i + 1].predicted, outcomes[i].predicted * (1 - 1e-9)) << limits[i + 1].first;
        }
      }
      EXPECT_FALSE(outcomes.back().feasible) << "1 MB per worker cannot hold " << model;
    }
  }
  std::printf("%d plans, %d infeasible requests\n", plans, infeasible);
  EXPECT_EQ(plans + infeasible, 5 * 7 * 5);
}

}  // namespace
}  // namespace pd

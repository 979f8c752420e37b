// `--cost-model pipedream` against the outputs of PipeDream's own optimizer.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "planner/pipedream_model.h"
#include "planner/planner.h"
#include "planner/planning_graph.h"

namespace pd {
namespace {

TEST(PipedreamGolden, ReproducesEveryRow) {
  std::ifstream in(std::string(PD_SOURCE_DIR) + "/tests/data/pipedream-golden.jsonl");
  ASSERT_TRUE(in) << "missing tests/data/pipedream-golden.jsonl";
  std::map<std::string, Profile> profiles;
  std::string line;
  int rows = 0, matched = 0, ties = 0, unverified = 0;
  double worst = 0;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    auto row = nlohmann::json::parse(line);
    std::string model = row["profile"];
    if (!profiles.count(model))
      profiles[model] = read_profile(std::string(PD_SOURCE_DIR) + "/tests/data/pipedream-profiles/" + model + "/graph.txt");
    Topology topology;
    for (size_t l = 0; l < row["workers_per_level"].size(); ++l)
      topology.levels.push_back({row["workers_per_level"][l].get<int>(), row["bandwidth_Bps_per_level"][l].get<double>() / 1e9});
    PlannerOptions options;
    options.cost_model = CostModel::pipedream;
    options.straight = row["straight_pipeline"];
    options.fewer_workers = row["use_fewer_machines"];
    if (!row["memory_limit_bytes"].is_null()) options.memory_bytes = uint64_t(row["memory_limit_bytes"].get<double>());
    if (!row["activation_compression_ratio"].is_null())
      options.activation_compression_ratio = row["activation_compression_ratio"].get<double>();
    Plan plan = plan_pipeline(profiles[model], topology, options);
    double want = row["pipeline_time_per_minibatch_s"];
    double error = std::abs(plan.time_per_minibatch_s - want) / want;
    worst = std::max(worst, error);
    ++rows;
    EXPECT_LE(error, 1e-9) << line << "\n got " << plan.time_per_minibatch_s;
    EXPECT_NEAR(plan.single_worker_s, row["single_worker_time_s"].get<double>(), 1e-9 * plan.single_worker_s);
    EXPECT_NEAR(plan.data_parallel_s, row["data_parallel_time_per_minibatch_s"].get<double>(),
                1e-9 * plan.data_parallel_s);
    // The top-level config string, where the outermost level has one group size.
    std::vector<int> top;
    for (const auto& stage : row["levels_printed"].back()) top.push_back(stage[3]);
    if (row["workers_per_level"].size() == 1 && plan.config != row["top_level_config"].get<std::string>()) {
      // A different config is only right when PipeDream's is optimal too (a tie).
      std::vector<PipedreamLayoutStage> layout;
      for (const auto& stage : row["levels_printed"].back())
        layout.push_back({stage[0].get<int>(), stage[1].get<int>(), stage[3].get<int>()});
      double theirs = evaluate_pipedream_layout(build_planning_graph(profiles[model]), topology, options, layout);
      bool same_numbering = true;
      for (size_t t = 0; t < layout.size(); ++t)
        same_numbering &= std::abs(layout[t].compute_s - row["levels_printed"].back()[t][2].get<double>()) < 1e-9;
      if (same_numbering) {
        // PipeDream's layout, evaluated under the same rules, must be optimal too.
        EXPECT_NEAR(theirs, plan.time_per_minibatch_s, 1e-12 * theirs) << "not a tie: " << line;
        ++ties;
      } else {
        // DAG states numbered differently (PipeDream's order depends on
        // Python set iteration): the time above is the check.
        ++unverified;
      }
    }
    if (error <= 1e-9) ++matched;
  }
  EXPECT_EQ(rows, 80);
  std::printf("pipedream golden: %d/%d rows matched, max relative error %.3g, %d configs differ by a verified tie, %d differ on DAG rows with other state numbering\n", matched, rows, worst, ties, unverified);
}

}  // namespace
}  // namespace pd

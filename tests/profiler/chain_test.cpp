// The profile -> plan -> simulate chain on a measured profile: what
// `pipedream profile` writes is enough for the planner and the simulator.
// (scripts/profile_zoo_chain.sh runs the same chain over every zoo model.)
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "planner/planner.h"
#include "profiler/measure.h"
#include "runtime/simulator/simulator.h"

namespace pd {
namespace {

TEST(ProfileChain, MeasuredProfilePlansAndSimulates) {
  Model m = build_model(zoo_spec("cnn"));
  ProfileOptions o;
  o.batch = 2;
  o.threads = 1;
  o.warmup = 0;
  o.iters = 1;
  const std::string path = (std::filesystem::temp_directory_path() / "pd_chain_profile.json").string();
  write_profile_json(measure_profile(m, o), path);
  Profile profile = read_profile(path);
  std::remove(path.c_str());

  for (int workers : {1, 2, 4}) {
    Plan plan = plan_pipeline(profile, flat_topology(workers, 10.0), PlannerOptions{});
    EXPECT_EQ(plan.profile.model, "cnn");
    EXPECT_EQ(plan.profile.batch_size, 2);
    EXPECT_EQ(plan.profile.sha256, profile.sha256);
    EXPECT_EQ(plan.stages.front().first_layer, 0);
    EXPECT_EQ(plan.stages.back().last_layer, m.size() - 1);
    EXPECT_GT(plan.time_per_minibatch_s, 0);

    SimulationOptions so;
    so.schedule.minibatches = 16;
    so.stashed_bytes = stashed_bytes_from_profile(plan, profile);
    SimulationReport r = simulate(plan, so);
    EXPECT_EQ(r.workers.size(), static_cast<size_t>(plan.workers()));
    EXPECT_GT(r.time_per_minibatch_s, 0) << workers << " workers";
  }
}

// scripts/profile_zoo_chain.sh: every *.plan.json in $PD_CHAIN_DIR (made by
// `pipedream plan` from a measured profile) simulates. Skipped when the
// variable is not set (ctest).
TEST(ProfileChain, PlansInFolderSimulate) {
  const char* dir = std::getenv("PD_CHAIN_DIR");
  if (!dir) GTEST_SKIP() << "set PD_CHAIN_DIR (scripts/profile_zoo_chain.sh does)";
  int simulated = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    const std::string suffix = ".plan.json";
    if (name.size() <= suffix.size() || name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0)
      continue;
    const std::string stem = name.substr(0, name.size() - suffix.size());
    Plan plan = read_plan(entry.path().string());
    Profile profile = read_profile(plan.profile.path);
    EXPECT_EQ(plan.profile.sha256, profile.sha256) << stem;
    SimulationOptions so;
    so.schedule.minibatches = 32;
    so.stashed_bytes = stashed_bytes_from_profile(plan, profile);
    SimulationReport r = simulate(plan, so);
    EXPECT_GT(r.time_per_minibatch_s, 0) << stem;
    std::printf("%-20s config %-8s planned %.3f ms/minibatch, simulated %.3f ms/minibatch\n", stem.c_str(),
                plan.config.c_str(), 1e3 * plan.time_per_minibatch_s, 1e3 * r.time_per_minibatch_s);
    ++simulated;
  }
  EXPECT_GT(simulated, 0) << "no *.plan.json in " << dir;
}

}  // namespace
}  // namespace pd

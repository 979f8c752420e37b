// What `pipedream` prints to a user with the README in hand: the workers a
// run really uses, one meaning of --batch, comparisons only where they mean
// something, plans edited after planning, and output of the cost models
// that lack some figures.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include <nlohmann/json.hpp>

#include "core/safetensors.h"
#include "planner/plan.h"
#include "tests/integration/run_job.h"

namespace pd::testing {
namespace {

namespace fs = std::filesystem;

std::string file_text(const std::string& path) {
  std::ifstream f(path);
  return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

// The mlp with hidden=24, depth=3 has 8 layers.
const std::string kModel = " --model mlp --model-options hidden=24,depth=3 --data synthetic --seed 3";

std::string one_stage_plan(const std::string& predicted) {
  return R"({"format": "pipedream-plan/1", "config": "1", "profile": {"model": "mlp", "batch_size": 8},
    "stages": [{"index": 0, "layers": [0, 7], "replicas": 1, "ranks": [0], "memory_bytes": 1000}])" +
         predicted + "}";
}

// A profile of two layers, fc1 -> fc2 (batch 4, 8-byte activations), each
// with these forward and backward ms and parameter bytes.
struct LayerCosts {
  int forward_ms, backward_ms;
  uint64_t parameter_bytes;
};
std::string two_layer_profile(const LayerCosts& fc1, const LayerCosts& fc2) {
  auto node = [](int id, const char* name, const LayerCosts& c) {
    return nlohmann::json{{"id", id}, {"name", name}, {"forward_ms", c.forward_ms}, {"backward_ms", c.backward_ms},
                          {"output_bytes", 8}, {"activation_bytes", 8}, {"parameter_bytes", c.parameter_bytes}};
  };
  return nlohmann::json{{"format", "pipedream-profile/1"}, {"model", "m"}, {"batch_size", 4},
                        {"nodes", {node(0, "fc1", fc1), node(1, "fc2", fc2)}}, {"edges", {{0, 1}}}}
      .dump();
}

std::string eight_stage_plan() {
  std::string stages;
  for (int s = 0; s < 8; ++s)
    stages += (s ? ", " : "") + std::string(R"({"index": )") + std::to_string(s) + R"(, "layers": [)" +
              std::to_string(s) + ", " + std::to_string(s) + R"(], "replicas": 1, "ranks": [)" + std::to_string(s) +
              "]}";
  return R"({"format": "pipedream-plan/1", "config": "1-1-1-1-1-1-1-1", "stages": [)" + stages + "]}";
}

class UserOutput : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = scratch_dir("user_output"); }
  void TearDown() override { fs::remove_all(dir_); }
  JobResult pipedream(const std::string& args) { return run_shell(pipedream_binary() + " " + args, 120); }
  std::string dir_;
};

// interleaved-1f1b runs v stages per worker: the run says how many workers
// it starts and which worker runs each stage.
TEST_F(UserOutput, InterleavedRunNamesTheWorkersItUses) {
  write_text(dir_ + "/plan8.json", eight_stage_plan());
  const JobResult r = pipedream("run --reference --plan " + dir_ + "/plan8.json" + kModel +
                                " --schedule interleaved-1f1b --virtual-stages 2 --microbatches 4 --batch 8"
                                " --minibatches 1 --no-eval --threads-per-worker 1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("8 stages on 4 workers (interleaved-1f1b: 2 stages per worker"), std::string::npos)
      << r.output;
  EXPECT_EQ(r.output.find("8 stages on 8 workers"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("  stage 5: layer 5 ("), std::string::npos) << r.output;
  EXPECT_NE(r.output.find(") on worker 1\n"), std::string::npos) << r.output;
}

// --batch is the minibatch for every schedule, as for `train`: a flush run
// of --batch 8 in 4 microbatches trains what train --batch 8 --microbatches 4
// trains, and says so.
TEST_F(UserOutput, BatchIsTheWholeMinibatchWithFlushSchedules) {
  write_text(dir_ + "/plan.json", one_stage_plan(""));
  const JobResult train = pipedream("train" + kModel + " --batch 8 --microbatches 4 --minibatches 3 --no-eval "
                                    "--threads 1 --save " + dir_ + "/train.safetensors");
  ASSERT_EQ(train.exit_code, 0) << train.output;
  const JobResult run = pipedream("run --plan " + dir_ + "/plan.json" + kModel +
                                  " --schedule gpipe --microbatches 4 --batch 8 --minibatches 3 --no-eval "
                                  "--threads-per-worker 1 --save " + dir_ + "/run.safetensors");
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_NE(run.output.find("gpipe, batches of 8: 4 microbatches of 2)"), std::string::npos) << run.output;
  EXPECT_EQ(run.output.find("weights stash"), std::string::npos) << run.output;
  const auto a = load_by_name(dir_ + "/train.safetensors"), b = load_by_name(dir_ + "/run.safetensors");
  ASSERT_EQ(a.size(), b.size());
  for (const auto& [name, t] : a) {
    ASSERT_TRUE(b.count(name)) << name;
    const Tensor& u = b.at(name);
    ASSERT_EQ(t.numel(), u.numel()) << name;
    for (int64_t k = 0; k < t.numel(); ++k) ASSERT_NEAR(t.f32()[k], u.f32()[k], 1e-6) << name << "[" << k << "]";
  }

  const JobResult uneven = pipedream("run --plan " + dir_ + "/plan.json" + kModel +
                                     " --schedule gpipe --microbatches 3 --batch 8 --minibatches 1 --no-eval");
  EXPECT_EQ(uneven.exit_code, 2) << uneven.output;
  EXPECT_NE(uneven.output.find("--batch 8 does not split into 3 equal microbatches"), std::string::npos)
      << uneven.output;
}

// A short run, and one with evaluation: the summary says why it does not
// compare instead of printing a meaningless percentage.
TEST_F(UserOutput, SummaryComparesWithThePlanOnlyWhereThatMeansSomething) {
  write_text(dir_ + "/plan.json", one_stage_plan(R"(, "predicted": {"time_per_minibatch_s": 0.0001})"));
  const JobResult short_run = pipedream("run --plan " + dir_ + "/plan.json" + kModel +
                                        " --batch 8 --minibatches 3 --threads-per-worker 1 --eval-batch 100");
  ASSERT_EQ(short_run.exit_code, 0) << short_run.output;
  EXPECT_NE(short_run.output.find("not compared with the plan's prediction: too few steps for a steady state"),
            std::string::npos)
      << short_run.output;
  EXPECT_NE(short_run.output.find("peak memory not compared with the plan's: the peak includes test-set evaluation"),
            std::string::npos)
      << short_run.output;
  EXPECT_EQ(short_run.output.find("(plan: "), std::string::npos) << short_run.output;

  const JobResult flush = pipedream("run --plan " + dir_ + "/plan.json" + kModel +
                                    " --schedule 1f1b-flush --microbatches 2 --batch 8 --minibatches 3 --no-eval "
                                    "--threads-per-worker 1");
  ASSERT_EQ(flush.exit_code, 0) << flush.output;
  EXPECT_NE(flush.output.find("the plan predicts 1f1b-rr, this run is 1f1b-flush"), std::string::npos) << flush.output;
  EXPECT_NE(flush.output.find("the plan's figure is for 1f1b-rr with stashed weights, not 1f1b-flush"),
            std::string::npos)
      << flush.output;

  const JobResult steady = pipedream("run --plan " + dir_ + "/plan.json" + kModel +
                                     " --batch 8 --minibatches 16 --no-eval --threads-per-worker 1");
  ASSERT_EQ(steady.exit_code, 0) << steady.output;
  EXPECT_NE(steady.output.find("predicted 100.000 us (closed form, steady state): "), std::string::npos) << steady.output;
  EXPECT_NE(steady.output.find("(plan: "), std::string::npos) << steady.output;
}

// A plan whose stages were edited after planning: simulate says its stored
// predictions are stale and drops them, and recomputes the stages' costs
// when it has the profile.
TEST_F(UserOutput, AnEditedPlansPredictionsAreMarkedStaleOrRecomputed) {
  write_text(dir_ + "/profile.json", two_layer_profile({1, 2, 4}, {3, 6, 4}));
  const JobResult planned = pipedream("plan --profile " + dir_ + "/profile.json --workers 3 --bandwidth 10 --straight "
                                      "--fewer-workers -o " + dir_ + "/plan.json");
  ASSERT_EQ(planned.exit_code, 0) << planned.output;
  const JobResult fresh = pipedream("simulate --plan " + dir_ + "/plan.json");
  ASSERT_EQ(fresh.exit_code, 0) << fresh.output;
  EXPECT_EQ(fresh.output.find("edited after it was planned"), std::string::npos) << fresh.output;
  EXPECT_NE(fresh.output.find("planner's prediction"), std::string::npos) << fresh.output;

  // By hand: the second stage gets two replicas.
  nlohmann::json j = nlohmann::json::parse(file_text(dir_ + "/plan.json"));
  ASSERT_EQ(j["stages"].size(), 2u);
  j["stages"][1]["replicas"] = 2;
  j["stages"][1]["ranks"] = {1, 2};
  j["config"] = "1-2";
  write_text(dir_ + "/edited.json", j.dump());
  const JobResult stale = pipedream("simulate --plan " + dir_ + "/edited.json");
  ASSERT_EQ(stale.exit_code, 0) << stale.output;
  EXPECT_NE(stale.output.find("its stages were edited after it was planned"), std::string::npos) << stale.output;
  EXPECT_NE(stale.output.find("pass --profile to recompute them"), std::string::npos) << stale.output;
  EXPECT_EQ(stale.output.find("planner's prediction"), std::string::npos) << stale.output;

  const JobResult recomputed = pipedream("simulate --plan " + dir_ + "/edited.json --profile " + dir_ + "/profile.json");
  ASSERT_EQ(recomputed.exit_code, 0) << recomputed.output;
  EXPECT_NE(recomputed.output.find("recomputed from " + dir_ + "/profile.json"), std::string::npos)
      << recomputed.output;
}

// `simulate --recost` prices the plan's split on another profile of the
// model: here every layer twice as slow, so the straight 2-stage pipeline
// (fc2 the slower stage, 9 ms a minibatch) takes 18 ms; without it the
// stored costs stand.
TEST_F(UserOutput, RecostPricesThePlansSplitOnAnotherProfile) {
  write_text(dir_ + "/profile.json", two_layer_profile({1, 2, 4}, {3, 6, 4}));
  write_text(dir_ + "/slower.json", two_layer_profile({2, 4, 4}, {6, 12, 4}));
  const JobResult planned = pipedream("plan --profile " + dir_ + "/profile.json --workers 2 --bandwidth 1000 "
                                      "--straight -o " + dir_ + "/plan.json");
  ASSERT_EQ(planned.exit_code, 0) << planned.output;
  auto replay = [&](const std::string& extra) {
    const JobResult r = pipedream("simulate --json --plan " + dir_ + "/plan.json" + extra);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    return nlohmann::json::parse(r.output.substr(r.output.find("{\""))).at("time_per_minibatch_s").get<double>();
  };
  EXPECT_NEAR(replay(" --profile " + dir_ + "/slower.json"), 0.009, 1e-5);
  EXPECT_NEAR(replay(" --profile " + dir_ + "/slower.json --recost"), 0.018, 1e-5);
  EXPECT_NEAR(replay(" --profile " + dir_ + "/profile.json --recost"), 0.009, 1e-5);

  const JobResult alone = pipedream("simulate --plan " + dir_ + "/plan.json --recost");
  EXPECT_EQ(alone.exit_code, 2) << alone.output;
  EXPECT_NE(alone.output.find("--recost prices the plan's stages from a profile: give --profile too"),
            std::string::npos)
      << alone.output;
}

// On a topology whose all-reduce bench-comm measured, `plan` prices a
// replicated stage's gradient buckets started during the backward, as the
// runtime starts them; `simulate --profile` reproduces that prediction, and
// without the profile says what it leaves out (one all-reduce after the
// backward: slower here, where fc2's 8 MB are ready 2 ms into a 22 ms
// backward and take 16 ms).
TEST_F(UserOutput, PlanAndSimulateWithTheProfilePriceTheRuntimesGradientBuckets) {
  write_text(dir_ + "/profile.json", two_layer_profile({10, 20, 400}, {1, 2, 8000000}));
  write_text(dir_ + "/topology.json",
             R"({"levels": [{"count": 2, "bandwidth_GBps": 10, "latency_us": 1, "allreduce_GBps": 0.5}]})");
  const JobResult planned =
      pipedream("plan --profile " + dir_ + "/profile.json --topology " + dir_ + "/topology.json -o " + dir_ + "/plan.json");
  ASSERT_EQ(planned.exit_code, 0) << planned.output;
  const nlohmann::json plan = nlohmann::json::parse(file_text(dir_ + "/plan.json"));
  ASSERT_EQ(plan["config"], "2") << planned.output;
  const double predicted = plan["predicted"]["time_per_minibatch_s"].get<double>();
  const JobResult with = pipedream("simulate --json --plan " + dir_ + "/plan.json --profile " + dir_ + "/profile.json");
  ASSERT_EQ(with.exit_code, 0) << with.output;
  const double replayed = nlohmann::json::parse(with.output.substr(with.output.find("{\"")))["time_per_minibatch_s"];
  EXPECT_NEAR(replayed, predicted, 1e-9 * predicted);
  EXPECT_NEAR(replayed, 0.033 / 2, 1e-4);  // the all-reduce hidden in the backward
  const JobResult without = pipedream("simulate --json --plan " + dir_ + "/plan.json");
  ASSERT_EQ(without.exit_code, 0) << without.output;
  EXPECT_NE(without.output.find("without --profile each replicated stage's all-reduce starts after its backward"),
            std::string::npos) << without.output;
  const double unbucketed =
      nlohmann::json::parse(without.output.substr(without.output.find("{\"")))["time_per_minibatch_s"];
  EXPECT_GT(unbucketed, replayed * 1.1);
}

// run says once that an edited plan's predictions are stale and compares
// nothing with them.
TEST_F(UserOutput, RunDropsAnEditedPlansPredictions) {
  write_text(dir_ + "/plan.json",
             one_stage_plan(R"(, "predicted": {"time_per_minibatch_s": 0.0001, "for_stages": "0123456789abcdef"})"));
  const JobResult r = pipedream("run --plan " + dir_ + "/plan.json" + kModel +
                                " --batch 8 --minibatches 16 --no-eval --threads-per-worker 1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string note = "its stages were edited after it was planned";
  ASSERT_NE(r.output.find(note), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find(note, r.output.find(note) + 1), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("predicted 100.000 us"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("(plan: "), std::string::npos) << r.output;
}

// PipeDream's graph.txt has no batch size and its cost model no per-stage
// times: the summary says so instead of printing zeros.
TEST_F(UserOutput, PipedreamCostModelAndGraphTxtPrintNoZeros) {
  const JobResult r = pipedream("plan --profile " PD_SOURCE_DIR "/tests/data/pipedream-profiles/vgg16/graph.txt "
                                "--workers 4 --bandwidth 10 --cost-model pipedream");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output.find("batch 0"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("batch size not recorded"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("stage time 0.000 us"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("transfer 0.000 us"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("0.00x"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("no candidate table"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace pd::testing

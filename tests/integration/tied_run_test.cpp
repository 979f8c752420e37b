// gpt-mini tie=1 under mpirun (models/ties.h): a 4-stage run with the
// embedding and the head in stages 0 and 3 ends at train --microbatches 4's
// bits and saves the tied matrix once; a checkpoint of it resumes on 2
// stages (the tie now in stages 0 and 1) and on one, ending at the
// uninterrupted run's bits; --init fills every copy from the one tensor.
#include <gtest/gtest.h>

#include "run_job.h"

namespace pd::testing {
namespace {

// embed (0), block0 (1), block1 (2), ln_f (3), head (4).
const std::string kModel =
    " --model gpt-mini --model-options tie=1,vocab=32,context=8,width=16,depth=2,heads=2 --data synthetic --seed 3"
    " --no-eval --log-every 1 --batch 8 --microbatches 4";
constexpr const char* kPlan4 = R"({"format": "pipedream-plan/1", "config": "1-1-1-1", "stages": [
  {"index": 0, "layers": [0, 0], "replicas": 1, "ranks": [0]}, {"index": 1, "layers": [1, 1], "replicas": 1, "ranks": [1]},
  {"index": 2, "layers": [2, 2], "replicas": 1, "ranks": [2]}, {"index": 3, "layers": [3, 4], "replicas": 1, "ranks": [3]}]})";
constexpr const char* kPlan2 = R"({"format": "pipedream-plan/1", "config": "1-1", "stages": [
  {"index": 0, "layers": [0, 1], "replicas": 1, "ranks": [0]}, {"index": 1, "layers": [2, 4], "replicas": 1, "ranks": [1]}]})";
constexpr const char* kPlan1 = R"({"format": "pipedream-plan/1", "config": "1", "stages": [
  {"index": 0, "layers": [0, 4], "replicas": 1, "ranks": [0]}]})";

RunFiles files(const std::string& dir, const std::string& tag) {
  return {dir + "/" + tag + ".safetensors", dir + "/" + tag + ".jsonl"};
}

RunFiles run(const std::string& dir, const std::string& tag, const std::string& plan, int ranks, const std::string& extra) {
  const RunFiles f = files(dir, tag);
  const JobResult r = run_shell((ranks > 1 ? mpirun(ranks) : std::string()) + pipedream_binary() + " run --plan " + dir +
                                "/" + plan + kModel + " --threads-per-worker 1 --timeout 60 --schedule 1f1b-flush" +
                                extra + " --save " + f.save + " --metrics " + f.metrics);
  EXPECT_EQ(r.exit_code, 0) << tag << ":\n" << r.output;
  return f;
}

RunFiles train(const std::string& dir, const std::string& tag, const std::string& extra) {
  const RunFiles f = files(dir, tag);
  const JobResult r = run_shell(pipedream_binary() + " train" + kModel + " --threads 1" + extra + " --save " + f.save +
                                " --metrics " + f.metrics);
  EXPECT_EQ(r.exit_code, 0) << tag << ":\n" << r.output;
  return f;
}

TEST(TiedRun, FourStagesEqualTrainAndCheckpointsReshardWithTheTieElsewhere) {
  const std::string dir = scratch_dir("tied_run");
  write_text(dir + "/4.json", kPlan4);
  write_text(dir + "/2.json", kPlan2);
  write_text(dir + "/1.json", kPlan1);
  const RunFiles one = train(dir, "train", " --minibatches 4");
  const RunFiles four = run(dir, "four", "4.json", 4, " --minibatches 4 --checkpoint-every 2 --checkpoint-dir " + dir + "/ck");
  expect_same_bits(four, one, "4 stages vs train", 4);
  const auto saved = load_by_name(four.save);
  EXPECT_TRUE(saved.count("0.token.weight"));
  EXPECT_FALSE(saved.count("4.weight")) << "the head's copy is saved";
  // The checkpoint holds the tied tensor and its optimizer state once.
  const auto stage3 = load_by_name(dir + "/ck/step-2/stage-3.safetensors");
  EXPECT_FALSE(stage3.count("4.weight"));
  EXPECT_FALSE(stage3.count("optimizer.0.4.weight"));
  EXPECT_TRUE(load_by_name(dir + "/ck/step-2/stage-0.safetensors").count("optimizer.0.0.token.weight"));
  // Resumed on 2 stages (tie in stages 0 and 1) and on one: train's bits.
  const RunFiles two = run(dir, "two", "2.json", 2, " --minibatches 4 --resume " + dir + "/ck/step-2");
  expect_same_weights(two, one, "resumed on 2 stages vs train");
  const RunFiles single = run(dir, "single", "1.json", 1, " --minibatches 4 --resume " + dir + "/ck/step-2");
  expect_same_weights(single, one, "resumed on 1 stage vs train");
}

TEST(TiedRun, InitFillsEveryCopyFromTheOneTensor) {
  const std::string dir = scratch_dir("tied_init");
  write_text(dir + "/4.json", kPlan4);
  const RunFiles start = train(dir, "start", " --minibatches 2");
  const RunFiles trained = train(dir, "trained", " --minibatches 3 --init " + start.save);
  const RunFiles piped = run(dir, "piped", "4.json", 4, " --minibatches 3 --init " + start.save);
  expect_same_bits(piped, trained, "--init on 4 stages vs train --init");
}

}  // namespace
}  // namespace pd::testing

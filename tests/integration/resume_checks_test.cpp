// What resuming checks and keeps, as users met it: a checkpoint of the same
// model name under other options is refused; another precision is allowed
// with a note; a folder resumes from the checkpoint committed last, not the
// highest step an abandoned run left there; the metrics log of a resumed
// run keeps the interrupted run's lines before the checkpoint. And what
// `evaluate` reports for bf16 weights: the numbers a bf16 run reports.
#include <gtest/gtest.h>

#include <filesystem>

#include "run_job.h"

namespace pd::testing {
namespace {

const std::string kGpt = " --model gpt-mini --model-options vocab=64,context=16,width=32,depth=2,heads=2";
const std::string kTrainArgs = " --data synthetic --batch 8 --no-eval --threads 1 --log-every 1";

JobResult train(const std::string& args) { return run_shell(pipedream_binary() + " train" + args); }

TEST(ResumeChecks, AnotherModelSpecIsRefusedAnotherPrecisionIsNoted) {
  const std::string dir = scratch_dir("resume_spec");
  JobResult first = train(kGpt + kTrainArgs + " --precision bf16 --minibatches 4 --checkpoint-every 2"
                          " --checkpoint-dir " + dir + "/ck");
  ASSERT_EQ(first.exit_code, 0) << first.output;
  // heads=4 keeps every tensor's shape: only the recorded spec tells them apart.
  JobResult heads = train(" --model gpt-mini --model-options vocab=64,context=16,width=32,depth=2,heads=4" +
                          kTrainArgs + " --precision bf16 --minibatches 6 --resume " + dir + "/ck/step-2");
  EXPECT_EQ(heads.exit_code, 2) << heads.output;
  EXPECT_NE(heads.output.find("with another spec"), std::string::npos) << heads.output;
  JobResult fp32 = train(kGpt + kTrainArgs + " --minibatches 6 --resume " + dir + "/ck/step-2");
  EXPECT_EQ(fp32.exit_code, 0) << fp32.output;
  EXPECT_NE(fp32.output.find("trained with --precision bf16, this run uses fp32"), std::string::npos) << fp32.output;
}

TEST(ResumeChecks, AFolderResumesFromTheCheckpointCommittedLast) {
  const std::string dir = scratch_dir("resume_latest");
  const std::string ck = dir + "/ck";
  // Every checkpoint kept (the default keeps the newest 3): step-2 is resumed from below.
  ASSERT_EQ(train(kGpt + kTrainArgs + " --minibatches 8 --checkpoint-every 2 --keep-checkpoints 0 --checkpoint-dir " + ck)
                .exit_code,
            0);
  // Back to step 2 with another learning rate, into the same folder: step-4
  // is written again, the abandoned run's step-6 and step-8 stay.
  JobResult retry = train(kGpt + kTrainArgs + " --lr 0.002 --minibatches 4 --checkpoint-every 2 --checkpoint-dir " +
                          ck + " --resume " + ck + "/step-2");
  ASSERT_EQ(retry.exit_code, 0) << retry.output;
  JobResult on = train(kGpt + kTrainArgs + " --lr 0.002 --minibatches 6 --resume " + ck);
  ASSERT_EQ(on.exit_code, 0) << on.output;
  EXPECT_NE(on.output.find("takes step-4, the checkpoint committed last; step-6, step-8 there are from an earlier run"),
            std::string::npos) << on.output;
  EXPECT_NE(on.output.find("resumed at step 4"), std::string::npos) << on.output;
}

TEST(ResumeChecks, AResumedRunsLogKeepsTheInterruptedRunsLinesBeforeTheCheckpoint) {
  const std::string dir = scratch_dir("resume_log");
  const std::string metrics = dir + "/m.jsonl";
  const std::string args = kGpt + kTrainArgs + " --minibatches 8 --checkpoint-every 3 --checkpoint-dir " + dir + "/ck";
  ASSERT_EQ(train(args + " --metrics " + metrics).exit_code, 0);
  const auto whole = step_losses(metrics);
  ASSERT_EQ(whole.size(), 8u);
  // As if killed after step 6 with the checkpoint at step 3: the partial
  // log holds steps 0..6.
  std::filesystem::rename(metrics, metrics + ".partial");
  JobResult resumed = train(args + " --metrics " + metrics + " --resume " + dir + "/ck/step-3");
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_EQ(step_losses(metrics), whole) << "steps 0..2 from the interrupted log, 3..7 from the resumed run";
  EXPECT_FALSE(std::filesystem::exists(metrics + ".partial"));
}

TEST(EvaluatePrecision, Bf16WeightsEvaluateToWhatTheBf16RunReported) {
  const std::string dir = scratch_dir("eval_bf16");
  const std::string metrics = dir + "/m.jsonl", weights = dir + "/w.safetensors";
  JobResult t = run_shell(pipedream_binary() + " train" + kGpt + " --data synthetic --batch 8 --threads 1"
                          " --precision bf16 --minibatches 3 --save " + weights + " --metrics " + metrics);
  ASSERT_EQ(t.exit_code, 0) << t.output;
  const std::vector<nlohmann::json> evals = metric_lines(metrics, "eval");
  ASSERT_FALSE(evals.empty());
  const std::string eval_metrics = dir + "/e.jsonl";
  JobResult e = run_shell(pipedream_binary() + " evaluate" + kGpt + " --data synthetic --threads 1 --batch 500"
                          " --precision bf16 --weights " + weights + " --metrics " + eval_metrics);
  ASSERT_EQ(e.exit_code, 0) << e.output;
  const std::vector<nlohmann::json> got = metric_lines(eval_metrics, "eval");
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].at("test_loss"), evals.back().at("test_loss"));
  EXPECT_EQ(got[0].at("test_accuracy"), evals.back().at("test_accuracy"));
  // More samples than the split holds: refused, not cut.
  JobResult many = run_shell(pipedream_binary() + " evaluate" + kGpt + " --data synthetic --weights " + weights +
                             " --samples 100000000");
  EXPECT_EQ(many.exit_code, 2) << many.output;
  EXPECT_NE(many.output.find("--samples 100000000"), std::string::npos) << many.output;
}

}  // namespace
}  // namespace pd::testing

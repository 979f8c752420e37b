// What the metrics files say beyond the loss: the learning rate of every
// step line, the same in `train` and in a pipeline that steps on the same
// batches, so that a user can check warm-up and decay from the file.
#include <gtest/gtest.h>

#include "run_job.h"

namespace pd::testing {
namespace {

std::map<int64_t, double> step_learning_rates(const std::string& metrics) {
  std::map<int64_t, double> out;
  for (const nlohmann::json& j : metric_lines(metrics, "step")) out[j.at("step").get<int64_t>()] = j.at("lr").get<double>();
  return out;
}

TEST(MetricsLines, StepLinesCarryTheScheduledLearningRateInTrainAndRun) {
  const std::string dir = scratch_dir("metrics_lr");
  write_text(dir + "/1111.json", kPlan1111);
  const std::string common = " --model mlp --data synthetic --minibatches 8 --batch 16 --no-eval --log-every 1"
                             " --lr 0.1 --lr-schedule cosine --warmup 4 --min-lr 0.01";
  const std::string train_metrics = dir + "/train.jsonl", run_metrics = dir + "/run.jsonl";
  JobResult t = run_shell(pipedream_binary() + " train" + common + " --threads 1 --metrics " + train_metrics);
  ASSERT_EQ(t.exit_code, 0) << t.output;
  JobResult r = run_shell(pipedream_binary() + " run --plan " + dir + "/1111.json" + common +
                          " --schedule 1f1b-flush --microbatches 4 --reference --metrics " + run_metrics);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto lr = step_learning_rates(train_metrics);
  ASSERT_EQ(lr.size(), 8u);
  EXPECT_EQ(step_learning_rates(run_metrics), lr);
  // Warm-up: 0.1 * (s + 1) / 4 over steps 0..3; then cosine from 0.1 at
  // step 4 down towards 0.01.
  EXPECT_NEAR(lr.at(0), 0.025, 1e-7);
  EXPECT_NEAR(lr.at(3), 0.1, 1e-7);
  EXPECT_NEAR(lr.at(4), 0.1, 1e-7);
  for (int64_t s = 5; s < 8; ++s) {
    EXPECT_LT(lr.at(s), lr.at(s - 1)) << "step " << s;
    EXPECT_GT(lr.at(s), 0.01) << "step " << s;
  }
}

}  // namespace
}  // namespace pd::testing

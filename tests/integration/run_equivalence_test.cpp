// `pipedream run` under mpirun against the single-process reference (bit for
// bit) and against `pipedream train` (docs/design.md §6 semantics).
#include <gtest/gtest.h>

#include <cmath>

#include "run_job.h"

namespace pd::testing {
namespace {


// Small and quick: an 8-layer mlp on synthetic data, one thread per worker.
const std::string kCommon =
    " --model mlp --model-options hidden=24,depth=3 --data synthetic --seed 3 --no-eval"
    " --threads-per-worker 1 --log-every 1 --timeout 30";

RunFiles run_pipeline(const std::string& dir, const std::string& tag, const std::string& plan, const std::string& extra,
                      bool reference) {
  RunFiles f{dir + "/" + tag + ".safetensors", dir + "/" + tag + ".jsonl"};
  const std::string args = " run --plan " + plan + kCommon + extra + " --save " + f.save + " --metrics " + f.metrics;
  JobResult r = reference ? run_shell(pipedream_binary() + args + " --reference")
                          : run_shell(mpirun(4) + pipedream_binary() + args);
  EXPECT_EQ(r.exit_code, 0) << tag << ":\n" << r.output;
  return f;
}

void expect_bitwise_equal_runs(const RunFiles& a, const RunFiles& b, const std::string& what) {
  auto wa = load_by_name(a.save), wb = load_by_name(b.save);
  ASSERT_EQ(wa.size(), wb.size()) << what;
  ASSERT_FALSE(wa.empty()) << what;
  for (auto& [n, t] : wa) {
    ASSERT_TRUE(wb.count(n)) << what << ": " << n;
    EXPECT_TRUE(same_bits(t, wb[n])) << what << ": tensor " << n << " differs";
  }
  auto la = step_losses(a.metrics), lb = step_losses(b.metrics);
  ASSERT_FALSE(la.empty()) << what;
  EXPECT_EQ(la, lb) << what << ": per-minibatch losses differ";
}

TEST(RunEquivalence, FourWorkersMatchTheReferenceBitwise) {
  const std::string dir = scratch_dir("equivalence");
  write_text(dir + "/1111.json", kPlan1111);
  write_text(dir + "/211.json", kPlan211);
  for (const std::string plan : {"1111", "211"}) {
    for (const std::string policy : {"stash", "vertical", "none"}) {
      const std::string tag = plan + "_" + policy;
      const std::string extra = " --batch 8 --minibatches 11 --weights " + policy;
      RunFiles mpi = run_pipeline(dir, tag + "_mpi", dir + "/" + plan + ".json", extra, false);
      RunFiles ref = run_pipeline(dir, tag + "_ref", dir + "/" + plan + ".json", extra, true);
      expect_bitwise_equal_runs(mpi, ref, tag);
      EXPECT_EQ(step_losses(mpi.metrics).size(), 11u) << tag;
    }
  }
}

TEST(RunEquivalence, VerticalSyncEqualsDelayedSgd) {
  const std::string dir = scratch_dir("vertical");
  write_text(dir + "/1111.json", kPlan1111);
  RunFiles mpi = run_pipeline(dir, "mpi", dir + "/1111.json", " --batch 8 --minibatches 10 --weights vertical", false);
  // NOAM = 4 workers / 1 input replica = 4: gradients are 3 steps stale.
  const std::string train_save = dir + "/train.safetensors", train_metrics = dir + "/train.jsonl";
  JobResult t = run_shell(pipedream_binary() +
                          " train --model mlp --model-options hidden=24,depth=3 --data synthetic --batch 8 --seed 3"
                          " --no-eval --threads 1 --log-every 1 --minibatches 10 --gradient-delay 3 --save " +
                          train_save + " --metrics " + train_metrics);
  ASSERT_EQ(t.exit_code, 0) << t.output;
  expect_bitwise_equal_runs(mpi, {train_save, train_metrics}, "vertical vs train --gradient-delay 3");
}

TEST(RunEquivalence, FlushSchedulesEqualTrainingOnTheWholeBatch) {
  const std::string dir = scratch_dir("flush");
  write_text(dir + "/211.json", kPlan211);
  const std::string train_save = dir + "/train.safetensors";
  JobResult t = run_shell(pipedream_binary() +
                          " train --model mlp --model-options hidden=24,depth=3 --data synthetic --batch 16 --seed 3"
                          " --no-eval --threads 1 --minibatches 6 --save " + train_save);
  ASSERT_EQ(t.exit_code, 0) << t.output;
  auto want = load_by_name(train_save);
  for (const std::string schedule : {"gpipe", "1f1b-flush"}) {
    // Microbatches of 4, four per step: 16 samples, as train takes them.
    RunFiles f = run_pipeline(dir, schedule, dir + "/211.json",
                              " --minibatches 6 --schedule " + schedule + " --microbatches 4 --batch 16", false);
    auto got = load_by_name(f.save);
    ASSERT_EQ(got.size(), want.size()) << schedule;
    for (auto& [n, w] : want) {
      std::vector<float> a = got[n].to_floats(), b = w.to_floats();
      ASSERT_EQ(a.size(), b.size()) << n;
      for (size_t k = 0; k < a.size(); ++k)
        ASSERT_NEAR(a[k], b[k], 1e-5 + 1e-4 * std::fabs(b[k])) << schedule << " " << n << "[" << k << "]";
    }
  }
}

}  // namespace
}  // namespace pd::testing

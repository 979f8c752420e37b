// The V-shaped schedules under mpirun (2p stages on p = 4 workers, stage w
// and 2p - 1 - w on worker w): bit for bit `train --microbatches 8`, with
// dropout, --clip-grad-norm and bf16, evaluating through the pipeline and
// resuming from their checkpoints, on cnn and gpt-mini.
#include <gtest/gtest.h>

#include <filesystem>

#include "run_job.h"

namespace pd::testing {
namespace {

// The schedules these tests walk (each placed in a V by the registry).
const std::vector<std::string> kVSchedules = {"zb-v", "dualpipev"};

std::string plan8(const std::vector<std::pair<int, int>>& layers) {
  std::string config, stages;
  for (size_t s = 0; s < layers.size(); ++s) {
    config += s ? "-1" : "1";
    stages += (s ? ",\n  " : "\n  ") + std::string("{\"index\": ") + std::to_string(s) + ", \"layers\": [" +
              std::to_string(layers[s].first) + ", " + std::to_string(layers[s].second) +
              "], \"replicas\": 1, \"ranks\": [" + std::to_string(s) + "]}";
  }
  return "{\"format\": \"pipedream-plan/1\", \"config\": \"" + config + "\", \"stages\": [" + stages + "]}";
}

struct ModelCase {
  std::string name, args, plan;
};

// gpt-mini with dropout: every microbatch's masks must be the ones train draws.
const ModelCase kCnn{"cnn", " --model cnn", plan8({{0, 0}, {1, 1}, {2, 2}, {3, 3}, {4, 4}, {5, 5}, {6, 7}, {8, 9}})};
const ModelCase kGpt{"gpt-mini",
                     " --model gpt-mini --model-options vocab=64,context=16,width=32,depth=6,heads=2,dropout=0.1",
                     plan8({{0, 0}, {1, 1}, {2, 2}, {3, 3}, {4, 4}, {5, 5}, {6, 6}, {7, 8}})};

// 8 microbatches of 2: dualpipev needs M >= 2p.
const std::string kCommon = " --data synthetic --seed 3 --log-every 1 --batch 16 --microbatches 8";

class VSchedulesRun : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = scratch_dir("v_schedules"); }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // `how`: "mpi", "reference" or "train".
  // `plan`: the plan's JSON (default the model's eight stages).
  RunFiles run(const std::string& tag, const ModelCase& m, const std::string& how, const std::string& args,
               const std::string& plan = "") {
    RunFiles f{dir_ + "/" + tag + ".safetensors", dir_ + "/" + tag + ".jsonl"};
    write_text(dir_ + "/plan8.json", plan.empty() ? m.plan : plan);
    const std::string out = " --save " + f.save + " --metrics " + f.metrics;
    std::string cmd;
    if (how == "train") {
      cmd = pipedream_binary() + " train" + m.args + kCommon + " --threads 1" + args + out;
    } else {
      cmd = (how == "mpi" ? mpirun(4) : std::string()) + pipedream_binary() + " run --plan " + dir_ + "/plan8.json" +
            m.args + kCommon + " --threads-per-worker 1 --timeout 60" + args + out +
            (how == "reference" ? " --reference" : "");
    }
    const JobResult r = run_shell(cmd);
    EXPECT_EQ(r.exit_code, 0) << tag << ":\n" << r.output;
    return f;
  }
  std::string dir_;
};

TEST_F(VSchedulesRun, EndAtTrainsBitsWithDropoutAndClipping) {
  for (const ModelCase& m : {kCnn, kGpt}) {
    const RunFiles train = run("train_" + m.name, m, "train", " --no-eval --minibatches 3");
    const RunFiles clipped = run("train_clip_" + m.name, m, "train", " --no-eval --minibatches 3 --clip-grad-norm 0.5");
    for (const std::string& s : kVSchedules) {
      const std::string what = m.name + " " + s;
      const RunFiles mpi = run(s + "_" + m.name, m, "mpi", " --no-eval --minibatches 3 --schedule " + s);
      expect_same_bits(mpi, train, what + " under mpirun vs train --microbatches 8");
      const RunFiles ref = run(s + "_ref_" + m.name, m, "reference", " --no-eval --minibatches 3 --schedule " + s);
      expect_same_bits(ref, train, what + " --reference vs train --microbatches 8");
      const RunFiles clip =
          run(s + "_clip_" + m.name, m, "mpi", " --no-eval --minibatches 3 --clip-grad-norm 0.5 --schedule " + s);
      expect_same_bits(clip, clipped, what + " --clip-grad-norm vs train's");
    }
  }
}

// The test set flows through the V in stage order (worker 0's chunk 1 last):
// the evaluations equal 1f1b-flush's (on four stages), bit for bit.
TEST_F(VSchedulesRun, EvaluateThroughThePipelineAsOneFOneBFlushDoes) {
  const std::string eval = " --minibatches 4 --eval-every 2 --eval-batch 100 --schedule ";
  const RunFiles flush = run("flush", kCnn, "mpi", eval + "1f1b-flush", plan8({{0, 2}, {3, 5}, {6, 7}, {8, 9}}));
  const std::vector<nlohmann::json> want = metric_lines(flush.metrics, "eval");
  ASSERT_EQ(want.size(), 2u);
  for (const std::string& s : kVSchedules) {
    const RunFiles mpi = run(s, kCnn, "mpi", eval + s);
    expect_same_bits(mpi, flush, s + " evaluating vs 1f1b-flush", 4);
    const std::vector<nlohmann::json> got = metric_lines(mpi.metrics, "eval");
    ASSERT_EQ(got.size(), want.size()) << s;
    for (size_t i = 0; i < got.size(); ++i) {
      EXPECT_EQ(got[i].at("step"), want[i].at("step")) << s;
      EXPECT_EQ(got[i].at("test_loss"), want[i].at("test_loss")) << s << " evaluation " << i;
      EXPECT_EQ(got[i].at("test_accuracy"), want[i].at("test_accuracy")) << s << " evaluation " << i;
    }
  }
}

// Checkpoints fall between batches, where the V is drained: writing them
// changes nothing, and a run resumed from the middle one ends at the
// uninterrupted run's bits.
TEST_F(VSchedulesRun, CheckpointAndResumeToTheSameBits) {
  for (const std::string& s : kVSchedules) {
    const std::string args = " --no-eval --minibatches 6 --schedule " + s;
    const RunFiles whole = run(s + "_whole", kGpt, "mpi", args);
    const RunFiles saved = run(s + "_saved", kGpt, "mpi", args + " --checkpoint-dir " + dir_ + "/ck_" + s +
                                                              " --checkpoint-every 2");
    expect_same_bits(saved, whole, s + " with checkpoints vs without", 6);
    const RunFiles resumed = run(s + "_resumed", kGpt, "mpi", args + " --resume " + dir_ + "/ck_" + s + "/step-4");
    expect_same_weights(resumed, whole, s + " resumed at step 4 vs uninterrupted");
    const auto losses = step_losses(resumed.metrics), all = step_losses(whole.metrics);
    ASSERT_EQ(losses.size(), 2u) << s;
    for (const auto& [step, loss] : losses) EXPECT_EQ(loss, all.at(step)) << s << " step " << step;
  }
}

TEST_F(VSchedulesRun, Bf16EndsAtTrainsBits) {
  const RunFiles train = run("train_bf16", kGpt, "train", " --no-eval --minibatches 3 --precision bf16");
  for (const std::string& s : kVSchedules) {
    const RunFiles mpi = run(s + "_bf16", kGpt, "mpi", " --no-eval --minibatches 3 --precision bf16 --schedule " + s);
    expect_same_bits(mpi, train, s + " bf16 vs train --precision bf16 --microbatches 8");
  }
}

}  // namespace
}  // namespace pd::testing

namespace pd::testing {
namespace {

// zb-h2 (one stage per worker, no V) ends at the same bits on four stages.
TEST_F(VSchedulesRun, ZeroBubbleH2EndsAtTrainsBits) {
  const std::string cnn4 = plan8({{0, 2}, {3, 5}, {6, 7}, {8, 9}}), gpt4 = plan8({{0, 1}, {2, 3}, {4, 5}, {6, 8}});
  for (const auto& [m, plan] : {std::pair{kCnn, cnn4}, std::pair{kGpt, gpt4}}) {
    const RunFiles train = run("train_" + m.name, m, "train", " --no-eval --minibatches 3 --clip-grad-norm 0.5");
    const RunFiles mpi =
        run("zb-h2_" + m.name, m, "mpi", " --no-eval --minibatches 3 --clip-grad-norm 0.5 --schedule zb-h2", plan);
    expect_same_bits(mpi, train, m.name + " zb-h2 --clip-grad-norm vs train --microbatches 8");
  }
}

}  // namespace
}  // namespace pd::testing

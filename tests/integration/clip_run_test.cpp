// --clip-grad-norm in pipelines: the stages exchange their gradients'
// squared norms at each optimizer step, so every stage scales by the whole
// model's norm and a synchronous pipeline ends at `train`'s bits; where no
// step sees the whole gradient (1f1b-rr on several stages) it is refused.
#include <gtest/gtest.h>

#include <cmath>

#include "run_job.h"

namespace pd::testing {
namespace {

constexpr const char* kPlan22 = R"({"format": "pipedream-plan/1", "config": "2-2", "stages": [
  {"index": 0, "layers": [0, 3], "replicas": 2, "ranks": [0, 1]},
  {"index": 1, "layers": [4, 9], "replicas": 2, "ranks": [2, 3]}]})";
constexpr const char* kPlanDp2 = R"({"format": "pipedream-plan/1", "config": "2", "stages": [
  {"index": 0, "layers": [0, 9], "replicas": 2, "ranks": [0, 1]}]})";
// cnn's ten layers on four stages; the third holds no parameters (relu2, pool2).
constexpr const char* kPlan1111 = R"({"format": "pipedream-plan/1", "config": "1-1-1-1", "stages": [
  {"index": 0, "layers": [0, 2], "replicas": 1, "ranks": [0]},
  {"index": 1, "layers": [3, 3], "replicas": 1, "ranks": [1]},
  {"index": 2, "layers": [4, 5], "replicas": 1, "ranks": [2]},
  {"index": 3, "layers": [6, 9], "replicas": 1, "ranks": [3]}]})";

// Eight stages on four workers (interleaved-1f1b, two chunks each).
constexpr const char* kPlan8 = R"({"format": "pipedream-plan/1", "config": "1-1-1-1-1-1-1-1", "stages": [
  {"index": 0, "layers": [0, 0], "replicas": 1, "ranks": [0]}, {"index": 1, "layers": [1, 1], "replicas": 1, "ranks": [1]},
  {"index": 2, "layers": [2, 2], "replicas": 1, "ranks": [2]}, {"index": 3, "layers": [3, 3], "replicas": 1, "ranks": [3]},
  {"index": 4, "layers": [4, 4], "replicas": 1, "ranks": [4]}, {"index": 5, "layers": [5, 5], "replicas": 1, "ranks": [5]},
  {"index": 6, "layers": [6, 7], "replicas": 1, "ranks": [6]}, {"index": 7, "layers": [8, 9], "replicas": 1, "ranks": [7]}]})";

// A small max norm: cnn's gradients at these settings have norms of 2 to 5,
// so every step clips.
const std::string kClip = " --clip-grad-norm 0.5";
const std::string kCommon = " --model cnn --data synthetic --seed 5 --no-eval --log-every 1 --minibatches 4";

RunFiles run(const std::string& dir, const std::string& tag, const std::string& plan, const std::string& args,
             bool reference, int ranks = 4) {
  RunFiles f{dir + "/" + tag + ".safetensors", dir + "/" + tag + ".jsonl"};
  const std::string cmd = " run --plan " + plan + kCommon + args +
                          " --threads-per-worker 1 --timeout 60 --save " + f.save + " --metrics " + f.metrics;
  JobResult r = reference ? run_shell(pipedream_binary() + cmd + " --reference")
                          : run_shell(mpirun(ranks) + pipedream_binary() + cmd);
  EXPECT_EQ(r.exit_code, 0) << tag << ":\n" << r.output;
  return f;
}

RunFiles train(const std::string& dir, const std::string& tag, const std::string& args) {
  RunFiles f{dir + "/" + tag + ".safetensors", dir + "/" + tag + ".jsonl"};
  JobResult r = run_shell(pipedream_binary() + " train" + kCommon + args + " --threads 1 --save " + f.save +
                          " --metrics " + f.metrics);
  EXPECT_EQ(r.exit_code, 0) << tag << ":\n" << r.output;
  return f;
}

// step -> (grad_norm, clip_factor) from a metrics file's grad_norm lines.
std::map<int64_t, std::pair<double, double>> grad_norms(const std::string& metrics) {
  std::map<int64_t, std::pair<double, double>> out;
  for (const nlohmann::json& j : metric_lines(metrics, "grad_norm"))
    out[j.at("step").get<int64_t>()] = {j.at("grad_norm").get<double>(), j.at("clip_factor").get<double>()};
  return out;
}

double max_difference(const std::string& a_path, const std::string& b_path) {
  auto a = load_by_name(a_path), b = load_by_name(b_path);
  EXPECT_EQ(a.size(), b.size());
  double worst = 0;
  for (auto& [n, t] : b) {
    if (!a.count(n)) {
      ADD_FAILURE() << n << " missing";
      continue;
    }
    std::vector<float> x = a[n].to_floats(), y = t.to_floats();
    for (size_t k = 0; k < std::min(x.size(), y.size()); ++k)
      worst = std::max(worst, static_cast<double>(std::fabs(x[k] - y[k])));
  }
  return worst;
}

TEST(ClipGradNormRun, SynchronousPipelinesEndAtTrainsBitsAndEveryStepClips) {
  const std::string dir = scratch_dir("clip_sync");
  write_text(dir + "/1111.json", kPlan1111);
  const std::string flush = " --batch 16 --microbatches 4 --schedule ";
  const RunFiles one = train(dir, "train", " --batch 16 --microbatches 4" + kClip);
  const RunFiles unclipped = train(dir, "train_unclipped", " --batch 16 --microbatches 4");
  const RunFiles zb = run(dir, "zb_mpi", dir + "/1111.json", flush + "zb-h1" + kClip, false);
  const RunFiles gpipe = run(dir, "gpipe_ref", dir + "/1111.json", flush + "gpipe" + kClip, true);
  // A rank's two chunks hand their norms over in process, the other ranks' arrive.
  write_text(dir + "/8.json", kPlan8);
  const std::string interleaved = flush + "interleaved-1f1b --virtual-stages 2" + kClip;
  const RunFiles il = run(dir, "il_mpi", dir + "/8.json", interleaved, false);
  const RunFiles il_ref = run(dir, "il_ref", dir + "/8.json", interleaved, true);
  expect_same_weights(il, one, "interleaved-1f1b under mpirun vs train");
  expect_same_weights(il_ref, one, "interleaved-1f1b --reference vs train");
  EXPECT_EQ(grad_norms(il.metrics), grad_norms(one.metrics));
  // The four stages' norms, summed smallest first, give train's norm: the
  // same bits, so the same factor, the same weights and the same losses.
  expect_same_bits(zb, one, "zb-h1 under mpirun vs train", 4);
  expect_same_bits(gpipe, one, "gpipe --reference vs train", 4);
  const auto norms = grad_norms(one.metrics);
  ASSERT_EQ(norms.size(), 4u);
  EXPECT_EQ(grad_norms(zb.metrics), norms);
  for (const auto& [step, nf] : norms) {
    EXPECT_GT(nf.first, 1.0) << "step " << step;  // well above 0.5: the test clips
    EXPECT_NEAR(nf.second, 0.5 / (nf.first + 1e-6), 1e-6) << "step " << step;
  }
  EXPECT_GT(max_difference(one.save, unclipped.save), 1e-4) << "clipping changed nothing";
  EXPECT_TRUE(grad_norms(unclipped.metrics).empty()) << "grad_norm lines without --clip-grad-norm";
}

TEST(ClipGradNormRun, ReplicatedStagesMatchTheReferenceAndTrain) {
  const std::string dir = scratch_dir("clip_replicated");
  write_text(dir + "/22.json", kPlan22);
  write_text(dir + "/dp2.json", kPlanDp2);
  const std::string flush = " --batch 16 --microbatches 4 --schedule 1f1b-flush" + kClip;
  const RunFiles mpi = run(dir, "flush_mpi", dir + "/22.json", flush, false);
  const RunFiles ref = run(dir, "flush_ref", dir + "/22.json", flush, true);
  expect_same_bits(mpi, ref, "2-2 1f1b-flush: mpirun vs --reference", 4);
  EXPECT_EQ(grad_norms(mpi.metrics), grad_norms(ref.metrics));
  EXPECT_EQ(grad_norms(mpi.metrics).size(), 4u);
  // Replicas sum their microbatches' gradients before the all-reduce adds
  // them, so the last bits may differ from train's running sum.
  const RunFiles one = train(dir, "train", " --batch 16 --microbatches 4" + kClip);
  EXPECT_LE(max_difference(mpi.save, one.save), 1e-6);

  // One stage, any schedule: its step sees the whole (all-reduced) gradient.
  const RunFiles dp_mpi = run(dir, "dp_mpi", dir + "/dp2.json", " --batch 8 --schedule 1f1b-rr" + kClip, false, 2);
  const RunFiles dp_ref = run(dir, "dp_ref", dir + "/dp2.json", " --batch 8 --schedule 1f1b-rr" + kClip, true);
  expect_same_bits(dp_mpi, dp_ref, "data parallel 1f1b-rr with clipping: mpirun vs --reference", 4);
  // Two updates of two minibatches each, logged at the first minibatch of each.
  EXPECT_EQ(grad_norms(dp_mpi.metrics), grad_norms(dp_ref.metrics));
  EXPECT_EQ(grad_norms(dp_mpi.metrics).size(), 2u);
}

TEST(ClipGradNormRun, RefusedWhereNoStepSeesTheWholeGradient) {
  const std::string dir = scratch_dir("clip_refused");
  write_text(dir + "/1111.json", kPlan1111);
  for (const std::string schedule : {"1f1b-rr", "2bw"}) {
    JobResult r = run_shell(pipedream_binary() + " run --plan " + dir + "/1111.json" + kCommon + " --batch 8" +
                            kClip + " --schedule " + schedule + " --reference");
    EXPECT_EQ(r.exit_code, 2) << schedule << ":\n" << r.output;
    EXPECT_NE(r.output.find("--clip-grad-norm needs the whole model's gradient"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("1f1b-flush"), std::string::npos) << "names the way out:\n" << r.output;
  }
  JobResult zero = run_shell(pipedream_binary() + " train" + kCommon + " --clip-grad-norm 0");
  EXPECT_EQ(zero.exit_code, 2) << zero.output;
  EXPECT_NE(zero.output.find("--clip-grad-norm"), std::string::npos) << zero.output;
}

}  // namespace
}  // namespace pd::testing

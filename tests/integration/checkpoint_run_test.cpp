// Checkpoints never change the result (docs/design.md §8): a run that
// writes them ends with the bits of one that does not, a resumed run ends
// with the bits of the uninterrupted one, and a checkpoint resumes under
// another plan (the synchronous schedules, 1f1b-rr from a drained one).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "run_job.h"

namespace pd::testing {
namespace {

const char* kPlan4 = R"({"format": "pipedream-plan/1", "config": "4", "stages": [
  {"index": 0, "layers": [0, 7], "replicas": 4, "ranks": [0, 1, 2, 3]}]})";
const char* kPlan11 = R"({"format": "pipedream-plan/1", "config": "1-1", "stages": [
  {"index": 0, "layers": [0, 4], "replicas": 1, "ranks": [0]},
  {"index": 1, "layers": [5, 7], "replicas": 1, "ranks": [1]}]})";

// 8 small layers with BatchNorm (stage 0: its statistics must survive the
// forwards a resumed run repeats) and dropout (keyed by minibatch), on
// synthetic data: each run takes a second or two.
const char* kTinyModel = R"({"name": "tiny-bn-dropout", "classes": 10, "input": {"shape": [1, 28, 28]}, "layers": [
  {"type": "conv2d", "name": "conv1", "out_channels": 4, "kernel": 3, "padding": 1, "stride": 2},
  {"type": "batchnorm2d", "name": "bn1"},
  {"type": "relu", "name": "relu1"},
  {"type": "flatten", "name": "flatten"},
  {"type": "linear", "name": "fc1", "out_features": 32},
  {"type": "dropout", "name": "drop1", "p": 0.3},
  {"type": "relu", "name": "relu2"},
  {"type": "linear", "name": "fc2", "out_features": 10}]})";

std::string model_args(const std::string& dir) {
  write_text(dir + "/tiny.json", kTinyModel);
  return " --model-spec " + dir + "/tiny.json --data synthetic --seed 7 --no-eval";
}
std::string run_args(const std::string& dir) {
  return " run" + model_args(dir) + " --threads-per-worker 1 --log-every 1 --timeout 30 --batch 4";
}

struct Plans {
  std::string dir;
  explicit Plans(const std::string& name) : dir(scratch_dir(name)) {
    write_text(dir + "/1111.json", kPlan1111);
    write_text(dir + "/211.json", kPlan211);
    write_text(dir + "/4.json", kPlan4);
    write_text(dir + "/11.json", kPlan11);
  }
  std::string plan(const std::string& config) const { return " --plan " + dir + "/" + config + ".json"; }
};

int workers_of(const std::string& config) { return config == "11" ? 2 : 4; }

// Runs `pipedream run` with `plan`, saving its final weights to DIR/tag.safetensors.
std::string run(const Plans& p, const std::string& config, const std::string& tag, const std::string& extra) {
  const std::string save = p.dir + "/" + tag + ".safetensors";
  JobResult r = run_shell(mpirun(workers_of(config)) + pipedream_binary() + run_args(p.dir) + p.plan(config) + extra + " --save " +
                          save + " --metrics " + p.dir + "/" + tag + ".jsonl");
  EXPECT_EQ(r.exit_code, 0) << tag << ":\n" << r.output;
  return save;
}

// Largest |a - b| over every tensor (`parameters_only`: BatchNorm running
// statistics left out); infinity when the files differ in names or shapes.
double max_abs_diff(const std::string& a_path, const std::string& b_path, bool parameters_only = false) {
  auto a = load_by_name(a_path), b = load_by_name(b_path);
  if (a.empty() || a.size() != b.size()) return INFINITY;
  double worst = 0;
  for (auto& [n, t] : a) {
    if (!b.count(n) || b[n].shape() != t.shape()) return INFINITY;
    if (parameters_only && n.find(".running_") != std::string::npos) continue;
    const float *x = t.f32(), *y = b[n].f32();
    for (int64_t i = 0; i < t.numel(); ++i) worst = std::max(worst, double(std::fabs(x[i] - y[i])));
  }
  return worst;
}

bool bitwise_equal_files(const std::string& a_path, const std::string& b_path) {
  auto a = load_by_name(a_path), b = load_by_name(b_path);
  if (a.empty() || a.size() != b.size()) return false;
  for (auto& [n, t] : a)
    if (!b.count(n) || !same_bits(t, b[n])) return false;
  return true;
}

std::string last_line(const std::string& output) {
  const size_t end = output.find_last_not_of('\n');
  if (end == std::string::npos) return "";
  const size_t start = output.rfind('\n', end);
  return output.substr(start == std::string::npos ? 0 : start + 1, end - (start == std::string::npos ? 0 : start + 1) + 1);
}

size_t count_of(const std::string& text, const std::string& part) {
  size_t n = 0;
  for (size_t at = text.find(part); at != std::string::npos; at = text.find(part, at + 1)) ++n;
  return n;
}

TEST(TrainCheckpoints, ResumedRunEqualsTheUninterruptedOne) {
  const std::string dir = scratch_dir("train_ckpt");
  const std::string common = pipedream_binary() + " train" + model_args(dir) + " --minibatches 10 --threads 1 --optimizer adam";
  const std::string train = common + " --batch 8";
  JobResult plain = run_shell(train + " --save " + dir + "/plain.safetensors");
  ASSERT_EQ(plain.exit_code, 0) << plain.output;
  JobResult ck = run_shell(train + " --checkpoint-every 4 --checkpoint-dir " + dir + "/ck --save " + dir + "/ck.safetensors");
  ASSERT_EQ(ck.exit_code, 0) << ck.output;
  for (const char* step : {"step-4", "step-8", "step-10"})
    EXPECT_TRUE(std::filesystem::exists(dir + "/ck/" + step + "/stage-0.safetensors")) << step;
  EXPECT_TRUE(bitwise_equal_files(dir + "/plain.safetensors", dir + "/ck.safetensors"));
  JobResult resumed = run_shell(train + " --resume " + dir + "/ck/step-4 --save " + dir + "/resumed.safetensors");
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_NE(resumed.output.find("resumed at step 4"), std::string::npos) << resumed.output;
  EXPECT_TRUE(bitwise_equal_files(dir + "/plain.safetensors", dir + "/resumed.safetensors"));
  // --keep-checkpoints 2: after each checkpoint only the newest two remain,
  // and the result is the same bits.
  JobResult kept = run_shell(train + " --checkpoint-every 2 --keep-checkpoints 2 --checkpoint-dir " + dir +
                             "/kept --save " + dir + "/kept.safetensors");
  ASSERT_EQ(kept.exit_code, 0) << kept.output;
  for (const char* step : {"step-2", "step-4", "step-6"})
    EXPECT_FALSE(std::filesystem::exists(dir + "/kept/" + step)) << step << " was kept";
  for (const char* step : {"step-8", "step-10"})
    EXPECT_TRUE(std::filesystem::exists(dir + "/kept/" + std::string(step) + "/state.json")) << step;
  EXPECT_TRUE(bitwise_equal_files(dir + "/plain.safetensors", dir + "/kept.safetensors"));
  JobResult no_dir = run_shell(train + " --keep-checkpoints 2");
  EXPECT_EQ(no_dir.exit_code, 2) << no_dir.output;
  EXPECT_NE(no_dir.output.find("--keep-checkpoints needs --checkpoint-dir"), std::string::npos) << no_dir.output;
  // Another batch size is refused naming it, as the last line.
  JobResult other = run_shell(common + " --batch 16 --resume " + dir + "/ck");
  EXPECT_EQ(other.exit_code, 2) << other.output;
  EXPECT_NE(last_line(other.output).find("the checkpoint has batch = 8 but this run has 16"), std::string::npos)
      << other.output;
}

// gpipe, 1f1b-flush and zb-h1 checkpoint between batches, where their
// pipeline is empty anyway: same bits with and without checkpoints, and
// from a resumed checkpoint.
TEST(RunCheckpoints, FlushSchedulesCheckpointWithoutChangingTheResult) {
  const Plans p("flush_ckpt");
  for (const std::string schedule : {"gpipe", "1f1b-flush", "zb-h1"}) {
    const std::string base = " --schedule " + schedule + " --minibatches 5";
    const std::string plain = run(p, "1111", schedule + "_plain", base);
    const std::string ck = p.dir + "/" + schedule + "_ck";
    const std::string with = run(p, "1111", schedule + "_with", base + " --checkpoint-every 2 --checkpoint-dir " + ck);
    EXPECT_TRUE(std::filesystem::exists(ck + "/step-2/stage-3.safetensors")) << schedule;
    EXPECT_TRUE(bitwise_equal_files(plain, with)) << schedule << ": checkpoints changed the result";
    const std::string resumed = run(p, "1111", schedule + "_resumed", base + " --resume " + ck + "/step-2");
    EXPECT_TRUE(bitwise_equal_files(plain, resumed)) << schedule << ": the resumed run differs";
    if (schedule != "gpipe") continue;
    // --keep-checkpoints 1: the pipeline's reporter leaves the newest only.
    const std::string kept_dir = p.dir + "/kept";
    const std::string kept = run(p, "1111", "kept", base + " --checkpoint-every 2 --keep-checkpoints 1 --checkpoint-dir " + kept_dir);
    EXPECT_TRUE(bitwise_equal_files(plain, kept));
    EXPECT_FALSE(std::filesystem::exists(kept_dir + "/step-2"));
    EXPECT_FALSE(std::filesystem::exists(kept_dir + "/step-4"));
    EXPECT_TRUE(std::filesystem::exists(kept_dir + "/step-5/stage-3.safetensors"));
  }
}

// A 1f1b-flush checkpoint of plan 1-1-1-1 resumes under other plans: bit
// for bit where the arithmetic is the same (unreplicated stages: 1-1),
// parameters within fp32 summation-order tolerance where replicas sum
// gradients in another order (2-1-1, 4). (A replicated stage's BatchNorm
// running statistics are its first replica's, updated on its own
// microbatches as in any data-parallel run: not compared.)
TEST(RunCheckpoints, FlushCheckpointResumesUnderAnotherPlan) {
  const Plans p("reshard");
  const std::string base = " --schedule 1f1b-flush --microbatches 4 --minibatches 6";
  const std::string ck = p.dir + "/ck";
  const std::string plain = run(p, "1111", "plain", base + " --checkpoint-every 3 --checkpoint-dir " + ck);
  const std::string same = run(p, "11", "on_11", base + " --resume " + ck + "/step-3");
  EXPECT_TRUE(bitwise_equal_files(plain, same)) << "1-1: " << max_abs_diff(plain, same);
  for (const std::string config : {"211", "4"}) {
    const std::string other = run(p, config, "on_" + config, base + " --resume " + ck + "/step-3");
    const double diff = max_abs_diff(plain, other, true);
    EXPECT_LT(diff, 1e-6) << config;
  }
  // Another microbatch count is another batch: refused naming it, once, last.
  JobResult refused = run_shell(pipedream_binary() + run_args(p.dir) + p.plan("4") +
                                " --schedule 1f1b-flush --microbatches 2 --minibatches 6 --resume " + ck);
  EXPECT_EQ(refused.exit_code, 2) << refused.output;
  EXPECT_NE(last_line(refused.output).find("the checkpoint has microbatches = 4 but this run has 2"), std::string::npos)
      << refused.output;
  EXPECT_EQ(count_of(refused.output, "the checkpoint has"), 1u) << refused.output;
}

// 1f1b-rr checkpoints with minibatches in flight: stash and vertical keep
// the same bits with and without them, and a run resumed from one rebuilds
// what was in flight and ends with the uninterrupted run's bits.
TEST(RunCheckpoints, OneFOneBRrCheckpointsInFlightWithoutChangingTheResult) {
  const Plans p("rr_ckpt");
  struct Case {
    std::string config, weights, every, resume_at;
  };
  // 2-1-1: a replicated stage's versions advance by 2, so checkpoints fall
  // on even steps; its second replica stores the versions it holds.
  for (const Case& c : {Case{"1111", "stash", "5", "5"}, Case{"1111", "vertical", "5", "5"},
                        Case{"211", "stash", "6", "6"}}) {
    const std::string tag = c.config + "_" + c.weights;
    const std::string base = " --schedule 1f1b-rr --weights " + c.weights + " --minibatches 12";
    const std::string plain = run(p, c.config, tag + "_plain", base);
    const std::string ck = p.dir + "/" + tag + "_ck";
    const std::string with = run(p, c.config, tag + "_with", base + " --checkpoint-every " + c.every + " --checkpoint-dir " + ck);
    EXPECT_TRUE(bitwise_equal_files(plain, with)) << tag << ": checkpoints changed the result, by up to "
                                                  << max_abs_diff(plain, with);
    const std::string resumed = run(p, c.config, tag + "_resumed", base + " --resume " + ck + "/step-" + c.resume_at);
    EXPECT_TRUE(bitwise_equal_files(plain, resumed)) << tag << ": the resumed run differs by up to "
                                                     << max_abs_diff(plain, resumed);
    // Losses of the resumed steps are those of the uninterrupted run.
    auto all = step_losses(p.dir + "/" + tag + "_plain.jsonl");
    auto after = step_losses(p.dir + "/" + tag + "_resumed.jsonl");
    ASSERT_FALSE(after.empty()) << tag;
    for (const auto& [step, loss] : after) EXPECT_EQ(all[step], loss) << tag << " step " << step;
  }
  JobResult odd = run_shell(pipedream_binary() + run_args(p.dir) + p.plan("211") +
                            " --schedule 1f1b-rr --minibatches 12 --checkpoint-every 5 --checkpoint-dir " + p.dir + "/odd");
  EXPECT_EQ(odd.exit_code, 2) << odd.output;
  EXPECT_NE(last_line(odd.output).find("use a multiple of 2"), std::string::npos) << odd.output;
}

// In flight, minibatches belong to their stages: another plan is refused
// naming the plan, once, as the last line. The drained checkpoint a run
// writes at its end resumes under 2-1-1 and 4 and trains on.
TEST(RunCheckpoints, OneFOneBRrReshardsFromADrainedCheckpointOnly) {
  const Plans p("rr_reshard");
  const std::string base = " --schedule 1f1b-rr --minibatches 8";
  const std::string ck = p.dir + "/ck";
  run(p, "1111", "first", base + " --checkpoint-every 4 --checkpoint-dir " + ck);
  JobResult refused = run_shell(pipedream_binary() + run_args(p.dir) + p.plan("211") + " --schedule 1f1b-rr --minibatches 12 --resume " +
                                ck + "/step-4");
  EXPECT_EQ(refused.exit_code, 2) << refused.output;
  const std::string last = last_line(refused.output);
  EXPECT_NE(last.find("the checkpoint has config = \"1-1-1-1\" but this run has \"2-1-1\""), std::string::npos)
      << refused.output;
  EXPECT_NE(last.find("drained"), std::string::npos) << refused.output;
  EXPECT_EQ(count_of(refused.output, "the checkpoint has"), 1u) << refused.output;
  for (const std::string config : {"211", "4"}) {
    const std::string tag = "on_" + config;
    run(p, config, tag, " --schedule 1f1b-rr --minibatches 12 --resume " + ck + "/step-8");
    auto losses = step_losses(p.dir + "/" + tag + ".jsonl");
    ASSERT_FALSE(losses.empty()) << config;
    // Every step, also from the other replicas of a replicated last stage.
    EXPECT_EQ(losses.begin()->first, 8) << config << ": the resumed run starts at the checkpoint's step";
    EXPECT_EQ(losses.size(), 4u) << config;
    EXPECT_EQ(losses.rbegin()->first, 11) << config;
    for (const auto& [step, loss] : losses) EXPECT_TRUE(std::isfinite(loss)) << config << " step " << step;
  }
}

}  // namespace
}  // namespace pd::testing

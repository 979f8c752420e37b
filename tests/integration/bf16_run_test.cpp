// `run --precision bf16` on the CPU under mpirun: bit for bit its
// --reference on 1f1b-rr (weight stashing), 1f1b-flush and zb-h1, bit for
// bit `train --precision bf16` with vertical sync, and half the bytes of
// fp32 on the wire (measured: the ranks' sent_bytes).
#include <gtest/gtest.h>

#include "run_job.h"

namespace pd::testing {
namespace {

// 4 single-worker stages.
std::string plan4(const std::vector<std::pair<int, int>>& layers) {
  std::string stages;
  for (size_t s = 0; s < layers.size(); ++s)
    stages += (s ? ",\n  " : "\n  ") + std::string("{\"index\": ") + std::to_string(s) + ", \"layers\": [" +
              std::to_string(layers[s].first) + ", " + std::to_string(layers[s].second) +
              "], \"replicas\": 1, \"ranks\": [" + std::to_string(s) + "]}";
  return "{\"format\": \"pipedream-plan/1\", \"config\": \"1-1-1-1\", \"stages\": [" + stages + "]}";
}

struct ModelCase {
  std::string name, args, plan;
};

const ModelCase kCnn{"cnn", " --model cnn", plan4({{0, 2}, {3, 5}, {6, 7}, {8, 9}})};
const ModelCase kGpt{"gpt_mini", " --model gpt-mini --model-options vocab=64,context=16,width=32,depth=6,heads=2",
                     plan4({{0, 1}, {2, 3}, {4, 5}, {6, 8}})};

// 3 steps of 16 samples; flush schedules in 4 microbatches of 4.
RunFiles run(const std::string& dir, const std::string& tag, const ModelCase& m, const std::string& schedule,
             const std::string& precision, bool reference) {
  RunFiles f{dir + "/" + tag + ".safetensors", dir + "/" + tag + ".jsonl"};
  const bool flush = schedule != "1f1b-rr";
  const std::string args = " run --plan " + dir + "/plan.json" + m.args +
                           " --data synthetic --seed 3 --no-eval --threads-per-worker 1 --log-every 1 --timeout 60"
                           " --minibatches 3 --schedule " + schedule +
                           (flush ? " --microbatches 4 --batch 16" : " --batch 16 --weights stash") +
                           " --precision " + precision + " --save " + f.save + " --metrics " + f.metrics;
  JobResult r = reference ? run_shell(pipedream_binary() + args + " --reference")
                          : run_shell(mpirun(4) + pipedream_binary() + args);
  EXPECT_EQ(r.exit_code, 0) << tag << ":\n" << r.output;
  return f;
}

void expect_pipelines_match_reference(const ModelCase& m, const std::vector<std::string>& schedules) {
  const std::string dir = scratch_dir("bf16_" + m.name);
  write_text(dir + "/plan.json", m.plan);
  for (const std::string& schedule : schedules) {
    const RunFiles mpi = run(dir, schedule + "_mpi", m, schedule, "bf16", false);
    const RunFiles ref = run(dir, schedule + "_ref", m, schedule, "bf16", true);
    expect_same_bits(mpi, ref, m.name + " " + schedule + " bf16: mpirun vs --reference");
  }
}

TEST(Bf16Run, CnnPipelinesEqualTheReferenceBitForBit) {
  expect_pipelines_match_reference(kCnn, {"1f1b-rr", "1f1b-flush", "zb-h1"});
}

TEST(Bf16Run, GptMiniPipelinesEqualTheReferenceBitForBit) {
  expect_pipelines_match_reference(kGpt, {"1f1b-rr", "zb-h1"});
}

// Packing the wire and the stash changes no bit: vertical sync on 4 stages
// is delayed SGD with a delay of 3, which `train` computes without either.
TEST(Bf16Run, VerticalSyncEqualsTrainWithADelayBitForBit) {
  for (const ModelCase& m : {kCnn, kGpt}) {
    const std::string dir = scratch_dir("bf16_vertical_" + m.name);
    write_text(dir + "/plan.json", m.plan);
    const std::string common = m.args + " --data synthetic --seed 3 --no-eval --log-every 1 --minibatches 5 --batch 8"
                               " --precision bf16";
    const std::string run_save = dir + "/run.safetensors", train_save = dir + "/train.safetensors";
    JobResult r = run_shell(mpirun(4) + pipedream_binary() + " run --plan " + dir + "/plan.json" + common +
                            " --weights vertical --threads-per-worker 1 --timeout 60 --save " + run_save);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    JobResult t = run_shell(pipedream_binary() + " train" + common + " --threads 1 --gradient-delay 3 --save " +
                            train_save);
    ASSERT_EQ(t.exit_code, 0) << t.output;
    auto a = load_by_name(run_save), b = load_by_name(train_save);
    ASSERT_EQ(a.size(), b.size()) << m.name;
    for (auto& [n, w] : b) EXPECT_TRUE(same_bits(a[n], w)) << m.name << ": tensor " << n << " differs";
  }
}

// A checkpoint taken with minibatches in flight records the precision, and
// resuming from it (the in-flight forwards rebuilt, their activations sent
// again packed) finishes with the uninterrupted run's bits.
TEST(Bf16Run, ResumeWithMinibatchesInFlightEqualsTheUninterruptedRun) {
  const std::string dir = scratch_dir("bf16_resume");
  write_text(dir + "/plan.json", kCnn.plan);
  const std::string args = " run --plan " + dir + "/plan.json" + kCnn.args +
                           " --data synthetic --seed 3 --no-eval --threads-per-worker 1 --timeout 60 --batch 8"
                           " --minibatches 6 --precision bf16";
  JobResult full = run_shell(mpirun(4) + pipedream_binary() + args + " --checkpoint-dir " + dir +
                             "/ck --checkpoint-every 3 --save " + dir + "/full.safetensors");
  ASSERT_EQ(full.exit_code, 0) << full.output;
  std::ifstream state(dir + "/ck/step-3/state.json");
  ASSERT_TRUE(state.good());
  const nlohmann::json j = nlohmann::json::parse(state);
  EXPECT_EQ(j.value("precision", ""), "bf16");
  EXPECT_FALSE(j.value("drained", true)) << "no minibatch in flight at the checkpoint: nothing to rebuild";
  JobResult resumed = run_shell(mpirun(4) + pipedream_binary() + args + " --resume " + dir + "/ck/step-3 --save " +
                                dir + "/resumed.safetensors");
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  auto a = load_by_name(dir + "/full.safetensors"), b = load_by_name(dir + "/resumed.safetensors");
  ASSERT_EQ(a.size(), b.size());
  for (auto& [n, w] : a) EXPECT_TRUE(same_bits(w, b[n])) << "tensor " << n << " differs";
}

// Activations forward and gradients backward, every rank's sent_bytes
// summed: bf16 sends 2 bytes an element (plus a few header words a message).
TEST(Bf16Run, SendsHalfTheBytesOfFp32) {
  const std::string dir = scratch_dir("bf16_bytes");
  write_text(dir + "/plan.json", kCnn.plan);
  const RunFiles fp32 = run(dir, "fp32", kCnn, "1f1b-rr", "fp32", false);
  const RunFiles bf16 = run(dir, "bf16", kCnn, "1f1b-rr", "bf16", false);
  auto sent = [](const RunFiles& f) {
    double total = 0;
    int ranks = 0;
    for (const nlohmann::json& r : metric_lines(f.metrics, "rank")) {
      total += r.at("sent_bytes").get<double>();
      ++ranks;
    }
    EXPECT_EQ(ranks, 4);
    return total;
  };
  const double a = sent(fp32), b = sent(bf16);
  ASSERT_GT(a, 0);
  // 3 minibatches x (3 activations + 3 gradients) messages, 4 header words each at most.
  EXPECT_LE(b, a / 2 + 3 * 6 * 4 * 4 * 2) << "fp32 " << a << " bytes, bf16 " << b;
  EXPECT_GE(b, a / 2) << "fp32 " << a << " bytes, bf16 " << b;
  std::printf("sent bytes: fp32 %.0f, bf16 %.0f (%.4f)\n", a, b, b / a);
  auto wa = load_by_name(fp32.save), wb = load_by_name(bf16.save);
  bool differs = false;
  for (auto& [n, t] : wa) differs = differs || !same_bits(t, wb[n]);
  EXPECT_TRUE(differs) << "--precision bf16 trained fp32's bits";
}

}  // namespace
}  // namespace pd::testing

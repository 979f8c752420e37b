// `pipedream train` end to end: exit codes for bad input, and training
// semantics checked against independent loops written here with the
// library pieces - plain SGD, delayed SGD, and batch-vs-microbatch
// gradients.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <unistd.h>
#include <fstream>

#include "core/cpu/gemm.h"
#include "core/error.h"
#include "core/loss.h"
#include "core/optimizer.h"
#include "core/safetensors.h"
#include "models/dataset.h"
#include "models/layer_range.h"
#include "models/parameters.h"

namespace pd {
namespace {

namespace fs = std::filesystem;

struct CommandResult {
  int exit_code = -1;
  std::string output;  // stdout and stderr
};

CommandResult run_pipedream(const std::string& args) {
  const std::string cmd = std::string(PD_BINARY_DIR) + "/bin/pipedream " + args + " 2>&1";
  CommandResult r;
  FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) return r;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) r.output.append(buf, n);
  int status = ::pclose(p);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

// One scratch folder per test process, removed when the process exits.
struct ScratchDir {
  fs::path path;
  explicit ScratchDir(const std::string& prefix)
      : path(fs::temp_directory_path() / (prefix + std::to_string(::getpid()))) {}
  ~ScratchDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

fs::path work_dir() {
  static ScratchDir scratch("pd_train_test_");
  fs::path d = scratch.path;
  fs::create_directories(d);
  return d;
}

// A small classifier on 8x8 synthetic images: fast enough to train in tests.
const char* kSmallSpec = R"({"name": "small", "input": {"shape": [1, 8, 8]}, "classes": 4, "layers": [
  {"type": "conv2d", "out_channels": 4, "kernel": 3, "padding": 1}, {"type": "relu"},
  {"type": "maxpool2d", "kernel": 2}, {"type": "flatten"}, {"type": "linear", "out_features": 4}]})";

fs::path small_spec() {
  fs::path p = work_dir() / "small.json";
  std::ofstream(p) << kSmallSpec;
  return p;
}

constexpr int kSteps = 6, kBatch = 16;
constexpr uint64_t kSeed = 5;
constexpr float kLr = 0.1f, kMomentum = 0.9f;

// Delayed SGD written out directly: history[t] = w_t, the step-t gradient
// is taken at w_{max(0, t-d)} and applied to w_t. d = 0 is plain SGD.
NamedTensors reference_training(int delay) {
  cpu::set_compute_threads(1);
  Model m = build_model(nlohmann::json::parse(kSmallSpec));
  DataSplits data = open_dataset("synthetic", "", m);
  SampleOrder order(data.train->size(), kSeed);
  auto opt = make_optimizer({.kind = OptimizerKind::sgd, .lr = kLr, .momentum = kMomentum});
  std::vector<ParameterStore> history{ParameterStore::create(m, kSeed)};
  OptimizerState st = opt->make_state(history[0].all_params());
  const int64_t per_epoch = data.train->size() / kBatch;
  for (int t = 0; t < kSteps; ++t) {
    Batch b = fetch(*data.train, order.minibatch(t / per_epoch, t % per_epoch, kBatch));
    const ParameterStore& w = history[static_cast<size_t>(std::max(0, t - delay))];
    ParameterStore g = w.zeros_like_params();
    StepInfo step{.training = true, .seed = kSeed, .minibatch_id = static_cast<uint64_t>(t)};
    RangeContext ctx;
    Tensor logits = forward_layers(m, w, 0, m.size() - 1, b.inputs, step, ctx);
    LossResult loss = softmax_cross_entropy(logits, b.labels);
    backward_layers(m, w, g, 0, m.size() - 1, loss.grad, step, ctx, false);
    ParameterStore next = history.back().clone_params();
    opt->step(next.all_params(), g.all_params(), st, kLr);
    history.push_back(std::move(next));
  }
  return history.back().named_tensors();
}

NamedTensors cli_training(const std::string& extra, const std::string& tag) {
  const fs::path out = work_dir() / (tag + ".safetensors");
  CommandResult r = run_pipedream(cat("train --model-spec ", small_spec().string(), " --data synthetic --minibatches ",
                                      kSteps, " --batch ", kBatch, " --optimizer sgd --lr ", kLr, " --momentum ",
                                      kMomentum, " --seed ", kSeed, " --threads 1 --no-eval --save ", out.string(),
                                      " ", extra));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  return load_safetensors(out.string());
}

bool bitwise_equal(const NamedTensors& a, const NamedTensors& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i].first != b[i].first || a[i].second.shape() != b[i].second.shape() ||
        std::memcmp(a[i].second.raw(), b[i].second.raw(), a[i].second.nbytes()) != 0)
      return false;
  return true;
}

TEST(TrainCli, GradientDelayZeroIsPlainSgd) {
  NamedTensors plain = cli_training("", "plain"), d0 = cli_training("--gradient-delay 0", "d0");
  EXPECT_TRUE(bitwise_equal(plain, d0));
  EXPECT_TRUE(bitwise_equal(plain, reference_training(0)));
}

TEST(TrainCli, GradientDelayIsDelayedSgdAndDiffersFromPlain) {
  NamedTensors d2 = cli_training("--gradient-delay 2", "d2");
  EXPECT_TRUE(bitwise_equal(d2, reference_training(2)));
  EXPECT_FALSE(bitwise_equal(d2, reference_training(0)));
  EXPECT_FALSE(bitwise_equal(d2, reference_training(1)));
}

TEST(TrainCli, WritesMetricsLines) {
  const fs::path metrics = work_dir() / "metrics.jsonl";
  CommandResult r = run_pipedream(cat("train --model-spec ", small_spec().string(),
                                      " --data synthetic --epochs 1 --batch 512 --lr 0.05 --threads 1 --log-every 1 --metrics ",
                                      metrics.string()));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::ifstream in(metrics);
  std::string line;
  int steps = 0, evals = 0;
  while (std::getline(in, line)) {
    auto j = nlohmann::json::parse(line);
    if (j["event"] == "step") {
      ++steps;
      for (const char* k : {"step", "epoch", "loss", "samples_per_s", "seconds"}) EXPECT_TRUE(j.contains(k)) << line;
    } else if (j["event"] == "eval") {
      ++evals;
      EXPECT_EQ(j["epoch"], 0);
      EXPECT_GT(j["test_accuracy"].get<double>(), 0.9) << "synthetic data is easy";  // learnable
    }
  }
  EXPECT_EQ(steps, 4096 / 512);
  EXPECT_EQ(evals, 1);
}

TEST(TrainCli, BadInputExitsWithCode2AndAMessage) {
  const fs::path bad = work_dir() / "bad.json";
  std::ofstream(bad) << R"({"name": "bad", "input": {"shape": [1, 28, 28]}, "classes": 10, "layers": [
    {"type": "flatten"}, {"type": "linear", "out_feature": 10}]})";
  CommandResult r = run_pipedream("train --model-spec " + bad.string() + " --data synthetic --minibatches 1");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("layer 1 (linear)"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("out_feature"), std::string::npos) << r.output;

  const fs::path notjson = work_dir() / "notjson.json";
  std::ofstream(notjson) << "{\"layers\": [";
  r = run_pipedream("train --model-spec " + notjson.string() + " --minibatches 1");
  EXPECT_EQ(r.exit_code, 2) << r.output;

  r = run_pipedream("train --model cnn --data fashion-mnist --data-dir /nonexistent/fmnist --minibatches 1");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("/nonexistent/fmnist"), std::string::npos) << r.output;

  r = run_pipedream("train --model vgg-mini --data cifar10 --data-dir /nonexistent/cifar --minibatches 1");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("data_batch_1.bin"), std::string::npos) << r.output;

  r = run_pipedream("train --model nosuchmodel --minibatches 1");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  r = run_pipedream("train --model cnn --data synthetic --minibatches 1 --optimizer sgd --momentum 2");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  r = run_pipedream("train --model cnn --data synthetic --epochs 1 --minibatches 1");
  EXPECT_EQ(r.exit_code, 2) << r.output;
}

TEST(ModelsCli, ListsTheZooWithParameterCounts) {
  CommandResult r = run_pipedream("models");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (const std::string& n : zoo_names()) EXPECT_NE(r.output.find(n), std::string::npos) << n;
  EXPECT_NE(r.output.find("1663370"), std::string::npos) << r.output;  // cnn
  r = run_pipedream("models --model cnn");
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_NE(r.output.find("conv2d(1->32"), std::string::npos) << r.output;
}

// One batch of 64 and four microbatches of 16 (minibatches 4m..4m+3) see
// the same samples, so the mean of the microbatch gradients is the batch
// gradient - what flush schedules rely on.
TEST(Microbatches, FourOf16GiveTheGradientOfOneBatchOf64) {
  cpu::set_compute_threads(1);
  Model m = build_model(zoo_spec("cnn"));
  DataSplits data = open_dataset("synthetic", "", m);
  SampleOrder order(data.train->size(), 9);
  ParameterStore w = ParameterStore::create(m, 9);
  auto gradient = [&](const Batch& b) {
    ParameterStore g = w.zeros_like_params();
    RangeContext ctx;
    StepInfo step{.training = true, .seed = 9};
    Tensor logits = forward_layers(m, w, 0, m.size() - 1, b.inputs, step, ctx);
    backward_layers(m, w, g, 0, m.size() - 1, softmax_cross_entropy(logits, b.labels).grad, step, ctx, false);
    return g;
  };
  const int64_t epoch = 1, mb = 3;
  ParameterStore big = gradient(fetch(*data.train, order.minibatch(epoch, mb, 64)));
  ParameterStore sum = w.zeros_like_params();
  for (int k = 0; k < 4; ++k) {
    ParameterStore g = gradient(fetch(*data.train, order.minibatch(epoch, 4 * mb + k, 16)));
    for (size_t i = 0; i < g.all_params().size(); ++i) {
      float* s = sum.all_params()[i].f32();
      const float* v = g.all_params()[i].f32();
      for (int64_t e = 0; e < g.all_params()[i].numel(); ++e) s[e] += 0.25f * v[e];
    }
  }
  for (size_t i = 0; i < big.all_params().size(); ++i) {
    std::vector<float> a = big.all_params()[i].to_floats(), b = sum.all_params()[i].to_floats();
    double scale = 0;
    for (float v : a) scale = std::max(scale, static_cast<double>(std::fabs(v)));
    for (size_t e = 0; e < a.size(); ++e)
      ASSERT_NEAR(a[e], b[e], 1e-4 * scale + 1e-7) << big.param_names()[i] << "[" << e << "]";
  }
}

}  // namespace
}  // namespace pd

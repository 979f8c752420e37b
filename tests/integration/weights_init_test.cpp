// Starting from weights and using them: `train --save` -> `train --init` ->
// `evaluate` agree; `run --init` gives each stage its slice and equals
// `run --reference --init`; a checkpoint's step folder reads as its weights; `predict` writes the model's eval-mode outputs
// in the data set's order; weights that do not fit are refused (exit 2).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <iterator>
#include <sstream>

#include "models/dataset.h"
#include "models/layer_range.h"
#include "models/parameters.h"
#include "run_job.h"

namespace pd::testing {
namespace {

const std::string kModel = " --model mlp --model-options hidden=24,depth=3 --data synthetic";
const std::string kTrain = " train" + kModel + " --batch 8 --threads 1 --log-every 1";

JobResult pipedream(const std::string& args) { return run_shell(pipedream_binary() + " " + args); }

// The last "eval" line of a metrics file.
nlohmann::json last_eval(const std::string& metrics) {
  const auto lines = metric_lines(metrics, "eval");
  return lines.empty() ? nlohmann::json::object() : lines.back();
}

// Trains 30 steps from the seed and saves: the weights the tests start from.
std::string trained_weights(const std::string& dir) {
  const std::string a = dir + "/a.safetensors";
  const JobResult r = pipedream(kTrain + " --minibatches 30 --lr 0.05 --seed 3 --save " + a + " --metrics " + dir +
                                "/a.jsonl");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  return a;
}

// evaluate's result equals the evaluation `train` printed for the same weights.
void expect_evaluate_matches(const std::string& weights, const std::string& train_metrics, const std::string& out) {
  const JobResult e = pipedream("evaluate" + kModel + " --threads 1 --weights " + weights + " --metrics " + out);
  ASSERT_EQ(e.exit_code, 0) << e.output;
  const nlohmann::json want = last_eval(train_metrics), got = last_eval(out);
  ASSERT_TRUE(want.contains("test_loss")) << train_metrics;
  ASSERT_TRUE(got.contains("test_loss")) << e.output;
  EXPECT_EQ(got["samples"].get<int64_t>(), 1024);  // synthetic/test
  EXPECT_NEAR(got["test_loss"].get<double>(), want["test_loss"].get<double>(), 1e-9) << weights;
  EXPECT_EQ(got["test_accuracy"].get<double>(), want["test_accuracy"].get<double>()) << weights;
}

TEST(WeightsInit, TrainSaveTrainInitEvaluateAgree) {
  const std::string dir = scratch_dir("weights_train");
  const std::string a = trained_weights(dir);
  expect_evaluate_matches(a, dir + "/a.jsonl", dir + "/eval_a.jsonl");

  // Training on from A: evaluate reports what train reported at its end.
  const std::string b = dir + "/b.safetensors";
  JobResult r = pipedream(kTrain + " --minibatches 10 --seed 4 --init " + a + " --save " + b + " --metrics " + dir +
                          "/b.jsonl");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  expect_evaluate_matches(b, dir + "/b.jsonl", dir + "/eval_b.jsonl");

  // A step too small to move a float: --init's weights come out as they went in.
  const std::string c = dir + "/c.safetensors";
  r = pipedream(kTrain + " --minibatches 1 --lr 1e-30 --momentum 0 --no-eval --init " + a + " --save " + c);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto wa = load_by_name(a), wc = load_by_name(c);
  ASSERT_EQ(wa.size(), wc.size());
  for (auto& [n, t] : wa) EXPECT_TRUE(same_bits(t, wc[n])) << n;
}

TEST(WeightsInit, RunInitEqualsReferenceAndStartsFromTheFile) {
  const std::string dir = scratch_dir("weights_run");
  const std::string a = trained_weights(dir);
  write_text(dir + "/plan.json", R"({"format": "pipedream-plan/1", "config": "1-1", "stages": [
    {"index": 0, "layers": [0, 3], "replicas": 1, "ranks": [0]},
    {"index": 1, "layers": [4, 7], "replicas": 1, "ranks": [1]}]})");
  const std::string run = " run --plan " + dir + "/plan.json" + kModel +
                          " --batch 8 --seed 5 --no-eval --threads-per-worker 1 --timeout 30 --init " + a;
  const std::string mpi = dir + "/mpi.safetensors", ref = dir + "/ref.safetensors", still = dir + "/still.safetensors";
  JobResult r = run_shell(mpirun(2) + pipedream_binary() + run + " --minibatches 6 --save " + mpi +
                          " --checkpoint-dir " + dir + "/ckpt");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  // The checkpoint's stage files, merged by name, are the weights --save wrote.
  const JobResult e1 = pipedream("evaluate" + kModel + " --threads 1 --weights " + mpi + " --metrics " + dir + "/e1.jsonl");
  const JobResult e2 = pipedream("evaluate" + kModel + " --threads 1 --weights " + dir + "/ckpt/step-6 --metrics " + dir +
                                 "/e2.jsonl");
  ASSERT_EQ(e1.exit_code, 0) << e1.output;
  ASSERT_EQ(e2.exit_code, 0) << e2.output;
  EXPECT_EQ(last_eval(dir + "/e1.jsonl")["test_loss"], last_eval(dir + "/e2.jsonl")["test_loss"]);
  r = pipedream(run + " --minibatches 6 --reference --save " + ref);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto wm = load_by_name(mpi), wr = load_by_name(ref), wa = load_by_name(a);
  ASSERT_EQ(wm.size(), wa.size());
  for (auto& [n, t] : wm) {
    EXPECT_TRUE(same_bits(t, wr[n])) << n;
    EXPECT_FALSE(same_bits(t, wa[n])) << n << " did not train";
  }
  // Both stages start from the file: steps too small to move a float leave it as it was.
  r = run_shell(mpirun(2) + pipedream_binary() + run + " --minibatches 2 --lr 1e-30 --momentum 0 --save " + still);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (auto& [n, t] : load_by_name(still)) EXPECT_TRUE(same_bits(t, wa[n])) << n;
}

// A .npy file's float32 values and shape (format 1.0, as predict writes it).
std::vector<float> read_npy(const std::string& path, std::string* header) {
  std::ifstream f(path, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(f)), {});
  if (bytes.size() < 10 || bytes.compare(0, 6, "\x93NUMPY") != 0) return {};
  const size_t n = static_cast<uint8_t>(bytes[8]) | static_cast<size_t>(static_cast<uint8_t>(bytes[9])) << 8;
  *header = bytes.substr(10, n);
  std::vector<float> v((bytes.size() - 10 - n) / sizeof(float));
  std::memcpy(v.data(), bytes.data() + 10 + n, v.size() * sizeof(float));
  return v;
}

TEST(WeightsInit, PredictWritesEvalModeOutputsInDataOrder) {
  const std::string dir = scratch_dir("weights_predict");
  const std::string a = trained_weights(dir);
  const std::string predict = "predict" + kModel + " --threads 1 --batch 16 --samples 40 --weights " + a;
  JobResult r = pipedream(predict + " -o " + dir + "/p.npy");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = pipedream(predict + " -o " + dir + "/p.csv");
  ASSERT_EQ(r.exit_code, 0) << r.output;

  // The same outputs computed here, in one batch.
  const Model m = resolve_model("mlp", "", "hidden=24,depth=3");
  ParameterStore w = ParameterStore::create(m, 0);
  w.load(load_named_weights(m, {a}), a);
  const DataSplits data = open_dataset("synthetic", "", m);
  std::vector<int64_t> idx(40);
  for (int64_t i = 0; i < 40; ++i) idx[static_cast<size_t>(i)] = i;
  RangeContext ctx;
  const Tensor want = forward_layers(m, w, 0, m.size() - 1, data.test->inputs(idx), StepInfo{.training = false}, ctx);
  const std::vector<float> wv = want.to_floats();
  ASSERT_EQ(want.shape(), (Shape{40, 10}));

  std::string header;
  const std::vector<float> got = read_npy(dir + "/p.npy", &header);
  EXPECT_NE(header.find("'shape': (40, 10)"), std::string::npos) << header;
  ASSERT_EQ(got.size(), wv.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], wv[i], 1e-5f * std::max(1.0f, std::fabs(wv[i]))) << i;

  std::ifstream csv(dir + "/p.csv");
  std::string line;
  int rows = 0;
  while (std::getline(csv, line)) {
    std::stringstream cells(line);
    std::string cell;
    int col = 0;
    while (std::getline(cells, cell, ',')) {
      const size_t i = static_cast<size_t>(rows * 10 + col++);
      ASSERT_LT(i, got.size());
      EXPECT_EQ(std::stof(cell), got[i]) << "row " << rows;  // %.9g keeps every float's bits
    }
    EXPECT_EQ(col, 10);
    ++rows;
  }
  EXPECT_EQ(rows, 40);
}

TEST(WeightsInit, WeightsThatDoNotFitAreRefusedNamingTheTensor) {
  const std::string dir = scratch_dir("weights_bad");
  const std::string a = trained_weights(dir);
  JobResult r = pipedream("evaluate --model cnn --data synthetic --weights " + a);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("not in cnn: '1.weight'"), std::string::npos) << r.output;
  r = pipedream(kTrain + " --minibatches 1 --init " + dir + "/none.safetensors");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  r = pipedream("predict" + kModel + " --weights " + a + " -o " + dir + "/p.txt");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find(".npy or a .csv"), std::string::npos) << r.output;
  r = pipedream(" run --plan auto --workers 2" + kModel + " --init " + a + " --resume " + dir);
  EXPECT_EQ(r.exit_code, 2) << r.output;
}

}  // namespace
}  // namespace pd::testing

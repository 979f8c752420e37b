// A PyTorch state_dict initialises an imported model (--init / --weights
// match ONNX initializers by name): torchvision resnet18 exported to ONNX,
// a state_dict of another resnet18 (random BatchNorm running statistics)
// saved as safetensors by tests/onnx/torch_init.py, and `pipedream evaluate
// --weights state_dict` on a fixed batch gives PyTorch's eval-mode loss
// within 1e-5 and its accuracy. Skipped without python3-torch.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/safetensors.h"
#include "models/dataset.h"
#include "onnx/import.h"
#include "tests/onnx/onnx_test_util.h"

namespace pd {
namespace {

nlohmann::json read_json_line(const std::string& path) {
  std::ifstream f(path);
  std::string line;
  std::getline(f, line);
  return nlohmann::json::parse(line, nullptr, false);
}

TEST(OnnxInit, TorchStateDictInitialisesTheImportedModel) {
  PD_SKIP_WITHOUT_TORCH();
  const std::string dir = testing::scratch_dir("torch_init");
  const std::string py = "tests/onnx/torch_init.py ";
  ASSERT_TRUE(testing::run_python(py + "export " + dir, dir + "/export.log")) << testing::read_text(dir + "/export.log");

  // The batch: the first samples of the synthetic test split that `evaluate --samples` reads.
  constexpr int64_t kSamples = 8;
  const std::string onnx = dir + "/resnet18.onnx";
  const Model m = onnx::import_model_file(onnx);
  const DataSplits data = open_dataset("synthetic", "", m);
  std::vector<int64_t> idx(kSamples);
  for (int64_t i = 0; i < kSamples; ++i) idx[static_cast<size_t>(i)] = i;
  save_safetensors(dir + "/batch.safetensors", {{"input", data.test->inputs(idx)}, {"labels", data.test->labels(idx)}});
  ASSERT_TRUE(testing::run_python(py + "loss " + dir, dir + "/loss.log")) << testing::read_text(dir + "/loss.log");
  std::printf("%s", testing::read_text(dir + "/loss.log").c_str());

  const std::string metrics = dir + "/eval.jsonl", log = dir + "/evaluate.log";
  ASSERT_EQ(testing::run_pipedream(cat("evaluate --model ", onnx, " --data synthetic --samples ", kSamples,
                                       " --threads 1 --weights ", dir, "/state_dict.safetensors --metrics ", metrics),
                                   log),
            0)
      << testing::read_text(log);
  std::printf("%s", testing::read_text(log).c_str());
  std::ifstream tf(dir + "/torch.json");
  const nlohmann::json torch = nlohmann::json::parse(tf, nullptr, false), ours = read_json_line(metrics);
  ASSERT_TRUE(torch.contains("loss")) << "torch.json";
  ASSERT_TRUE(ours.contains("test_loss")) << testing::read_text(metrics);
  EXPECT_EQ(ours["samples"].get<int64_t>(), kSamples);
  const double diff = std::fabs(ours["test_loss"].get<double>() - torch["loss"].get<double>());
  std::printf("eval-mode loss: ours %.7f, PyTorch %.7f, |difference| %.2e\n", ours["test_loss"].get<double>(),
              torch["loss"].get<double>(), diff);
  EXPECT_LE(diff, 1e-5);
  EXPECT_EQ(ours["test_accuracy"].get<double>(), torch["accuracy"].get<double>());
  // Eval mode is what was compared: the batch's statistics give another loss.
  EXPECT_GT(std::fabs(torch["train_mode_loss"].get<double>() - torch["loss"].get<double>()), 1e-3);
}

}  // namespace
}  // namespace pd

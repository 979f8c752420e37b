// Round trip with PyTorch: a PyTorch model exported
// to ONNX, trained by `pipedream train --save`, written back by `pipedream
// export`, is loaded into the original PyTorch module
// (tests/onnx/torch_roundtrip.py: the exported initializers into its
// state_dict by name, every name matched) and gives the logits our import
// of the exported file gives on the same batch, within 1e-5 (of the logits' max-abs where
// that is above 1) - with
// BatchNorm on the exported running statistics (eval mode on both sides)
// and on the batch's statistics (training mode). Dropout is exported with
// p = 0. Skipped without python3-torch or python3-onnx.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <map>
#include <sys/wait.h>

#include "core/cpu/gemm.h"
#include "core/error.h"
#include "core/safetensors.h"
#include "models/layer_range.h"
#include "models/parameters.h"
#include "onnx/import.h"
#include "tests/onnx/onnx_test_util.h"

namespace pd {
namespace {

struct RoundTrip {
  std::string model, args;
};

void PrintTo(const RoundTrip& c, std::ostream* os) { *os << c.model; }

class OnnxExportTorch : public ::testing::TestWithParam<RoundTrip> {};

using pd::testing::read_text;

bool pipedream(const std::string& args, const std::string& log) { return pd::testing::run_pipedream(args, log) == 0; }

// Our logits for `x` from the model in `path`, BatchNorm in training or eval mode.
Tensor logits(const Model& m, const Tensor& x, bool training) {
  ParameterStore w = ParameterStore::create(m, 0);  // the file's initializers: the exported weights
  StepInfo s;
  s.training = training;
  RangeContext ctx;
  return forward_layers(m, w, 0, m.size() - 1, x, s, ctx);
}

TEST_P(OnnxExportTorch, TorchReproducesOutputs) {
  PD_SKIP_WITHOUT_TORCH();
  if (std::system(cat("cd / && ", testing::kPython, " -c 'import onnx.numpy_helper' >/dev/null 2>&1").c_str()) != 0)
    GTEST_SKIP() << "the python `onnx` package is not installed (python3 -c 'import onnx' fails)";
  const RoundTrip& c = GetParam();
  const std::string tag = c.model.substr(c.model.find_last_of(':') == std::string::npos ? 0 : c.model.find_last_of(':') + 1);
  const std::string dir = testing::scratch_dir("roundtrip_" + tag);
  const std::string model = c.model.find(':') == std::string::npos ? c.model : cat(PD_SOURCE_DIR, "/", c.model);
  const std::string py = cat("tests/onnx/torch_roundtrip.py ");
  ASSERT_TRUE(testing::run_python(cat(py, "export ", model, " ", dir, " ", c.args), dir + "/export.log"))
      << read_text(dir + "/export.log");

  // Train 20 steps (plain SGD: the weights move, the running statistics
  // come most of the way to the data's), export.
  const std::string in = dir + "/in.onnx", weights = dir + "/trained.safetensors", out = dir + "/out.onnx";
  ASSERT_TRUE(pipedream(cat("train --model ", in, " --data synthetic --minibatches 20 --batch 4 --no-eval --threads 1 "
                            "--lr 0.02 --momentum 0 --save ", weights),
                        dir + "/train.log"))
      << read_text(dir + "/train.log");
  ASSERT_TRUE(pipedream(cat("export --onnx ", in, " --weights ", weights, " -o ", out), dir + "/export_cli.log"))
      << read_text(dir + "/export_cli.log");

  cpu::set_compute_threads(1);
  const Model m = onnx::import_model_file(out);
  Tensor x;
  for (auto& [name, t] : load_safetensors(dir + "/batch.safetensors"))
    if (name == "input") x = t;
  ASSERT_TRUE(x.defined());
  save_safetensors(dir + "/ours.safetensors", {{"eval", logits(m, x, false)}, {"train", logits(m, x, true)}});

  const bool ok = testing::run_python(cat(py, "compare ", model, " ", dir, " ", c.args), dir + "/compare.log");
  const std::string log = read_text(dir + "/compare.log");
  std::printf("%s", log.c_str());
  EXPECT_TRUE(ok) << log;
}

INSTANTIATE_TEST_SUITE_P(OnnxExport, OnnxExportTorch,
                         ::testing::Values(RoundTrip{"resnet18", "--input 3,32,32 --classes 10"},
                                           RoundTrip{"scripts/torch_models/gpt_decoder.py:GPTDecoder", "--tokens 16"}),
                         [](const auto& info) {
                           const std::string& m = info.param.model;
                           return m.find(':') == std::string::npos ? m : m.substr(m.find(':') + 1);
                         });

}  // namespace
}  // namespace pd

// Imported models against PyTorch on the same weights and batch (issue 15,
// Must show 1): the loss within 1e-4 relative, every parameter gradient
// within 1e-3 of the largest (max-abs normalised), the loss after 5 SGD
// steps within 1e-3 relative. tests/onnx/torch_reference.py exports the
// model and records PyTorch's figures; Dropout is exported with p = 0 (the
// two RNGs cannot draw the same masks), BatchNorm runs in training mode.
// Where PyTorch's own float32 result is further than 1e-3 from its float64
// one (MobileNet's and DenseNet's BatchNorms over 2x2 maps of 4 samples
// amplify rounding; gradients that are zero in exact arithmetic), the
// bound is 3x that error instead: no float32 implementation can do better.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>

#include "core/cpu/gemm.h"
#include "core/error.h"
#include "core/loss.h"
#include "core/optimizer.h"
#include "core/safetensors.h"
#include "models/layer_range.h"
#include "models/parameters.h"
#include "onnx/import.h"
#include "tests/onnx/onnx_test_util.h"

namespace pd {
namespace {

struct Case {
  std::string model, args;
  float lr = 0.01f;
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.model; }

class TorchNumerics : public ::testing::TestWithParam<Case> {};

TEST_P(TorchNumerics, LossGradientsAndFiveSgdStepsMatchPyTorch) {
  PD_SKIP_WITHOUT_TORCH();
  const Case& c = GetParam();
  std::string tag = c.model.substr(c.model.find_last_of("/:") == std::string::npos ? 0 : c.model.find_last_of("/:") + 1);
  if (c.args.find("--opset 13") != std::string::npos) tag += "_opset13";
  const std::string dir = testing::scratch_dir("numerics_" + tag);
  const std::string model = c.model.find(':') == std::string::npos || c.model[0] == '/' ? c.model : cat(PD_SOURCE_DIR, "/", c.model);
  ASSERT_TRUE(testing::run_python(cat("tests/onnx/torch_reference.py ", model, " ", dir, " ", c.args, " --lr ", c.lr),
                                  dir + "/log.txt"))
      << "torch_reference.py failed, see " << dir << "/log.txt";
  cpu::set_compute_threads(1);

  const Model m = onnx::import_model_file(dir + "/model.onnx");
  std::map<std::string, Tensor> ref;
  for (auto& [name, t] : load_safetensors(dir + "/reference.safetensors")) ref[name] = t;
  const Tensor x = ref.at("input"), labels = ref.at("labels"), losses = ref.at("losses");

  ParameterStore w = ParameterStore::create(m, 0);
  ParameterStore grads = w.zeros_like_params();
  auto step = [&](int k) {
    StepInfo s;
    s.training = true;
    s.minibatch_id = static_cast<uint64_t>(k);
    RangeContext ctx;
    const Tensor logits = forward_layers(m, w, 0, m.size() - 1, x, s, ctx);
    LossResult l = softmax_cross_entropy(logits, labels);
    grads.zero_params();
    backward_layers(m, w, grads, 0, m.size() - 1, l.grad, s, ctx, false);
    return l.loss;
  };

  const float loss0 = step(0);
  EXPECT_NEAR(loss0, losses.f32()[0], 1e-4 * std::fabs(losses.f32()[0])) << "initial loss";

  // Parameter names are "{layer}.{ONNX initializer name}"; PyTorch's are the initializer names.
  int compared = 0;
  double worst_grad = 0;  // over the parameters held to 1e-3
  int loosened = 0;       // parameters PyTorch itself computes less exactly in float32
  for (size_t k = 0; k < w.param_names().size(); ++k) {
    const std::string& full = w.param_names()[k];
    const std::string name = full.substr(full.find('.') + 1);
    auto it = ref.find("grad/" + name);
    if (it == ref.end()) {
      ADD_FAILURE() << "no PyTorch gradient for parameter " << name;
      continue;
    }
    const Tensor& g = grads.all_params()[k];
    const Tensor& want = it->second;
    ASSERT_EQ(g.numel(), want.numel()) << name;
    double scale = 0, diff = 0;
    for (int64_t i = 0; i < g.numel(); ++i) {
      scale = std::max(scale, double(std::fabs(want.f32()[i])));
      diff = std::max(diff, double(std::fabs(g.f32()[i] - want.f32()[i])));
    }
    const double tol = ref.at("tolerance/" + name).f32()[0];
    EXPECT_LE(diff, tol * scale + 1e-12) << name << ": max |ours - torch| " << diff << ", max |torch| " << scale
                                         << ", tolerance " << tol;
    const double err = diff / std::max(scale, 1e-30);
    if (tol <= 1.001e-3) worst_grad = std::max(worst_grad, err);
    else ++loosened;
    ++compared;
  }
  int torch_params = 0;
  for (const auto& [name, t] : ref) torch_params += name.rfind("grad/", 0) == 0;
  EXPECT_EQ(compared, torch_params) << "every PyTorch parameter is a parameter of the import";

  OptimizerConfig oc;
  oc.kind = "sgd";
  oc.lr = c.lr;
  auto opt = make_optimizer(oc);
  OptimizerState st = opt->make_state(w.all_params());
  const int steps = static_cast<int>(losses.numel()) - 1;
  float loss = loss0;
  for (int k = 1; k <= steps; ++k) {
    opt->step(w.all_params(), grads.all_params(), st, oc.lr);
    loss = step(k);
  }
  const float want = losses.f32()[steps];
  std::printf("%s: loss %.7f (torch %.7f), worst gradient error %.2e of max-abs over %d parameters held to 1e-3 "
              "(%d more within 3x PyTorch's own float32 error), loss after %d SGD steps %.7f (torch %.7f, tolerance %.1e)\n",
              m.name.c_str(), loss0, losses.f32()[0], worst_grad, compared - loosened, loosened, steps, loss, want,
              ref.at("loss_tolerance").f32()[0]);
  const double loss_tol = ref.at("loss_tolerance").f32()[0];
  EXPECT_NEAR(loss, want, loss_tol * std::fabs(want)) << "loss after " << steps << " SGD steps (initial " << loss0 << ")";
}

INSTANTIATE_TEST_SUITE_P(Models, TorchNumerics,
                         ::testing::Values(Case{"resnet18", "--input 3,64,64 --classes 10", 0.001f},
                                           Case{"scripts/torch_models/gpt_decoder.py:GPTDecoder", "--tokens 16", 0.05f},
                                           // Opset 13: LayerNorm decomposed (ReduceMean, Sub, Pow, Sqrt, Div).
                                           Case{"scripts/torch_models/gpt_decoder.py:GPTDecoder", "--tokens 16 --opset 13", 0.05f},
                                           Case{"squeezenet1_0", "--input 3,64,64 --classes 10", 0.001f},
                                           Case{"mobilenet_v2", "--input 3,64,64 --classes 10", 0.0001f},
                                           Case{"densenet121", "--input 3,64,64 --classes 10", 0.001f}),
                         [](const auto& info) {
                           const std::string& m = info.param.model;
                           const std::string name = m.find(':') == std::string::npos ? m : m.substr(m.find(':') + 1);
                           return info.param.args.find("--opset 13") == std::string::npos ? name : name + "_opset13";
                         });

}  // namespace
}  // namespace pd

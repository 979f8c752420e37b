// Imported models against PyTorch on the same weights and batch, with
// these bounds (onnx/README.md): the loss within 1e-4 relative,
// every parameter gradient within 1e-3 of its max-abs, the loss after 5 SGD
// steps within 1e-3 relative. tests/onnx/torch_reference.py exports the
// model and records PyTorch's figures; Dropout is exported with p = 0 (the
// two RNGs cannot draw the same masks), BatchNorm runs in training mode.
// A gradient that is zero in exact arithmetic, or a cancellation by a scale
// symmetry, is normalised by its module's largest. Where PyTorch's own
// float32 gradients are far from float64 at random initial weights
// (MobileNet 17%, Inception 59%: rounding amplified through depth), the
// comparison runs after some steps of training on a synthetic task
// (--pretrain). A gradient beyond 1e-3 passes only where
// relu_flip_audit.py shows one ReLU within a rounding of zero decides it
// (float64 with that ReLU flipped equals ours within 1e-4 everywhere).
// efficientnet_b0 (no ReLU) is held to float64 instead: ours within 5x
// PyTorch float32's own error (--float64-gradients). Every parameter after
// the 5 steps is compared with PyTorch's by initializer name (the weights'
// 5-step error; compare_weights has its bound).
// The gradients after the 5 steps are compared too where
// PyTorch's own float32 trajectory is reproducible, to 3x its own error
// where that is larger than 1e-3. The figures are printed (docs/measurements.md
// keeps them).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

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

// Our parameters after the SGD steps against PyTorch's, by initializer
// name: max |ours - torch| over the tensor's scale (torch_reference.py's
// weight_scale: its max-abs, or its module's largest for one that stays
// zero in exact arithmetic). Each within 1e-4, or 3x PyTorch's own float32
// error on that tensor, or PyTorch's own worst in the model, whichever is
// largest: a zero-initialised bias after 5 steps is the sum of 5 of its
// gradients, and where PyTorch's own two float32 runs part (DenseNet,
// SqueezeNet, ResNet-18: a ReLU choice flipped after a step), so do ours,
// the differences carried from tensor to tensor by the steps, as for the
// gradients after them.
struct WeightErrors {
  double worst = 0, torch_own_at_worst = 0;  // ours, and PyTorch's own float32 error on that tensor
  double torch_own = 0;                      // PyTorch's own worst over the model
  std::string worst_name, torch_own_name;
};

constexpr double kWeightTolerance = 1e-4;

// Ours against PyTorch's float64 gradients (torch_reference.py
// --float64-gradients), over the same scales: each within 1e-3, or within
// kFloat64Ratio times PyTorch float32's own error against float64 on that
// tensor (torch_error: float64 is its only other run in these cases).
constexpr double kFloat64Ratio = 5;

struct Float64Errors {
  std::vector<std::string> misses;
  int beyond = 0;  // parameters of ours beyond 1e-3 of float64
  double worst_ratio = 0, ours_at_worst = 0, torch_at_worst = 0;
  std::string worst_name;
};

Float64Errors compare_with_float64(const ParameterStore& w, const ParameterStore& grads,
                                   const std::map<std::string, Tensor>& ref) {
  Float64Errors e;
  for (size_t k = 0; k < w.param_names().size(); ++k) {
    const std::string& full = w.param_names()[k];
    const std::string name = full.substr(full.find('.') + 1);
    const Tensor& g = grads.all_params()[k];
    const Tensor& exact = ref.at("grad64/" + name);
    double diff = 0;
    for (int64_t i = 0; i < g.numel(); ++i) diff = std::max(diff, double(std::fabs(g.f32()[i] - exact.f32()[i])));
    const double ours = diff / std::max(double(ref.at("scale/" + name).f32()[0]), 1e-30);
    const double torch_own = ref.at("torch_error/" + name).f32()[0];
    if (ours <= 1e-3) continue;
    ++e.beyond;
    const double ratio = ours / std::max(torch_own, 1e-30);
    if (ratio > kFloat64Ratio)
      e.misses.push_back(cat(name, ": against float64 ", ours, " of its scale, ", ratio,
                             "x PyTorch float32's own error ", torch_own));
    if (ratio >= e.worst_ratio) e.worst_ratio = ratio, e.worst_name = name, e.ours_at_worst = ours, e.torch_at_worst = torch_own;
  }
  return e;
}

WeightErrors compare_weights(const ParameterStore& w, const std::map<std::string, Tensor>& ref) {
  WeightErrors e;
  for (const auto& [name, t] : ref)
    if (name.rfind("weight_torch_error/", 0) == 0 && t.f32()[0] >= e.torch_own)
      e.torch_own = t.f32()[0], e.torch_own_name = name.substr(name.find('/') + 1);
  int compared = 0;
  for (size_t k = 0; k < w.param_names().size(); ++k) {
    const std::string& full = w.param_names()[k];
    const std::string name = full.substr(full.find('.') + 1);
    auto it = ref.find("weight_final/" + name);
    if (it == ref.end()) {
      ADD_FAILURE() << "no PyTorch weights after the steps for parameter " << name;
      continue;
    }
    const Tensor& ours = w.all_params()[k];
    const Tensor& want = it->second;
    if (ours.numel() != want.numel()) {
      ADD_FAILURE() << name << ": " << ours.numel() << " values, PyTorch's " << want.numel();
      continue;
    }
    double diff = 0;
    for (int64_t i = 0; i < ours.numel(); ++i) diff = std::max(diff, double(std::fabs(ours.f32()[i] - want.f32()[i])));
    const double err = diff / std::max(double(ref.at("weight_scale/" + name).f32()[0]), 1e-30);
    const double torch_own = ref.at("weight_torch_error/" + name).f32()[0];
    const double tol = std::max({kWeightTolerance, 3 * torch_own, e.torch_own});
    EXPECT_LE(err, tol) << name << " after the steps: max |ours - torch| " << diff << ", " << err << " of its scale "
                        << ref.at("weight_scale/" + name).f32()[0] << " (PyTorch's own float32 error there " << torch_own
                        << ", its worst in the model " << e.torch_own << ")";
    if (err >= e.worst) e.worst = err, e.worst_name = name, e.torch_own_at_worst = torch_own;
    ++compared;
  }
  int torch_params = 0;
  for (const auto& [name, t] : ref) torch_params += name.rfind("weight_final/", 0) == 0;
  EXPECT_EQ(compared, torch_params) << "every PyTorch parameter is a parameter of the import";
  return e;
}

TEST_P(TorchNumerics, LossGradientsAndFiveSgdStepsMatchPyTorch) {
  PD_SKIP_WITHOUT_TORCH();
  const Case& c = GetParam();
  std::string tag = c.model.substr(c.model.find_last_of("/:") == std::string::npos ? 0 : c.model.find_last_of("/:") + 1);
  if (c.args.find("--opset 13") != std::string::npos) tag += "_opset13";
  const std::string dir = testing::scratch_dir("numerics_" + tag);
  std::filesystem::remove(dir + "/ours.safetensors");  // written below only if this run misses a bound
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
  EXPECT_NEAR(loss0, losses.f32()[0], 1e-4 * std::fabs(losses.f32()[0]))
      << "initial loss (PyTorch's own float32 error " << ref.at("loss0_error32").f32()[0] << ")";

  // Parameter names are "{layer}.{ONNX initializer name}"; PyTorch's are the
  // initializer names. `suffix` "" : the gradients at the initial weights,
  // "_final": at the weights after the SGD steps.
  struct GradientErrors {
    int compared = 0, loosened = 0;  // loosened: PyTorch itself computes them less exactly in float32
    std::vector<std::string> misses;  // beyond their bound, as messages
    double worst = 0;                // over the parameters held to 1e-3
    double worst_loosened = 0;       // ours against PyTorch's, and PyTorch's own error on that parameter
    double torch_own = 0;
    std::string worst_name;
  };
  double model_torch_final = 0;  // PyTorch's own largest float32 error after the steps
  for (const auto& [name, t] : ref)
    if (name.rfind("torch_error_final/", 0) == 0) model_torch_final = std::max(model_torch_final, double(t.f32()[0]));
  auto compare_gradients = [&](const std::string& suffix) {
    GradientErrors e;
    for (size_t k = 0; k < w.param_names().size(); ++k) {
      const std::string& full = w.param_names()[k];
      const std::string name = full.substr(full.find('.') + 1);
      auto it = ref.find("grad" + suffix + "/" + name);
      if (it == ref.end()) {
        ADD_FAILURE() << "no PyTorch gradient for parameter " << name;
        continue;
      }
      const Tensor& g = grads.all_params()[k];
      const Tensor& want = it->second;
      if (g.numel() != want.numel()) {
        ADD_FAILURE() << name << ": " << g.numel() << " values, PyTorch's " << want.numel();
        continue;
      }
      double diff = 0;
      for (int64_t i = 0; i < g.numel(); ++i) diff = std::max(diff, double(std::fabs(g.f32()[i] - want.f32()[i])));
      // The tensor's max-abs, or its module's largest gradient for one that is zero in exact arithmetic.
      const double scale = ref.at("scale" + suffix + "/" + name).f32()[0];
      // 1e-3 at the initial weights, unless PyTorch's own float32 gradient
      // is itself further than that from float64 (then no float32 summation
      // order can promise 1e-3: mobilenet_v2's features.14 on AMD EPYC hosts,
      // 1.35e-3); there, and after the steps, 3x PyTorch's own float32 error
      // where that is larger.
      // After the steps, at least the largest gap between PyTorch's own two
      // float32 runs anywhere in the model: the steps carry a summation
      // order's differences from one tensor into the next (mobilenet_v2's
      // features.4 on AMD EPYC hosts: 1.5e-2, where PyTorch's own runs part
      // by up to 3.8e-2 in the same model).
      const double torch_own = ref.at("torch_error" + suffix + "/" + name).f32()[0];
      const double loosened = ref.at("tolerance" + suffix + "/" + name).f32()[0];
      const double tol = suffix.empty() ? (torch_own <= 1e-3 ? 1e-3 : loosened) : std::max(model_torch_final, double(loosened));
      if (diff > tol * scale + 1e-12)
        e.misses.push_back(cat(name, suffix, ": max |ours - torch| ", diff, ", scale ", scale, ", tolerance ", tol));
      const double err = diff / std::max(scale, 1e-30);
      if (tol <= 1.001e-3) {
        if (err > e.worst) e.worst = err, e.worst_name = name;
      } else {
        ++e.loosened;
        if (err > e.worst_loosened) {
          e.worst_loosened = err;
          e.torch_own = ref.at("torch_error" + suffix + "/" + name).f32()[0];
        }
      }
      ++e.compared;
    }
    int torch_params = 0;
    for (const auto& [name, t] : ref) torch_params += name.rfind("grad" + suffix + "/", 0) == 0;
    EXPECT_EQ(e.compared, torch_params) << "every PyTorch parameter is a parameter of the import";
    return e;
  };
  auto report = [](const char* what, const GradientErrors& e) {
    std::printf("  %s: worst error %.2e of max-abs (%s) over %d parameters held to 1e-3", what, e.worst,
                e.worst_name.c_str(), e.compared - e.loosened);
    if (e.loosened)
      std::printf("; %d more within 3x PyTorch's own float32 error (after the steps: at least PyTorch's own worst in the model), worst %.2e "
                  "(PyTorch's own there %.2e)", e.loosened,
                  e.worst_loosened, e.torch_own);
    std::printf("\n");
  };
  const GradientErrors initial = compare_gradients("");
  // A gradient beyond 1e-3 passes only where one ReLU decides it whose
  // input is within a rounding of zero: relu_flip_audit.py must find the
  // single flip that makes float64 equal ours within 1e-4 on every
  // gradient (another summation order - im2col on AVX2-only hosts - flips
  // inception's Mixed_6c.branch7x7_1 at 75x75; docs/measurements.md).
  // A case run with --float64-gradients holds the gradients beyond 1e-3
  // against float64 instead, to kFloat64Ratio times PyTorch float32's own
  // error on each: efficientnet_b0 (no ReLU to flip), whose batch gradient
  // is the ~10x smaller difference of its samples' gradients, which lie
  // along one direction, so that both float32 runs' rounding is amplified
  // into an error along the gradient itself (float64_audit.py).
  std::string explained;
  const bool float64_recorded = ref.count("grad64/" + w.param_names()[0].substr(w.param_names()[0].find('.') + 1)) > 0;
  if (!initial.misses.empty()) {  // for relu_flip_audit.py and float64_audit.py
    NamedTensors ours;
    for (size_t k = 0; k < w.param_names().size(); ++k) ours.emplace_back(w.param_names()[k], grads.all_params()[k]);
    save_safetensors(dir + "/ours.safetensors", ours);
  }
  if (!initial.misses.empty() && float64_recorded) {
    const Float64Errors e = compare_with_float64(w, grads, ref);
    for (const std::string& m : e.misses) ADD_FAILURE() << m;
    char line[512];
    std::snprintf(line, sizeof line,
                  "against float64 ours are within %gx PyTorch float32's own error on each of the %d beyond 1e-3 "
                  "(worst %.2fx, %s: ours %.2e, PyTorch float32 %.2e of max-abs)\n",
                  kFloat64Ratio, e.beyond, e.worst_ratio, e.worst_name.c_str(), e.ours_at_worst, e.torch_at_worst);
    explained = line;
  } else if (!initial.misses.empty()) {
    const std::string audit = dir + "/audit.txt";
    if (testing::run_python(cat("tests/onnx/relu_flip_audit.py ", dir), audit)) {
      explained = testing::read_text(audit);
      explained = "all from one ReLU within a rounding of zero (relu_flip_audit.py): " +
                  explained.substr(explained.rfind('\n', explained.size() - 2) + 1);
    } else {
      for (const std::string& m : initial.misses) ADD_FAILURE() << m;
      ADD_FAILURE() << initial.misses.size() << " gradients miss the bound and no single flipped ReLU explains them ("
                    << audit << ")";
    }
  }

  OptimizerConfig oc;
  oc.kind = OptimizerKind::sgd;
  oc.lr = c.lr;
  auto opt = make_optimizer(oc);
  OptimizerState st = opt->make_state(w.all_params());
  const int steps = static_cast<int>(losses.numel()) - 1;
  float loss = loss0;
  for (int k = 1; k <= steps; ++k) {
    opt->step(w.all_params(), grads.all_params(), st, oc.lr);
    loss = step(k);
  }
  const WeightErrors weights = compare_weights(w, ref);
  const float want = losses.f32()[steps];
  const double loss_tol = 1e-3;
  // The gradients after the steps are compared where the trajectory is
  // reproducible in float32: where PyTorch's own float32 loss after the
  // steps is within a third of 1e-3 of its other run's (float64, or its
  // native convolution) and its final gradients within 10% of that run's.
  // Elsewhere (DenseNet's BatchNorms over a few values per channel, VGG's
  // ReLU and max-pool choices) two float32 runs part after a step or two
  // and their final gradients are unrelated.
  const double torch_final_error = model_torch_final;
  const bool trajectory_reproducible = ref.at("loss_tolerance").f32()[0] <= 1.001e-3 && torch_final_error <= 0.1;
  const GradientErrors final = trajectory_reproducible ? compare_gradients("_final") : GradientErrors{};
  for (const std::string& m : final.misses) ADD_FAILURE() << m;
  std::printf("%s: loss %.7f (torch %.7f, relative error %.2e, PyTorch's own float32 error %.2e)\n", c.model.c_str(),
              loss0, losses.f32()[0], std::fabs(loss0 - losses.f32()[0]) / std::fabs(losses.f32()[0]),
              ref.at("loss0_error32").f32()[0]);
  report("gradients", initial);
  if (!explained.empty())
    std::printf("  %zu gradients beyond 1e-3 of PyTorch's float32, %s",
                initial.misses.size(), explained.c_str());
  if (trajectory_reproducible) report(cat("gradients after ", steps, " steps").c_str(), final);
  else
    std::printf("  gradients after %d steps not compared: PyTorch's own float32 trajectory is not reproducible "
                "(its final gradients up to %.2e off)\n", steps, torch_final_error);
  std::printf("  weights after %d steps: worst error %.2e of max-abs (%s; PyTorch's own float32 error there %.2e), "
              "PyTorch's own worst %.2e (%s)\n", steps, weights.worst, weights.worst_name.c_str(),
              weights.torch_own_at_worst, weights.torch_own, weights.torch_own_name.c_str());
  std::printf("  loss after %d SGD steps %.7f (torch %.7f, relative error %.2e, PyTorch's own %.2e)\n", steps, loss,
              want, std::fabs(loss - want) / std::fabs(want), ref.at("loss_error32").f32()[0]);
  EXPECT_NEAR(loss, want, loss_tol * std::fabs(want)) << "loss after " << steps << " SGD steps (initial " << loss0 << ")";
}

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  const std::string& m = info.param.model;
  const std::string name = m.find(':') == std::string::npos ? m : m.substr(m.find(':') + 1);
  return info.param.args.find("--opset 13") == std::string::npos ? name : name + "_opset13";
}

// Every model of the issue, at the smallest input its architecture takes
// or 64x64, batch 4. --native-conv: PyTorch's own float32 error is also
// measured against its native (non-mkldnn) convolution, which rounds in
// another order, as ours do; it decides only the bound on the gradients
// after the steps, which the issue does not ask for.
INSTANTIATE_TEST_SUITE_P(
    Models, TorchNumerics,
    ::testing::Values(Case{"resnet18", "--input 3,64,64 --classes 10", 0.001f},
                      Case{"scripts/torch_models/gpt_decoder.py:GPTDecoder", "--tokens 16", 0.05f},
                      // Opset 13: LayerNorm decomposed (ReduceMean, Sub, Pow, Sqrt, Div).
                      Case{"scripts/torch_models/gpt_decoder.py:GPTDecoder", "--tokens 16 --opset 13", 0.05f},
                      // Hugging Face's layout: Conv1D exports as Gemm with transB=0.
                      Case{"scripts/torch_models/hf_gpt2.py:GPT2Conv1D", "--tokens 16", 0.05f},
                      // Gemm's every attribute: transA, transB, alpha, beta, a scalar and a row C.
                      Case{"scripts/torch_models/hf_gpt2.py:GemmForms", "--input 16", 0.05f},
                      Case{"squeezenet1_0", "--input 3,64,64 --classes 10", 0.001f},
                      // At its random initial weights PyTorch's own float32 gradients are 17% off float64.
                      Case{"mobilenet_v2", "--input 3,64,64 --classes 10 --pretrain 100", 0.0001f},
                      Case{"densenet121", "--input 3,64,64 --classes 10", 0.0001f},
                      // Zero-initialised last BatchNorm of each residual branch
                      // (torchvision's option, Goyal et al.): with the default
                      // init PyTorch's own float32 gradients are 40% off float64.
                      Case{"resnet50", "--input 3,64,64 --classes 10 --native-conv --kwargs '{\"zero_init_residual\": true}'", 0.001f},
                      // 32x32: the 7x7 adaptive pooling exports as slices and means
                      // (scripts/export_torch.py). At 224x224 some ReLU among its
                      // 11 million is always within a rounding of zero, and
                      // PyTorch's two float32 convolutions disagree by 8e-3.
                      Case{"vgg11", "--input 3,32,32 --classes 10 --native-conv", 0.001f},
                      Case{"vgg16", "--input 3,32,32 --classes 10 --native-conv", 0.001f},
                      // 75x75, the smallest input it takes. At its initial
                      // weights PyTorch's own float32 gradients are 59% off.
                      Case{"inception_v3", "--input 3,75,75 --classes 10 --native-conv --pretrain 200 --pretrain-batch 8", 0.0001f}),
    case_name);

// The zoo of onnx/README.md: architectures people train, beyond the CNNs above.
INSTANTIATE_TEST_SUITE_P(
    Zoo, TorchNumerics,
    ::testing::Values(Case{"mobilenet_v3_small", "--input 3,32,32 --classes 10", 0.001f},
                      Case{"scripts/torch_models/transformer_lm.py:EncoderLM", "--tokens 32", 0.05f},
                      Case{"scripts/torch_models/transformer_lm.py:GPT2", "--tokens 32", 0.05f},
                      Case{"scripts/torch_models/transformer_lm.py:Llama", "--tokens 32", 0.05f}),
    case_name);
// The zoo's large models (28M and 86M parameters; 40 and 80 s on one core)
// and efficientnet_b0 (40 s on a quiet host: 100 pretraining steps and a float64 run):
// run with --gtest_also_run_disabled_tests --gtest_filter='*ZooLarge*'.
INSTANTIATE_TEST_SUITE_P(
    DISABLED_ZooLarge, TorchNumerics,
    ::testing::Values(Case{"convnext_tiny", "--input 3,32,32 --classes 10", 0.001f},
                      Case{"vit_b_16", "--input 3,32,32 --classes 10 --kwargs '{\"image_size\": 32}'", 0.001f},
                      // At 32x32 its last BatchNorms normalise 4 values each and
                      // PyTorch's own float32 loss after 5 steps is 15% off float64.
                      // At 64x64 after 100 steps of training every gradient of
                      // PyTorch float32 is 7e-4 off float64 and ours 2.4e-3, 3.3x
                      // that on every tensor: held to float64 (onnx/README.md's zoo).
                      Case{"efficientnet_b0", "--input 3,64,64 --classes 10 --pretrain 100 --float64-gradients", 0.0001f}),
    case_name);

}  // namespace
}  // namespace pd

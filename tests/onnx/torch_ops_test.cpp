// The ops inception_v3 runs, one small module at a time, against PyTorch in
// float64 (tests/onnx/inception_ops.py, tests/onnx/torch_op_reference.py):
// 7x1 and 1x7 convolutions with inception's pads (3,0)/(0,3), with and
// without bias (onnx/ops/general_conv.cpp), each followed by training-mode
// BatchNorm and ReLU, on a 6x6 map (Mixed_6*'s at 128x128: the kernel is
// longer than the map) and a 9x7 one; the 3x3 stride-1 pad-1
// count_include_pad average pool (exported as Pad + AveragePool) and the
// 3x3 stride-2 max pool; torchvision's InceptionC block (Mixed_6e) whole.
// Forward output, input gradient and every parameter gradient for a fixed
// upstream gradient within 1e-5 of their max-abs (PyTorch's own float32
// errors are printed next to ours). Skipped without python3-torch.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <map>

#include "core/cpu/gemm.h"
#include "core/error.h"
#include "core/safetensors.h"
#include "models/layer_range.h"
#include "models/parameters.h"
#include "onnx/import.h"
#include "tests/onnx/onnx_test_util.h"

namespace pd {
namespace {

struct OpCase {
  std::string name, module, args;
  double tol = 1e-5;
};

void PrintTo(const OpCase& c, std::ostream* os) { *os << c.name; }

class TorchOps : public ::testing::TestWithParam<OpCase> {};

double max_abs(const Tensor& t) {
  double m = 0;
  for (int64_t i = 0; i < t.numel(); ++i) m = std::max(m, double(std::fabs(t.f32()[i])));
  return m;
}

// max |ours - want| / scale
double rel_error(const Tensor& ours, const Tensor& want, double scale) {
  double diff = 0;
  for (int64_t i = 0; i < want.numel(); ++i) diff = std::max(diff, double(std::fabs(ours.f32()[i] - want.f32()[i])));
  return diff / std::max(scale, 1e-30);
}

TEST_P(TorchOps, OutputAndGradientsMatchFloat64) {
  PD_SKIP_WITHOUT_TORCH();
  const OpCase& c = GetParam();
  const std::string dir = testing::scratch_dir("ops_" + c.name);
  ASSERT_TRUE(testing::run_python(cat("tests/onnx/torch_op_reference.py ", PD_SOURCE_DIR, "/tests/onnx/", c.module, " ",
                                      dir, " ", c.args),
                                  dir + "/log.txt"))
      << "torch_op_reference.py failed, see " << dir << "/log.txt";
  cpu::set_compute_threads(1);
  const Model m = onnx::import_model_file(dir + "/model.onnx");
  std::map<std::string, Tensor> ref;
  for (auto& [name, t] : load_safetensors(dir + "/reference.safetensors")) ref[name] = t;

  ParameterStore w = ParameterStore::create(m, 0);
  ParameterStore grads = w.zeros_like_params();
  StepInfo s;
  s.training = true;
  RangeContext ctx;
  Tensor x = ref.at("input");
  if (m.input_dtype == DType::I32) {  // token ids, stored as float
    std::vector<int32_t> ids;
    for (int64_t i = 0; i < x.numel(); ++i) ids.push_back(static_cast<int32_t>(x.f32()[i]));
    x = Tensor::from_ints(ids, x.shape());
  }
  const Tensor y = forward_layers(m, w, 0, m.size() - 1, x, s, ctx);
  const Tensor dx = backward_layers(m, w, grads, 0, m.size() - 1, ref.at("dy"), s, ctx, true);
  sum_tied_gradients(m, grads);  // a tied initializer's copies, one per reading layer (models/ties.h)

  // A gradient that is zero in exact arithmetic (a conv bias before a
  // training-mode BatchNorm) is normalised by its module's largest, as in
  // torch_numerics_test.cpp.
  std::map<std::string, double> module_max;
  for (const auto& [name, t] : ref)
    if (name.rfind("grad/", 0) == 0) {
      double& m = module_max[name.substr(0, name.rfind('.'))];
      m = std::max(m, max_abs(t));
    }
  auto check = [&](const std::string& what, const Tensor& ours, const std::string& key) {
    const Tensor& want = ref.at(key);
    ASSERT_EQ(ours.numel(), want.numel()) << what;
    double scale = max_abs(want);
    if (key.rfind("grad/", 0) == 0 && scale < 1e-6 * module_max[key.substr(0, key.rfind('.'))])
      scale = module_max[key.substr(0, key.rfind('.'))];
    const double err = rel_error(ours, want, scale);
    std::printf("  %-28s ours %.2e  PyTorch float32 %.2e\n", what.c_str(), err,
                double(ref.at("err32/" + key.substr(key.find('/') + 1)).f32()[0]));
    EXPECT_LE(err, c.tol) << what << ": max |ours - float64| / max |float64|";
  };
  std::printf("%s\n", c.name.c_str());
  check("output", y, "y");
  if (m.input_dtype == DType::F32) check("input gradient", dx, "dx");
  int compared = 0;
  for (size_t k = 0; k < w.param_names().size(); ++k) {
    if (w.is_tie_copy(k)) continue;  // its owner's, the same sum
    const std::string& full = w.param_names()[k];
    const std::string name = full.substr(full.find('.') + 1);
    ASSERT_TRUE(ref.count("grad/" + name)) << "no PyTorch gradient for " << name;
    check(name, grads.all_params()[k], "grad/" + name);
    ++compared;
  }
  int torch_params = 0;
  for (const auto& [name, t] : ref) torch_params += name.rfind("grad/", 0) == 0;
  EXPECT_EQ(compared, torch_params);
}

std::string op_case_name(const ::testing::TestParamInfo<OpCase>& info) { return info.param.name; }

INSTANTIATE_TEST_SUITE_P(
    Inception, TorchOps,
    ::testing::Values(OpCase{"conv7x1_6x6", "inception_ops.py:Conv7x1", "--input 8,6,6"},
                      OpCase{"conv7x1_bias_6x6", "inception_ops.py:Conv7x1", "--input 8,6,6 --kwargs '{\"bias\": true}'"},
                      OpCase{"conv7x1_bias_no_bn_6x6", "inception_ops.py:Conv7x1", "--input 8,6,6 --kwargs '{\"bias\": true, \"bn\": false}'"},
                      OpCase{"conv7x1_9x7", "inception_ops.py:Conv7x1", "--input 8,9,7"},
                      OpCase{"conv7x1_bias_9x7", "inception_ops.py:Conv7x1", "--input 8,9,7 --kwargs '{\"bias\": true}'"},
                      OpCase{"avgpool_13x13", "inception_ops.py:AvgPool", "--input 8,13,13"},
                      OpCase{"avgpool_6x5", "inception_ops.py:AvgPool", "--input 8,6,5"},
                      OpCase{"maxpool_13x13", "inception_ops.py:MaxPool", "--input 8,13,13"},
                      OpCase{"maxpool_61x61", "inception_ops.py:MaxPool", "--input 4,61,61 --kwargs '{\"channels\": 4}'"},
                      OpCase{"mixed_6e_block", "inception_ops.py:MixedC", "--input 768,6,6 --kwargs '{\"c7\": 192}'"}),
    op_case_name);

// VGG's 7x7 adaptive average pooling from maps it does not divide (1x1: VGG
// at 32x32; 2x2: at 64x64; 9x9; 3x5), which scripts/export_torch.py writes
// as slices, means and concats, and from 14x14, which torch.onnx exports as
// an AveragePool.
INSTANTIATE_TEST_SUITE_P(
    Vgg, TorchOps,
    ::testing::Values(OpCase{"adaptive_pool_from_1x1", "vgg_ops.py:AdaptivePool", "--input 8,1,1"},
                      OpCase{"adaptive_pool_from_2x2", "vgg_ops.py:AdaptivePool", "--input 8,2,2"},
                      OpCase{"adaptive_pool_from_9x9", "vgg_ops.py:AdaptivePool", "--input 8,9,9"},
                      OpCase{"adaptive_pool_from_3x5", "vgg_ops.py:AdaptivePool", "--input 8,3,5"},
                      OpCase{"adaptive_pool_from_14x14", "vgg_ops.py:AdaptivePool", "--input 8,14,14"}),
    op_case_name);

// The export patterns of real transformers and 1-d models
// (tests/onnx/transformer_ops.py): nn.MultiheadAttention with the batch
// first or not (the exporter moves the batch with Transpose and merges it
// with the heads by Reshape), with causal masks from a buffer or from
// torch.triu in forward, and a key padding mask; nn.TransformerEncoderLayer
// and DecoderLayer with norm_first either way; attention written as PyTorch
// 1.13 users do, or F.scaled_dot_product_attention where the PyTorch has it,
// and the ops PyTorch 2.x's exporter writes for it;
// BatchNorm1d on [N, C] and [N, C, L]; a LLaMA block (RMSNorm, SiLU,
// SwiGLU, rotary embeddings, causal attention); a token embedding tied to
// the output head (one initializer, its gradient summed over both uses).
const std::string kT = "transformer_ops.py:";
INSTANTIATE_TEST_SUITE_P(
    Transformer, TorchOps,
    ::testing::Values(OpCase{"mha_batch_first", kT + "MHA", "--input 6,16", 1e-5},
                      OpCase{"mha_seq_first", kT + "MHA", "--input 6,16 --kwargs '{\"batch_first\": false}'", 1e-5},
                      OpCase{"mha_mask_buffer", kT + "MHA", "--input 6,16 --kwargs '{\"mask\": \"buffer\"}'", 1e-5},
                      OpCase{"mha_mask_triu", kT + "MHA", "--input 6,16 --kwargs '{\"mask\": \"triu\"}'", 1e-5},
                      OpCase{"mha_seq_first_triu", kT + "MHA", "--input 6,16 --kwargs '{\"mask\": \"triu\", \"batch_first\": false}'", 1e-5},
                      OpCase{"mha_key_padding", kT + "MHA", "--input 6,16 --kwargs '{\"mask\": \"padding\"}'", 1e-5},
                      OpCase{"mha_is_causal", kT + "MHA", "--input 6,16 --kwargs '{\"mask\": \"is_causal\"}'", 1e-5},
                      OpCase{"encoder_layer", kT + "EncoderLayer", "--input 6,16", 1e-5},
                      OpCase{"encoder_layer_norm_first_causal", kT + "EncoderLayer", "--input 6,16 --kwargs '{\"norm_first\": true, \"causal\": true}'", 1e-5},
                      OpCase{"encoder_seq_first_2_layers", kT + "EncoderLayer", "--input 6,16 --kwargs '{\"batch_first\": false, \"layers\": 2}'", 1e-5},
                      OpCase{"decoder_layer", kT + "DecoderLayer", "--input 6,16", 1e-5},
                      OpCase{"decoder_layer_norm_first", kT + "DecoderLayer", "--input 6,16 --kwargs '{\"norm_first\": true}'", 1e-5},
                      OpCase{"sdpa_causal", kT + "SDPA", "--input 6,16", 1e-5},
                      OpCase{"sdpa_torch2_export_pattern", kT + "SDPA", "--input 6,16 --kwargs '{\"torch2_pattern\": true}'", 1e-5},
                      OpCase{"class_token_expand", kT + "ClassToken", "--input 6,16", 1e-5},
                      OpCase{"batchnorm1d_rank2", kT + "BatchNorm1d", "--input 8", 1e-5},
                      OpCase{"batchnorm1d_rank3", kT + "BatchNorm1d", "--input 8,5 --kwargs '{\"rank\": 3}'", 1e-5},
                      OpCase{"llama_block", kT + "LlamaBlock", "--input 6,16", 1e-5},
                      OpCase{"tied_embedding_encoder", kT + "TiedLM", "--tokens 6", 1e-5},
                      OpCase{"tied_embedding_llama", kT + "TiedLM", "--tokens 6 --kwargs '{\"llama\": true}'", 1e-5}),
    op_case_name);

}  // namespace
}  // namespace pd

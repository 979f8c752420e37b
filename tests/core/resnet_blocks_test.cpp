#include <gtest/gtest.h>

#include <cstring>

#include "core/cpu/gemm.h"
#include "core/error.h"
#include "core/layers.h"
#include "tests/core/gradcheck.h"

namespace pd {
namespace {

using testing::random_tensor;

std::vector<std::string> names(const std::vector<ParamSpec>& specs) {
  std::vector<std::string> out;
  for (const ParamSpec& s : specs) out.push_back(s.name);
  return out;
}

TEST(ResnetBlocks, TorchvisionParameterAndBufferNames) {
  LayerPtr basic = make_resnet_basic_block(8, 8, 1);
  EXPECT_EQ(names(basic->param_specs()),
            (std::vector<std::string>{"conv1.weight", "bn1.weight", "bn1.bias", "conv2.weight", "bn2.weight", "bn2.bias"}));
  EXPECT_EQ(names(basic->buffer_specs()),
            (std::vector<std::string>{"bn1.running_mean", "bn1.running_var", "bn2.running_mean", "bn2.running_var"}));
  LayerPtr down = make_resnet_basic_block(8, 16, 2);
  auto specs = down->param_specs();
  ASSERT_EQ(specs.size(), 9u);
  EXPECT_EQ(specs[0].shape, (Shape{16, 8, 3, 3}));
  EXPECT_EQ(specs[6].name, "downsample.0.weight");
  EXPECT_EQ(specs[6].shape, (Shape{16, 8, 1, 1}));
  EXPECT_EQ(specs[7].name, "downsample.1.weight");
  EXPECT_EQ(names(down->buffer_specs()).back(), "downsample.1.running_var");
  LayerPtr bottle = make_resnet_bottleneck_block(64, 16, 64, 1);
  EXPECT_EQ(names(bottle->param_specs()),
            (std::vector<std::string>{"conv1.weight", "bn1.weight", "bn1.bias", "conv2.weight", "bn2.weight",
                                      "bn2.bias", "conv3.weight", "bn3.weight", "bn3.bias"}));
  EXPECT_EQ(make_resnet_bottleneck_block(16, 8, 32, 1)->param_specs().size(), 12u);  // channels change
}

TEST(ResnetBlocks, OutputShapes) {
  EXPECT_EQ(make_resnet_basic_block(8, 16, 2)->output_shape({8, 9, 9}), (Shape{16, 5, 5}));
  EXPECT_EQ(make_resnet_bottleneck_block(64, 32, 128, 2)->output_shape({64, 8, 8}), (Shape{128, 4, 4}));
  EXPECT_THROW(make_resnet_basic_block(8, 8, 1)->output_shape({4, 8, 8}), UserError);
  EXPECT_THROW(make_resnet_basic_block(8, 8, 0), UserError);
}

// The block equals relu(bn2(conv2(relu(bn1(conv1 x)))) + bn(conv1x1 x)) run
// layer by layer with the same parameters.
TEST(ResnetBlocks, BasicBlockForwardEqualsItsLayersComposed) {
  LayerPtr block = make_resnet_basic_block(3, 4, 2);
  auto params = allocate_params(*block), buffers = allocate_buffers(*block);
  block->init(params, buffers, CounterRng(9, 2, 0));
  for (int k : {2, 5, 8}) params[k] = random_tensor(params[k].shape(), 40 + k, 0.5f);  // non-trivial BN bias
  Tensor x = random_tensor({2, 3, 7, 7}, 1);
  LayerContext ctx;
  Tensor y = block->forward({params, buffers, {}}, x, ctx);

  LayerPtr conv1 = make_conv2d(3, 4, 3, 2, 1, false), bn = make_batchnorm2d(4), relu = make_relu();
  LayerPtr conv2 = make_conv2d(4, 4, 3, 1, 1, false), proj = make_conv2d(3, 4, 1, 2, 0, false);
  std::vector<Tensor> scratch_bufs{Tensor::zeros({4}), Tensor::full({4}, 1.0f)};
  auto run = [&](const Layer& l, std::vector<Tensor> p, const Tensor& in) {
    LayerContext c;
    return l.forward({p, scratch_bufs, {}}, in, c);
  };
  Tensor h = run(*conv1, {params[0]}, x);
  h = run(*relu, {}, run(*bn, {params[1], params[2]}, h));
  h = run(*bn, {params[4], params[5]}, run(*conv2, {params[3]}, h));
  Tensor s = run(*bn, {params[7], params[8]}, run(*proj, {params[6]}, x));
  ASSERT_EQ(y.shape(), h.shape());
  for (int64_t i = 0; i < y.numel(); ++i) ASSERT_EQ(y.f32()[i], std::max(0.0f, h.f32()[i] + s.f32()[i])) << i;
  // Every BN's running statistics moved.
  for (size_t b = 0; b < buffers.size(); b += 2) EXPECT_NE(buffers[b].f32()[0], 0.0f) << b;
}

std::vector<Tensor> perturbed_params(const Layer& l) {
  auto params = allocate_params(l), buffers = allocate_buffers(l);
  l.init(params, buffers, CounterRng(3, 1, 0));
  auto specs = l.param_specs();
  // BN weight/bias away from 1/0 so every term of the BN gradient matters.
  for (size_t k = 0; k < specs.size(); ++k)
    if (specs[k].name.find("bn") != std::string::npos || specs[k].name.find("downsample.1") != std::string::npos)
      params[k] = random_tensor(specs[k].shape, 60 + k, 1.0f);
  return params;
}

TEST(ResnetBlocks, GradientsMatchFiniteDifferences) {
  testing::GradCheckOptions o;
  o.max_coords = 12;
  o.h = 1e-3f;
  LayerPtr identity = make_resnet_basic_block(3, 3, 1);
  testing::gradcheck(*identity, random_tensor({2, 3, 5, 5}, 21), o, perturbed_params(*identity));
  LayerPtr projected = make_resnet_basic_block(2, 4, 2);
  testing::gradcheck(*projected, random_tensor({2, 2, 5, 5}, 22), o, perturbed_params(*projected));
  LayerPtr bottleneck = make_resnet_bottleneck_block(3, 2, 4, 2);
  testing::gradcheck(*bottleneck, random_tensor({2, 3, 5, 5}, 23), o, perturbed_params(*bottleneck));
}

TEST(ResnetBlocks, NoInputGradientWhenNotWantedButParamsStillGetGradients) {
  for (bool projected : {false, true}) {
    LayerPtr block = make_resnet_basic_block(4, projected ? 8 : 4, projected ? 2 : 1);
    auto params = allocate_params(*block), buffers = allocate_buffers(*block);
    block->init(params, buffers, CounterRng(1, 1, 0));
    std::vector<Tensor> grads;
    for (const Tensor& p : params) grads.push_back(Tensor::zeros(p.shape()));
    LayerContext ctx;
    Tensor y = block->forward({params, buffers, {}}, random_tensor({2, 4, 6, 6}, 3), ctx);
    Tensor dx = block->backward({params, grads, {}, false}, random_tensor(y.shape(), 4), ctx);
    EXPECT_FALSE(dx.defined());
    for (size_t k = 0; k < grads.size(); ++k) {
      float m = 0;
      for (int64_t i = 0; i < grads[k].numel(); ++i) m = std::max(m, std::fabs(grads[k].f32()[i]));
      EXPECT_GT(m, 0.0f) << block->param_specs()[k].name;
    }
    EXPECT_EQ(ctx.saved_bytes(), 0u);  // backward released what forward saved
  }
}

TEST(ResnetBlocks, BitwiseReproducibleWithFixedThreadsAndInitDependsOnlyOnRng) {
  int keep = cpu::compute_threads();
  cpu::set_compute_threads(2);
  LayerPtr block = make_resnet_bottleneck_block(16, 8, 32, 2);
  auto run = [&] {
    auto params = allocate_params(*block), buffers = allocate_buffers(*block);
    block->init(params, buffers, CounterRng(11, 3, 0));
    std::vector<Tensor> grads;
    for (const Tensor& p : params) grads.push_back(Tensor::zeros(p.shape()));
    LayerContext ctx;
    Tensor y = block->forward({params, buffers, {}}, random_tensor({4, 16, 10, 10}, 5), ctx);
    Tensor dx = block->backward({params, grads, {}}, random_tensor(y.shape(), 6), ctx);
    std::vector<Tensor> all{y, dx};
    for (auto* v : {&params, &buffers, &grads}) all.insert(all.end(), v->begin(), v->end());
    return all;
  };
  auto a = run(), b = run();
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i)
    EXPECT_EQ(0, std::memcmp(a[i].raw(), b[i].raw(), a[i].nbytes())) << "tensor " << i;
  cpu::set_compute_threads(keep);
}

}  // namespace
}  // namespace pd

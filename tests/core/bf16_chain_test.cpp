// The rounding of a chain of sub-layers under --precision bf16
// (round_layer_output_if_bf16, round_layer_input_grad_if_bf16): skipping
// the passes that change nothing (after ReLU) and letting a ReLU round its
// batch norm's output in its place gives the bits of rounding after every
// sub-layer, in fewer passes. tests/models/bf16_range_test.cpp: the same
// for layer ranges.
#include <gtest/gtest.h>

#include <cstring>
#include <limits>
#include <string>

#include "core/bf16_rounding.h"
#include "core/device_ops.h"
#include "core/layers.h"
#include "core/op_times.h"
#include "tests/core/gradcheck.h"

namespace pd {
namespace {

using testing::random_tensor;
using testing::same_bits;

Tensor rounded(const Tensor& t) { return rounded_copy_if_bf16(Precision::BF16, t); }

void round_all(std::vector<Tensor>& ts) {
  for (Tensor& t : ts) round_in_place_if_bf16(Precision::BF16, t);
}

float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

int64_t calls(const std::vector<OpTime>& times, const std::string& op) {
  for (const OpTime& t : times)
    if (t.op == op) return t.calls;
  return 0;
}

using Bf16Chain = ::testing::Test;

// relu(round(x)) == round(relu(x)) bit for bit: zeros of both signs,
// subnormals that round to -0 and +0, ties, infinities, NaNs.
TEST_F(Bf16Chain, ReluCommutesWithRoundingOnEveryEdgeCase) {
  std::vector<float> x;
  for (uint32_t u : {0x00000000u, 0x80000000u, 0x00000001u, 0x80000001u, 0x00007FFFu, 0x80007FFFu, 0x00008000u,
                     0x80008000u, 0x00018000u, 0x80018000u, 0x3F808000u, 0xBF808000u, 0x3F818000u, 0x7F7FFFFFu,
                     0xFF7FFFFFu, 0x7F800000u, 0xFF800000u, 0x7FC00000u, 0xFFC00000u, 0x7F800001u, 0xFFBFFFFFu})
    x.push_back(from_bits(u));
  for (int i = 0; i < 1000; ++i) x.push_back(random_tensor({1}, 500 + i, 1e-3f).f32()[0]);
  const int64_t n = static_cast<int64_t>(x.size());
  const DeviceOps& o = device_ops(Device::cpu());
  std::vector<float> a(x.size()), b(x.size());
  o.round_bf16(n, x.data(), a.data());
  o.relu_forward(n, a.data(), a.data());  // relu(round(x))
  o.relu_forward(n, x.data(), b.data());
  o.round_bf16(n, b.data(), b.data());  // round(relu(x))
  for (size_t i = 0; i < x.size(); ++i) {
    uint32_t ua, ub, ux;
    std::memcpy(&ua, &a[i], 4);
    std::memcpy(&ub, &b[i], 4);
    std::memcpy(&ux, &x[i], 4);
    EXPECT_EQ(ua, ub) << "x bits 0x" << std::hex << ux;
  }
}

// A layer whose backward reads its own output must get that output rounded
// (as every caller saw it before), whatever comes next.
TEST_F(Bf16Chain, OutputKeptForBackwardIsRoundedEvenBeforeARelu) {
  LayerPtr relu = make_relu(), conv = make_conv2d(1, 1, 1, 1, 0, false);
  const Tensor x = random_tensor({1, 1, 4, 4}, 30);
  const StepInfo bf16{.precision = Precision::BF16};
  for (bool kept : {false, true}) {
    SCOPED_TRACE(kept ? "output kept" : "output not kept");
    Tensor h = x.clone();
    LayerContext ctx;
    if (kept) ctx.saved = {h};
    const bool exact = round_layer_output_if_bf16(Precision::BF16, *conv, relu.get(), ctx, h, true);
    EXPECT_EQ(exact, kept);
    EXPECT_EQ(same_bits(h, rounded(x)), kept);
    if (kept) EXPECT_TRUE(same_bits(ctx.saved[0], rounded(x)));  // what backward will read
    // Nothing to leave to the next layer: the output is rounded.
    Tensor last = x.clone();
    EXPECT_TRUE(round_layer_output_if_bf16(Precision::BF16, *conv, nullptr, LayerContext{}, last, true));
    EXPECT_TRUE(same_bits(last, rounded(x)));
  }
  // A ReLU's output holds bf16 values whatever its input; a max pool's only when its input does.
  LayerContext c;
  Tensor r = relu->forward({{}, {}, bf16}, x, c);
  EXPECT_TRUE(same_bits(r, rounded(r)));
  LayerPtr pool = make_maxpool2d(2, 2, 0);
  Tensor p = pool->forward({{}, {}, bf16}, x, c);
  EXPECT_FALSE(round_layer_output_if_bf16(Precision::BF16, *pool, relu.get(), LayerContext{}, p, false));
  Tensor q = pool->forward({{}, {}, bf16}, rounded(x), c);
  EXPECT_TRUE(round_layer_output_if_bf16(Precision::BF16, *pool, relu.get(), LayerContext{}, q, true));
}

// The old rule, by hand: every sub-layer's output and input gradient
// rounded, on standalone layers holding the block's parameters.
struct SubLayerRef {
  std::shared_ptr<const Layer> layer;
  size_t first_param = 0, params = 0, first_buffer = 0, buffers = 0;
};

struct ChainResult {
  Tensor y, dx;
  std::vector<Tensor> grads, buffers;
};

ChainResult reference_bottleneck(const std::vector<Tensor>& params, std::vector<Tensor> buffers, const Tensor& x,
                                 const Tensor& dy, const StepInfo& step) {
  // conv1 bn1 relu conv2 bn2 relu conv3 bn3 | downsample conv, bn (torchvision order).
  std::vector<SubLayerRef> main{{make_conv2d(8, 4, 1, 1, 0, false), 0, 1, 0, 0},
                                {make_batchnorm2d(4), 1, 2, 0, 2},
                                {make_relu(), 3, 0, 2, 0},
                                {make_conv2d(4, 4, 3, 2, 1, false), 3, 1, 2, 0},
                                {make_batchnorm2d(4), 4, 2, 2, 2},
                                {make_relu(), 6, 0, 4, 0},
                                {make_conv2d(4, 16, 1, 1, 0, false), 6, 1, 4, 0},
                                {make_batchnorm2d(16), 7, 2, 4, 2}};
  std::vector<SubLayerRef> shortcut{{make_conv2d(8, 16, 1, 2, 0, false), 9, 1, 6, 0},
                                    {make_batchnorm2d(16), 10, 2, 6, 2}};
  ChainResult r;
  for (const Tensor& p : params) r.grads.push_back(Tensor::zeros(p.shape()));
  std::vector<LayerContext> main_ctx(main.size()), sc_ctx(shortcut.size());
  auto fwd = [&](std::vector<SubLayerRef>& seq, std::vector<LayerContext>& ctx) {
    Tensor h = x;
    for (size_t k = 0; k < seq.size(); ++k) {
      const SubLayerRef& s = seq[k];
      h = s.layer->forward({std::span<const Tensor>(params).subspan(s.first_param, s.params),
                            std::span<Tensor>(buffers).subspan(s.first_buffer, s.buffers), step},
                           h, ctx[k]);
      round_in_place_if_bf16(Precision::BF16, h);
    }
    return h;
  };
  const Tensor h = fwd(main, main_ctx), s = fwd(shortcut, sc_ctx);
  r.y = Tensor::empty(h.shape());
  const DeviceOps& o = device_ops(Device::cpu());
  o.add_relu_forward(h.numel(), h.f32(), s.f32(), r.y.f32());
  round_in_place_if_bf16(Precision::BF16, r.y);  // as the layer range did
  Tensor dsum = Tensor::empty(h.shape());
  o.relu_backward(h.numel(), r.y.f32(), dy.f32(), dsum.f32());
  auto bwd = [&](std::vector<SubLayerRef>& seq, std::vector<LayerContext>& ctx) {
    Tensor g = dsum;
    for (size_t k = seq.size(); k-- > 0;) {
      const SubLayerRef& s = seq[k];
      g = s.layer->backward({std::span<const Tensor>(params).subspan(s.first_param, s.params),
                             std::span<Tensor>(r.grads).subspan(s.first_param, s.params), step, true},
                            g, ctx[k]);
      round_in_place_if_bf16(Precision::BF16, g);
    }
    return g;
  };
  r.dx = bwd(main, main_ctx);
  const Tensor g = bwd(shortcut, sc_ctx);
  o.add(r.dx.numel(), r.dx.f32(), g.f32(), r.dx.f32());
  r.buffers = buffers;
  return r;
}

TEST_F(Bf16Chain, BottleneckBlockEqualsRoundingAfterEverySubLayerInFewerPasses) {
  LayerPtr block = make_resnet_bottleneck_block(8, 4, 16, 2);
  auto params = allocate_params(*block), buffers = allocate_buffers(*block);
  block->init(params, buffers, CounterRng(5, 2, 0));
  const auto specs = block->param_specs();
  ASSERT_EQ(specs.size(), 12u);
  for (size_t k = 0; k < specs.size(); ++k)  // BN weights and biases away from 1 and 0
    if (specs[k].name.find("bn") != std::string::npos || specs[k].name.find("downsample.1") != std::string::npos)
      params[k] = random_tensor(specs[k].shape, 70 + static_cast<uint32_t>(k), 1.0f);
  round_all(params);  // the operands a layer range hands over
  const Tensor x = rounded(random_tensor({2, 8, 7, 7}, 1));
  const StepInfo step{.training = true, .seed = 3, .precision = Precision::BF16};

  std::vector<Tensor> block_buffers;
  for (const Tensor& b : buffers) block_buffers.push_back(b.clone());
  std::vector<Tensor> grads;
  for (const Tensor& p : params) grads.push_back(Tensor::zeros(p.shape()));
  LayerContext ctx;
  start_op_timing();
  const Tensor y = block->forward({params, block_buffers, step}, x, ctx);
  const std::vector<OpTime> forward_ops = stop_op_timing();
  const Tensor dy = rounded(random_tensor(y.shape(), 2));
  start_op_timing();
  const Tensor dx = block->backward({params, grads, step, true}, dy, ctx);
  const std::vector<OpTime> backward_ops = stop_op_timing();

  const ChainResult ref = reference_bottleneck(params, buffers, x, dy, step);
  EXPECT_TRUE(same_bits(y, ref.y));
  EXPECT_TRUE(same_bits(dx, ref.dx));
  for (size_t k = 0; k < grads.size(); ++k) EXPECT_TRUE(same_bits(grads[k], ref.grads[k])) << specs[k].name;
  for (size_t k = 0; k < buffers.size(); ++k) EXPECT_TRUE(same_bits(block_buffers[k], ref.buffers[k])) << k;
  // Ten sub-layers and the final add + ReLU. Forward: the ReLUs round for
  // their batch norms and the final add + ReLU for itself, as they write
  // (11 passes over the outputs were 6 and 3 fused). Backward: the ReLUs'
  // input gradients need no rounding (10 passes were 8).
  EXPECT_EQ(calls(forward_ops, "round_bf16"), 6);
  EXPECT_EQ(calls(forward_ops, "relu_forward_rounded"), 2);
  EXPECT_EQ(calls(forward_ops, "add_relu_forward_rounded"), 1);
  EXPECT_EQ(calls(forward_ops, "relu_forward") + calls(forward_ops, "add_relu_forward"), 0);
  EXPECT_EQ(calls(backward_ops, "round_bf16"), 8);
}

}  // namespace
}  // namespace pd

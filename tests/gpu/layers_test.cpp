// Every layer of the compute core, forward and backward, on a GPU against
// the same layer on the CPU (same parameters, inputs and output gradient):
// outputs, input gradients, parameter gradients and updated buffers.
// Tolerances (|gpu - cpu| <= atol + rtol * |cpu|), per layer:
//   relu, flatten, dropout, non-overlapping max pooling: exact (same
//     selections, one IEEE multiply or a copy per element);
//   avg/adaptive pooling, overlapping max pooling: atol 1e-6, rtol 1e-5
//     (window sums, and gradients of an element that is the maximum of
//     several windows, are added in another order);
//   gelu: atol 1e-6, rtol 1e-5 (tanhf vs the CPU's tanh);
//   embedding: atol 1e-6, rtol 1e-5 (gradient sums in another order);
//   linear, conv2d, layernorm, batchnorm2d, attention, the blocks, the
//     loss and optimizer steps: atol 1e-4, rtol 1e-3 (cuBLAS/cuDNN FP32
//     accumulation order; TF32 stays off by default);
//   a block under --precision bf16: relative L2 3e-2, largest error 1e-1
//     of the largest value (a sum in another order rounds to the
//     neighbouring bf16 value, and the next layers carry it on).
#if defined(PIPEDREAM_HAVE_CUDA)  // the whole file needs the CUDA backend
#include <functional>

#include "core/bf16_rounding.h"
#include "core/error.h"
#include "core/layers.h"
#include "core/loss.h"
#include "core/optimizer.h"
#include "tests/gpu/bf16_compare.h"
#include "tests/gpu/gpu_test.h"

namespace pd::gputest {

namespace {

struct Tolerance {
  double atol, rtol;
};
constexpr Tolerance kExact{0, 0};
constexpr Tolerance kSum{1e-6, 1e-5};
constexpr Tolerance kBlas{1e-4, 1e-3};

Tensor random_tensor(const Shape& s, uint32_t key, float lo = -1.0f, float hi = 1.0f) {
  return Tensor::from_floats(random_floats(static_cast<size_t>(shape_numel(s)), key, lo, hi), s);
}

// One forward + backward of a layer on one device.
struct LayerRun {
  Tensor y, dx;
  std::vector<Tensor> grads, buffers;
};

LayerRun run_layer(const Layer& l, Device dev, const std::vector<Tensor>& params,
                   const std::vector<Tensor>& buffers, const Tensor& x, const StepInfo& step,
                   bool need_input_grad = true) {
  std::vector<Tensor> p, g;
  LayerRun r;
  for (const Tensor& t : params) {
    p.push_back(t.to(dev));
    g.push_back(Tensor::zeros(t.shape(), DType::F32, dev));
  }
  for (const Tensor& t : buffers) r.buffers.push_back(t.to(dev));
  LayerContext ctx;
  r.y = l.forward({p, r.buffers, step}, x.to(dev), ctx);
  // The output gradient depends only on the output's shape: both devices get the same.
  Tensor dy = random_tensor(r.y.shape(), 900).to(dev);
  r.dx = l.backward({p, g, step, need_input_grad}, dy, ctx);
  r.grads = g;
  return r;
}

// Random parameters (the layer's own init for buffers).
void random_params(const Layer& l, std::vector<Tensor>& params, std::vector<Tensor>& buffers) {
  params = allocate_params(l);
  buffers = allocate_buffers(l);
  l.init(params, buffers, CounterRng(5, 1, 0));
  for (size_t i = 0; i < params.size(); ++i) params[i] = random_tensor(params[i].shape(), 100 + i, -0.5f, 0.5f);
}

::testing::AssertionResult same(const Tensor& gpu, const Tensor& cpu, Tolerance t) {
  if (gpu.defined() != cpu.defined()) return ::testing::AssertionFailure() << "defined on one device only";
  if (!cpu.defined()) return ::testing::AssertionSuccess();
  if (gpu.shape() != cpu.shape())
    return ::testing::AssertionFailure() << shape_str(gpu.shape()) << " vs " << shape_str(cpu.shape());
  if (!gpu.device().is_cuda()) return ::testing::AssertionFailure() << "result is on " << gpu.device().str();
  return close(gpu.to_floats(), cpu.to_floats(), t.atol, t.rtol);
}

// Runs `l` on both devices and compares everything it produces.
void expect_layer_matches(const Layer& l, const Tensor& x, Tolerance tol, StepInfo step = {},
                          bool need_input_grad = true,
                          const std::function<void(std::vector<Tensor>&)>& set_buffers = {}) {
  std::vector<Tensor> params, buffers;
  random_params(l, params, buffers);
  if (set_buffers) set_buffers(buffers);
  LayerRun cpu = run_layer(l, Device::cpu(), params, buffers, x, step, need_input_grad);
  LayerRun gpu = run_layer(l, Device::cuda(0), params, buffers, x, step, need_input_grad);
  EXPECT_TRUE(same(gpu.y, cpu.y, tol)) << l.describe() << ": output";
  EXPECT_TRUE(same(gpu.dx, cpu.dx, tol)) << l.describe() << ": input gradient";
  for (size_t i = 0; i < cpu.grads.size(); ++i)
    EXPECT_TRUE(same(gpu.grads[i], cpu.grads[i], tol)) << l.describe() << ": gradient of " << l.param_specs()[i].name;
  for (size_t i = 0; i < cpu.buffers.size(); ++i)
    EXPECT_TRUE(same(gpu.buffers[i], cpu.buffers[i], tol)) << l.describe() << ": buffer " << l.buffer_specs()[i].name;
}

StepInfo training_step() {
  StepInfo s;
  s.training = true;
  s.seed = 42;
  s.layer_index = 3;
  s.minibatch_id = 17;
  return s;
}

StepInfo eval_step() {
  StepInfo s = training_step();
  s.training = false;
  return s;
}

}  // namespace

using CudaLayers = GpuTest;

TEST_F(CudaLayers, Relu) { expect_layer_matches(*make_relu(), random_tensor({4, 3, 8, 8}, 1), kExact); }

TEST_F(CudaLayers, Gelu) { expect_layer_matches(*make_gelu(), random_tensor({3, 5, 24}, 2, -3, 3), kSum); }

TEST_F(CudaLayers, LinearOverLeadingDims) {
  expect_layer_matches(*make_linear(16, 8), random_tensor({2, 5, 16}, 3), kBlas);
}

TEST_F(CudaLayers, LinearWithoutBiasOrInputGradient) {
  expect_layer_matches(*make_linear(33, 7, false), random_tensor({6, 33}, 4), kBlas, {}, false);
}

TEST_F(CudaLayers, Conv2dStridedPadded) {
  expect_layer_matches(*make_conv2d(3, 8, 3, 2, 1), random_tensor({2, 3, 11, 9}, 5), kBlas);
}

TEST_F(CudaLayers, Conv2dWithoutBias) {
  expect_layer_matches(*make_conv2d(2, 4, 5, 1, 2, false), random_tensor({3, 2, 12, 12}, 6), kBlas);
}

TEST_F(CudaLayers, MaxPool) { expect_layer_matches(*make_maxpool2d(2), random_tensor({2, 3, 8, 8}, 7), kExact); }

TEST_F(CudaLayers, MaxPoolOverlappingPadded) {
  expect_layer_matches(*make_maxpool2d(3, 2, 1), random_tensor({2, 3, 9, 9}, 8), kSum);
}

TEST_F(CudaLayers, AvgPoolPaddedCountsPadding) {
  expect_layer_matches(*make_avgpool2d(3, 2, 1), random_tensor({2, 3, 9, 9}, 9), kSum);
}

TEST_F(CudaLayers, AdaptiveAvgPoolDividingOutput) {
  expect_layer_matches(*make_adaptive_avgpool2d(2, 1), random_tensor({2, 4, 8, 6}, 10), kSum);
}

TEST_F(CudaLayers, AdaptiveAvgPoolUnevenWindowsAreRefused) {
  auto l = make_adaptive_avgpool2d(3, 3);
  LayerContext ctx;
  Tensor x = random_tensor({1, 2, 8, 8}, 11).to(Device::cuda(0));
  EXPECT_THROW(l->forward({{}, {}, {}}, x, ctx), UserError);
}

TEST_F(CudaLayers, Flatten) { expect_layer_matches(*make_flatten(), random_tensor({3, 2, 4, 5}, 12), kExact); }

TEST_F(CudaLayers, DropoutDropsTheSameElementsAsTheCpu) {
  expect_layer_matches(*make_dropout(0.3f), random_tensor({4, 1000}, 13), kExact, training_step());
}

TEST_F(CudaLayers, DropoutInEvalIsTheIdentity) {
  expect_layer_matches(*make_dropout(0.3f), random_tensor({4, 100}, 14), kExact, eval_step());
}

TEST_F(CudaLayers, BatchNormTrainingUpdatesRunningStatistics) {
  expect_layer_matches(*make_batchnorm2d(5), random_tensor({4, 5, 6, 7}, 15, -2, 3), kBlas, training_step());
}

TEST_F(CudaLayers, BatchNormEvalUsesRunningStatistics) {
  expect_layer_matches(*make_batchnorm2d(5), random_tensor({4, 5, 6, 7}, 16, -2, 3), kBlas, eval_step(), true,
                       [](std::vector<Tensor>& b) {
                         b[0] = random_tensor({5}, 17, -0.5f, 0.5f);
                         b[1] = random_tensor({5}, 18, 0.5f, 1.5f);
                       });
}

TEST_F(CudaLayers, LayerNorm) { expect_layer_matches(*make_layernorm(24), random_tensor({3, 7, 24}, 19, -2, 2), kBlas); }

TEST_F(CudaLayers, EmbeddingWithTokenIdsOnTheDevice) {
  auto ids = random_ints(2 * 9, 20, 13);  // repeated tokens: gradients sum over positions
  expect_layer_matches(*make_embedding(13, 8, 12), Tensor::from_ints(ids, {2, 9}), kSum);
}

TEST_F(CudaLayers, EmbeddingWithTokenIdsOnTheHost) {
  auto l = make_embedding(13, 8, 12);
  std::vector<Tensor> params, buffers;
  random_params(*l, params, buffers);
  std::vector<Tensor> gp;
  for (const Tensor& p : params) gp.push_back(p.to(Device::cuda(0)));
  Tensor ids = Tensor::from_ints(random_ints(2 * 9, 21, 13), {2, 9});
  LayerContext cpu_ctx, gpu_ctx;
  Tensor want = l->forward({params, {}, {}}, ids, cpu_ctx);
  Tensor got = l->forward({gp, {}, {}}, ids, gpu_ctx);
  EXPECT_TRUE(same(got, want, kExact));
  Tensor bad = Tensor::from_ints({0, 13}, {1, 2});
  EXPECT_THROW(l->forward({gp, {}, {}}, bad, gpu_ctx), UserError);
}

TEST_F(CudaLayers, CausalSelfAttention) {
  expect_layer_matches(*make_causal_self_attention(16, 4), random_tensor({2, 7, 16}, 22), kBlas);
}

TEST_F(CudaLayers, TransformerBlockWithDropoutSubstreams) {
  // p > 0 while training: both residual dropouts (substreams 1 and 2) must
  // drop the same elements as on the CPU.
  expect_layer_matches(*make_transformer_block(16, 2, 0.1f), random_tensor({2, 6, 16}, 23), kBlas, training_step());
}

TEST_F(CudaLayers, TransformerBlockEval) {
  expect_layer_matches(*make_transformer_block(16, 4, 0.1f), random_tensor({2, 5, 16}, 24), kBlas, eval_step());
}

TEST_F(CudaLayers, ResNetBasicBlockWithProjection) {
  expect_layer_matches(*make_resnet_basic_block(4, 8, 2), random_tensor({2, 4, 8, 8}, 25), kBlas, training_step());
}

TEST_F(CudaLayers, ResNetBottleneckIdentityShortcutWithoutInputGradient) {
  expect_layer_matches(*make_resnet_bottleneck_block(8, 4, 8, 1), random_tensor({2, 8, 6, 6}, 26), kBlas,
                       training_step(), false);
}

// Under --precision bf16 a ResNet block rounds its sub-layers' outputs
// (ReLU and the final add + ReLU as they write: relu_forward_rounded,
// add_relu_forward_rounded) on both devices: the GPU's block stays within
// bf16's tolerance of the CPU's (a conv sum in another order can round to
// the neighbouring bf16 value, which the next layers carry on).
TEST_F(CudaLayers, ResNetBottleneckWithProjectionUnderBf16) {
  LayerPtr block = make_resnet_bottleneck_block(8, 4, 16, 2);
  std::vector<Tensor> params, buffers;
  random_params(*block, params, buffers);
  for (Tensor& p : params) p = rounded_copy_if_bf16(Precision::BF16, p);  // as a layer range hands them over
  const Tensor x = rounded_copy_if_bf16(Precision::BF16, random_tensor({2, 8, 9, 9}, 29));
  StepInfo step = training_step();
  step.precision = Precision::BF16;
  const LayerRun cpu = run_layer(*block, Device::cpu(), params, buffers, x, step);
  const LayerRun gpu = run_layer(*block, Device::cuda(0), params, buffers, x, step);
  for (float v : gpu.y.to_floats()) ASSERT_EQ(v, round_to_bf16(v)) << "the block's output is bf16 values";
  EXPECT_TRUE(close_l2(gpu.y.to_floats(), cpu.y.to_floats(), 3e-2, 1e-1)) << "output";
  EXPECT_TRUE(close_l2(gpu.dx.to_floats(), cpu.dx.to_floats(), 3e-2, 1e-1)) << "input gradient";
  for (size_t i = 0; i < cpu.grads.size(); ++i)
    EXPECT_TRUE(close_l2(gpu.grads[i].to_floats(), cpu.grads[i].to_floats(), 3e-2, 1e-1))
        << "gradient of " << block->param_specs()[i].name;
}

// Parameters allocated on the GPU get exactly the CPU's initial values.
TEST_F(CudaLayers, InitOnTheDeviceDrawsTheCpuValues) {
  std::vector<LayerPtr> layers;
  layers.push_back(make_linear(9, 5));
  layers.push_back(make_conv2d(3, 4, 3));
  layers.push_back(make_batchnorm2d(4));
  layers.push_back(make_layernorm(8));
  layers.push_back(make_embedding(11, 8, 6));
  layers.push_back(make_causal_self_attention(8, 2));
  layers.push_back(make_transformer_block(8, 2));
  layers.push_back(make_resnet_basic_block(4, 8, 2));
  for (const LayerPtr& l : layers) {
    std::vector<Tensor> cp = allocate_params(*l), cb = allocate_buffers(*l);
    std::vector<Tensor> gp = allocate_params(*l, Device::cuda(0)), gb = allocate_buffers(*l, Device::cuda(0));
    l->init(cp, cb, CounterRng(11, 2, 0));
    l->init(gp, gb, CounterRng(11, 2, 0));
    for (size_t i = 0; i < cp.size(); ++i) EXPECT_TRUE(same(gp[i], cp[i], kExact)) << l->describe() << " param " << i;
    for (size_t i = 0; i < cb.size(); ++i) EXPECT_TRUE(same(gb[i], cb[i], kExact)) << l->describe() << " buffer " << i;
  }
}

using CudaLoss = GpuTest;

TEST_F(CudaLoss, SoftmaxCrossEntropyMatchesCpu) {
  Tensor logits = random_tensor({3, 5, 11}, 27, -4, 4);
  Tensor labels = Tensor::from_ints(random_ints(15, 28, 11), {3, 5});
  LossResult want = softmax_cross_entropy(logits, labels);
  for (bool labels_on_device : {false, true}) {
    LossResult got = softmax_cross_entropy(logits.to(Device::cuda(0)),
                                           labels_on_device ? labels.to(Device::cuda(0)) : labels);
    EXPECT_NEAR(got.loss, want.loss, 1e-4 + 1e-3 * std::fabs(want.loss));
    EXPECT_EQ(got.correct, want.correct);
    EXPECT_EQ(got.count, want.count);
    EXPECT_TRUE(same(got.grad, want.grad, kBlas));
  }
  LossResult no_grad = softmax_cross_entropy(logits.to(Device::cuda(0)), labels, false);
  EXPECT_FALSE(no_grad.grad.defined());
  EXPECT_NEAR(no_grad.loss, want.loss, 1e-4 + 1e-3 * std::fabs(want.loss));
}

TEST_F(CudaLoss, LabelOutsideTheClassesOnTheHostIsAUserError) {
  Tensor logits = random_tensor({2, 4}, 29).to(Device::cuda(0));
  EXPECT_THROW(softmax_cross_entropy(logits, Tensor::from_ints({1, 4}, {2})), UserError);
}

namespace {

// The CPU optimizer's rules (core/optimizer.cpp), written out on host vectors.
void cpu_sgd(const OptimizerConfig& c, float lr, bool first, std::vector<float>& p, const std::vector<float>& g,
             std::vector<float>& buf) {
  for (size_t k = 0; k < p.size(); ++k) {
    float d = g[k] + c.weight_decay * p[k];
    if (c.momentum == 0.0f) {
      p[k] -= lr * d;
      continue;
    }
    buf[k] = first ? d : c.momentum * buf[k] + d;
    p[k] -= lr * (c.nesterov ? d + c.momentum * buf[k] : buf[k]);
  }
}

}  // namespace

// conv(1->4, k5, p2) - relu - maxpool2 - flatten - linear(144->10) - CE,
// SGD with momentum, two steps: every layer, the loss and the optimizer on
// the GPU against the same layers on the CPU.
TEST_F(CudaLayers, CnnStackTrainingStepsMatchCpu) {
  std::vector<LayerPtr> net;
  net.push_back(make_conv2d(1, 4, 5, 1, 2));
  net.push_back(make_relu());
  net.push_back(make_maxpool2d(2));
  net.push_back(make_flatten());
  net.push_back(make_linear(4 * 6 * 6, 10));
  OptimizerConfig oc;
  oc.momentum = 0.9f;
  oc.weight_decay = 1e-4f;
  const float lr = 0.05f;
  const int64_t N = 8;

  std::vector<std::vector<Tensor>> cpu_params, gpu_params;
  for (size_t i = 0; i < net.size(); ++i) {
    std::vector<Tensor> p = allocate_params(*net[i]), b;
    net[i]->init(p, b, CounterRng(7, static_cast<uint32_t>(i), 0));
    std::vector<Tensor> g;
    for (const Tensor& t : p) g.push_back(t.to(Device::cuda(0)));
    cpu_params.push_back(p);
    gpu_params.push_back(g);
  }
  std::vector<Tensor> gpu_flat, gpu_grads_flat;
  std::vector<std::vector<float>> cpu_bufs;
  for (auto& ps : gpu_params)
    for (Tensor& t : ps) gpu_flat.push_back(t);
  OptimizerState gpu_state;
  for (const Tensor& t : gpu_flat) gpu_state.slots.push_back(Tensor::zeros(t.shape(), DType::F32, t.device()));
  for (auto& ps : cpu_params)
    for (Tensor& t : ps) cpu_bufs.emplace_back(static_cast<size_t>(t.numel()), 0.0f);

  for (int step = 0; step < 2; ++step) {
    Tensor x = random_tensor({N, 1, 12, 12}, 40 + step);
    Tensor labels = Tensor::from_ints(random_ints(N, 50 + step, 10), {N});
    float loss[2];
    int64_t correct[2];
    std::vector<std::vector<Tensor>> grads[2];
    for (int d = 0; d < 2; ++d) {
      Device dev = d == 0 ? Device::cpu() : Device::cuda(0);
      auto& params = d == 0 ? cpu_params : gpu_params;
      std::vector<LayerContext> ctx(net.size());
      StepInfo info = training_step();
      Tensor h = x.to(dev);
      for (size_t i = 0; i < net.size(); ++i) h = net[i]->forward({params[i], {}, info}, h, ctx[i]);
      LossResult ce = softmax_cross_entropy(h, labels.to(dev));
      loss[d] = ce.loss;
      correct[d] = ce.correct;
      Tensor g = ce.grad;
      grads[d].resize(net.size());
      for (size_t i = net.size(); i-- > 0;) {
        for (const Tensor& p : params[i]) grads[d][i].push_back(Tensor::zeros(p.shape(), DType::F32, dev));
        g = net[i]->backward({params[i], grads[d][i], info, i > 0}, g, ctx[i]);
      }
    }
    EXPECT_NEAR(loss[1], loss[0], 1e-4 + 1e-3 * std::fabs(loss[0])) << "step " << step;
    EXPECT_EQ(correct[1], correct[0]) << "step " << step;
    for (size_t i = 0; i < net.size(); ++i)
      for (size_t j = 0; j < grads[0][i].size(); ++j)
        EXPECT_TRUE(same(grads[1][i][j], grads[0][i][j], kBlas)) << "step " << step << " layer " << i << " grad " << j;

    std::vector<Tensor> gpu_grads;
    for (auto& gs : grads[1])
      for (Tensor& t : gs) gpu_grads.push_back(t);
    make_optimizer(oc)->step(gpu_flat, gpu_grads, gpu_state, lr);
    size_t k = 0;
    for (size_t i = 0; i < net.size(); ++i)
      for (size_t j = 0; j < cpu_params[i].size(); ++j, ++k) {
        std::vector<float> p = cpu_params[i][j].to_floats();
        cpu_sgd(oc, lr, step == 0, p, grads[0][i][j].to_floats(), cpu_bufs[k]);
        cpu_params[i][j] = Tensor::from_floats(p, cpu_params[i][j].shape());
        EXPECT_TRUE(same(gpu_params[i][j], cpu_params[i][j], kBlas)) << "step " << step << " layer " << i << " param " << j;
      }
  }
  EXPECT_EQ(gpu_state.step, 2);
}

using CudaOptimizerStep = GpuTest;

TEST_F(CudaOptimizerStep, AdamAndAdamWCountStepsLikeTheCpu) {
  for (bool decoupled : {false, true}) {
    OptimizerConfig c;
    c.kind = decoupled ? OptimizerKind::adamw : OptimizerKind::adam;
    c.weight_decay = 0.01f;
    const float lr = 0.01f;
    auto p0 = random_floats(300, 60), g0 = random_floats(300, 61), g1 = random_floats(300, 62);
    Tensor p = on_gpu(p0);
    std::vector<Tensor> params{p};
    OptimizerState st;
    st.slots = {gpu_zeros(300), gpu_zeros(300)};
    std::vector<float> want = p0, m(300, 0.0f), v(300, 0.0f);
    int64_t t = 0;
    for (const auto* g : {&g0, &g1}) {
      std::vector<Tensor> grads{on_gpu(*g)};
      make_optimizer(c)->step(params, grads, st, lr);
      ++t;
      const float bc1 = 1.0f - static_cast<float>(std::pow(0.9, static_cast<double>(t)));
      const float bc2 = 1.0f - static_cast<float>(std::pow(0.999, static_cast<double>(t)));
      for (size_t k = 0; k < want.size(); ++k) {
        float d = (*g)[k];
        if (decoupled) want[k] *= 1.0f - lr * c.weight_decay;
        else d += c.weight_decay * want[k];
        m[k] = c.beta1 * m[k] + (1.0f - c.beta1) * d;
        v[k] = c.beta2 * v[k] + (1.0f - c.beta2) * d * d;
        want[k] -= (lr / bc1) * (m[k] / (std::sqrt(v[k]) / std::sqrt(bc2) + c.eps));
      }
    }
    EXPECT_EQ(st.step, 2);
    EXPECT_TRUE(close(host(p), want, 1e-5, 1e-4)) << to_string(c.kind);
  }
}

}  // namespace pd::gputest

#endif  // PIPEDREAM_HAVE_CUDA

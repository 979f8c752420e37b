// cuDNN convolution, pooling and batch norm against naive loops.
// Tolerances (inputs in [-1, 1]):
//   convolution: atol 2e-3 + rtol 1e-3 - cuDNN may pick Winograd or FFT
//     algorithms whose FP32 error exceeds a direct sum's (about 1e-4 here);
//   pooling: max exact (a selection), average atol 1e-6 + rtol 1e-6;
//   batch norm: atol 1e-4 + rtol 1e-3 (variance of 2048 values per channel).
#if defined(PIPEDREAM_HAVE_CUDA)  // the whole file needs the CUDA backend
#include "core/cuda/dnn.h"
#include "core/precision.h"
#include "tests/gpu/gpu_test.h"
#include "tests/gpu/reference.h"

namespace pd::gputest {

using CudaConv = GpuTest;

namespace {

Conv2dGeometry geometry(int64_t stride, int64_t padding) {
  Conv2dGeometry g;
  g.batch = 3;
  g.in_channels = 4;
  g.in_h = 11;
  g.in_w = 9;
  g.out_channels = 6;
  g.square_window(3, stride, padding);
  return g;
}

struct ConvData {
  std::vector<float> x, w, b, dy;
};

ConvData conv_data(const Conv2dGeometry& g) {
  return {random_floats(g.batch * g.in_channels * g.in_h * g.in_w, 1),
          random_floats(g.out_channels * g.in_channels * g.kernel_h * g.kernel_w, 2),
          random_floats(g.out_channels, 3),
          random_floats(g.batch * g.out_channels * g.out_h() * g.out_w(), 4)};
}

}  // namespace

TEST_F(CudaConv, ForwardAndBackwardMatchReferenceForStridesAndPadding) {
  for (auto [stride, pad] : {std::pair<int64_t, int64_t>{1, 0}, {1, 1}, {2, 1}, {2, 2}}) {
    Conv2dGeometry g = geometry(stride, pad);
    ConvData d = conv_data(g);
    Tensor x = on_gpu(d.x), w = on_gpu(d.w), b = on_gpu(d.b), dy = on_gpu(d.dy);
    Tensor y = gpu_zeros(d.dy.size()), dx = gpu_zeros(d.x.size());
    // Gradients accumulate: start from a known non-zero value.
    Tensor dw = on_gpu(std::vector<float>(d.w.size(), 0.5f)), db = on_gpu(std::vector<float>(d.b.size(), -1.0f));
    ops->conv2d_forward(Precision::FP32, g, x.f32(), w.f32(), b.f32(), y.f32());
    ops->conv2d_backward_data(Precision::FP32, g, w.f32(), dy.f32(), dx.f32());
    ops->conv2d_backward_params_accum(Precision::FP32, g, x.f32(), dy.f32(), dw.f32(), db.f32());
    auto want_y = ref::conv2d_forward(g, d.x, d.w, d.b);
    auto grads = ref::conv2d_backward(g, d.x, d.w, d.dy);
    for (double& v : grads.dw) v += 0.5;
    for (double& v : grads.db) v -= 1.0;
    SCOPED_TRACE(::testing::Message() << "stride " << stride << " padding " << pad);
    EXPECT_TRUE(close(host(y), want_y, 2e-3, 1e-3));
    EXPECT_TRUE(close(host(dx), grads.dx, 2e-3, 1e-3));
    EXPECT_TRUE(close(host(dw), grads.dw, 2e-3, 1e-3));
    EXPECT_TRUE(close(host(db), grads.db, 2e-3, 1e-3));
  }
}

// --precision bf16 runs convolutions in TF32 math, exact on bf16-valued
// operands: the FP32 reference's tolerance still holds, with the
// deterministic algorithms (what --precision bf16 runs use for staged
// pipelines) giving the same bits twice.
TEST_F(CudaConv, Bf16PrecisionOnBfloatOperandsKeepsFp32Results) {
  ops->set_deterministic(true);
  Conv2dGeometry g = geometry(1, 1);
  ConvData d = conv_data(g);
  for (auto* v : {&d.x, &d.w, &d.dy})
    for (float& e : *v) e = round_to_bf16(e);
  Tensor x = on_gpu(d.x), w = on_gpu(d.w), b = on_gpu(d.b), dy = on_gpu(d.dy);
  Tensor y = gpu_zeros(d.dy.size()), y2 = gpu_zeros(d.dy.size()), dx = gpu_zeros(d.x.size()),
         dw = gpu_zeros(d.w.size()), db = gpu_zeros(d.b.size());
  ops->conv2d_forward(Precision::BF16, g, x.f32(), w.f32(), b.f32(), y.f32());
  ops->conv2d_forward(Precision::BF16, g, x.f32(), w.f32(), b.f32(), y2.f32());
  ops->conv2d_backward_data(Precision::BF16, g, w.f32(), dy.f32(), dx.f32());
  ops->conv2d_backward_params_accum(Precision::BF16, g, x.f32(), dy.f32(), dw.f32(), db.f32());
  ops->set_deterministic(false);
  auto want_y = ref::conv2d_forward(g, d.x, d.w, d.b);
  auto grads = ref::conv2d_backward(g, d.x, d.w, d.dy);
  EXPECT_TRUE(close(host(y), want_y, 2e-3, 1e-3));
  EXPECT_EQ(host(y), host(y2));
  EXPECT_TRUE(close(host(dx), grads.dx, 2e-3, 1e-3));
  EXPECT_TRUE(close(host(dw), grads.dw, 2e-3, 1e-3));
  EXPECT_TRUE(close(host(db), grads.db, 2e-3, 1e-3));
}

TEST_F(CudaConv, NoBiasLeavesOutputUnbiased) {
  Conv2dGeometry g = geometry(1, 1);
  ConvData d = conv_data(g);
  Tensor x = on_gpu(d.x), w = on_gpu(d.w), y = gpu_zeros(d.dy.size());
  ops->conv2d_forward(Precision::FP32, g, x.f32(), w.f32(), nullptr, y.f32());
  EXPECT_TRUE(close(host(y), ref::conv2d_forward(g, d.x, d.w, {}), 2e-3, 1e-3));
}

TEST_F(CudaConv, DeterministicModeRepeatsBitwiseAndPlansAreCachedPerShape) {
  ops->set_deterministic(true);
  cuda::clear_conv_plans();
  Conv2dGeometry g = geometry(1, 1);
  g.batch = 16;
  g.in_channels = 32;
  g.out_channels = 32;
  ConvData d = conv_data(g);
  Tensor x = on_gpu(d.x), w = on_gpu(d.w), dy = on_gpu(d.dy);
  std::vector<std::vector<float>> dws;
  for (int rep = 0; rep < 2; ++rep) {
    Tensor dw = gpu_zeros(d.w.size());
    ops->conv2d_backward_params_accum(Precision::FP32, g, x.f32(), dy.f32(), dw.f32(), nullptr);
    dws.push_back(host(dw));
  }
  EXPECT_EQ(dws[0], dws[1]);
  EXPECT_EQ(cuda::conv_plan_count(), 1u);
  Conv2dGeometry other = geometry(2, 1);
  ConvData d2 = conv_data(other);
  Tensor x2 = on_gpu(d2.x), w2 = on_gpu(d2.w), y2 = gpu_zeros(d2.dy.size());
  ops->conv2d_forward(Precision::FP32, other, x2.f32(), w2.f32(), nullptr, y2.f32());
  EXPECT_EQ(cuda::conv_plan_count(), 2u);
  ops->set_deterministic(false);
}

using CudaPool = GpuTest;

TEST_F(CudaPool, MaxAndAverageForwardBackward) {
  struct Case {
    int64_t k, s, pad;
  };
  for (Case c : {Case{2, 2, 0}, Case{3, 2, 1}, Case{3, 1, 1}}) {
    for (PoolKind kind : {PoolKind::Max, PoolKind::Average}) {
      Pool2dGeometry g;
      g.batch = 2;
      g.channels = 3;
      g.in_h = 10;
      g.in_w = 8;
      g.kernel_h = g.kernel_w = c.k;
      g.stride_h = g.stride_w = c.s;
      g.pad = Pads2d::uniform(c.pad);
      auto x = random_floats(g.batch * g.channels * g.in_h * g.in_w, 5);
      auto dy = random_floats(g.batch * g.channels * g.out_h() * g.out_w(), 6);
      Tensor dx_ = on_gpu(x), ddy = on_gpu(dy), y = gpu_zeros(dy.size()), dx = gpu_zeros(x.size());
      ops->pool2d_forward(kind, g, dx_.f32(), y.f32());
      ops->pool2d_backward(kind, g, dx_.f32(), y.f32(), ddy.f32(), dx.f32());
      SCOPED_TRACE(::testing::Message() << (kind == PoolKind::Max ? "max" : "avg") << " k" << c.k << " s" << c.s
                                        << " p" << c.pad);
      double tol = kind == PoolKind::Max ? 0.0 : 1e-6;
      EXPECT_TRUE(close(host(y), ref::pool2d_forward(kind, g, x), tol, tol));
      EXPECT_TRUE(close(host(dx), ref::pool2d_backward(kind, g, x, dy), 1e-6, 1e-6));
    }
  }
}

using CudaBatchNorm = GpuTest;

TEST_F(CudaBatchNorm, TrainingEvalAndBackward) {
  const int64_t N = 8, C = 5, H = 16, W = 16;
  const float momentum = 0.1f, eps = 1e-5f;
  auto x = random_floats(N * C * H * W, 7, -2.0f, 3.0f);
  auto gamma = random_floats(C, 8, 0.5f, 1.5f), beta = random_floats(C, 9);
  auto rm = random_floats(C, 10), rv = random_floats(C, 11, 0.5f, 2.0f);
  auto dy = random_floats(x.size(), 12);
  Tensor dx_ = on_gpu(x), dg = on_gpu(gamma), db = on_gpu(beta), drm = on_gpu(rm), drv = on_gpu(rv);
  Tensor y = gpu_zeros(x.size()), sm = gpu_zeros(C), si = gpu_zeros(C);
  ops->batchnorm_forward_train(N, C, H, W, dx_.f32(), dg.f32(), db.f32(), momentum, eps, drm.f32(), drv.f32(),
                               sm.f32(), si.f32(), y.f32());
  auto want = ref::batchnorm_train(N, C, H * W, x, gamma, beta, momentum, eps, rm, rv);
  EXPECT_TRUE(close(host(y), want.y, 1e-4, 1e-3));
  EXPECT_TRUE(close(host(sm), want.mean, 1e-5, 1e-4));
  EXPECT_TRUE(close(host(si), want.invstd, 1e-5, 1e-4));
  EXPECT_TRUE(close(host(drm), want.running_mean, 1e-5, 1e-4));
  EXPECT_TRUE(close(host(drv), want.running_var, 1e-5, 1e-4));

  Tensor dyd = on_gpu(dy), dx = gpu_zeros(x.size());
  Tensor dgamma = on_gpu(std::vector<float>(C, 1.0f)), dbeta = on_gpu(std::vector<float>(C, 2.0f));
  ops->batchnorm_backward(N, C, H, W, dx_.f32(), dyd.f32(), dg.f32(), sm.f32(), si.f32(), eps, dx.f32(),
                          dgamma.f32(), dbeta.f32());
  auto g = ref::batchnorm_backward(N, C, H * W, x, dy, gamma, eps);
  for (double& v : g.dgamma) v += 1.0;
  for (double& v : g.dbeta) v += 2.0;
  EXPECT_TRUE(close(host(dx), g.dx, 1e-4, 1e-3));
  EXPECT_TRUE(close(host(dgamma), g.dgamma, 1e-3, 1e-3));
  EXPECT_TRUE(close(host(dbeta), g.dbeta, 1e-3, 1e-3));

  Tensor ye = gpu_zeros(x.size());
  ops->batchnorm_forward_eval(N, C, H, W, dx_.f32(), dg.f32(), db.f32(), drm.f32(), drv.f32(), eps, ye.f32());
  std::vector<float> rm2 = host(drm), rv2 = host(drv);
  EXPECT_TRUE(close(host(ye), ref::batchnorm_eval(N, C, H * W, x, gamma, beta, rm2, rv2, eps), 1e-4, 1e-4));
}

}  // namespace pd::gputest

#endif  // PIPEDREAM_HAVE_CUDA

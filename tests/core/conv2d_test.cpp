#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "core/cpu/conv_kernels.h"
#include "core/cpu/gemm.h"
#include "core/error.h"
#include "core/layers.h"
#include "tests/core/conv_shape.h"
#include "tests/core/gradcheck.h"

namespace pd {
namespace {

using cpu::ConvShape;
using testing::random_tensor;

// Direct 7-loop convolution in double: the definition the kernels must match.
struct NaiveConv {
  ConvShape s;
  const float *x, *w, *b;
  double at(int64_t n, int64_t o, int64_t oh, int64_t ow) const {
    double acc = b ? b[o] : 0.0;
    for (int64_t c = 0; c < s.in_channels; ++c)
      for (int ki = 0; ki < s.kernel_h; ++ki)
        for (int kj = 0; kj < s.kernel_h; ++kj) {
          int64_t ih = oh * s.stride - s.padding + ki, iw = ow * s.stride - s.padding + kj;
          if (ih < 0 || ih >= s.in_h || iw < 0 || iw >= s.in_w) continue;
          acc += double(x[((n * s.in_channels + c) * s.in_h + ih) * s.in_w + iw]) *
                 w[((o * s.in_channels + c) * s.kernel_h + ki) * s.kernel_h + kj];
        }
    return acc;
  }
};

// dx, dw, db of L = sum(y * dy), by the chain rule written loop by loop.
void naive_conv_backward(const ConvShape& s, const float* x, const float* w, const float* dy,
                         std::vector<double>& dx, std::vector<double>& dw, std::vector<double>& db) {
  const int64_t OH = s.out_h(), OW = s.out_w();
  dx.assign(s.batch * s.in_channels * s.in_h * s.in_w, 0.0);
  dw.assign(s.out_channels * s.patch(), 0.0);
  db.assign(s.out_channels, 0.0);
  for (int64_t n = 0; n < s.batch; ++n)
    for (int64_t o = 0; o < s.out_channels; ++o)
      for (int64_t oh = 0; oh < OH; ++oh)
        for (int64_t ow = 0; ow < OW; ++ow) {
          double g = dy[((n * s.out_channels + o) * OH + oh) * OW + ow];
          db[o] += g;
          for (int64_t c = 0; c < s.in_channels; ++c)
            for (int ki = 0; ki < s.kernel_h; ++ki)
              for (int kj = 0; kj < s.kernel_h; ++kj) {
                int64_t ih = oh * s.stride - s.padding + ki, iw = ow * s.stride - s.padding + kj;
                if (ih < 0 || ih >= s.in_h || iw < 0 || iw >= s.in_w) continue;
                int64_t xi = ((n * s.in_channels + c) * s.in_h + ih) * s.in_w + iw;
                int64_t wi = ((o * s.in_channels + c) * s.kernel_h + ki) * s.kernel_h + kj;
                dx[xi] += g * w[wi];
                dw[wi] += g * x[xi];
              }
        }
}

void expect_close(const float* got, const std::vector<double>& want, double tol, const char* what) {
  double scale = 1e-6;
  for (double v : want) scale = std::max(scale, std::fabs(v));
  for (size_t i = 0; i < want.size(); ++i)
    ASSERT_NEAR(got[i], want[i], tol * scale) << what << "[" << i << "]";
}

void check_kernels_against_naive(const ConvShape& s) {
  SCOPED_TRACE(::testing::Message() << "N" << s.batch << " C" << s.in_channels << " " << s.in_h << "x"
                                  << s.in_w << " O" << s.out_channels << " k" << s.kernel_h << " s"
                                  << s.stride << " p" << s.padding);
  Tensor x = random_tensor({s.batch, s.in_channels, s.in_h, s.in_w}, 1);
  Tensor w = random_tensor({s.out_channels, s.in_channels, s.kernel_h, s.kernel_h}, 2);
  Tensor b = random_tensor({s.out_channels}, 3);
  const int64_t OH = s.out_h(), OW = s.out_w();
  Tensor y = Tensor::empty({s.batch, s.out_channels, OH, OW});
  cpu::conv2d_forward(s, x.f32(), w.f32(), b.f32(), y.f32());
  NaiveConv ref{s, x.f32(), w.f32(), b.f32()};
  std::vector<double> want;
  for (int64_t n = 0; n < s.batch; ++n)
    for (int64_t o = 0; o < s.out_channels; ++o)
      for (int64_t oh = 0; oh < OH; ++oh)
        for (int64_t ow = 0; ow < OW; ++ow) want.push_back(ref.at(n, o, oh, ow));
  expect_close(y.f32(), want, 1e-5, "y");

  Tensor dy = random_tensor(y.shape(), 4);
  Tensor dx = Tensor::full(x.shape(), 7.0f);  // overwritten
  Tensor dw = Tensor::full(w.shape(), 0.5f);  // accumulated into
  Tensor db = Tensor::full(b.shape(), 0.25f);
  cpu::conv2d_backward(s, x.f32(), w.f32(), dy.f32(), dx.f32(), dw.f32(), db.f32());
  std::vector<double> rdx, rdw, rdb;
  naive_conv_backward(s, x.f32(), w.f32(), dy.f32(), rdx, rdw, rdb);
  for (double& v : rdw) v += 0.5;
  for (double& v : rdb) v += 0.25;
  expect_close(dx.f32(), rdx, 1e-5, "dx");
  expect_close(dw.f32(), rdw, 1e-5, "dw");
  expect_close(db.f32(), rdb, 1e-5, "db");
}

TEST(Conv2dKernels, MatchNaiveLoopsForStridesPaddingsAndKernels) {
  check_kernels_against_naive(testing::conv_shape(2, 3, 7, 9, 4, 3, 1, 1));
  check_kernels_against_naive(testing::conv_shape(3, 2, 8, 8, 5, 3, 2, 1));
  check_kernels_against_naive(testing::conv_shape(2, 4, 6, 5, 3, 1, 1, 0));
  check_kernels_against_naive(testing::conv_shape(2, 4, 7, 7, 3, 1, 2, 0));
  check_kernels_against_naive(testing::conv_shape(2, 1, 10, 10, 6, 5, 1, 2));
  check_kernels_against_naive(testing::conv_shape(1, 3, 9, 9, 2, 4, 3, 2));
  check_kernels_against_naive(testing::conv_shape(2, 2, 3, 3, 2, 3, 1, 3));  // padding wider than the image
  // One sample per chunk (large maps): GEMMs write straight into y / dx.
  check_kernels_against_naive(testing::conv_shape(3, 3, 20, 20, 4, 3, 1, 1));
  check_kernels_against_naive(testing::conv_shape(3, 4, 20, 20, 5, 1, 1, 0));  // pointwise: no im2col at all
  check_kernels_against_naive(testing::conv_shape(2, 4, 20, 20, 5, 1, 2, 0));
  // Several samples per chunk, the last chunk short.
  check_kernels_against_naive(testing::conv_shape(7, 3, 8, 8, 4, 3, 1, 1));
  check_kernels_against_naive(testing::conv_shape(7, 4, 8, 8, 4, 1, 1, 0));
}

TEST(Conv2dKernels, ChunkedBatchMatchesNaive) {
  // Several samples per chunk, the batch not a multiple of the chunk.
  ConvShape s = testing::conv_shape(11, 8, 6, 6, 3, 3, 1, 1);
  ASSERT_GT(cpu::conv_chunk_samples(s), 1);
  ASSERT_NE(s.batch % cpu::conv_chunk_samples(s), 0);
  check_kernels_against_naive(s);
}

TEST(Conv2dKernels, StrideOneInputGradientAsConvolutionMatchesNaive) {
  // Stride 1 with padding <= k-1 computes dx as a convolution of dy with
  // the flipped kernel; cover every padding in that range, even kernels,
  // non-square maps, several samples per chunk and one sample per chunk.
  check_kernels_against_naive(testing::conv_shape(2, 3, 7, 5, 4, 3, 1, 0));
  check_kernels_against_naive(testing::conv_shape(2, 3, 7, 5, 4, 3, 1, 2));
  check_kernels_against_naive(testing::conv_shape(3, 2, 6, 9, 3, 2, 1, 0));
  check_kernels_against_naive(testing::conv_shape(3, 2, 6, 9, 3, 2, 1, 1));
  check_kernels_against_naive(testing::conv_shape(2, 2, 5, 6, 3, 4, 1, 3));
  check_kernels_against_naive(testing::conv_shape(5, 6, 14, 14, 8, 5, 1, 2));  // cnn's conv2, narrower
  check_kernels_against_naive(testing::conv_shape(9, 5, 2, 2, 7, 3, 1, 1));    // vgg's last maps: 2x2
  check_kernels_against_naive(testing::conv_shape(2, 3, 24, 23, 2, 3, 1, 1));  // one sample per chunk
  check_kernels_against_naive(testing::conv_shape(2, 3, 1, 1, 4, 3, 1, 1));    // 1x1 map, 3x3 kernel
  // Padding beyond k-1 keeps the column route.
  check_kernels_against_naive(testing::conv_shape(2, 2, 4, 4, 3, 3, 1, 3));
}

TEST(Conv2dKernels, ChunksSpreadOverThreadsMatchNaive) {
  // Above the parallel threshold each thread takes whole chunks and sums
  // its own weight gradient; these shapes take every route that way.
  const int keep = cpu::compute_threads();
  cpu::set_compute_threads(2);
  check_kernels_against_naive(testing::conv_shape(7, 16, 12, 12, 16, 3, 1, 1));  // dx as a convolution
  check_kernels_against_naive(testing::conv_shape(5, 8, 14, 14, 16, 5, 1, 2));   // cnn's conv2, narrower
  check_kernels_against_naive(testing::conv_shape(8, 16, 20, 20, 16, 3, 2, 1));  // stride 2: dx by col2im
  check_kernels_against_naive(testing::conv_shape(9, 32, 12, 12, 32, 1, 1, 0));  // pointwise
  check_kernels_against_naive(testing::conv_shape(3, 16, 33, 31, 8, 3, 1, 1));   // one sample per chunk, odd batch
  cpu::set_compute_threads(keep);
}

TEST(Conv2dKernels, MapsSmallerThanTheKernelRunAsDenseMatricesAndMatchNaive) {
  // Fewer input pixels than kernel taps: the layer runs as a dense matrix.
  check_kernels_against_naive(testing::conv_shape(9, 5, 2, 2, 7, 3, 1, 1));
  check_kernels_against_naive(testing::conv_shape(3, 4, 1, 1, 6, 3, 1, 1));
  check_kernels_against_naive(testing::conv_shape(2, 3, 2, 3, 4, 3, 2, 1));  // stride 2, non-square
  check_kernels_against_naive(testing::conv_shape(2, 3, 3, 3, 5, 4, 1, 2));  // even kernel, 3x3 map
  check_kernels_against_naive(testing::conv_shape(4, 2, 3, 3, 3, 4, 1, 1));  // 2x2 outputs, uneven padding use
  const int keep = cpu::compute_threads();
  cpu::set_compute_threads(2);
  check_kernels_against_naive(testing::conv_shape(32, 64, 2, 2, 64, 3, 1, 1));  // vgg-mini's last convs, narrower
  cpu::set_compute_threads(keep);
}

TEST(Conv2dKernels, ForwardWithoutBiasMatchesNaive) {
  for (const ConvShape& s : {testing::conv_shape(3, 2, 6, 6, 4, 3, 1, 1), testing::conv_shape(1, 3, 20, 20, 2, 3, 2, 1),
                             testing::conv_shape(2, 4, 5, 5, 3, 1, 1, 0)}) {
    Tensor x = random_tensor({s.batch, s.in_channels, s.in_h, s.in_w}, 5);
    Tensor w = random_tensor({s.out_channels, s.in_channels, s.kernel_h, s.kernel_h}, 6);
    Tensor y = Tensor::full({s.batch, s.out_channels, s.out_h(), s.out_w()}, 3.0f);
    cpu::conv2d_forward(s, x.f32(), w.f32(), nullptr, y.f32());
    NaiveConv ref{s, x.f32(), w.f32(), nullptr};
    std::vector<double> want;
    for (int64_t n = 0; n < s.batch; ++n)
      for (int64_t o = 0; o < s.out_channels; ++o)
        for (int64_t oh = 0; oh < s.out_h(); ++oh)
          for (int64_t ow = 0; ow < s.out_w(); ++ow) want.push_back(ref.at(n, o, oh, ow));
    expect_close(y.f32(), want, 1e-5, "y");
  }
}

TEST(Conv2dKernels, SkipsInputGradientWhenNotWanted) {
  ConvShape s = testing::conv_shape(2, 3, 5, 5, 2, 3, 1, 1);
  Tensor x = random_tensor({2, 3, 5, 5}, 1), w = random_tensor({2, 3, 3, 3}, 2);
  Tensor dy = random_tensor({2, 2, 5, 5}, 3);
  Tensor dw1 = Tensor::zeros(w.shape()), dw2 = Tensor::zeros(w.shape()), dx = Tensor::empty(x.shape());
  cpu::conv2d_backward(s, x.f32(), w.f32(), dy.f32(), nullptr, dw1.f32(), nullptr);
  cpu::conv2d_backward(s, x.f32(), w.f32(), dy.f32(), dx.f32(), dw2.f32(), nullptr);
  EXPECT_EQ(0, std::memcmp(dw1.raw(), dw2.raw(), dw1.nbytes()));
}

TEST(Conv2dLayer, GradientsMatchFiniteDifferences) {
  testing::gradcheck(*make_conv2d(3, 4, 3, 1, 1), random_tensor({2, 3, 6, 6}, 10));
  testing::gradcheck(*make_conv2d(2, 3, 3, 2, 1, false), random_tensor({2, 2, 7, 7}, 11));
  testing::gradcheck(*make_conv2d(2, 3, 5, 1, 2), random_tensor({1, 2, 6, 5}, 12));
}

TEST(Conv2dLayer, ShapesNamesAndInit) {
  LayerPtr conv = make_conv2d(3, 8, 5, 2, 2);
  EXPECT_EQ(conv->output_shape({3, 28, 28}), (Shape{8, 14, 14}));
  auto specs = conv->param_specs();
  ASSERT_EQ(specs.size(), 2u);
  EXPECT_EQ(specs[0].name, "weight");
  EXPECT_EQ(specs[0].shape, (Shape{8, 3, 5, 5}));
  EXPECT_EQ(specs[1].name, "bias");
  EXPECT_EQ(make_conv2d(3, 8, 3, 1, 1, false)->param_specs().size(), 1u);
  EXPECT_THROW(conv->output_shape({4, 28, 28}), UserError);
  EXPECT_THROW(make_conv2d(3, 8, 5)->output_shape({3, 3, 4}), UserError);
  EXPECT_THROW(make_conv2d(3, 8, 5, 2)->output_shape({3, 4, 4}), UserError);  // (4-5)/2 truncates to 0
  EXPECT_THROW(make_conv2d(3, 8, 0), UserError);
  EXPECT_THROW(make_conv2d(3, 8, 3, 0), UserError);

  auto p1 = allocate_params(*conv), p2 = allocate_params(*conv), p3 = allocate_params(*conv);
  conv->init(p1, {}, CounterRng(1, 4, 0));
  conv->init(p2, {}, CounterRng(1, 4, 0));
  conv->init(p3, {}, CounterRng(1, 5, 0));
  const float bound = 1.0f / std::sqrt(75.0f);
  float wmax = 0;
  for (int64_t i = 0; i < p1[0].numel(); ++i) wmax = std::max(wmax, std::fabs(p1[0].f32()[i]));
  EXPECT_LE(wmax, bound);
  EXPECT_GT(wmax, 0.9f * bound);  // uses the whole range
  for (int64_t i = 0; i < p1[1].numel(); ++i) EXPECT_LE(std::fabs(p1[1].f32()[i]), bound);
  EXPECT_EQ(0, std::memcmp(p1[0].raw(), p2[0].raw(), p1[0].nbytes()));
  EXPECT_NE(0, std::memcmp(p1[0].raw(), p3[0].raw(), p1[0].nbytes()));
}

TEST(Conv2dLayer, NoInputGradientWhenNotWanted) {
  LayerPtr conv = make_conv2d(2, 3, 3, 1, 1);
  auto params = allocate_params(*conv);
  conv->init(params, {}, CounterRng(1, 0, 0));
  std::vector<Tensor> grads{Tensor::zeros(params[0].shape()), Tensor::zeros(params[1].shape())};
  LayerContext ctx;
  Tensor x = random_tensor({2, 2, 4, 4}, 3);
  Tensor y = conv->forward({params, {}, {}}, x, ctx);
  Tensor dx = conv->backward({params, grads, {}, false}, random_tensor(y.shape(), 4), ctx);
  EXPECT_FALSE(dx.defined());
  EXPECT_NE(grads[0].f32()[0], 0.0f);
}

TEST(Conv2dLayer, BitwiseReproducibleWithFixedThreads) {
  int keep = cpu::compute_threads();
  cpu::set_compute_threads(2);
  LayerPtr conv = make_conv2d(16, 32, 3, 1, 1);
  auto params = allocate_params(*conv);
  conv->init(params, {}, CounterRng(3, 0, 0));
  Tensor x = random_tensor({8, 16, 12, 12}, 5);
  auto run = [&] {
    std::vector<Tensor> grads{Tensor::zeros(params[0].shape()), Tensor::zeros(params[1].shape())};
    LayerContext ctx;
    Tensor y = conv->forward({params, {}, {}}, x, ctx);
    Tensor dx = conv->backward({params, grads, {}}, y, ctx);
    return std::vector<Tensor>{y, dx, grads[0], grads[1]};
  };
  auto a = run(), b = run();
  for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(0, std::memcmp(a[i].raw(), b[i].raw(), a[i].nbytes())) << i;
  cpu::set_compute_threads(keep);
}

}  // namespace
}  // namespace pd

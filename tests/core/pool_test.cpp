#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "core/cpu/pool_kernels.h"
#include "core/error.h"
#include "core/layers.h"
#include "tests/core/gradcheck.h"

namespace pd {
namespace {

using testing::random_tensor;

// Distinct values at least 0.05 apart (a shuffled ramp), so a finite
// difference step never changes which element wins a max window.
Tensor separated_tensor(const Shape& s) {
  Tensor t = Tensor::empty(s);
  const int64_t n = t.numel();
  for (int64_t i = 0; i < n; ++i) t.f32()[i] = 0.05f * static_cast<float>((i * 7919) % n) - 0.025f * n;
  return t;
}

cpu::PoolShape pool(int64_t planes, int64_t h, int64_t w, int k, int s, int p) {
  cpu::PoolShape ps;
  ps.planes = planes; ps.height = h; ps.width = w; ps.kernel = k; ps.stride = s; ps.padding = p;
  return ps;
}

// Window [h0, h0+k) x [w0, w0+k) clipped to the image, reduced naively.
template <class F>
void for_each_window(const cpu::PoolShape& s, F f) {
  for (int64_t pl = 0; pl < s.planes; ++pl)
    for (int64_t oh = 0; oh < s.out_height(); ++oh)
      for (int64_t ow = 0; ow < s.out_width(); ++ow) {
        std::vector<int64_t> cells;
        for (int ki = 0; ki < s.kernel; ++ki)
          for (int kj = 0; kj < s.kernel; ++kj) {
            int64_t ih = oh * s.stride - s.padding + ki, iw = ow * s.stride - s.padding + kj;
            if (ih >= 0 && ih < s.height && iw >= 0 && iw < s.width) cells.push_back(pl * s.height * s.width + ih * s.width + iw);
          }
        f((pl * s.out_height() + oh) * s.out_width() + ow, cells);
      }
}

void check_max_and_avg(const cpu::PoolShape& s) {
  SCOPED_TRACE(::testing::Message() << s.height << "x" << s.width << " k" << s.kernel << " s" << s.stride << " p" << s.padding);
  Tensor x = random_tensor({s.planes, s.height, s.width}, 1);
  Tensor dy = random_tensor({s.planes, s.out_height(), s.out_width()}, 2);
  const int64_t out = dy.numel(), in = x.numel();
  Tensor y = Tensor::empty(dy.shape()), arg = Tensor::empty(dy.shape(), DType::I32), dx = Tensor::full(x.shape(), 3.0f);
  std::vector<double> want_y(out), want_dx(in, 0.0), want_avg(out), want_avg_dx(in, 0.0);
  for_each_window(s, [&](int64_t o, const std::vector<int64_t>& cells) {
    int64_t best = cells[0];
    double sum = 0;
    for (int64_t c : cells) {
      if (x.f32()[c] > x.f32()[best]) best = c;
      sum += x.f32()[c];
    }
    want_y[o] = x.f32()[best];
    want_dx[best] += dy.f32()[o];
    want_avg[o] = sum / (s.kernel * s.kernel);
    for (int64_t c : cells) want_avg_dx[c] += dy.f32()[o] / (s.kernel * s.kernel);
  });
  cpu::maxpool2d_forward(s, x.f32(), y.f32(), arg.data<int32_t>());
  cpu::maxpool2d_backward(s, dy.f32(), arg.data<int32_t>(), dx.f32());
  for (int64_t i = 0; i < out; ++i) ASSERT_EQ(y.f32()[i], want_y[i]) << "max y " << i;
  for (int64_t i = 0; i < in; ++i) ASSERT_NEAR(dx.f32()[i], want_dx[i], 1e-6) << "max dx " << i;
  dx.fill(3.0f);
  cpu::avgpool2d_forward(s, x.f32(), y.f32());
  cpu::avgpool2d_backward(s, dy.f32(), dx.f32());
  for (int64_t i = 0; i < out; ++i) ASSERT_NEAR(y.f32()[i], want_avg[i], 1e-6) << "avg y " << i;
  for (int64_t i = 0; i < in; ++i) ASSERT_NEAR(dx.f32()[i], want_avg_dx[i], 1e-6) << "avg dx " << i;
}

TEST(PoolKernels, MaxAndAvgMatchNaiveWindows) {
  check_max_and_avg(pool(3, 8, 8, 2, 2, 0));  // the specialised 2x2 path
  check_max_and_avg(pool(2, 7, 9, 2, 2, 0));  // 2x2 with a dropped last row/column
  check_max_and_avg(pool(3, 28, 28, 2, 2, 0));  // 2x2, 8 windows at a time and a tail
  check_max_and_avg(pool(2, 6, 33, 2, 2, 0));   // 2x2, exactly two blocks of 8, a dropped column
  check_max_and_avg(pool(2, 7, 9, 3, 2, 1));  // overlapping windows, padding
  check_max_and_avg(pool(2, 5, 5, 3, 1, 1));
  check_max_and_avg(pool(2, 9, 7, 2, 3, 0));  // stride beyond the window
}

TEST(PoolKernels, MaxIgnoresPaddingEvenForNegativeInputs) {
  Tensor x = Tensor::full({1, 2, 2}, -5.0f);
  Tensor y = Tensor::empty({1, 2, 2}), arg = Tensor::empty({1, 2, 2}, DType::I32);
  cpu::maxpool2d_forward(pool(1, 2, 2, 3, 1, 1), x.f32(), y.f32(), arg.data<int32_t>());
  for (int i = 0; i < 4; ++i) EXPECT_EQ(y.f32()[i], -5.0f);
}

TEST(PoolKernels, MaxPropagatesNaNLikeTorch) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (int k : {2, 3}) {
    Tensor x = Tensor::from_floats({1, nan, 5, 2, 0, 0, 0, 0, 9}, {1, 3, 3});
    Tensor y = Tensor::empty({1, 1, 1}), arg = Tensor::empty({1, 1, 1}, DType::I32);
    cpu::maxpool2d_forward(pool(1, 3, 3, k, k, 0), x.f32(), y.f32(), arg.data<int32_t>());
    EXPECT_TRUE(std::isnan(y.f32()[0])) << k;
    EXPECT_EQ(arg.data<int32_t>()[0], 1) << k;
  }
}

TEST(PoolKernels, MaxPropagatesNaNInEveryWindowPosition) {
  // 2x2 windows, 8 at a time: a NaN in each position of some window, and
  // windows with two NaNs, must give NaN and the first NaN's index.
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const int64_t W = 40, OW = 20;
  Tensor x = random_tensor({1, 2, W}, 9);
  float* v = x.f32();
  // Cells (window): 0, 1 (0); W+4 (2); W+7 (3); 10, W+11 (5); 19, 18 (9); 35 (17, in the tail).
  for (int64_t cell : {int64_t{0}, int64_t{1}, W + 4, W + 7, int64_t{10}, W + 11, int64_t{19}, int64_t{18}, int64_t{35}})
    v[cell] = nan;
  Tensor y = Tensor::empty({1, 1, OW}), arg = Tensor::empty({1, 1, OW}, DType::I32);
  cpu::maxpool2d_forward(pool(1, 2, W, 2, 2, 0), v, y.f32(), arg.data<int32_t>());
  for (int64_t o = 0; o < OW; ++o) {
    const int64_t cells[4] = {2 * o, 2 * o + 1, W + 2 * o, W + 2 * o + 1};
    int64_t first_nan = -1, best = cells[0];
    for (int64_t c : cells) {
      if (std::isnan(v[c]) && first_nan < 0) first_nan = c;
      if (v[c] > v[best]) best = c;
    }
    const int64_t want = first_nan >= 0 ? first_nan : best;
    EXPECT_EQ(arg.data<int32_t>()[o], want) << o;
    if (first_nan >= 0) EXPECT_TRUE(std::isnan(y.f32()[o])) << o;
    else EXPECT_EQ(y.f32()[o], v[best]) << o;
  }
}

TEST(PoolKernels, AdaptiveAvgMatchesTorchWindows) {
  // 5 -> 3: torch windows are rows [0,2), [1,4), [3,5).
  Tensor x = random_tensor({2, 5, 7}, 3);
  Tensor y = Tensor::empty({2, 3, 2}), dy = random_tensor({2, 3, 2}, 4), dx = Tensor::full({2, 5, 7}, 1.0f);
  cpu::adaptive_avgpool2d_forward(2, 5, 7, 3, 2, x.f32(), y.f32());
  cpu::adaptive_avgpool2d_backward(2, 5, 7, 3, 2, dy.f32(), dx.f32());
  const int hs[] = {0, 1, 3}, he[] = {2, 4, 5}, ws[] = {0, 3}, we[] = {4, 7};
  std::vector<double> want_dx(70, 0.0);
  for (int p = 0; p < 2; ++p)
    for (int i = 0; i < 3; ++i)
      for (int j = 0; j < 2; ++j) {
        double sum = 0;
        int cnt = (he[i] - hs[i]) * (we[j] - ws[j]);
        for (int h = hs[i]; h < he[i]; ++h)
          for (int w = ws[j]; w < we[j]; ++w) {
            sum += x.f32()[p * 35 + h * 7 + w];
            want_dx[p * 35 + h * 7 + w] += dy.f32()[p * 6 + i * 2 + j] / cnt;
          }
        EXPECT_NEAR(y.f32()[p * 6 + i * 2 + j], sum / cnt, 1e-6);
      }
  for (int i = 0; i < 70; ++i) EXPECT_NEAR(dx.f32()[i], want_dx[i], 1e-6) << i;
}

TEST(PoolLayers, GradientsMatchFiniteDifferences) {
  testing::gradcheck(*make_maxpool2d(2), separated_tensor({2, 3, 6, 6}));
  testing::gradcheck(*make_maxpool2d(3, 2, 1), separated_tensor({2, 2, 7, 7}));
  testing::gradcheck(*make_avgpool2d(2), random_tensor({2, 3, 6, 6}, 5));
  testing::gradcheck(*make_avgpool2d(3, 2, 1), random_tensor({2, 2, 7, 7}, 6));
  testing::gradcheck(*make_adaptive_avgpool2d(3, 2), random_tensor({2, 2, 5, 7}, 7));
  testing::gradcheck(*make_adaptive_avgpool2d(1, 1), random_tensor({2, 4, 3, 3}, 8));
}

TEST(PoolLayers, ShapesAndBadArguments) {
  EXPECT_EQ(make_maxpool2d(2)->output_shape({32, 28, 28}), (Shape{32, 14, 14}));
  EXPECT_EQ(make_maxpool2d(3, 2, 1)->output_shape({64, 112, 112}), (Shape{64, 56, 56}));
  EXPECT_EQ(make_avgpool2d(2)->output_shape({8, 7, 7}), (Shape{8, 3, 3}));
  EXPECT_EQ(make_adaptive_avgpool2d(1, 1)->output_shape({512, 7, 7}), (Shape{512, 1, 1}));
  EXPECT_THROW(make_maxpool2d(0), UserError);
  EXPECT_THROW(make_maxpool2d(2, 2, 2), UserError);  // padding > kernel / 2
  EXPECT_THROW(make_adaptive_avgpool2d(0, 1), UserError);
  EXPECT_THROW(make_maxpool2d(4)->output_shape({3, 2, 2}), UserError);
  EXPECT_THROW(make_maxpool2d(2)->output_shape({28, 28}), UserError);
}

TEST(PoolLayers, NoInputGradientWhenNotWanted) {
  LayerPtr l = make_maxpool2d(2);
  LayerContext ctx;
  Tensor y = l->forward({{}, {}, {}}, random_tensor({1, 1, 4, 4}, 1), ctx);
  EXPECT_FALSE(l->backward({{}, {}, {}, false}, y, ctx).defined());
}

}  // namespace
}  // namespace pd

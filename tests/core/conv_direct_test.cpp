// The direct convolution kernels (core/cpu/conv_direct_kernels.h) against
// their reference, the im2col + sgemm route, on shapes of every kind; and
// the entry points that choose between them. Skipped on hosts without
// AVX-512, where the entry points always take the reference.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "core/cpu/conv_direct_kernels.h"
#include "core/cpu/conv_kernels.h"
#include "core/cpu/gemm.h"
#include "core/layers.h"
#include "tests/core/conv_shape.h"
#include "tests/core/gradcheck.h"

namespace pd {
namespace {

using cpu::ConvShape;
using testing::random_tensor;

std::string name_of(const ConvShape& s) {
  return "N" + std::to_string(s.batch) + " C" + std::to_string(s.in_channels) + " " + std::to_string(s.in_h) + "x" +
         std::to_string(s.in_w) + " O" + std::to_string(s.out_channels) + " k" + std::to_string(s.kernel_h) + " s" +
         std::to_string(s.stride) + " p" + std::to_string(s.padding);
}

// Both routes sum the same products in different orders: agreement to a
// few float32 roundings of the result's scale (max |entry|).
constexpr double kTolerance = 1e-5;

void expect_close(const Tensor& got, const Tensor& want, const char* what) {
  double scale = 1e-6;
  for (int64_t i = 0; i < want.numel(); ++i) scale = std::max(scale, std::fabs(double(want.f32()[i])));
  for (int64_t i = 0; i < want.numel(); ++i)
    ASSERT_NEAR(got.f32()[i], want.f32()[i], kTolerance * scale) << what << "[" << i << "]";
}

Tensor input_of(const ConvShape& s) { return random_tensor({s.batch, s.in_channels, s.in_h, s.in_w}, 1); }
Tensor weight_of(const ConvShape& s) {
  return random_tensor({s.out_channels, s.in_channels, s.kernel_h, s.kernel_h}, 2);
}
Tensor output_grad_of(const ConvShape& s) { return random_tensor({s.batch, s.out_channels, s.out_h(), s.out_w()}, 4); }

// The direct kernels themselves (whatever the entry points would choose).
void check_direct_against_im2col(const ConvShape& s, bool with_bias) {
  SCOPED_TRACE(name_of(s) + (with_bias ? " bias" : ""));
  Tensor x = input_of(s), w = weight_of(s), b = random_tensor({s.out_channels}, 3);
  const Shape ys{s.batch, s.out_channels, s.out_h(), s.out_w()};
  Tensor got = Tensor::full(ys, 5.0f), want = Tensor::full(ys, 6.0f);
  const float* bias = with_bias ? b.f32() : nullptr;
  cpu::conv2d_direct_forward(s, x.f32(), w.f32(), bias, got.f32());
  cpu::conv2d_forward_im2col(s, x.f32(), w.f32(), bias, want.f32());
  expect_close(got, want, "y");

  Tensor dy = output_grad_of(s);
  Tensor dw_got = Tensor::full(w.shape(), 0.5f), dw_want = Tensor::full(w.shape(), 0.5f);  // added to
  cpu::conv2d_direct_backward_params(s, x.f32(), dy.f32(), dw_got.f32());
  cpu::conv2d_backward_im2col(s, x.f32(), nullptr, dy.f32(), nullptr, dw_want.f32(), nullptr);
  expect_close(dw_got, dw_want, "dw");
}

// conv2d_forward / conv2d_backward* (direct where chosen) against the
// reference route, fused and split, dx-only and dw-only.
void check_entry_points_against_im2col(const ConvShape& s) {
  SCOPED_TRACE(name_of(s));
  Tensor x = input_of(s), w = weight_of(s), b = random_tensor({s.out_channels}, 3), dy = output_grad_of(s);
  const Shape ys{s.batch, s.out_channels, s.out_h(), s.out_w()};
  Tensor y = Tensor::empty(ys), y_ref = Tensor::empty(ys);
  cpu::conv2d_forward(s, x.f32(), w.f32(), b.f32(), y.f32());
  cpu::conv2d_forward_im2col(s, x.f32(), w.f32(), b.f32(), y_ref.f32());
  expect_close(y, y_ref, "y");

  Tensor dx = Tensor::full(x.shape(), 7.0f), dw = Tensor::full(w.shape(), 0.5f), db = Tensor::full(b.shape(), 0.25f);
  Tensor dx_ref = Tensor::full(x.shape(), 8.0f), dw_ref = Tensor::full(w.shape(), 0.5f);
  Tensor db_ref = Tensor::full(b.shape(), 0.25f);
  cpu::conv2d_backward(s, x.f32(), w.f32(), dy.f32(), dx.f32(), dw.f32(), db.f32());
  cpu::conv2d_backward_im2col(s, x.f32(), w.f32(), dy.f32(), dx_ref.f32(), dw_ref.f32(), db_ref.f32());
  expect_close(dx, dx_ref, "dx");
  expect_close(dw, dw_ref, "dw");
  expect_close(db, db_ref, "db");

  // The split halves give the fused call's bits.
  Tensor dx_only = Tensor::full(x.shape(), 9.0f), dw_only = Tensor::full(w.shape(), 0.5f);
  Tensor db_only = Tensor::full(b.shape(), 0.25f);
  cpu::conv2d_backward_input(s, w.f32(), dy.f32(), dx_only.f32());
  cpu::conv2d_backward_params(s, x.f32(), dy.f32(), dw_only.f32(), db_only.f32());
  EXPECT_EQ(0, std::memcmp(dx_only.raw(), dx.raw(), dx.nbytes()));
  EXPECT_EQ(0, std::memcmp(dw_only.raw(), dw.raw(), dw.nbytes()));
  EXPECT_EQ(0, std::memcmp(db_only.raw(), db.raw(), db.nbytes()));
}

std::vector<ConvShape> many_shapes() {
  return {
      testing::conv_shape(1, 1, 5, 5, 1, 3, 1, 1),       // one of everything
      testing::conv_shape(2, 3, 7, 9, 4, 3, 1, 1),       // odd, non-square maps
      testing::conv_shape(3, 5, 17, 13, 7, 3, 1, 0),     // no padding
      testing::conv_shape(2, 4, 11, 12, 6, 3, 1, 2),     // padding past the kernel's half
      testing::conv_shape(4, 3, 20, 20, 9, 1, 1, 0),     // pointwise
      testing::conv_shape(3, 6, 15, 15, 5, 1, 2, 0),     // pointwise, stride 2
      testing::conv_shape(5, 3, 23, 21, 10, 3, 2, 1),    // stride 2, odd maps
      testing::conv_shape(2, 3, 30, 29, 17, 7, 2, 3),    // a stem: 7x7 stride 2
      testing::conv_shape(1, 2, 19, 19, 3, 5, 1, 2),     // 5x5
      testing::conv_shape(2, 2, 9, 8, 3, 4, 1, 1),       // even kernel
      testing::conv_shape(3, 2, 13, 13, 3, 3, 3, 1),     // stride 3
      testing::conv_shape(9, 18, 12, 12, 20, 3, 1, 1),   // batch 9, channels not a multiple of 16
      testing::conv_shape(7, 33, 14, 14, 35, 3, 1, 1),   // several channel blocks and a short one
      testing::conv_shape(2, 64, 24, 24, 64, 3, 1, 1),   // resnet18's 64-channel stage, smaller maps
      testing::conv_shape(2, 40, 16, 16, 70, 3, 2, 1),   // downsampling, O not a multiple of the tile
      testing::conv_shape(3, 4, 3, 3, 5, 3, 1, 1),       // maps smaller than a tile row
      testing::conv_shape(2, 3, 2, 40, 4, 3, 1, 1),      // two rows
      testing::conv_shape(2, 3, 40, 1, 4, 3, 1, 1),      // one column
  };
}

class ConvDirect : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!cpu::conv_direct_available()) GTEST_SKIP() << "no AVX-512 on this host: the direct kernels never run";
  }
};

TEST_F(ConvDirect, KernelsMatchIm2colWithAndWithoutBias) {
  for (const ConvShape& s : many_shapes()) {
    check_direct_against_im2col(s, true);
    check_direct_against_im2col(s, false);
  }
}

TEST_F(ConvDirect, EntryPointsMatchIm2col) {
  for (const ConvShape& s : many_shapes()) check_entry_points_against_im2col(s);
  // Shapes the entry points route to the direct kernels.
  const ConvShape stem = testing::conv_shape(2, 3, 64, 64, 64, 7, 2, 3), stage = testing::conv_shape(3, 64, 28, 28, 64, 3, 1, 1);
  for (const ConvShape& s : {stem, stage}) {
    EXPECT_TRUE(cpu::conv_direct_forward_chosen(s)) << name_of(s);
    EXPECT_TRUE(cpu::conv_direct_params_chosen(s)) << name_of(s);
    check_entry_points_against_im2col(s);
  }
}

// Every output is computed by the same arithmetic whichever thread takes
// it: 1 and 2 threads give the same bits, and so do repeated calls.
TEST_F(ConvDirect, BitsDoNotDependOnThreadCount) {
  const int keep = cpu::compute_threads();
  for (const ConvShape& s : {testing::conv_shape(5, 16, 20, 20, 24, 3, 1, 1), testing::conv_shape(4, 3, 61, 61, 16, 7, 2, 3),
                             testing::conv_shape(3, 8, 30, 30, 8, 3, 1, 1)}) {
    SCOPED_TRACE(name_of(s));
    Tensor x = input_of(s), w = weight_of(s), b = random_tensor({s.out_channels}, 3), dy = output_grad_of(s);
    std::vector<std::vector<Tensor>> runs;
    for (int threads : {1, 2, 2, 1}) {
      cpu::set_compute_threads(threads);
      Tensor y = Tensor::empty({s.batch, s.out_channels, s.out_h(), s.out_w()});
      Tensor dx = Tensor::empty(x.shape()), dw = Tensor::zeros(w.shape()), db = Tensor::zeros(b.shape());
      cpu::conv2d_forward(s, x.f32(), w.f32(), b.f32(), y.f32());
      cpu::conv2d_backward(s, x.f32(), w.f32(), dy.f32(), dx.f32(), dw.f32(), db.f32());
      // The direct kernels whether or not the entry points chose them.
      Tensor y_direct = Tensor::empty(y.shape()), dw_direct = Tensor::zeros(w.shape());
      cpu::conv2d_direct_forward(s, x.f32(), w.f32(), b.f32(), y_direct.f32());
      cpu::conv2d_direct_backward_params(s, x.f32(), dy.f32(), dw_direct.f32());
      runs.push_back({y, dx, dw, db, y_direct, dw_direct});
    }
    for (size_t r = 1; r < runs.size(); ++r)
      for (size_t i = 0; i < runs[0].size(); ++i)
        EXPECT_EQ(0, std::memcmp(runs[r][i].raw(), runs[0][i].raw(), runs[0][i].nbytes())) << "run " << r << " tensor " << i;
  }
  cpu::set_compute_threads(keep);
}

// Largest |got - exact| over a tensor, exact computed in double.
double worst_error(const float* got, const std::vector<double>& exact) {
  double worst = 0;
  for (size_t i = 0; i < exact.size(); ++i) worst = std::max(worst, std::fabs(double(got[i]) - exact[i]));
  return worst;
}

// Thousands of taps per output (512 channels of 3x3 in VGG and ResNet):
// a single running sum over all of them rounds visibly worse than
// im2col + sgemm, enough to flip a ReLU or max-pool choice that the
// reference route and PyTorch agree on. The kernels' sums must be as
// exact as the reference route's.
TEST_F(ConvDirect, LongSumsAreAsExactAsIm2col) {
  const ConvShape s = testing::conv_shape(2, 512, 7, 7, 32, 3, 1, 1);
  Tensor x = random_tensor({2, 512, 7, 7}, 21), w = random_tensor({32, 512, 3, 3}, 22), dy = output_grad_of(s);
  const int64_t OH = s.out_h(), OW = s.out_w(), T = s.patch();
  std::vector<double> y(static_cast<size_t>(s.batch * 32 * OH * OW), 0.0), dw(static_cast<size_t>(32 * T), 0.0);
  for (int64_t n = 0; n < s.batch; ++n)
    for (int64_t o = 0; o < 32; ++o)
      for (int64_t oh = 0; oh < OH; ++oh)
        for (int64_t ow = 0; ow < OW; ++ow)
          for (int64_t c = 0; c < 512; ++c)
            for (int64_t ky = 0; ky < 3; ++ky)
              for (int64_t kx = 0; kx < 3; ++kx) {
                const int64_t ih = oh - 1 + ky, iw = ow - 1 + kx;
                if (ih < 0 || ih >= 7 || iw < 0 || iw >= 7) continue;
                const int64_t t = (c * 3 + ky) * 3 + kx, yi = ((n * 32 + o) * OH + oh) * OW + ow;
                const double xv = x.f32()[((n * 512 + c) * 7 + ih) * 7 + iw];
                y[static_cast<size_t>(yi)] += xv * w.f32()[o * T + t];
                dw[static_cast<size_t>(o * T + t)] += xv * dy.f32()[yi];
              }
  Tensor y_direct = Tensor::empty(dy.shape()), y_ref = Tensor::empty(dy.shape());
  Tensor dw_direct = Tensor::zeros(w.shape()), dw_ref = Tensor::zeros(w.shape());
  cpu::conv2d_direct_forward(s, x.f32(), w.f32(), nullptr, y_direct.f32());
  cpu::conv2d_forward_im2col(s, x.f32(), w.f32(), nullptr, y_ref.f32());
  cpu::conv2d_direct_backward_params(s, x.f32(), dy.f32(), dw_direct.f32());
  cpu::conv2d_backward_im2col(s, x.f32(), nullptr, dy.f32(), nullptr, dw_ref.f32(), nullptr);
  EXPECT_LE(worst_error(y_direct.f32(), y), 1.5 * worst_error(y_ref.f32(), y));
  EXPECT_LE(worst_error(dw_direct.f32(), dw), 1.5 * worst_error(dw_ref.f32(), dw));
}

TEST_F(ConvDirect, LayerGradientsMatchFiniteDifferences) {
  const ConvShape s = testing::conv_shape(2, 4, 28, 28, 16, 3, 1, 1);
  ASSERT_TRUE(cpu::conv_direct_forward_chosen(s));
  ASSERT_TRUE(cpu::conv_direct_params_chosen(s));
  testing::gradcheck(*make_conv2d(4, 16, 3, 1, 1), random_tensor({2, 4, 28, 28}, 10));
  const ConvShape stem = testing::conv_shape(1, 2, 56, 56, 16, 7, 2, 3);
  ASSERT_TRUE(cpu::conv_direct_forward_chosen(stem));
  ASSERT_TRUE(cpu::conv_direct_params_chosen(stem));
  testing::gradcheck(*make_conv2d(2, 16, 7, 2, 3, false), random_tensor({1, 2, 56, 56}, 11));
}

}  // namespace
}  // namespace pd

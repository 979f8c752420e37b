// The CPU table's convolution and pooling entries on every geometry
// (core/geometry.h): the core layers' case gives the fast kernels' bits;
// groups, rectangular kernels, per-axis strides, uneven pads, ceil mode and
// count_include_pad = false match naive loops (tests/gpu/reference.h, in
// double) within float rounding: atol 1e-5 + rtol 1e-4.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "core/cpu/conv_kernels.h"
#include "core/cpu/pool_kernels.h"
#include "core/device_ops.h"
#include "tests/gpu/reference.h"

namespace pd {
namespace {

std::vector<float> random_values(size_t n, uint32_t key) {
  CounterRng r(42, key, 1);
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = 2.0f * r.uniform(i) - 1.0f;
  return v;
}

::testing::AssertionResult near(const std::vector<float>& got, const std::vector<double>& want) {
  if (got.size() != want.size()) return ::testing::AssertionFailure() << "size " << got.size() << " != " << want.size();
  for (size_t i = 0; i < got.size(); ++i)
    if (!(std::fabs(got[i] - want[i]) <= 1e-5 + 1e-4 * std::fabs(want[i])))
      return ::testing::AssertionFailure() << "[" << i << "] got " << got[i] << " want " << want[i];
  return ::testing::AssertionSuccess();
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

Conv2dGeometry conv(int64_t c, int64_t o, int64_t groups, int64_t kh, int64_t kw, int64_t sh, int64_t sw, Pads2d pad) {
  Conv2dGeometry g;
  g.batch = 2;
  g.in_channels = c;
  g.in_h = 9;
  g.in_w = 10;
  g.out_channels = o;
  g.kernel_h = kh;
  g.kernel_w = kw;
  g.stride_h = sh;
  g.stride_w = sw;
  g.pad = pad;
  g.groups = groups;
  return g;
}

struct ConvCase {
  std::string name;
  Conv2dGeometry g;
};
std::vector<ConvCase> conv_cases() {
  return {{"depthwise 3x3", conv(6, 6, 6, 3, 3, 1, 1, Pads2d::uniform(1))},
          {"depthwise stride 2, pads 0 0 1 1", conv(4, 8, 4, 3, 3, 2, 2, {0, 0, 1, 1})},
          {"groups 2", conv(4, 6, 2, 3, 3, 1, 1, Pads2d::uniform(1))},
          {"1x3", conv(3, 5, 1, 1, 3, 1, 1, {0, 1, 0, 1})},
          {"3x1", conv(3, 5, 1, 3, 1, 1, 1, {1, 0, 1, 0})},
          {"3x2 strides 2x1, pads 1 0 0 1", conv(3, 4, 1, 3, 2, 2, 1, {1, 0, 0, 1})},
          {"3x5 groups 3, strides 1x2, pads 1 2 1 2", conv(6, 3, 3, 3, 5, 1, 2, {1, 2, 1, 2})}};
}

TEST(ConvGeometry, CpuTableMatchesNaiveLoopsOnEveryGeometry) {
  const DeviceOps& cpu = device_ops(Device::cpu());
  for (const ConvCase& c : conv_cases()) {
    SCOPED_TRACE(c.name);
    const Conv2dGeometry& g = c.g;
    const size_t xs = g.batch * g.in_channels * g.in_h * g.in_w, ws = g.out_channels * g.patch();
    const size_t ys = g.batch * g.out_channels * g.out_h() * g.out_w();
    auto x = random_values(xs, 1), w = random_values(ws, 2), b = random_values(g.out_channels, 3);
    auto dy = random_values(ys, 4);
    std::vector<float> y(ys), dx(xs), dw(ws, 0.5f), db(g.out_channels, -1.0f);
    cpu.conv2d_forward(Precision::FP32, g, x.data(), w.data(), b.data(), y.data());
    cpu.conv2d_backward_data(Precision::FP32, g, w.data(), dy.data(), dx.data());
    cpu.conv2d_backward_params_accum(Precision::FP32, g, x.data(), dy.data(), dw.data(), db.data());
    ref::ConvGrads want = ref::conv2d_backward(g, x, w, dy);
    for (double& v : want.dw) v += 0.5;
    for (double& v : want.db) v -= 1.0;
    EXPECT_TRUE(near(y, ref::conv2d_forward(g, x, w, b)));
    EXPECT_TRUE(near(dx, want.dx));
    EXPECT_TRUE(near(dw, want.dw));
    EXPECT_TRUE(near(db, want.db));
  }
}

// The core layers' geometry reaches conv_kernels.h unchanged: the same bits.
TEST(ConvGeometry, CpuTableRunsTheSquareKernelsOnTheCoreCase) {
  Conv2dGeometry g = conv(5, 7, 1, 3, 3, 2, 2, Pads2d::uniform(1));
  g.square_window(3, 2, 1);
  cpu::ConvShape s;
  s.batch = g.batch;
  s.in_channels = g.in_channels;
  s.in_h = g.in_h;
  s.in_w = g.in_w;
  s.out_channels = g.out_channels;
  s.kernel_h = s.kernel_w = 3;
  s.stride = 2;
  s.padding = 1;
  ASSERT_EQ(s.out_h(), g.out_h());
  ASSERT_EQ(s.out_w(), g.out_w());
  const size_t xs = g.batch * g.in_channels * g.in_h * g.in_w, ws = g.out_channels * g.patch();
  const size_t ys = g.batch * g.out_channels * g.out_h() * g.out_w();
  auto x = random_values(xs, 5), w = random_values(ws, 6), b = random_values(g.out_channels, 7);
  auto dy = random_values(ys, 8);
  std::vector<float> y1(ys), y2(ys), dx1(xs), dx2(xs), dw1(ws, 0.0f), dw2(ws, 0.0f), db1(7, 0.0f), db2(7, 0.0f);
  const DeviceOps& cpu = device_ops(Device::cpu());
  cpu.conv2d_forward(Precision::FP32, g, x.data(), w.data(), b.data(), y1.data());
  cpu::conv2d_forward(s, x.data(), w.data(), b.data(), y2.data());
  cpu.conv2d_backward_data(Precision::FP32, g, w.data(), dy.data(), dx1.data());
  cpu::conv2d_backward_input(s, w.data(), dy.data(), dx2.data());
  cpu.conv2d_backward_params_accum(Precision::FP32, g, x.data(), dy.data(), dw1.data(), db1.data());
  cpu::conv2d_backward_params(s, x.data(), dy.data(), dw2.data(), db2.data());
  EXPECT_TRUE(same_bits(y1, y2));
  EXPECT_TRUE(same_bits(dx1, dx2));
  EXPECT_TRUE(same_bits(dw1, dw2));
  EXPECT_TRUE(same_bits(db1, db2));
}

Pool2dGeometry pool(int64_t h, int64_t w, int64_t kh, int64_t kw, int64_t sh, int64_t sw, Pads2d pad, bool ceil,
                    bool include_pad) {
  Pool2dGeometry g;
  g.batch = 2;
  g.channels = 3;
  g.in_h = h;
  g.in_w = w;
  g.kernel_h = kh;
  g.kernel_w = kw;
  g.stride_h = sh;
  g.stride_w = sw;
  g.pad = pad;
  g.ceil_mode = ceil;
  g.count_include_pad = include_pad;
  return g;
}

struct PoolCase {
  std::string name;
  Pool2dGeometry g;
};
std::vector<PoolCase> pool_cases() {
  return {{"3x3 s2 ceil", pool(8, 9, 3, 3, 2, 2, {}, true, true)},
          {"3x3 s2 pad 1 ceil, padding counted", pool(8, 8, 3, 3, 2, 2, Pads2d::uniform(1), true, true)},
          {"3x2 s2x1 pads 1 0 1 1, padding not counted", pool(7, 6, 3, 2, 2, 1, {1, 0, 1, 1}, false, false)},
          {"2x3 s1x2 pads 0 1 1 0", pool(6, 9, 2, 3, 1, 2, {0, 1, 1, 0}, false, true)},
          {"3x3 s1 pad 1, padding not counted", pool(5, 6, 3, 3, 1, 1, Pads2d::uniform(1), false, false)},
          {"3x2 s2 pads 1 0 1 0 ceil, padding not counted", pool(9, 7, 3, 2, 2, 2, {1, 0, 1, 0}, true, false)},
          {"core 3x3 s2 pad 1", pool(9, 9, 3, 3, 2, 2, Pads2d::uniform(1), false, true)}};
}

TEST(PoolGeometry, CpuTableMatchesNaiveLoopsOnEveryGeometry) {
  const DeviceOps& cpu = device_ops(Device::cpu());
  for (const PoolCase& c : pool_cases())
    for (PoolKind kind : {PoolKind::Max, PoolKind::Average}) {
      SCOPED_TRACE(c.name + (kind == PoolKind::Max ? " max" : " average"));
      const Pool2dGeometry& g = c.g;
      const size_t xs = g.batch * g.channels * g.in_h * g.in_w, ys = g.batch * g.channels * g.out_h() * g.out_w();
      auto x = random_values(xs, 9), dy = random_values(ys, 10);
      std::vector<float> y(ys), dx(xs, 7.0f), y2(ys), dx2(xs, 7.0f);
      std::vector<int32_t> argmax(ys);
      cpu.pool2d_forward_indexed(kind, g, x.data(), y.data(), argmax.data());
      cpu.pool2d_backward_indexed(kind, g, nullptr, nullptr, argmax.data(), dy.data(), dx.data());
      EXPECT_TRUE(near(y, ref::pool2d_forward(kind, g, x)));
      EXPECT_TRUE(near(dx, ref::pool2d_backward(kind, g, x, dy)));
      // The cuDNN-shaped entries (argmax recomputed) give the same bits.
      cpu.pool2d_forward(kind, g, x.data(), y2.data());
      cpu.pool2d_backward(kind, g, x.data(), y2.data(), dy.data(), dx2.data());
      EXPECT_TRUE(same_bits(y, y2));
      EXPECT_TRUE(same_bits(dx, dx2));
    }
}

// PyTorch's output sizes (torch.nn.functional.max_pool2d): in ceil mode a
// window that would start in the trailing pad is dropped.
TEST(PoolGeometry, PooledSizesFollowPyTorch) {
  EXPECT_EQ(pooled_size(8, 3, 2, 0, 0, false), 3);
  EXPECT_EQ(pooled_size(8, 3, 2, 0, 0, true), 4);
  EXPECT_EQ(pooled_size(7, 3, 2, 0, 0, true), 3);
  EXPECT_EQ(pooled_size(5, 2, 2, 1, 1, false), 3);
  EXPECT_EQ(pooled_size(5, 2, 2, 1, 1, true), 3);  // 4 windows, the last would start in the pad
  EXPECT_EQ(pooled_size(6, 2, 2, 1, 1, true), 4);
  EXPECT_EQ(pooled_size(55, 3, 2, 0, 0, true), 27);  // SqueezeNet's 111 -> 55 -> 27
  EXPECT_EQ(pooled_size(111, 3, 2, 0, 0, true), 55);
}

}  // namespace
}  // namespace pd

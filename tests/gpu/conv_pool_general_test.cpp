// The CUDA convolution and pooling entries on the geometries beyond the core
// layers' (groups, rectangular kernels, per-axis strides, uneven pads, ceil
// mode, count_include_pad = false) against the CPU table on the same random
// data, forward and both backwards. Tolerances (inputs in [-1, 1]):
//   convolution: atol 2e-3 + rtol 1e-3, as tests/gpu/dnn_test.cpp (cuDNN
//     may pick Winograd or FFT algorithms);
//   pooling: atol 1e-6 + rtol 1e-6 (max selects, averages divide sums of a
//     few values in the same order).
// window.cu's pooling backward, run twice, gives the same bits (no atomics).
#if defined(PIPEDREAM_HAVE_CUDA)  // the whole file needs the CUDA backend
#include <cstring>
#include <string>

#include "tests/gpu/gpu_test.h"

namespace pd::gputest {

namespace {

Conv2dGeometry conv(int64_t c, int64_t o, int64_t groups, int64_t kh, int64_t kw, int64_t sh, int64_t sw, Pads2d pad) {
  Conv2dGeometry g;
  g.batch = 3;
  g.in_channels = c;
  g.in_h = 11;
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

Pool2dGeometry pool(int64_t h, int64_t w, int64_t kh, int64_t kw, int64_t sh, int64_t sw, Pads2d pad, bool ceil,
                    bool include_pad) {
  Pool2dGeometry g;
  g.batch = 2;
  g.channels = 5;
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
  bool own_kernels;  // window.cu's kernels, not cuDNN's (uneven pads, ceil mode)
};

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace

using CudaConvGeneral = GpuTest;

TEST_F(CudaConvGeneral, GroupsRectangularKernelsStridesAndPadsMatchTheCpuTable) {
  const DeviceOps& cpu = device_ops(Device::cpu());
  ops->set_deterministic(true);
  const ConvCase cases[] = {
      {"depthwise 3x3 pad 1", conv(8, 8, 8, 3, 3, 1, 1, Pads2d::uniform(1))},
      {"depthwise 5x5 stride 2, pads 1 1 2 2 (uneven)", conv(6, 6, 6, 5, 5, 2, 2, {1, 1, 2, 2})},
      {"depthwise multiplier 2, stride 2, pads 0 0 1 1", conv(4, 8, 4, 3, 3, 2, 2, {0, 0, 1, 1})},
      {"groups 2", conv(4, 6, 2, 3, 3, 1, 1, Pads2d::uniform(1))},
      {"1x3 pads 0 1 0 1", conv(3, 5, 1, 1, 3, 1, 1, {0, 1, 0, 1})},
      {"3x1 pads 1 0 1 0", conv(3, 5, 1, 3, 1, 1, 1, {1, 0, 1, 0})},
      {"3x2 strides 2x1, pads 1 0 0 1 (uneven)", conv(3, 4, 1, 3, 2, 2, 1, {1, 0, 0, 1})},
      {"3x5 groups 3, strides 1x2, pads 1 2 1 2", conv(6, 3, 3, 3, 5, 1, 2, {1, 2, 1, 2})},
  };
  for (const ConvCase& c : cases) {
    SCOPED_TRACE(c.name);
    const Conv2dGeometry& g = c.g;
    const size_t xs = g.batch * g.in_channels * g.in_h * g.in_w, ws = g.out_channels * g.patch();
    const size_t ys = g.batch * g.out_channels * g.out_h() * g.out_w();
    auto x = random_floats(xs, 21), w = random_floats(ws, 22), b = random_floats(g.out_channels, 23);
    auto dy = random_floats(ys, 24);
    // CPU table. Gradients accumulate: both start from a known non-zero value.
    std::vector<float> y(ys), dx(xs), dw(ws, 0.5f), db(g.out_channels, -1.0f);
    cpu.conv2d_forward(Precision::FP32, g, x.data(), w.data(), b.data(), y.data());
    cpu.conv2d_backward_data(Precision::FP32, g, w.data(), dy.data(), dx.data());
    cpu.conv2d_backward_params_accum(Precision::FP32, g, x.data(), dy.data(), dw.data(), db.data());
    // CUDA table.
    Tensor gx = on_gpu(x), gw = on_gpu(w), gb = on_gpu(b), gdy = on_gpu(dy);
    Tensor gy = gpu_zeros(ys), gdx = gpu_zeros(xs);
    Tensor gdw = on_gpu(std::vector<float>(ws, 0.5f)), gdb = on_gpu(std::vector<float>(g.out_channels, -1.0f));
    ops->conv2d_forward(Precision::FP32, g, gx.f32(), gw.f32(), gb.f32(), gy.f32());
    ops->conv2d_backward_data(Precision::FP32, g, gw.f32(), gdy.f32(), gdx.f32());
    ops->conv2d_backward_params_accum(Precision::FP32, g, gx.f32(), gdy.f32(), gdw.f32(), gdb.f32());
    EXPECT_TRUE(close(host(gy), y, 2e-3, 1e-3));
    EXPECT_TRUE(close(host(gdx), dx, 2e-3, 1e-3));
    EXPECT_TRUE(close(host(gdw), dw, 2e-3, 1e-3));
    EXPECT_TRUE(close(host(gdb), db, 2e-3, 1e-3));
  }
  ops->set_deterministic(false);
}

using CudaPoolGeneral = GpuTest;

TEST_F(CudaPoolGeneral, CeilModeUnevenPadsAndUncountedPaddingMatchTheCpuTable) {
  const DeviceOps& cpu = device_ops(Device::cpu());
  const PoolCase cases[] = {
      {"3x3 s2 ceil (SqueezeNet)", pool(13, 12, 3, 3, 2, 2, {}, true, true), true},
      {"3x3 s2 pad 1 ceil, padding counted", pool(8, 8, 3, 3, 2, 2, Pads2d::uniform(1), true, true), true},
      {"3x3 s2 pad 1 ceil, padding not counted", pool(8, 9, 3, 3, 2, 2, Pads2d::uniform(1), true, false), true},
      {"3x2 s2x1 pads 1 0 1 1, padding not counted", pool(7, 6, 3, 2, 2, 1, {1, 0, 1, 1}, false, false), true},
      {"2x3 s1x2 pads 0 1 1 0, padding counted", pool(6, 9, 2, 3, 1, 2, {0, 1, 1, 0}, false, true), true},
      {"3x3 s1 pad 1, padding not counted (cuDNN)", pool(5, 6, 3, 3, 1, 1, Pads2d::uniform(1), false, false), false},
      {"3x2 s2 pads 1 0 1 0 (cuDNN)", pool(9, 7, 3, 2, 2, 2, {1, 0, 1, 0}, false, true), false},
  };
  for (const PoolCase& c : cases)
    for (PoolKind kind : {PoolKind::Max, PoolKind::Average}) {
      SCOPED_TRACE(c.name + (kind == PoolKind::Max ? " max" : " average"));
      const Pool2dGeometry& g = c.g;
      const size_t xs = g.batch * g.channels * g.in_h * g.in_w, ys = g.batch * g.channels * g.out_h() * g.out_w();
      auto x = random_floats(xs, 25), dy = random_floats(ys, 26);
      std::vector<float> y(ys), dx(xs);
      cpu.pool2d_forward(kind, g, x.data(), y.data());
      cpu.pool2d_backward(kind, g, x.data(), y.data(), dy.data(), dx.data());
      Tensor gx = on_gpu(x), gdy = on_gpu(dy), gy = gpu_zeros(ys), gdx = gpu_zeros(xs), gdx2 = gpu_zeros(xs);
      ops->pool2d_forward(kind, g, gx.f32(), gy.f32());
      ops->pool2d_backward(kind, g, gx.f32(), gy.f32(), gdy.f32(), gdx.f32());
      ops->pool2d_backward(kind, g, gx.f32(), gy.f32(), gdy.f32(), gdx2.f32());
      EXPECT_TRUE(close(host(gy), y, 1e-6, 1e-6));
      EXPECT_TRUE(close(host(gdx), dx, 1e-6, 1e-6));
      if (c.own_kernels) EXPECT_TRUE(same_bits(host(gdx), host(gdx2)));
    }
}

}  // namespace pd::gputest

#endif

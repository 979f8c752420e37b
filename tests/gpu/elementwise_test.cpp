// Own elementwise kernels against CPU loops.
// Tolerances: relu, add, scale, axpy, bias, permute are exact (one IEEE
// operation per element, or a copy); GELU atol 1e-6 + rtol 1e-5 (tanhf vs
// double tanh); dropout masks are compared exactly with the CPU's
// CounterRng, values with rtol 1e-6; column sums atol 1e-5 + rtol 1e-5
// (atol 2e-3 over up to 100,003 rows).
#if defined(PIPEDREAM_HAVE_CUDA)  // the whole file needs the CUDA backend
#include <cstring>

#include "tests/gpu/gpu_test.h"
#include "tests/gpu/reference.h"

namespace pd::gputest {

using CudaElementwise = GpuTest;

TEST_F(CudaElementwise, ReluForwardBackward) {
  const size_t n = 5000;
  auto x = random_floats(n, 1), dy = random_floats(n, 2);
  Tensor dx_ = on_gpu(x), ddy = on_gpu(dy), y = gpu_zeros(n), dx = gpu_zeros(n);
  ops->relu_forward(n, dx_.f32(), y.f32());
  ops->relu_backward(n, y.f32(), ddy.f32(), dx.f32());
  std::vector<float> wy(n), wdx(n);
  for (size_t i = 0; i < n; ++i) {
    wy[i] = x[i] > 0 ? x[i] : 0.0f;
    wdx[i] = x[i] > 0 ? dy[i] : 0.0f;
  }
  EXPECT_EQ(host(y), wy);
  EXPECT_EQ(host(dx), wdx);
  ops->relu_forward(n, dx_.f32(), dx_.f32());  // in place
  EXPECT_EQ(host(dx_), wy);
}

// relu, add + relu and their bf16-rounding forms give the CPU's bits,
// zeros of both signs, subnormals, ties, infinities and NaN included (the
// chain rounding of core/bf16_rounding.h relies on relu(round(x)) having
// the bits of round(relu(x)) on every backend).
TEST_F(CudaElementwise, ReluAndAddReluWithAndWithoutRoundingGiveTheCpusBits) {
  std::vector<float> x = random_floats(4000, 40, -4.0f, 4.0f), b = random_floats(4000, 41, -4.0f, 4.0f);
  for (uint32_t u : {0x00000000u, 0x80000000u, 0x00000001u, 0x80000001u, 0x80007FFFu, 0x80008000u, 0x3F808000u,
                     0xBF818000u, 0x7F800000u, 0xFF800000u, 0x7FC00000u, 0xFFC00000u, 0x7F7FFFFFu}) {
    float f;
    std::memcpy(&f, &u, 4);
    x.push_back(f);
    b.push_back(0.0f);
  }
  const int64_t n = static_cast<int64_t>(x.size());
  const DeviceOps& cpu = device_ops(Device::cpu());
  Tensor dx = on_gpu(x), db = on_gpu(b), dy = gpu_zeros(x.size());
  auto bits_equal = [&](const std::vector<float>& got, const std::vector<float>& want, const char* what) {
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i)
      ASSERT_EQ(std::memcmp(&got[i], &want[i], 4), 0) << what << " at " << i << ": x = " << x[i] << ", got "
                                                       << got[i] << ", want " << want[i];
  };
  std::vector<float> want(x.size());
  cpu.relu_forward(n, x.data(), want.data());
  ops->relu_forward(n, dx.f32(), dy.f32());
  bits_equal(host(dy), want, "relu_forward");
  cpu.relu_forward_rounded(n, x.data(), want.data());
  ops->relu_forward_rounded(n, dx.f32(), dy.f32());
  bits_equal(host(dy), want, "relu_forward_rounded");
  cpu.add_relu_forward(n, x.data(), b.data(), want.data());
  ops->add_relu_forward(n, dx.f32(), db.f32(), dy.f32());
  bits_equal(host(dy), want, "add_relu_forward");
  cpu.add_relu_forward_rounded(n, x.data(), b.data(), want.data());
  ops->add_relu_forward_rounded(n, dx.f32(), db.f32(), dy.f32());
  bits_equal(host(dy), want, "add_relu_forward_rounded");
}

TEST_F(CudaElementwise, AddScaleAxpy) {
  const size_t n = 3001;
  auto a = random_floats(n, 3), b = random_floats(n, 4);
  Tensor da = on_gpu(a), db = on_gpu(b), y = gpu_zeros(n);
  ops->add(n, da.f32(), db.f32(), y.f32());
  std::vector<float> w(n);
  for (size_t i = 0; i < n; ++i) w[i] = a[i] + b[i];
  EXPECT_EQ(host(y), w);
  ops->scale(n, -1.5f, da.f32(), y.f32());
  for (size_t i = 0; i < n; ++i) w[i] = -1.5f * a[i];
  EXPECT_EQ(host(y), w);
  ops->axpy(n, 0.25f, da.f32(), db.f32());
  for (size_t i = 0; i < n; ++i) w[i] = b[i] + 0.25f * a[i];
  EXPECT_EQ(host(db), w);
}

TEST_F(CudaElementwise, GeluTanhForwardBackward) {
  const size_t n = 4096;
  auto x = random_floats(n, 5, -6.0f, 6.0f), dy = random_floats(n, 6);
  Tensor dx_ = on_gpu(x), ddy = on_gpu(dy), y = gpu_zeros(n), dx = gpu_zeros(n);
  ops->gelu_forward(n, dx_.f32(), y.f32());
  ops->gelu_backward(n, dx_.f32(), ddy.f32(), dx.f32());
  std::vector<double> wy(n), wdx(n);
  for (size_t i = 0; i < n; ++i) {
    wy[i] = ref::gelu(x[i]);
    wdx[i] = dy[i] * ref::gelu_grad(x[i]);
  }
  EXPECT_TRUE(close(host(y), wy, 1e-6, 1e-5));
  EXPECT_TRUE(close(host(dx), wdx, 1e-6, 1e-5));
}

TEST_F(CudaElementwise, DropoutMaskIsTheCpuCounterRngMask) {
  const size_t n = 10007;  // not a multiple of 4: the last Philox block is partial
  const float p = 0.3f;
  DropoutKey key{42, 5, 17};
  auto x = random_floats(n, 7, 0.5f, 1.5f);  // never 0, so zeros reveal the mask
  Tensor dx_ = on_gpu(x), y = gpu_zeros(n), g = gpu_zeros(n);
  ops->dropout_forward(n, p, key, dx_.f32(), y.f32());
  ops->dropout_backward(n, p, key, dx_.f32(), g.f32());
  auto hy = host(y);
  size_t kept = 0;
  float scale = 1.0f / (1.0f - p);
  for (size_t i = 0; i < n; ++i) {
    bool keep = ref::dropout_keep(key, p, i);
    ASSERT_EQ(hy[i] != 0.0f, keep) << "element " << i;
    if (keep) {
      EXPECT_FLOAT_EQ(hy[i], x[i] * scale);
    }
    kept += keep;
  }
  EXPECT_EQ(host(g), hy) << "backward applies the forward mask and scale";
  EXPECT_NEAR(double(kept) / n, 1.0 - p, 0.02);
  // Another minibatch draws another mask.
  Tensor y2 = gpu_zeros(n);
  ops->dropout_forward(n, p, DropoutKey{42, 5, 18}, dx_.f32(), y2.f32());
  EXPECT_NE(host(y2), hy);
}

TEST_F(CudaElementwise, BiasRowsAndColumnSums) {
  const int64_t rows = 300, cols = 77;
  auto x = random_floats(rows * cols, 8), b = random_floats(cols, 9);
  Tensor dx_ = on_gpu(x), db = on_gpu(b), acc = on_gpu(std::vector<float>(cols, 1.0f));
  ops->sum_rows_accum(rows, cols, dx_.f32(), acc.f32());
  std::vector<double> want(cols, 1.0);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) want[c] += x[r * cols + c];
  EXPECT_TRUE(close(host(acc), want, 1e-5, 1e-5));
  ops->add_bias_rows(rows, cols, db.f32(), dx_.f32());
  std::vector<float> wy(x);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) wy[r * cols + c] += b[c];
  EXPECT_EQ(host(dx_), wy);
}

// The two-stage column sums: shapes with one chunk, many chunks, a ragged
// last chunk and tile, and far more rows than columns (bias gradients).
TEST_F(CudaElementwise, ColumnSumsOfManyRowsAreCloseAndRepeatable) {
  const int64_t shapes[][2] = {{8192, 256}, {5000, 77}, {63, 1030}, {1, 5}, {100003, 3}, {4096, 3000}};
  for (const auto& sh : shapes) {
    const int64_t rows = sh[0], cols = sh[1];
    SCOPED_TRACE(::testing::Message() << rows << " x " << cols);
    auto x = random_floats(rows * cols, 31);
    Tensor dx_ = on_gpu(x), a = on_gpu(std::vector<float>(cols, 0.5f)), b = on_gpu(std::vector<float>(cols, 0.5f));
    ops->sum_rows_accum(rows, cols, dx_.f32(), a.f32());
    ops->sum_rows_accum(rows, cols, dx_.f32(), b.f32());
    std::vector<double> want(cols, 0.5);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) want[c] += x[r * cols + c];
    EXPECT_TRUE(close(host(a), want, 2e-3, 1e-4));
    EXPECT_EQ(host(a), host(b)) << "a fixed summation tree gives the same bits every run";
  }
}

// Gradient averaging divides (x / n, as the CPU does), not x * (1 / n).
TEST_F(CudaElementwise, DivideIsTheCpusDivisionBitForBit) {
  const size_t n = 4097;
  auto x = random_floats(n, 41, -1e3f, 1e3f);
  Tensor d = on_gpu(x), y = gpu_zeros(n);
  ops->divide(static_cast<int64_t>(n), 3.0f, d.f32(), y.f32());
  ops->divide(static_cast<int64_t>(n), 3.0f, d.f32(), d.f32());  // in place
  std::vector<float> want(n);
  cpu_device_ops().divide(static_cast<int64_t>(n), 3.0f, x.data(), want.data());
  EXPECT_EQ(host(y), want);
  EXPECT_EQ(host(d), want);
}

TEST_F(CudaElementwise, PermuteSplitsAttentionHeads) {
  // [B, T, 3, H, hd] -> [3, B, H, T, hd]
  const int64_t B = 2, T = 5, H = 3, hd = 4;
  int64_t shape[5] = {B, T, 3, H, hd};
  int perm[5] = {2, 0, 3, 1, 4};
  auto x = random_floats(B * T * 3 * H * hd, 10);
  Tensor dx_ = on_gpu(x), y = gpu_zeros(x.size());
  ops->permute(5, shape, perm, dx_.f32(), y.f32());
  std::vector<float> want(x.size());
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t)
      for (int64_t k = 0; k < 3; ++k)
        for (int64_t h = 0; h < H; ++h)
          for (int64_t d = 0; d < hd; ++d)
            want[(((k * B + b) * H + h) * T + t) * hd + d] = x[(((b * T + t) * 3 + k) * H + h) * hd + d];
  EXPECT_EQ(host(y), want);
}

}  // namespace pd::gputest

#endif  // PIPEDREAM_HAVE_CUDA

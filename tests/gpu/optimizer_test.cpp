// SGD and Adam/AdamW updates against the PyTorch formulas on the CPU.
// Tolerance: atol 1e-6 + rtol 1e-5 after three steps (a few float roundings).
#if defined(PIPEDREAM_HAVE_CUDA)  // the whole file needs the CUDA backend
#include <cmath>

#include "tests/gpu/gpu_test.h"

namespace pd::gputest {

using CudaOptimizer = GpuTest;

TEST_F(CudaOptimizer, SgdMomentumNesterovWeightDecay) {
  const size_t n = 2049;
  for (bool nesterov : {false, true}) {
    auto p = random_floats(n, 1), buf = std::vector<float>(n, 0.0f);
    Tensor dp = on_gpu(p), db = gpu_zeros(n);
    std::vector<double> wp(p.begin(), p.end()), wb(n, 0.0);
    const float lr = 0.1f, mom = 0.9f, wd = 0.01f;
    for (uint32_t step = 0; step < 3; ++step) {
      auto g = random_floats(n, 10 + step);
      Tensor dg = on_gpu(g);
      ops->sgd_step(n, lr, mom, wd, nesterov, dp.f32(), dg.f32(), db.f32());
      for (size_t i = 0; i < n; ++i) {
        double gi = g[i] + wd * wp[i];
        wb[i] = mom * wb[i] + gi;
        wp[i] -= lr * (nesterov ? gi + mom * wb[i] : wb[i]);
      }
    }
    EXPECT_TRUE(close(host(dp), wp, 1e-6, 1e-5)) << "nesterov " << nesterov;
    EXPECT_TRUE(close(host(db), wb, 1e-6, 1e-5));
  }
}

TEST_F(CudaOptimizer, PlainSgdNeedsNoBuffer) {
  auto p = random_floats(100, 2), g = random_floats(100, 3);
  Tensor dp = on_gpu(p), dg = on_gpu(g);
  ops->sgd_step(100, 0.5f, 0.0f, 0.0f, false, dp.f32(), dg.f32(), nullptr);
  std::vector<float> want(100);
  for (size_t i = 0; i < 100; ++i) want[i] = p[i] - 0.5f * g[i];
  EXPECT_TRUE(close(host(dp), want, 1e-7, 1e-6));
}

TEST_F(CudaOptimizer, AdamAndAdamW) {
  const size_t n = 1500;
  for (bool decoupled : {false, true}) {
    auto p = random_floats(n, 4);
    Tensor dp = on_gpu(p), dm = gpu_zeros(n), dv = gpu_zeros(n);
    std::vector<double> wp(p.begin(), p.end()), wm(n, 0.0), wv(n, 0.0);
    const float lr = 1e-2f, b1 = 0.9f, b2 = 0.999f, eps = 1e-8f, wd = 0.1f;
    for (int64_t t = 1; t <= 3; ++t) {
      auto g = random_floats(n, 20 + static_cast<uint32_t>(t));
      Tensor dg = on_gpu(g);
      ops->adam_step(n, lr, b1, b2, eps, wd, decoupled, t, dp.f32(), dg.f32(), dm.f32(), dv.f32());
      for (size_t i = 0; i < n; ++i) {
        double gi = g[i];
        if (decoupled)
          wp[i] *= 1 - double(lr) * wd;
        else
          gi += double(wd) * wp[i];
        wm[i] = b1 * wm[i] + (1 - double(b1)) * gi;
        wv[i] = b2 * wv[i] + (1 - double(b2)) * gi * gi;
        double mh = wm[i] / (1 - std::pow(double(b1), double(t))), vh = wv[i] / (1 - std::pow(double(b2), double(t)));
        wp[i] -= lr * mh / (std::sqrt(vh) + eps);
      }
    }
    EXPECT_TRUE(close(host(dp), wp, 1e-6, 1e-5)) << "decoupled " << decoupled;
    EXPECT_TRUE(close(host(dm), wm, 1e-6, 1e-5));
    EXPECT_TRUE(close(host(dv), wv, 1e-7, 1e-4));
  }
}

// The multi-tensor entries are the per-tensor updates in fewer launches:
// the same bits for 100 tensors of mixed sizes (more than one launch's
// worth, empty and one-element tensors among them).
TEST_F(CudaOptimizer, MultiTensorStepsEqualPerTensorStepsBitForBit) {
  std::vector<int64_t> sizes;
  for (int k = 0; k < 100; ++k) sizes.push_back(k % 10 == 0 ? 0 : k % 7 == 0 ? 1 : (k * 977) % 20000 + 3);
  sizes.push_back(300000);
  const size_t count = sizes.size();
  struct Set {
    std::vector<Tensor> p, g, a, b;
  };
  auto make = [&](uint32_t key) {
    Set s;
    for (size_t k = 0; k < count; ++k) {
      const size_t n = static_cast<size_t>(sizes[k]);
      s.p.push_back(on_gpu(random_floats(n, key + 4 * k)));
      s.g.push_back(on_gpu(random_floats(n, key + 4 * k + 1)));
      s.a.push_back(on_gpu(random_floats(n, key + 4 * k + 2, 0.0f, 0.1f)));
      s.b.push_back(on_gpu(random_floats(n, key + 4 * k + 3, 0.0f, 0.1f)));
    }
    return s;
  };
  auto ptrs = [](std::vector<Tensor>& v) {
    std::vector<float*> r;
    for (Tensor& t : v) r.push_back(t.f32());
    return r;
  };
  auto const_ptrs = [](std::vector<Tensor>& v) {
    std::vector<const float*> r;
    for (Tensor& t : v) r.push_back(t.f32());
    return r;
  };
  for (int rule = 0; rule < 4; ++rule) {
    // many: updated in place; moved: read from moved.p, written to fresh
    // tensors (a stage keeping its old weight version), moved.p untouched.
    Set one = make(1000), many = make(1000), moved = make(1000), original = make(1000);
    std::vector<Tensor> fresh;
    for (size_t k = 0; k < count; ++k) fresh.push_back(gpu_zeros(static_cast<size_t>(sizes[k])));
    std::vector<float*> p = ptrs(many.p), a = ptrs(many.a), b = ptrs(many.b), gm = ptrs(many.g);
    std::vector<const float*> g(gm.begin(), gm.end());
    std::vector<const float*> p_in(p.begin(), p.end());
    std::vector<const float*> moved_in = const_ptrs(moved.p), moved_g = const_ptrs(moved.g);
    std::vector<float*> moved_out = ptrs(fresh), moved_a = ptrs(moved.a), moved_b = ptrs(moved.b);
    for (size_t k = 0; k < count; ++k) {
      if (rule < 2)
        ops->sgd_step(sizes[k], 0.1f, 0.9f, 0.01f, rule == 1, one.p[k].f32(), one.g[k].f32(), one.a[k].f32());
      else
        ops->adam_step(sizes[k], 1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f, rule == 3, 5, one.p[k].f32(), one.g[k].f32(),
                       one.a[k].f32(), one.b[k].f32());
    }
    const auto n = static_cast<int64_t>(count);
    if (rule < 2) {
      ops->sgd_step_multi(n, sizes.data(), p_in.data(), p.data(), g.data(), a.data(), 0.1f, 0.9f, 0.01f, rule == 1);
      ops->sgd_step_multi(n, sizes.data(), moved_in.data(), moved_out.data(), moved_g.data(), moved_a.data(), 0.1f,
                          0.9f, 0.01f, rule == 1);
    } else {
      ops->adam_step_multi(n, sizes.data(), p_in.data(), p.data(), g.data(), a.data(), b.data(), 1e-3f, 0.9f, 0.999f,
                           1e-8f, 0.01f, rule == 3, 5);
      ops->adam_step_multi(n, sizes.data(), moved_in.data(), moved_out.data(), moved_g.data(), moved_a.data(),
                           moved_b.data(), 1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f, rule == 3, 5);
    }
    for (size_t k = 0; k < count; ++k) {
      if (sizes[k] == 0) continue;
      ASSERT_EQ(host(one.p[k]), host(many.p[k])) << "rule " << rule << " tensor " << k;
      ASSERT_EQ(host(one.a[k]), host(many.a[k])) << "rule " << rule << " tensor " << k;
      if (rule >= 2) ASSERT_EQ(host(one.b[k]), host(many.b[k])) << "rule " << rule << " tensor " << k;
      ASSERT_EQ(host(one.p[k]), host(fresh[k])) << "out of place, rule " << rule << " tensor " << k;
      ASSERT_EQ(host(one.a[k]), host(moved.a[k])) << "out of place, rule " << rule << " tensor " << k;
      ASSERT_EQ(host(original.p[k]), host(moved.p[k])) << "out of place changed its source, rule " << rule;
    }
  }
}

// Gradient clipping's sums of squares: the CPU's within double rounding
// (both sum in double, in different trees), the same bits on every call,
// over sizes that are below, at and across the kernel's chunk, and empty.
TEST_F(CudaOptimizer, SumSquaresMultiMatchesTheCpu) {
  const std::vector<int64_t> sizes{1, 255, 4096, 4097, 0, 3 * 4096 + 5, 1'000'003};
  std::vector<Tensor> on_device;
  std::vector<std::vector<float>> values;
  for (size_t k = 0; k < sizes.size(); ++k) {
    values.push_back(random_floats(static_cast<size_t>(sizes[k]), 40 + static_cast<uint32_t>(k)));
    on_device.push_back(sizes[k] > 0 ? on_gpu(values.back()) : gpu_zeros(1));
  }
  std::vector<const float*> dev, cpu;
  for (size_t k = 0; k < sizes.size(); ++k) {
    dev.push_back(on_device[k].f32());
    cpu.push_back(values[k].data());
  }
  const auto n = static_cast<int64_t>(sizes.size());
  std::vector<double> got(sizes.size(), -1.0), again(sizes.size(), -1.0), want(sizes.size(), -1.0);
  ops->sum_squares_multi(n, sizes.data(), dev.data(), got.data());
  ops->sum_squares_multi(n, sizes.data(), dev.data(), again.data());
  device_ops(Device::cpu()).sum_squares_multi(n, sizes.data(), cpu.data(), want.data());
  for (size_t k = 0; k < sizes.size(); ++k) {
    EXPECT_NEAR(got[k], want[k], 1e-12 * want[k]) << "tensor " << k << " of " << sizes[k];
    EXPECT_EQ(got[k], again[k]) << "tensor " << k << ": not deterministic";
  }
  EXPECT_EQ(got[4], 0.0);
}

}  // namespace pd::gputest

#endif  // PIPEDREAM_HAVE_CUDA

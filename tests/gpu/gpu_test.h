#pragma once
// Shared pieces of the GPU tests: a fixture that skips without a GPU, random
// inputs, host<->device transfers and a tolerance comparison.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "core/cuda/backend.h"
#include "core/device_ops.h"
#include "core/rng.h"
#include "core/tensor.h"

namespace pd::gputest {

// Every GPU test derives from this: skipped when cudaGetDeviceCount reports
// no device (or fails), otherwise the backend is initialised on cuda:0.
class GpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (cuda::visible_device_count() == 0) GTEST_SKIP() << "no GPU visible (cudaGetDeviceCount reports none)";
    cuda::initialize_backend(0);
    ops = &device_ops(Device::cuda(0));
  }
  const DeviceOps* ops = nullptr;
};

// Uniform in [lo, hi), from a counter-based stream keyed by `key`.
inline std::vector<float> random_floats(size_t n, uint32_t key, float lo = -1.0f, float hi = 1.0f) {
  CounterRng r(1234, key, 7);
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = lo + (hi - lo) * r.uniform(i);
  return v;
}

inline std::vector<int32_t> random_ints(size_t n, uint32_t key, int32_t bound) {
  CounterRng r(99, key, 3);
  std::vector<int32_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<int32_t>(r.bits(i) % static_cast<uint32_t>(bound));
  return v;
}

inline Tensor on_gpu(const std::vector<float>& v) {
  return Tensor::from_floats(v, {static_cast<int64_t>(v.size())}).to(Device::cuda(0));
}
inline Tensor on_gpu_ints(const std::vector<int32_t>& v) {
  return Tensor::from_ints(v, {static_cast<int64_t>(v.size())}).to(Device::cuda(0));
}
inline Tensor gpu_zeros(size_t n) { return Tensor::zeros({static_cast<int64_t>(n)}, DType::F32, Device::cuda(0)); }
inline std::vector<float> host(const Tensor& t) { return t.to_floats(); }

// |got - want| <= atol + rtol * |want| for every element, reporting the first
// few offenders with their index.
inline ::testing::AssertionResult close(const std::vector<float>& got, const std::vector<double>& want, double atol,
                                        double rtol) {
  if (got.size() != want.size())
    return ::testing::AssertionFailure() << "size " << got.size() << " != " << want.size();
  int bad = 0;
  auto fail = ::testing::AssertionFailure();
  for (size_t i = 0; i < got.size(); ++i) {
    double err = std::fabs(static_cast<double>(got[i]) - want[i]);
    if (!(err <= atol + rtol * std::fabs(want[i]))) {
      if (bad < 5) fail << "[" << i << "] got " << got[i] << " want " << want[i] << " (err " << err << ")\n";
      ++bad;
    }
  }
  if (bad) return fail << bad << " of " << got.size() << " elements outside atol " << atol << " rtol " << rtol;
  return ::testing::AssertionSuccess();
}

inline ::testing::AssertionResult close(const std::vector<float>& got, const std::vector<float>& want, double atol,
                                        double rtol) {
  return close(got, std::vector<double>(want.begin(), want.end()), atol, rtol);
}

}  // namespace pd::gputest

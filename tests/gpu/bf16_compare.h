#pragma once
// Comparisons of bf16 results shared by the GPU tests of the bf16 paths:
// inputs whose GEMM products are exact, rounding on the host, tolerances
// in bf16 units in the last place, and a relative L2 check for whole layers.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/precision.h"
#include "tests/gpu/gpu_test.h"

namespace pd::gputest {

// The transformer block's shapes the entries are tested at: rows x in -> out
// of gpt-mini (batch 8, context 128, width 256), the zoo gpt (batch 8,
// context 1024, width 768) and a ragged one.
struct BlockShape {
  int64_t rows, in, out;
};
inline constexpr BlockShape kBlockShapes[] = {{8 * 128, 256, 1024}, {8 * 1024, 768, 3072}, {37, 20, 83}};

// Multiples of 1/16 in [-0.5, 0.5]: bf16 values whose products are exact
// multiples of 1/256 and whose sums over <= 3072 terms stay exact in FP32.
inline std::vector<float> sixteenths(size_t n, uint32_t key) {
  std::vector<float> v = random_floats(n, key, -8.5f, 8.5f);
  for (float& x : v) x = std::round(x) / 16.0f;
  return v;
}

// v rounded to bf16 on the host (round_to_bf16).
inline std::vector<float> cpu_bf16(std::vector<float> v) {
  for (float& x : v) x = round_to_bf16(x);
  return v;
}

// One bf16 unit in the last place of |w| (w a bf16 value; 2^-133 at 0).
inline double bf16_ulp(double w) {
  if (w == 0) return std::ldexp(1.0, -133);
  int e = 0;
  std::frexp(std::fabs(w), &e);  // |w| in [2^(e-1), 2^e)
  return std::ldexp(1.0, e - 1 - 7);
}

// |got - want| <= ulps * bf16_ulp(scale_of[i]) + atol, scale_of defaulting to want.
inline ::testing::AssertionResult within_bf16_ulps(const std::vector<float>& got, const std::vector<float>& want,
                                                   double ulps, double atol,
                                                   const std::vector<float>* scale_of = nullptr) {
  if (got.size() != want.size()) return ::testing::AssertionFailure() << "size " << got.size() << " != " << want.size();
  int bad = 0;
  auto fail = ::testing::AssertionFailure();
  for (size_t i = 0; i < got.size(); ++i) {
    const double s = scale_of ? (*scale_of)[i] : want[i];
    const double err = std::fabs(static_cast<double>(got[i]) - want[i]);
    if (!(err <= ulps * bf16_ulp(s) + atol)) {
      if (bad < 5) fail << "[" << i << "] got " << got[i] << " want " << want[i] << "\n";
      ++bad;
    }
  }
  if (bad) return fail << bad << " of " << got.size() << " elements beyond " << ulps << " bf16 ulp + " << atol;
  return ::testing::AssertionSuccess();
}

// Relative L2 error and largest error relative to the largest reference value.
inline ::testing::AssertionResult close_l2(const std::vector<float>& got, const std::vector<float>& want,
                                           double l2_tol, double max_tol) {
  if (got.size() != want.size()) return ::testing::AssertionFailure() << "size mismatch";
  double err2 = 0, ref2 = 0, max_err = 0, max_ref = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double e = std::fabs(static_cast<double>(got[i]) - want[i]);
    if (!(e <= max_err)) max_err = std::isnan(e) ? INFINITY : e;
    err2 += e * e;
    ref2 += static_cast<double>(want[i]) * want[i];
    max_ref = std::max(max_ref, std::fabs(static_cast<double>(want[i])));
  }
  const double l2 = std::sqrt(err2 / std::max(ref2, 1e-30)), mx = max_err / std::max(max_ref, 1e-30);
  if (l2 <= l2_tol && mx <= max_tol) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "relative L2 " << l2 << " (tol " << l2_tol << "), largest " << mx << " (tol "
                                       << max_tol << ")";
}

}  // namespace pd::gputest

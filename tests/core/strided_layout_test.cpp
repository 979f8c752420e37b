// The CPU table's layout entries (strided_copy, index_select_*) against
// plain index loops: negative and zero strides, offsets, size-1 and empty
// dimensions, rank 0 and kMaxStridedRank, and more runs than one thread
// takes (the copy splits across threads above a grain).
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "core/device_ops.h"
#include "core/error.h"
#include "core/rng.h"

namespace pd {
namespace {

std::vector<float> noise(size_t n, uint32_t key) {
  CounterRng r(7, key, 1);
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = r.uniform(i) - 0.5f;
  return v;
}

// y at ys = x at xs over shape, one element at a time.
void reference_copy(const Shape& shape, const float* x, const std::vector<int64_t>& xs, float* y,
                    const std::vector<int64_t>& ys) {
  const int64_t n = shape_numel(shape);
  for (int64_t i = 0; i < n; ++i) {
    int64_t rest = i, xo = 0, yo = 0;
    for (size_t d = shape.size(); d-- > 0;) {
      const int64_t c = rest % shape[d];
      rest /= shape[d];
      xo += c * xs[d];
      yo += c * ys[d];
    }
    y[yo] = x[xo];
  }
}

struct Case {
  Shape shape;
  std::vector<int64_t> xs, ys;
  int64_t x_offset, y_offset, x_size, y_size;
};

TEST(StridedCopy, MatchesAnIndexLoopOnEveryPattern) {
  const DeviceOps& o = cpu_device_ops();
  ASSERT_TRUE(o.strided_copy && o.index_select_forward && o.index_select_backward_accum);
  const std::vector<Case> cases = {
      {{2, 4, 5, 3}, {60, 5, 1, 20}, {60, 15, 3, 1}, 0, 0, 120, 120},   // transpose
      {{3, 3}, {20, -3}, {3, 1}, 19, 0, 60, 9},                         // slice, negative step
      {{4, 2, 3}, {6, 3, 1}, {21, 3, 1}, 0, 9, 24, 84},                 // concat slab
      {{3, 4, 5}, {54, 9, 1}, {20, 5, 1}, 11, 0, 162, 60},              // pad backward
      {{4, 5, 6}, {0, 1, 0}, {30, 6, 1}, 0, 0, 5, 120},                 // expand
      {{}, {}, {}, 3, 2, 5, 4},                                         // rank 0
      {{2, 1, 3, 2, 1, 2, 3, 2}, {1, 0, 2, 6, 0, 12, 24, 72}, {72, 72, 24, 12, 12, 6, 2, 1}, 0, 0, 144, 144},  // rank 8
      {{300, 40, 7}, {7, 2100, 1}, {280, 7, 1}, 0, 0, 84000, 84000},    // many runs (threads)
  };
  uint32_t key = 1;
  for (const Case& c : cases) {
    SCOPED_TRACE(shape_str(c.shape));
    const std::vector<float> x = noise(size_t(c.x_size), key++);
    std::vector<float> want = noise(size_t(c.y_size), key++), got = want;
    reference_copy(c.shape, x.data() + c.x_offset, c.xs, want.data() + c.y_offset, c.ys);
    cpu_device_ops().strided_copy(int(c.shape.size()), c.shape.data(), x.data() + c.x_offset, c.xs.data(),
                                  got.data() + c.y_offset, c.ys.data());
    EXPECT_EQ(got, want);
  }
}

TEST(StridedCopy, AnEmptyShapeWritesNothingAndRankAboveTheLimitIsRefused) {
  std::vector<float> x(4, 1.0f), y(4, 2.0f);
  const Shape empty{2, 0, 2};
  const std::vector<int64_t> st{2, 2, 1};
  cpu_device_ops().strided_copy(3, empty.data(), x.data(), st.data(), y.data(), st.data());
  EXPECT_EQ(y, std::vector<float>(4, 2.0f));
  const Shape nine(9, 1);
  const std::vector<int64_t> ones(9, 1);
  EXPECT_THROW(cpu_device_ops().strided_copy(9, nine.data(), x.data(), ones.data(), y.data(), ones.data()),
               std::logic_error);
}

TEST(IndexSelect, SelectsCountsFromTheEndAndAddsGradientsInIndexOrder) {
  // x [outer 2, len 3, inner 2]; indices 2, -1 (= 2), 0.
  const std::vector<float> x{0, 1, 2, 3, 4, 5, 10, 11, 12, 13, 14, 15};
  const std::vector<int64_t> idx{2, -1, 0};
  std::vector<float> y(12);
  ASSERT_TRUE(cpu_device_ops().index_select_forward(2, 3, 2, 3, DType::I64, idx.data(), x.data(), y.data()));
  EXPECT_EQ(y, (std::vector<float>{4, 5, 4, 5, 0, 1, 14, 15, 14, 15, 10, 11}));
  const std::vector<float> dy{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
  std::vector<float> dx(12, 0.5f);
  cpu_device_ops().index_select_backward_accum(2, 3, 2, 3, DType::I64, idx.data(), dy.data(), dx.data());
  EXPECT_EQ(dx, (std::vector<float>{5.5f, 6.5f, 0.5f, 0.5f, 4.5f, 6.5f, 11.5f, 12.5f, 0.5f, 0.5f, 16.5f, 18.5f}));
  const std::vector<int32_t> bad{0, 3};
  EXPECT_FALSE(cpu_device_ops().index_select_forward(1, 3, 2, 2, DType::I32, bad.data(), x.data(), y.data()));
  EXPECT_THROW(cpu_device_ops().index_select_backward_accum(1, 3, 2, 2, DType::I32, bad.data(), dy.data(), dx.data()),
               RuntimeFailure);
}

}  // namespace
}  // namespace pd

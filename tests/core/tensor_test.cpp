#include <gtest/gtest.h>

#include "core/error.h"
#include "core/rng.h"
#include "core/tensor.h"

namespace pd {

TEST(Tensor, ReshapeSharesStorageAndSliceRowsOffsets) {
  Tensor t = Tensor::from_floats({0, 1, 2, 3, 4, 5}, {3, 2});
  Tensor r = t.reshape({2, 3});
  EXPECT_TRUE(r.same_storage(t));
  Tensor s = t.slice_rows(1, 3);
  ASSERT_EQ(s.shape(), (Shape{2, 2}));
  EXPECT_EQ(s.f32()[0], 2.0f);
  EXPECT_THROW(t.reshape({4, 2}), std::logic_error);
}

TEST(Tensor, CloneIsDeepAndDtypeIsChecked) {
  Tensor t = Tensor::from_ints({1, 2, 3}, {3});
  Tensor c = t.clone();
  c.data<int32_t>()[0] = 9;
  EXPECT_EQ(t.data<int32_t>()[0], 1);
  EXPECT_THROW(t.f32(), std::logic_error);
}

TEST(Device, ParseRejectsJunk) {
  EXPECT_EQ(Device::parse("cuda:3"), Device::cuda(3));
  EXPECT_EQ(Device::parse("cpu"), Device::cpu());
  EXPECT_THROW(Device::parse("gpu"), UserError);
  EXPECT_THROW(Device::parse("cuda:x"), UserError);
}

TEST(CounterRng, IsAPureFunctionOfKeyAndIndex) {
  CounterRng a(42, 3, 7), b(42, 3, 7), c(42, 4, 7);
  EXPECT_EQ(a.bits(1000), b.bits(1000));
  EXPECT_NE(a.bits(1000), c.bits(1000));
  double mean = 0;
  for (int i = 0; i < 100000; ++i) mean += a.uniform(i);
  EXPECT_NEAR(mean / 100000, 0.5, 0.01);
  double m2 = 0;
  for (int i = 0; i < 100000; ++i) m2 += a.normal(i) * a.normal(i);
  EXPECT_NEAR(m2 / 100000, 1.0, 0.02);
}

}  // namespace pd

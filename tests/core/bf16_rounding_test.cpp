// --precision bf16's rounding: round_to_bf16 and the CPU's round_bf16
// entry (nearest, ties to even, NaN kept) on the cases that break naive
// rounding, and the helpers at the layers' rounding points, which must do
// nothing under FP32.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "core/bf16_rounding.h"
#include "core/device_ops.h"
#include "core/precision.h"

namespace pd {
namespace {

float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}
uint32_t bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

struct Case {
  const char* what;
  uint32_t in, want;
};

const std::vector<Case>& cases() {
  static const std::vector<Case> c = {
      {"exact 1.0", 0x3F800000u, 0x3F800000u},
      {"tie to even, down (1 + 2^-8)", 0x3F808000u, 0x3F800000u},
      {"tie to even, up (odd lower neighbour)", 0x3F818000u, 0x3F820000u},
      {"just above the tie rounds up", 0x3F808001u, 0x3F810000u},
      {"just below the tie rounds down", 0x3F807FFFu, 0x3F800000u},
      {"negative tie to even, down", 0xBF808000u, 0xBF800000u},
      {"negative tie to even, up", 0xBF818000u, 0xBF820000u},
      {"carry into the exponent (just below 2)", 0x3FFFFFFFu, 0x40000000u},
      {"tie with odd mantissa carries into the exponent", 0x3FFF8000u, 0x40000000u},
      {"float max overflows to +inf", 0x7F7FFFFFu, 0x7F800000u},
      {"-float max overflows to -inf", 0xFF7FFFFFu, 0xFF800000u},
      {"bf16 max finite stays", 0x7F7F0000u, 0x7F7F0000u},
      {"+inf", 0x7F800000u, 0x7F800000u},
      {"-inf", 0xFF800000u, 0xFF800000u},
      {"+0", 0x00000000u, 0x00000000u},
      {"-0 keeps its sign", 0x80000000u, 0x80000000u},
      {"smallest subnormal rounds to 0", 0x00000001u, 0x00000000u},
      {"subnormal tie to even, down", 0x00008000u, 0x00000000u},
      {"subnormal tie to even, up", 0x00018000u, 0x00020000u},
      {"negative subnormal to -0", 0x80000001u, 0x80000000u},
      {"largest subnormal carries to the smallest normal", 0x007FFFFFu, 0x00800000u},
  };
  return c;
}

TEST(Bf16Rounding, NearestTiesToEvenOnEveryEdgeCase) {
  for (const Case& c : cases()) {
    EXPECT_EQ(bits_of(round_to_bf16(from_bits(c.in))), c.want) << c.what;
    float y = 0;
    const float x = from_bits(c.in);
    device_ops(Device::cpu()).round_bf16(1, &x, &y);
    EXPECT_EQ(bits_of(y), c.want) << c.what << " (CPU round_bf16)";
  }
}

TEST(Bf16Rounding, NanStaysNan) {
  // 0x7F800001 would become +inf under a rounding that ignores NaN (the
  // carry clears the low mantissa bits); 0x7FFFFFFF would wrap to -0.
  for (uint32_t nan : {0x7FC00000u, 0x7F800001u, 0x7FFFFFFFu, 0xFFC00001u, 0xFF800001u}) {
    EXPECT_TRUE(std::isnan(round_to_bf16(from_bits(nan)))) << std::hex << nan;
    float y = 0;
    const float x = from_bits(nan);
    device_ops(Device::cpu()).round_bf16(1, &x, &y);
    EXPECT_TRUE(std::isnan(y)) << std::hex << nan;
  }
}

TEST(Bf16Rounding, ResultsAreBf16ValuesAndIdempotent) {
  for (uint32_t u = 0x3E000000u; u < 0x3E000000u + (1u << 20); u += 97) {
    const float r = round_to_bf16(from_bits(u));
    EXPECT_EQ(bits_of(r) & 0xFFFFu, 0u);
    EXPECT_EQ(bits_of(round_to_bf16(r)), bits_of(r));
  }
}

TEST(Bf16Rounding, HelpersDoNothingUnderFp32) {
  Tensor t = Tensor::from_floats({1.0f + 1.0f / 1024, -3.14159f, 1e-30f}, {3});
  const std::vector<float> before = t.to_floats();
  round_in_place_if_bf16(Precision::FP32, t);
  EXPECT_EQ(t.to_floats(), before);
  const Tensor same = rounded_copy_if_bf16(Precision::FP32, t);
  EXPECT_EQ(same.raw(), t.raw());  // no copy, no rounding work
  std::vector<Tensor> storage;
  const std::vector<Tensor> params{t};
  EXPECT_EQ(operand_params(Precision::FP32, params, storage).data(), params.data());
  EXPECT_TRUE(storage.empty());
}

TEST(Bf16Rounding, HelpersRoundUnderBf16WithoutTouchingTheSource) {
  Tensor master = Tensor::from_floats({1.0f + 1.0f / 1024, -3.14159f, 1e-30f}, {3});
  const std::vector<float> before = master.to_floats();
  std::vector<Tensor> storage;
  const std::vector<Tensor> params{master};
  std::span<const Tensor> used = operand_params(Precision::BF16, params, storage);
  ASSERT_EQ(used.size(), 1u);
  EXPECT_EQ(master.to_floats(), before);  // the master weights are never rounded
  const std::vector<float> got = used[0].to_floats();
  for (size_t i = 0; i < got.size(); ++i) EXPECT_EQ(bits_of(got[i]), bits_of(round_to_bf16(before[i])));
  Tensor copy = rounded_copy_if_bf16(Precision::BF16, master);
  EXPECT_EQ(master.to_floats(), before);
  EXPECT_EQ(copy.to_floats(), got);
  round_in_place_if_bf16(Precision::BF16, master);
  EXPECT_EQ(master.to_floats(), got);
  Tensor tokens = Tensor::from_ints({1, 2, 3}, {3});  // integer tensors are not rounded
  round_in_place_if_bf16(Precision::BF16, tokens);
  EXPECT_EQ(tokens.data<int32_t>()[2], 3);
}

}  // namespace
}  // namespace pd

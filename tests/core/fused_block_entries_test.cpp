// The CPU's fused transformer-block entries give the bits of the unfused
// sequences they name (device_ops.h), in FP32 and BF16: what keeps CPU
// training results unchanged by the fusion.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "core/device_ops.h"
#include "tests/core/gradcheck.h"

namespace pd {
namespace {

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

std::vector<float> values(const Shape& s, uint32_t key, float scale = 1.0f) {
  Tensor t = testing::random_tensor(s, key, scale);
  return std::vector<float>(t.f32(), t.f32() + t.numel());
}

class CpuFusedEntries : public ::testing::TestWithParam<Precision> {
 protected:
  const DeviceOps& o = cpu_device_ops();
  Precision p = GetParam();
  void round_if_bf16(std::vector<float>& v) const {
    if (p == Precision::BF16) o.round_bf16(static_cast<int64_t>(v.size()), v.data(), v.data());
  }
};

TEST_P(CpuFusedEntries, LinearGeluIsLinearRoundGeluRound) {
  const int64_t rows = 37, in = 20, out = 83;  // ragged: not multiples of the kernels' blocks
  const auto x = values({rows, in}, 1), w = values({out, in}, 2), b = values({out}, 3);
  const size_t n = static_cast<size_t>(rows * out);
  std::vector<float> pre(n), y(n), want_pre(n), want_y(n);
  o.linear_forward(Precision::FP32, rows, in, out, x.data(), w.data(), b.data(), want_pre.data());
  round_if_bf16(want_pre);
  o.gelu_forward(static_cast<int64_t>(n), want_pre.data(), want_y.data());
  round_if_bf16(want_y);
  o.linear_gelu_forward(p, rows, in, out, x.data(), w.data(), b.data(), pre.data(), y.data());
  EXPECT_TRUE(same_bits(pre, want_pre));
  EXPECT_TRUE(same_bits(y, want_y));
}

TEST_P(CpuFusedEntries, GeluBackwardRoundedIsGeluBackwardRound) {
  const int64_t n = 4099;
  const auto pre = values({n}, 4, 3.0f), dy = values({n}, 5);
  std::vector<float> dx(n), want(n);
  o.gelu_backward(n, pre.data(), dy.data(), want.data());
  round_if_bf16(want);
  o.gelu_backward_rounded(p, n, pre.data(), dy.data(), dx.data());
  EXPECT_TRUE(same_bits(dx, want));
}

TEST_P(CpuFusedEntries, AddLayerNormIsAddLayerNormRound) {
  const int64_t rows = 13, dim = 83;
  const size_t n = static_cast<size_t>(rows * dim);
  const auto a = values({rows, dim}, 6, 2.0f), r = values({rows, dim}, 7), g = values({dim}, 8), be = values({dim}, 9);
  for (bool with_residual : {true, false}) {
    SCOPED_TRACE(with_residual ? "with residual" : "without residual");
    std::vector<float> s(n), y(n), mean(rows), rstd(rows), want_s(n), want_y(n), want_mean(rows), want_rstd(rows);
    const float* x = a.data();
    if (with_residual) {
      o.add(static_cast<int64_t>(n), a.data(), r.data(), want_s.data());
      x = want_s.data();
    }
    o.layernorm_forward(rows, dim, x, g.data(), be.data(), 1e-5f, want_y.data(), want_mean.data(), want_rstd.data());
    round_if_bf16(want_y);
    o.add_layernorm_forward(p, rows, dim, a.data(), with_residual ? r.data() : nullptr, g.data(), be.data(), 1e-5f,
                            with_residual ? s.data() : nullptr, y.data(), mean.data(), rstd.data());
    if (with_residual) EXPECT_TRUE(same_bits(s, want_s));
    EXPECT_TRUE(same_bits(y, want_y));
    EXPECT_TRUE(same_bits(mean, want_mean));
    EXPECT_TRUE(same_bits(rstd, want_rstd));
  }
}

TEST_P(CpuFusedEntries, LayerNormBackwardInputAddIsBackwardRoundAdd) {
  const int64_t rows = 13, dim = 83;
  const size_t n = static_cast<size_t>(rows * dim);
  const auto x = values({rows, dim}, 10, 2.0f), dy = values({rows, dim}, 11), dres = values({rows, dim}, 12),
             g = values({dim}, 13), be = values({dim}, 14);
  std::vector<float> y(n), mean(rows), rstd(rows), lnb(n), want(n), dx(n), bare(n);
  o.layernorm_forward(rows, dim, x.data(), g.data(), be.data(), 1e-5f, y.data(), mean.data(), rstd.data());
  o.layernorm_backward_input(rows, dim, x.data(), dy.data(), g.data(), mean.data(), rstd.data(), lnb.data());
  round_if_bf16(lnb);
  o.add(static_cast<int64_t>(n), dres.data(), lnb.data(), want.data());
  o.layernorm_backward_input_add(p, rows, dim, x.data(), dy.data(), g.data(), mean.data(), rstd.data(), dres.data(),
                                 dx.data());
  EXPECT_TRUE(same_bits(dx, want));
  o.layernorm_backward_input_add(p, rows, dim, x.data(), dy.data(), g.data(), mean.data(), rstd.data(), nullptr,
                                 bare.data());
  EXPECT_TRUE(same_bits(bare, lnb));
  std::vector<float> in_place = dres;  // dx aliasing dres
  o.layernorm_backward_input_add(p, rows, dim, x.data(), dy.data(), g.data(), mean.data(), rstd.data(),
                                 in_place.data(), in_place.data());
  EXPECT_TRUE(same_bits(in_place, want));
}

INSTANTIATE_TEST_SUITE_P(Precisions, CpuFusedEntries, ::testing::Values(Precision::FP32, Precision::BF16),
                         [](const ::testing::TestParamInfo<Precision>& i) {
                           return std::string(i.param == Precision::BF16 ? "Bf16" : "Fp32");
                         });

}  // namespace
}  // namespace pd

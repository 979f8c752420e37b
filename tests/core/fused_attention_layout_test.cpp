// The CPU-checkable half of fused attention: the strided views cuDNN's SDPA
// graphs read from the layers' layouts (core/cuda/fused_attention_layout.h),
// the plan-cache key, which shapes are handed to cuDNN, and that a backend
// without fused entries (the CPU) keeps the attention layer on its probs path
// under --precision bf16.
#include <gtest/gtest.h>

#include <set>
#include <vector>

#include "core/cuda/fused_attention_layout.h"
#include "core/device_ops.h"
#include "core/layers.h"
#include "core/rng.h"

namespace pd {
namespace {

using cuda::AttentionShape;
using cuda::View4;

int64_t at(const View4& v, int64_t b, int64_t h, int64_t s, int64_t d) {
  return v.offset + b * v.stride[0] + h * v.stride[1] + s * v.stride[2] + d * v.stride[3];
}

const AttentionShape kShape{2, 5, 3, 8};  // B, T, H, hd

TEST(FusedAttentionLayout, QkvViewsAddressTheirPartOfThePackedLayout) {
  const AttentionShape& s = kShape;
  std::set<int64_t> seen;
  for (int part = 0; part < 3; ++part) {
    const View4 v = cuda::qkv_part_view(s, part);
    EXPECT_EQ(v.dim, (std::array<int64_t, 4>{s.batch, s.heads, s.T, s.head_dim}));
    for (int64_t b = 0; b < s.batch; ++b)
      for (int64_t h = 0; h < s.heads; ++h)
        for (int64_t t = 0; t < s.T; ++t)
          for (int64_t d = 0; d < s.head_dim; ++d) {
            // qkv [B, T, 3, H, hd]
            const int64_t want = (((b * s.T + t) * 3 + part) * s.heads + h) * s.head_dim + d;
            ASSERT_EQ(at(v, b, h, t, d), want) << "part " << part;
            seen.insert(want);
          }
  }
  // The three views tile the buffer: a dqkv written through them has every element overwritten.
  EXPECT_EQ(static_cast<int64_t>(seen.size()), s.batch * s.T * 3 * s.heads * s.head_dim);
}

TEST(FusedAttentionLayout, OutputAndStatsViewsMatchTheLayersLayouts) {
  const AttentionShape& s = kShape;
  const View4 o = cuda::output_view(s), st = cuda::row_stats_view(s);
  for (int64_t b = 0; b < s.batch; ++b)
    for (int64_t h = 0; h < s.heads; ++h)
      for (int64_t t = 0; t < s.T; ++t) {
        EXPECT_EQ(at(st, b, h, t, 0), (b * s.heads + h) * s.T + t);  // stats [B, H, T]
        for (int64_t d = 0; d < s.head_dim; ++d)
          EXPECT_EQ(at(o, b, h, t, d), ((b * s.T + t) * s.heads + h) * s.head_dim + d);  // att [B, T, H, hd]
      }
  const View4 dense = cuda::dense_heads_view(s);
  EXPECT_EQ(at(dense, 1, 2, 4, 7), s.batch * s.heads * s.T * s.head_dim - 1);
}

TEST(FusedAttentionLayout, TransposedViewSwapsTheLastTwoDimensions) {
  const View4 k = cuda::qkv_part_view(kShape, 1);
  const View4 kt = cuda::transposed(k);
  EXPECT_EQ(kt.dim[2], kShape.head_dim);
  EXPECT_EQ(kt.dim[3], kShape.T);
  EXPECT_EQ(kt.offset, k.offset);
  for (int64_t t = 0; t < kShape.T; ++t)
    for (int64_t d = 0; d < kShape.head_dim; ++d) EXPECT_EQ(at(kt, 1, 2, d, t), at(k, 1, 2, t, d));
  const View4 pt = cuda::transposed(cuda::scores_view(kShape));
  EXPECT_EQ(pt.stride, (std::array<int64_t, 4>{3 * 25, 25, 1, 5}));
}

TEST(FusedAttentionLayout, ShapeRulesNameWhatIsWrong) {
  EXPECT_EQ(cuda::fused_attention_shape_problem({8, 128, 4, 64}), "");    // gpt-mini
  EXPECT_EQ(cuda::fused_attention_shape_problem({8, 1024, 12, 64}), "");  // zoo gpt
  EXPECT_EQ(cuda::fused_attention_shape_problem({1, 1, 1, 128}), "");
  EXPECT_NE(cuda::fused_attention_shape_problem({8, 128, 4, 12}).find("multiple of 8"), std::string::npos);
  EXPECT_NE(cuda::fused_attention_shape_problem({8, 128, 4, 256}).find("exceeds 128"), std::string::npos);
  EXPECT_EQ(cuda::fused_attention_shape_problem({0, 128, 4, 64}), "empty shape");
}

TEST(FusedAttentionLayout, PlanKeySeparatesShapesPassesAndDeterministicBackward) {
  using cuda::FusedPass;
  const AttentionShape s{8, 128, 4, 64};
  // The forward graph is the same under --deterministic: one plan.
  EXPECT_EQ(cuda::fused_plan_key(s, FusedPass::Forward, true), cuda::fused_plan_key(s, FusedPass::Forward, false));
  EXPECT_FALSE(cuda::fused_plan_key(s, FusedPass::Backward, true) ==
               cuda::fused_plan_key(s, FusedPass::Backward, false));
  EXPECT_FALSE(cuda::fused_plan_key(s, FusedPass::Forward, false) ==
               cuda::fused_plan_key(s, FusedPass::Backward, false));
  std::set<cuda::FusedPlanKey> keys;
  for (int64_t b : {8, 64})
    for (FusedPass p : {FusedPass::Forward, FusedPass::Backward})
      for (bool det : {false, true}) keys.insert(cuda::fused_plan_key({b, 128, 4, 64}, p, det));
  EXPECT_EQ(keys.size(), 6u);  // 2 batches x (1 forward + 2 backward)
}

TEST(FusedAttentionLayout, CpuHasNoFusedEntriesAndTheLayerKeepsProbsUnderBf16) {
  const DeviceOps& cpu = cpu_device_ops();
  EXPECT_EQ(cpu.fused_attention_supported, nullptr);
  EXPECT_EQ(cpu.fused_attention_forward, nullptr);
  EXPECT_EQ(cpu.fused_attention_backward, nullptr);

  const int64_t B = 2, T = 8, dim = 16, heads = 2;
  LayerPtr attn = make_causal_self_attention(dim, heads);
  std::vector<Tensor> params = allocate_params(*attn);
  attn->init(params, {}, CounterRng(3, 0, 0));
  std::vector<float> xs(static_cast<size_t>(B * T * dim));
  CounterRng r(7, 1, 0);
  for (size_t i = 0; i < xs.size(); ++i) xs[i] = r.uniform(i) - 0.5f;
  Tensor x = Tensor::from_floats(xs, {B, T, dim});
  StepInfo step;
  step.precision = Precision::BF16;
  LayerContext ctx;
  attn->forward({params, {}, step}, x, ctx);
  ASSERT_EQ(ctx.saved.size(), 4u);
  EXPECT_EQ(ctx.saved[2].shape(), (Shape{B, heads, T, T}));  // probs, not fused stats
}

}  // namespace
}  // namespace pd

#include <gtest/gtest.h>

#include "core/cpu/attention_kernels.h"
#include "core/cpu/gemm.h"
#include "core/error.h"
#include "core/layers.h"
#include "tests/core/sequence_reference.h"

namespace pd {
namespace {

// Naive causal attention forward and backward in double, from qkv.
struct AttentionRef {
  std::vector<double> out, dqkv;
};
AttentionRef attention_ref(const cpu::AttentionShape& s, const std::vector<float>& qkv,
                           const std::vector<float>& dout) {
  const int64_t B = s.batch, T = s.seq, H = s.heads, hd = s.head_dim, D = s.dim();
  AttentionRef r{std::vector<double>(B * T * D, 0.0), std::vector<double>(B * T * 3 * D, 0.0)};
  const double scale = 1.0 / std::sqrt(double(hd));
  auto at = [&](int64_t b, int64_t t, int64_t part, int64_t h, int64_t c) {
    return ((b * T + t) * 3 + part) * D + h * hd + c;  // index into qkv / dqkv
  };
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h) {
      std::vector<double> P(T * T, 0.0);
      for (int64_t t = 0; t < T; ++t) {
        double mx = -1e300;
        std::vector<double> sc(t + 1);
        for (int64_t j = 0; j <= t; ++j) {
          double d = 0;
          for (int64_t c = 0; c < hd; ++c) d += double(qkv[at(b, t, 0, h, c)]) * qkv[at(b, j, 1, h, c)];
          sc[j] = d * scale;
          mx = std::max(mx, sc[j]);
        }
        double sum = 0;
        for (int64_t j = 0; j <= t; ++j) sum += std::exp(sc[j] - mx);
        for (int64_t j = 0; j <= t; ++j) P[t * T + j] = std::exp(sc[j] - mx) / sum;
        for (int64_t c = 0; c < hd; ++c) {
          double o = 0;
          for (int64_t j = 0; j <= t; ++j) o += P[t * T + j] * qkv[at(b, j, 2, h, c)];
          r.out[(b * T + t) * D + h * hd + c] = o;
        }
      }
      for (int64_t t = 0; t < T; ++t) {
        std::vector<double> dP(t + 1);
        double dot = 0;
        for (int64_t j = 0; j <= t; ++j) {
          double g = 0;
          for (int64_t c = 0; c < hd; ++c) {
            double dO = dout[(b * T + t) * D + h * hd + c];
            g += dO * qkv[at(b, j, 2, h, c)];
            r.dqkv[at(b, j, 2, h, c)] += P[t * T + j] * dO;
          }
          dP[j] = g;
          dot += P[t * T + j] * g;
        }
        for (int64_t j = 0; j <= t; ++j) {
          double dS = P[t * T + j] * (dP[j] - dot) * scale;
          for (int64_t c = 0; c < hd; ++c) {
            r.dqkv[at(b, t, 0, h, c)] += dS * qkv[at(b, j, 1, h, c)];
            r.dqkv[at(b, j, 1, h, c)] += dS * qkv[at(b, t, 0, h, c)];
          }
        }
      }
    }
  return r;
}

// Shapes cover one row block per head, several blocks (32 rows), blocks
// with a tail (16 rows of 100), and whole heads run serially (T * hd too
// large for single-threaded row blocks).
class AttentionKernels : public ::testing::TestWithParam<cpu::AttentionShape> {};
INSTANTIATE_TEST_SUITE_P(Shapes, AttentionKernels,
                         ::testing::Values(cpu::AttentionShape{3, 11, 3, 5}, cpu::AttentionShape{1, 128, 2, 64},
                                           cpu::AttentionShape{2, 100, 1, 160}, cpu::AttentionShape{1, 300, 1, 64}));

TEST_P(AttentionKernels, MatchNaiveLoops) {
  const cpu::AttentionShape s = GetParam();
  const int64_t n_qkv = s.batch * s.seq * 3 * s.dim(), n_out = s.batch * s.seq * s.dim();
  auto qkv = testing::random_vec(n_qkv, 1, 2.0f), dout = testing::random_vec(n_out, 2);
  std::vector<float> probs(s.batch * s.heads * s.seq * s.seq), out(n_out), dqkv(n_qkv);
  cpu::attention_forward(s, qkv.data(), probs.data(), out.data());
  cpu::attention_backward(s, qkv.data(), probs.data(), dout.data(), dqkv.data());
  AttentionRef r = attention_ref(s, qkv, dout);
  EXPECT_LT(testing::rel_err(out.data(), r.out), 1e-5);
  EXPECT_LT(testing::rel_err(dqkv.data(), r.dqkv), 1e-5);
}

TEST(AttentionSoftmax, IsStableForLargeScores) {
  std::vector<float> s{1000.0f, 0, 0, 2000.0f, 1999.0f, 0, -3000.0f, -3000.0f, -3000.0f};
  cpu::causal_softmax_rows(s.data(), 3);
  EXPECT_FLOAT_EQ(s[0], 1.0f);
  EXPECT_EQ(s[1], 0.0f);
  EXPECT_NEAR(s[3], 1.0 / (1.0 + std::exp(-1.0)), 1e-6);
  EXPECT_NEAR(s[6], 1.0 / 3, 1e-6);
  for (float v : s) EXPECT_TRUE(std::isfinite(v));
}

TEST(Attention, ParamsShapesAndValidation) {
  LayerPtr a = make_causal_self_attention(8, 2);
  auto specs = a->param_specs();
  ASSERT_EQ(specs.size(), 4u);
  EXPECT_EQ(specs[0].name, "qkv.weight");
  EXPECT_EQ(specs[0].shape, (Shape{24, 8}));
  EXPECT_EQ(specs[1].name, "qkv.bias");
  EXPECT_EQ(specs[2].name, "proj.weight");
  EXPECT_EQ(specs[3].name, "proj.bias");
  EXPECT_EQ(a->output_shape({5, 8}), (Shape{5, 8}));
  EXPECT_THROW(a->output_shape({5, 9}), UserError);
  EXPECT_THROW(make_causal_self_attention(10, 3), UserError);
}

TEST(Attention, BackwardMatchesFiniteDifferences) {
  testing::OneComputeThread one;
  LayerPtr a = make_causal_self_attention(8, 2);
  // Larger weights than the 0.02 init so the softmax is far from uniform.
  std::vector<Tensor> p{testing::random_tensor({24, 8}, 30, 0.5f), testing::random_tensor({24}, 31, 0.2f),
                        testing::random_tensor({8, 8}, 32, 0.5f), testing::random_tensor({8}, 33, 0.2f)};
  testing::gradcheck(*a, testing::random_tensor({2, 5, 8}, 34), {}, p);
}

TEST(Attention, OutputAtTDoesNotDependOnLaterInputs) {
  LayerPtr a = make_causal_self_attention(16, 4);
  std::vector<Tensor> p{testing::random_tensor({48, 16}, 40, 0.5f), testing::random_tensor({48}, 41),
                        testing::random_tensor({16, 16}, 42, 0.5f), testing::random_tensor({16}, 43)};
  const int64_t T = 9, t0 = 4;
  Tensor x = testing::random_tensor({2, T, 16}, 44);
  Tensor x2 = x.clone();
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t t = t0 + 1; t < T; ++t)
      for (int64_t c = 0; c < 16; ++c) x2.f32()[(b * T + t) * 16 + c] += 3.0f;
  LayerContext c1, c2;
  Tensor y1 = a->forward({p, {}, {}}, x, c1), y2 = a->forward({p, {}, {}}, x2, c2);
  bool later_changed = false;
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t t = 0; t < T; ++t)
      for (int64_t c = 0; c < 16; ++c) {
        int64_t i = (b * T + t) * 16 + c;
        if (t <= t0) EXPECT_EQ(y1.f32()[i], y2.f32()[i]) << "t=" << t;
        else later_changed |= y1.f32()[i] != y2.f32()[i];
      }
  EXPECT_TRUE(later_changed);
  // And the gradient of an output at t0 reaches no input after t0.
  Tensor dy = Tensor::zeros(y1.shape());
  for (int64_t c = 0; c < 16; ++c) dy.f32()[t0 * 16 + c] = 1.0f;
  std::vector<Tensor> g;
  for (auto& t : p) g.push_back(Tensor::zeros(t.shape()));
  Tensor dx = a->backward({p, g, {}, true}, dy, c1);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t c = 0; c < 16; ++c) {
      float v = dx.f32()[t * 16 + c];
      if (t > t0) EXPECT_EQ(v, 0.0f) << "t=" << t;
    }
  EXPECT_NE(dx.f32()[t0 * 16], 0.0f);
}

}  // namespace
}  // namespace pd

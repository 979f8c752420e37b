#include <gtest/gtest.h>

#include "core/cpu/embedding_kernels.h"
#include "core/error.h"
#include "core/layers.h"
#include "tests/core/sequence_reference.h"

namespace pd {
namespace {

TEST(EmbeddingKernels, MatchNaiveLoops) {
  const int64_t B = 3, T = 5, D = 70, V = 4;  // few tokens: repeats collide in dtok
  std::vector<int32_t> ids(B * T);
  for (int64_t i = 0; i < B * T; ++i) ids[i] = static_cast<int32_t>((i * 7) % V);
  auto tok = testing::random_vec(V * D, 1), pos = testing::random_vec(T * D, 2), dy = testing::random_vec(B * T * D, 3);
  std::vector<float> y(B * T * D), dtok(V * D, 0.5f), dpos(T * D, 0.5f);
  cpu::embedding_forward(ids.data(), tok.data(), pos.data(), y.data(), B, T, D);
  cpu::embedding_backward(ids.data(), dy.data(), dtok.data(), dpos.data(), B, T, D);
  std::vector<double> ry(B * T * D), rtok(V * D, 0.5), rpos(T * D, 0.5);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t)
      for (int64_t c = 0; c < D; ++c) {
        int64_t r = b * T + t;
        ry[r * D + c] = double(tok[ids[r] * D + c]) + pos[t * D + c];
        rtok[ids[r] * D + c] += dy[r * D + c];
        rpos[t * D + c] += dy[r * D + c];
      }
  EXPECT_LT(testing::rel_err(y.data(), ry), 1e-6);
  EXPECT_LT(testing::rel_err(dtok.data(), rtok), 1e-6);
  EXPECT_LT(testing::rel_err(dpos.data(), rpos), 1e-6);
}

TEST(Embedding, ShapesDtypeAndNames) {
  LayerPtr e = make_embedding(256, 16, 32);
  EXPECT_EQ(e->input_dtype(), DType::I32);
  EXPECT_EQ(e->output_shape({32}), (Shape{32, 16}));
  EXPECT_THROW(e->output_shape({33}), UserError);
  EXPECT_THROW(e->output_shape({4, 4}), UserError);
  auto specs = e->param_specs();
  EXPECT_EQ(specs[0].name, "token.weight");
  EXPECT_EQ(specs[0].shape, (Shape{256, 16}));
  EXPECT_EQ(specs[1].name, "position.weight");
  EXPECT_EQ(specs[1].shape, (Shape{32, 16}));
  auto p = testing::init_params(*e);
  double m2 = 0;
  for (float v : p[0].to_floats()) m2 += double(v) * v;
  EXPECT_NEAR(std::sqrt(m2 / p[0].numel()), 0.02, 0.002);
}

TEST(Embedding, RejectsTokensOutsideTheVocabulary) {
  LayerPtr e = make_embedding(10, 4, 8);
  auto p = testing::init_params(*e);
  LayerContext ctx;
  EXPECT_THROW(e->forward({p, {}, {}}, Tensor::from_ints({1, 10}, {1, 2}), ctx), UserError);
  EXPECT_THROW(e->forward({p, {}, {}}, Tensor::from_ints({-1, 0}, {1, 2}), ctx), UserError);
}

TEST(Embedding, BackwardMatchesFiniteDifferencesAndHasNoInputGrad) {
  LayerPtr e = make_embedding(5, 3, 4);
  Tensor ids = Tensor::from_ints({0, 3, 3, 1, 4, 0, 3, 2}, {2, 4});
  testing::GradCheckOptions o;
  o.check_input = false;
  testing::gradcheck(*e, ids, o);
  auto p = testing::init_params(*e);
  auto r = testing::forward_backward(*e, p, ids, Tensor());
  EXPECT_FALSE(r.dx.defined());
}

}  // namespace
}  // namespace pd

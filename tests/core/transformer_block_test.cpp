#include <gtest/gtest.h>

#include "core/cpu/gemm.h"
#include "core/cpu/residual_kernels.h"
#include "core/error.h"
#include "core/layers.h"
#include "tests/core/sequence_reference.h"

namespace pd {
namespace {

std::vector<Tensor> big_params(const Layer& l) {
  // Random weights well away from the init so every term matters.
  std::vector<Tensor> p;
  uint32_t key = 50;
  for (const ParamSpec& s : l.param_specs()) {
    bool is_ln_weight = s.name == "ln1.weight" || s.name == "ln2.weight";
    Tensor t = testing::random_tensor(s.shape, key++, 0.4f);
    if (is_ln_weight)
      for (int64_t i = 0; i < t.numel(); ++i) t.f32()[i] += 1.0f;
    p.push_back(t);
  }
  return p;
}

TEST(TransformerBlock, ParamNamesFollowGptConventions) {
  LayerPtr b = make_transformer_block(8, 2);
  std::vector<std::string> names;
  for (const ParamSpec& s : b->param_specs()) names.push_back(s.name);
  std::vector<std::string> want{"ln1.weight", "ln1.bias", "attn.qkv.weight", "attn.qkv.bias",
                                "attn.proj.weight", "attn.proj.bias", "ln2.weight", "ln2.bias",
                                "mlp.fc1.weight", "mlp.fc1.bias", "mlp.fc2.weight", "mlp.fc2.bias"};
  EXPECT_EQ(names, want);
  EXPECT_EQ(b->param_specs()[8].shape, (Shape{32, 8}));
  EXPECT_EQ(b->output_shape({5, 8}), (Shape{5, 8}));
  EXPECT_THROW(b->output_shape({5, 7}), UserError);
  auto p = testing::init_params(*b, 3, 1), q = testing::init_params(*b, 3, 1);
  for (size_t i = 0; i < p.size(); ++i) EXPECT_TRUE(testing::bitwise_equal(p[i], q[i])) << names[i];
  // The parts draw from different streams.
  EXPECT_NE(p[2].f32()[0], p[8].f32()[0]);
  EXPECT_EQ(p[0].f32()[0], 1.0f);
}

TEST(TransformerBlock, IsPreLnResidualComposition) {
  LayerPtr b = make_transformer_block(8, 2);
  auto p = big_params(*b);
  Tensor x = testing::random_tensor({2, 5, 8}, 60);
  LayerContext ctx;
  Tensor y = b->forward({p, {}, {}}, x, ctx);

  auto run = [](const LayerPtr& l, std::vector<Tensor> ps, const Tensor& in) {
    LayerContext c;
    return l->forward({ps, {}, {}}, in, c);
  };
  auto add = [](const Tensor& u, const Tensor& v) {
    Tensor o = Tensor::empty(u.shape());
    for (int64_t i = 0; i < u.numel(); ++i) o.f32()[i] = u.f32()[i] + v.f32()[i];
    return o;
  };
  Tensor h = run(make_layernorm(8), {p[0], p[1]}, x);
  Tensor x1 = add(x, run(make_causal_self_attention(8, 2), {p[2], p[3], p[4], p[5]}, h));
  Tensor f = run(make_linear(8, 32), {p[8], p[9]}, run(make_layernorm(8), {p[6], p[7]}, x1));
  Tensor want = add(x1, run(make_linear(32, 8), {p[10], p[11]}, run(make_gelu(), {}, f)));
  EXPECT_TRUE(testing::bitwise_equal(y, want));
}

TEST(TransformerBlock, BackwardMatchesFiniteDifferences) {
  testing::OneComputeThread one;
  testing::GradCheckOptions o;
  o.max_coords = 20;
  LayerPtr b = make_transformer_block(8, 2);
  testing::gradcheck(*b, testing::random_tensor({2, 4, 8}, 61), o, big_params(*b));
  LayerPtr d = make_transformer_block(8, 2, 0.2f);
  testing::gradcheck(*d, testing::random_tensor({2, 4, 8}, 62), o, big_params(*d));
}

TEST(TransformerBlock, DropoutDependsOnMinibatchAndIsOffInEval) {
  LayerPtr b = make_transformer_block(8, 2, 0.3f);
  auto p = testing::init_params(*b);
  Tensor x = testing::random_tensor({2, 4, 8}, 63);
  auto fwd = [&](uint64_t mb, bool training) {
    StepInfo s;
    s.training = training;
    s.seed = 1;
    s.minibatch_id = mb;
    LayerContext c;
    return b->forward({p, {}, s}, x, c);
  };
  EXPECT_TRUE(testing::bitwise_equal(fwd(1, true), fwd(1, true)));
  EXPECT_FALSE(testing::bitwise_equal(fwd(1, true), fwd(2, true)));
  LayerPtr plain = make_transformer_block(8, 2);
  LayerContext c;
  EXPECT_TRUE(testing::bitwise_equal(fwd(1, false), plain->forward({p, {}, {}}, x, c)));
}

TEST(TransformerBlock, SkipsInputGradButStillAccumulatesParamGrads) {
  LayerPtr b = make_transformer_block(8, 2);
  auto p = testing::init_params(*b);
  Tensor x = testing::random_tensor({1, 3, 8}, 64), dy = testing::random_tensor({1, 3, 8}, 65);
  LayerContext ctx;
  b->forward({p, {}, {}}, x, ctx);
  std::vector<Tensor> g;
  for (auto& t : p) g.push_back(Tensor::zeros(t.shape()));
  EXPECT_FALSE(b->backward({p, g, {}, false}, dy, ctx).defined());
  for (size_t i = 0; i < g.size(); ++i) {
    double s = 0;
    for (float v : g[i].to_floats()) s += std::fabs(v);
    EXPECT_GT(s, 0.0) << b->param_specs()[i].name;
  }
}

// Two runs with the same thread count give the same bits: every parallel
// loop splits independent outputs, never a sum.
TEST(SequenceLayers, TwoRunsWithTheSameThreadCountAreBitwiseEqual) {
  int keep = cpu::compute_threads();
  cpu::set_compute_threads(2);
  // [2, 64, 512] activations: above the parallel grain, so threads split the loops.
  LayerPtr emb = make_embedding(50, 512, 64);
  LayerPtr blk = make_transformer_block(512, 8, 0.1f);
  LayerPtr head = make_linear(512, 50);
  auto pe = testing::init_params(*emb, 1, 0), pb = testing::init_params(*blk, 1, 1), ph = testing::init_params(*head, 1, 2);
  std::vector<int32_t> ids(2 * 64);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>((i * 13) % 50);
  Tensor x = Tensor::from_ints(ids, {2, 64});
  auto run = [&] {
    StepInfo s;
    s.seed = 9;
    s.minibatch_id = 2;
    LayerContext ce, cb, ch;
    Tensor h = blk->forward({pb, {}, s}, emb->forward({pe, {}, s}, x, ce), cb);
    Tensor y = head->forward({ph, {}, s}, h, ch);
    std::vector<Tensor> out{y};
    for (auto* ps : {&pe, &pb, &ph})
      for (auto& t : *ps) out.push_back(Tensor::zeros(t.shape()));
    std::span<Tensor> g(out);
    Tensor dh = head->backward({ph, g.subspan(1 + pe.size() + pb.size()), s, true}, testing::random_tensor(y.shape(), 3), ch);
    Tensor de = blk->backward({pb, g.subspan(1 + pe.size(), pb.size()), s, true}, dh, cb);
    emb->backward({pe, g.subspan(1, pe.size()), s, false}, de, ce);
    return out;
  };
  auto a = run(), b = run();
  for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(testing::bitwise_equal(a[i], b[i])) << i;
  // The threaded paths compute the same values as one thread.
  cpu::set_compute_threads(1);
  auto c = run();
  for (size_t i = 0; i < a.size(); ++i) {
    std::vector<double> want(c[i].f32(), c[i].f32() + c[i].numel());
    EXPECT_LT(testing::rel_err(a[i].f32(), want), 1e-5) << i;
  }
  cpu::set_compute_threads(keep);
}

}  // namespace
}  // namespace pd

#include <gtest/gtest-spi.h>
#include <gtest/gtest.h>

#include "core/cpu/gemm.h"
#include "core/cpu/linear_kernels.h"
#include "core/error.h"
#include "core/layers.h"
#include "tests/core/sequence_reference.h"

namespace pd {
namespace {

using testing::rel_err;
using testing::random_vec;

TEST(LinearKernels, MatchNaiveLoops) {
  const int64_t R = 13, I = 37, O = 70;  // odd sizes: remainders of every chunking
  auto x = random_vec(R * I, 1), W = random_vec(O * I, 2), b = random_vec(O, 3), dy = random_vec(R * O, 4);
  std::vector<float> y(R * O), dx(R * I), dW(O * I, 0.5f), db(O, -0.25f);
  cpu::linear_forward(x.data(), W.data(), b.data(), y.data(), R, I, O);
  cpu::linear_backward(x.data(), W.data(), dy.data(), dx.data(), dW.data(), db.data(), R, I, O);
  std::vector<double> ry(R * O), rdx(R * I, 0.0), rdW(O * I, 0.5), rdb(O, -0.25);
  for (int64_t r = 0; r < R; ++r)
    for (int64_t o = 0; o < O; ++o) {
      double s = b[o];
      for (int64_t i = 0; i < I; ++i) s += double(x[r * I + i]) * W[o * I + i];
      ry[r * O + o] = s;
      rdb[o] += dy[r * O + o];
      for (int64_t i = 0; i < I; ++i) {
        rdx[r * I + i] += double(dy[r * O + o]) * W[o * I + i];
        rdW[o * I + i] += double(dy[r * O + o]) * x[r * I + i];
      }
    }
  EXPECT_LT(rel_err(y.data(), ry), 1e-5);
  EXPECT_LT(rel_err(dx.data(), rdx), 1e-5);
  EXPECT_LT(rel_err(dW.data(), rdW), 1e-5);  // accumulated onto 0.5
  EXPECT_LT(rel_err(db.data(), rdb), 1e-5);
}

TEST(Linear, AppliesOverLeadingDimsAndChecksShapes) {
  LayerPtr l = make_linear(6, 4);
  EXPECT_EQ(l->output_shape({5, 6}), (Shape{5, 4}));
  EXPECT_THROW(l->output_shape({5, 7}), UserError);
  EXPECT_THROW(make_linear(0, 4), UserError);
  auto p = testing::init_params(*l);
  Tensor x3 = testing::random_tensor({2, 3, 6}, 9);
  LayerContext c1, c2;
  Tensor y3 = l->forward({p, {}, {}}, x3, c1);
  Tensor y2 = l->forward({p, {}, {}}, x3.reshape({6, 6}), c2);
  ASSERT_EQ(y3.shape(), (Shape{2, 3, 4}));
  EXPECT_TRUE(testing::bitwise_equal(y3.reshape({6, 4}), y2));
}

TEST(Linear, InitIsPyTorchUniformAndAFunctionOfTheRngOnly) {
  LayerPtr l = make_linear(100, 50);
  auto a = testing::init_params(*l, 7, 3), b = testing::init_params(*l, 7, 3), c = testing::init_params(*l, 7, 4);
  EXPECT_TRUE(testing::bitwise_equal(a[0], b[0]));
  EXPECT_TRUE(testing::bitwise_equal(a[1], b[1]));
  EXPECT_FALSE(testing::bitwise_equal(a[0], c[0]));
  float mx = 0;
  for (float v : a[0].to_floats()) mx = std::max(mx, std::fabs(v));
  EXPECT_LE(mx, 0.1f);  // 1/sqrt(100)
  EXPECT_GT(mx, 0.09f);
  EXPECT_EQ(l->param_specs()[0].name, "weight");
  EXPECT_EQ(l->param_specs()[1].name, "bias");
  EXPECT_EQ(make_linear(3, 2, false)->param_specs().size(), 1u);
}

TEST(Linear, BackwardMatchesFiniteDifferences) {
  testing::gradcheck(*make_linear(7, 5), testing::random_tensor({2, 3, 7}, 11));
  testing::gradcheck(*make_linear(7, 5, false), testing::random_tensor({4, 7}, 12));
}

TEST(Linear, BackwardAddsIntoGradsAndSkipsInputGradWhenAsked) {
  LayerPtr l = make_linear(5, 3);
  auto p = testing::init_params(*l);
  Tensor x = testing::random_tensor({4, 5}, 1), dy = testing::random_tensor({4, 3}, 2);
  std::vector<Tensor> g1{Tensor::zeros({3, 5}), Tensor::zeros({3})};
  std::vector<Tensor> g2{Tensor::zeros({3, 5}), Tensor::zeros({3})};
  for (int k = 0; k < 2; ++k) {
    LayerContext ctx;
    l->forward({p, {}, {}}, x, ctx);
    Tensor dx = l->backward({p, g2, {}, false}, dy, ctx);
    EXPECT_FALSE(dx.defined());
  }
  LayerContext ctx;
  l->forward({p, {}, {}}, x, ctx);
  l->backward({p, g1, {}, true}, dy, ctx);
  for (int64_t i = 0; i < 15; ++i) EXPECT_FLOAT_EQ(g2[0].f32()[i], 2 * g1[0].f32()[i]);
  for (int64_t i = 0; i < 3; ++i) EXPECT_FLOAT_EQ(g2[1].f32()[i], 2 * g1[1].f32()[i]);
}

// The checker itself must fail on a wrong gradient: a layer whose backward
// flips the sign of one parameter gradient or drops dx's scale.
class BrokenLinear : public Layer {
 public:
  explicit BrokenLinear(int mode) : inner_(make_linear(6, 4)), mode_(mode) {}
  std::string type() const override { return "broken_linear"; }
  std::vector<ParamSpec> param_specs() const override { return inner_->param_specs(); }
  void init(std::span<Tensor> p, std::span<Tensor> b, const CounterRng& r) const override { inner_->init(p, b, r); }
  Shape output_shape(const Shape& s) const override { return inner_->output_shape(s); }
  Tensor forward(const ForwardArgs& a, const Tensor& x, LayerContext& c) const override {
    return inner_->forward(a, x, c);
  }
  Tensor backward(const BackwardArgs& a, const Tensor& dy, LayerContext& c) const override {
    Tensor dx = inner_->backward(a, dy, c);
    if (mode_ == 0)
      for (int64_t i = 0; i < a.grads[1].numel(); ++i) a.grads[1].f32()[i] *= -1.0f;
    if (mode_ == 1)
      for (int64_t i = 0; i < dx.numel(); ++i) dx.f32()[i] *= 0.8f;
    return dx;
  }

 private:
  LayerPtr inner_;
  int mode_;
};

// Number of gradcheck failures whose message mentions `what`.
int broken_failures(int mode, const std::string& what) {
  ::testing::TestPartResultArray results;
  {
    ::testing::ScopedFakeTestPartResultReporter reporter(
        ::testing::ScopedFakeTestPartResultReporter::INTERCEPT_ONLY_CURRENT_THREAD, &results);
    testing::gradcheck(BrokenLinear(mode), testing::random_tensor({3, 6}, 4));
  }
  int n = 0;
  for (int i = 0; i < results.size(); ++i)
    n += results.GetTestPartResult(i).failed() &&
         std::string(results.GetTestPartResult(i).message()).find(what) != std::string::npos;
  return n;
}

TEST(GradCheck, CatchesAWrongSignAndAMissingScale) {
  EXPECT_GT(broken_failures(0, "param bias"), 0);
  EXPECT_GT(broken_failures(1, "input"), 0);
  EXPECT_EQ(broken_failures(2, "analytic"), 0);  // the unbroken layer passes
}

}  // namespace
}  // namespace pd

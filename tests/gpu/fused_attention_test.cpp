// Fused causal attention (cuDNN flash SDPA through the graph API,
// core/cuda/fused_attention.h) against the FP32 composition of the same
// backend (attention_forward/backward: GEMMs + causal softmax) on the same
// bf16-valued inputs, for gpt-mini's and the zoo gpt's shapes; bitwise
// reproducibility (forward always, backward under --deterministic); the
// layers' bf16 path against FP32; the fallback for shapes cuDNN is not
// asked to run.
//
// Tolerances are bf16's: the fused kernels round P and dS to bf16 before
// their second products and return bf16 outputs (unit roundoff 2^-9), so
// results are compared by relative L2 error (<= 1.5e-2) and largest
// error against the largest reference value (<= 5e-2), twice that for a
// whole transformer block; the softmax statistics are FP32 and compared
// at 2e-3.
#if defined(PIPEDREAM_HAVE_CUDA)  // the whole file needs the CUDA backend
#include <algorithm>
#include <cmath>
#include <iostream>
#include <string>

#include "core/cuda/fused_attention.h"
#include "core/layers.h"
#include "core/precision.h"
#include "tests/gpu/gpu_test.h"

namespace pd::gputest {

namespace {

struct Shape4 {
  int64_t B, T, H, hd;
  int64_t qkv_numel() const { return B * T * 3 * H * hd; }
  int64_t att_numel() const { return B * T * H * hd; }
};

std::ostream& operator<<(std::ostream& o, const Shape4& s) {
  return o << "[B " << s.B << ", T " << s.T << ", H " << s.H << ", hd " << s.hd << "]";
}

std::vector<float> bf16_floats(size_t n, uint32_t key, float lo = -1.0f, float hi = 1.0f) {
  std::vector<float> v = random_floats(n, key, lo, hi);
  for (float& x : v) x = round_to_bf16(x);
  return v;
}

// Relative L2 error and largest error relative to the largest reference value.
::testing::AssertionResult bf16_close(const std::vector<float>& got, const std::vector<float>& want,
                                      const std::string& what, double l2_tol = 1.5e-2, double max_tol = 5e-2) {
  if (got.size() != want.size()) return ::testing::AssertionFailure() << what << ": size mismatch";
  double err2 = 0, ref2 = 0, max_err = 0, max_ref = 0;
  size_t worst = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double e = std::fabs(static_cast<double>(got[i]) - want[i]);
    if (!(e <= max_err)) {  // also catches NaN
      max_err = std::isnan(e) ? INFINITY : e;
      worst = i;
    }
    err2 += e * e;
    ref2 += static_cast<double>(want[i]) * want[i];
    max_ref = std::max(max_ref, std::fabs(static_cast<double>(want[i])));
  }
  const double rel_l2 = std::sqrt(err2 / std::max(ref2, 1e-30));
  const double rel_max = max_err / std::max(max_ref, 1e-30);
  if (rel_l2 <= l2_tol && rel_max <= max_tol) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << what << ": relative L2 error " << rel_l2 << ", largest error " << max_err
                                       << " at [" << worst << "] (got " << got[worst] << ", want " << want[worst]
                                       << ") against largest |want| " << max_ref;
}

class FusedAttention : public GpuTest {
 protected:
  void SetUp() override {
    GpuTest::SetUp();
    if (IsSkipped()) return;
    cuda::set_deterministic(false);
  }
  void TearDown() override {
    if (ops) cuda::set_deterministic(false);
  }

  // Asserts cuDNN builds both plans for s, printing what it built or why not.
  void require_supported(const Shape4& s) {
    const bool ok = ops->fused_attention_supported(s.B, s.T, s.H, s.hd);
    const bool det = cuda::deterministic();
    std::cout << "forward:  " << cuda::fused_attention_plan_info(s.B, s.T, s.H, s.hd, false, false) << "\n"
              << "backward: " << cuda::fused_attention_plan_info(s.B, s.T, s.H, s.hd, true, det) << std::endl;
    ASSERT_TRUE(ok) << "cuDNN refused fused attention for " << s << " (see the lines above)";
  }

  struct Run {
    std::vector<float> att, stats, dqkv;
  };
  Run fused(const Shape4& s, const Tensor& qkv, const Tensor& datt) {
    Tensor att = Tensor::empty({s.att_numel()}, DType::F32, Device::cuda(0));
    Tensor stats = Tensor::empty({s.B * s.H * s.T}, DType::F32, Device::cuda(0));
    Tensor dqkv = Tensor::empty({s.qkv_numel()}, DType::F32, Device::cuda(0));
    ops->fused_attention_forward(s.B, s.T, s.H, s.hd, qkv.f32(), att.f32(), stats.f32());
    ops->fused_attention_backward(s.B, s.T, s.H, s.hd, qkv.f32(), att.f32(), stats.f32(), datt.f32(), dqkv.f32());
    return {host(att), host(stats), host(dqkv)};
  }
  Run composed(const Shape4& s, const Tensor& qkv, const Tensor& datt) {
    Tensor probs = Tensor::empty({s.B * s.H * s.T * s.T}, DType::F32, Device::cuda(0));
    Tensor att = Tensor::empty({s.att_numel()}, DType::F32, Device::cuda(0));
    Tensor dqkv = Tensor::empty({s.qkv_numel()}, DType::F32, Device::cuda(0));
    ops->attention_forward(Precision::FP32, s.B, s.T, s.H, s.hd, qkv.f32(), probs.f32(), att.f32());
    ops->attention_backward(Precision::FP32, s.B, s.T, s.H, s.hd, qkv.f32(), probs.f32(), datt.f32(), dqkv.f32());
    return {host(att), {}, host(dqkv)};
  }

  // Fused against composed on bf16-valued inputs; stats against a double
  // reference on a sample of rows.
  void expect_matches_composition(const Shape4& s) {
    require_supported(s);
    if (HasFatalFailure()) return;
    const std::vector<float> qkv_h = bf16_floats(static_cast<size_t>(s.qkv_numel()), 11);
    const std::vector<float> datt_h = bf16_floats(static_cast<size_t>(s.att_numel()), 12);
    const Tensor qkv = on_gpu(qkv_h), datt = on_gpu(datt_h);
    const Run f = fused(s, qkv, datt), c = composed(s, qkv, datt);
    EXPECT_TRUE(bf16_close(f.att, c.att, "att"));
    EXPECT_TRUE(bf16_close(f.dqkv, c.dqkv, "dqkv"));
    const int64_t rows = s.B * s.H * s.T, step = std::max<int64_t>(1, rows / 97);
    const double scale = 1.0 / std::sqrt(static_cast<double>(s.hd));
    int bad = 0;
    for (int64_t r = 0; r < rows; r += step) {
      const int64_t b = r / (s.H * s.T), h = (r / s.T) % s.H, t = r % s.T;
      auto q_at = [&](int64_t tok, int part, int64_t d) {
        return static_cast<double>(qkv_h[static_cast<size_t>((((b * s.T + tok) * 3 + part) * s.H + h) * s.hd + d)]);
      };
      std::vector<double> sc(static_cast<size_t>(t + 1));
      double mx = -INFINITY;
      for (int64_t j = 0; j <= t; ++j) {
        double dot = 0;
        for (int64_t d = 0; d < s.hd; ++d) dot += q_at(t, 0, d) * q_at(j, 1, d);
        sc[static_cast<size_t>(j)] = dot * scale;
        mx = std::max(mx, sc[static_cast<size_t>(j)]);
      }
      double sum = 0;
      for (double v : sc) sum += std::exp(v - mx);
      const double want = mx + std::log(sum), got = f.stats[static_cast<size_t>(r)];
      if (!(std::fabs(got - want) <= 2e-3 * std::max(1.0, std::fabs(want))) && bad++ < 5)
        ADD_FAILURE() << "stats row " << r << " (b " << b << ", h " << h << ", t " << t << "): got " << got
                      << ", want " << want;
    }
  }
};

// Needs cuDNN but no GPU: every tensor and operation descriptor of the
// forward, backward and deterministic backward graphs, and the operation
// graphs themselves, finalise for the shapes the models use (engine
// selection and execution are the GPU tests below).
TEST(FusedAttentionGraphs, EveryDescriptorFinalisesWithoutAGpu) {
#if !defined(PIPEDREAM_HAVE_CUDNN)
  GTEST_SKIP() << "built without cuDNN";
#endif
  for (const Shape4& s : {Shape4{8, 128, 4, 64}, Shape4{64, 128, 4, 64}, Shape4{8, 1024, 12, 64},
                          Shape4{3, 100, 2, 32}}) {
    const std::vector<std::string> errors = cuda::fused_attention_graph_errors(s.B, s.T, s.H, s.hd);
    ASSERT_EQ(errors.size(), 6u) << "3 graphs in each of 2 forms";
    for (const std::string& e : errors) EXPECT_EQ(e, "") << s;
  }
}

TEST_F(FusedAttention, GptMiniShapeBatch8MatchesComposition) { expect_matches_composition({8, 128, 4, 64}); }

TEST_F(FusedAttention, GptMiniShapeBatch64MatchesComposition) { expect_matches_composition({64, 128, 4, 64}); }

TEST_F(FusedAttention, ZooGptShapeMatchesComposition) { expect_matches_composition({8, 1024, 12, 64}); }

TEST_F(FusedAttention, DeterministicBackwardMatchesComposition) {
  cuda::set_deterministic(true);
  expect_matches_composition({8, 128, 4, 64});
}

// A length that is no multiple of cuDNN's 64/128 tiles and a small head
// dimension: cuDNN 9 handles both; if it refuses, the layers fall back, which
// the fallback test covers, so only a built plan is compared.
TEST_F(FusedAttention, RaggedLengthMatchesCompositionWhenSupported) {
  const Shape4 s{3, 100, 2, 32};
  if (!ops->fused_attention_supported(s.B, s.T, s.H, s.hd))
    GTEST_SKIP() << "cuDNN refused " << s << ": "
                 << cuda::fused_attention_plan_info(s.B, s.T, s.H, s.hd, false, false) << " / "
                 << cuda::fused_attention_plan_info(s.B, s.T, s.H, s.hd, true, false);
  expect_matches_composition(s);
}

TEST_F(FusedAttention, ForwardIsBitwiseReproducibleAndBackwardUnderDeterministic) {
  const Shape4 s{8, 128, 4, 64};
  cuda::set_deterministic(true);
  require_supported(s);
  if (HasFatalFailure()) return;
  const Tensor qkv = on_gpu(bf16_floats(static_cast<size_t>(s.qkv_numel()), 21));
  const Tensor datt = on_gpu(bf16_floats(static_cast<size_t>(s.att_numel()), 22));
  const Run a = fused(s, qkv, datt), b = fused(s, qkv, datt);
  EXPECT_EQ(a.att, b.att);
  EXPECT_EQ(a.stats, b.stats);
  EXPECT_EQ(a.dqkv, b.dqkv);
  // The forward does not depend on the mode.
  cuda::set_deterministic(false);
  const Run c = fused(s, qkv, datt);
  EXPECT_EQ(a.att, c.att);
  EXPECT_EQ(a.stats, c.stats);
}

TEST_F(FusedAttention, UnsupportedHeadDimIsRefusedAndTheLayerFallsBack) {
  const int64_t B = 2, T = 16, heads = 3, dim = 36;  // head_dim 12: not a multiple of 8
  EXPECT_FALSE(ops->fused_attention_supported(B, T, heads, dim / heads));
  LayerPtr attn = make_causal_self_attention(dim, heads);
  std::vector<Tensor> params = allocate_params(*attn);
  attn->init(params, {}, CounterRng(3, 0, 0));
  for (Tensor& p : params) p = p.to(Device::cuda(0));
  const Tensor x = Tensor::from_floats(bf16_floats(static_cast<size_t>(B * T * dim), 31), {B, T, dim})
                       .to(Device::cuda(0));
  StepInfo step;
  step.precision = Precision::BF16;
  LayerContext ctx;
  attn->forward({params, {}, step}, x, ctx);
  ASSERT_EQ(ctx.saved.size(), 4u);
  EXPECT_EQ(ctx.saved[2].shape(), (Shape{B, heads, T, T}));  // probs: the unfused path
}

// One transformer block forward + backward on the GPU under BF16 against
// FP32: the same parameters, input and output gradient.
struct BlockRun {
  std::vector<float> y, dx;
  std::vector<std::vector<float>> grads;
  int saved_rank = 0;  // rank of what the attention part saved: 3 = fused stats, 4 = probs
};

BlockRun run_block(const Layer& block, const std::vector<Tensor>& params_h, const Tensor& x_h, const Tensor& dy_h,
                   Precision precision) {
  const Device dev = Device::cuda(0);
  std::vector<Tensor> p, g;
  for (const Tensor& t : params_h) {
    p.push_back(t.to(dev));
    g.push_back(Tensor::zeros(t.shape(), DType::F32, dev));
  }
  StepInfo step;
  step.precision = precision;
  LayerContext ctx;
  BlockRun r;
  Tensor y = block.forward({p, {}, step}, x_h.to(dev), ctx);
  if (ctx.children.size() > 1 && ctx.children[1].saved.size() > 2) r.saved_rank = ctx.children[1].saved[2].ndim();
  Tensor dx = block.backward({p, g, step, true}, dy_h.to(dev), ctx);
  r.y = host(y);
  r.dx = host(dx);
  for (const Tensor& t : g) r.grads.push_back(host(t));
  return r;
}

TEST_F(FusedAttention, TransformerBlockUnderBf16MatchesFp32) {
  const int64_t B = 8, T = 128, dim = 256, heads = 4;
  require_supported({B, T, heads, dim / heads});
  if (HasFatalFailure()) return;
  LayerPtr block = make_transformer_block(dim, heads);
  std::vector<Tensor> params = allocate_params(*block);
  block->init(params, {}, CounterRng(9, 0, 0));
  const Tensor x = Tensor::from_floats(random_floats(static_cast<size_t>(B * T * dim), 41), {B, T, dim});
  const Tensor dy = Tensor::from_floats(random_floats(static_cast<size_t>(B * T * dim), 42), {B, T, dim});
  const BlockRun bf = run_block(*block, params, x, dy, Precision::BF16);
  const BlockRun fp = run_block(*block, params, x, dy, Precision::FP32);
  EXPECT_EQ(bf.saved_rank, 3) << "the block's attention did not take the fused path under BF16";
  EXPECT_EQ(fp.saved_rank, 4) << "FP32 must keep the probs path";
  // A scalar "loss" sum(y * dy), then every output and gradient.
  double loss_bf = 0, loss_fp = 0;
  const std::vector<float> dyh = dy.to_floats();
  for (size_t i = 0; i < dyh.size(); ++i) {
    loss_bf += static_cast<double>(bf.y[i]) * dyh[i];
    loss_fp += static_cast<double>(fp.y[i]) * dyh[i];
  }
  EXPECT_NEAR(loss_bf, loss_fp, 1e-2 * std::max(1.0, std::fabs(loss_fp)));
  // Twice the kernel tolerances: under --precision bf16 the block's other
  // matrix operands are rounded to bf16 too.
  EXPECT_TRUE(bf16_close(bf.y, fp.y, "y", 3e-2, 1e-1));
  EXPECT_TRUE(bf16_close(bf.dx, fp.dx, "dx", 3e-2, 1e-1));
  const std::vector<ParamSpec> specs = block->param_specs();
  for (size_t i = 0; i < bf.grads.size(); ++i)
    EXPECT_TRUE(bf16_close(bf.grads[i], fp.grads[i], specs[i].name, 3e-2, 1e-1));
}

}  // namespace

}  // namespace pd::gputest

#endif  // PIPEDREAM_HAVE_CUDA

// Layer norm, softmax cross-entropy, causal softmax and embedding against
// CPU loops. Tolerances: layer norm atol 1e-5 + rtol 1e-4 (dx, dgamma atol
// 1e-4: sums over 64 rows); cross-entropy loss sum rtol 1e-5, grad atol
// 1e-6; causal softmax atol 1e-6 + rtol 1e-5; embedding forward exact (one
// addition), backward atol 1e-5 and bitwise repeatable.
#if defined(PIPEDREAM_HAVE_CUDA)  // the whole file needs the CUDA backend
#include "core/error.h"
#include "tests/gpu/gpu_test.h"
#include "tests/gpu/reference.h"

namespace pd::gputest {

using CudaRowOps = GpuTest;

TEST_F(CudaRowOps, LayerNormForwardBackward) {
  for (int64_t dim : {32, 300, 1030}) {  // below, between and above one block's width
    const int64_t rows = 64;
    const float eps = 1e-5f;
    auto x = random_floats(rows * dim, 1, -3.0f, 2.0f), g = random_floats(dim, 2, 0.5f, 1.5f),
         b = random_floats(dim, 3), dy = random_floats(rows * dim, 4);
    Tensor dx_ = on_gpu(x), dg = on_gpu(g), dbeta_in = on_gpu(b), y = gpu_zeros(x.size()), mean = gpu_zeros(rows),
           rstd = gpu_zeros(rows);
    ops->layernorm_forward(rows, dim, dx_.f32(), dg.f32(), dbeta_in.f32(), eps, y.f32(), mean.f32(), rstd.f32());
    auto f = ref::layernorm(rows, dim, x, g, b, eps);
    SCOPED_TRACE(::testing::Message() << "dim " << dim);
    EXPECT_TRUE(close(host(y), f.y, 1e-5, 1e-4));
    EXPECT_TRUE(close(host(mean), f.mean, 1e-6, 1e-5));
    EXPECT_TRUE(close(host(rstd), f.rstd, 1e-6, 1e-5));
    Tensor ddy = on_gpu(dy), dx = gpu_zeros(x.size()), dgamma = on_gpu(std::vector<float>(dim, 1.0f)),
           dbeta = gpu_zeros(dim);
    ops->layernorm_backward(rows, dim, dx_.f32(), ddy.f32(), dg.f32(), mean.f32(), rstd.f32(), dx.f32(),
                            dgamma.f32(), dbeta.f32());
    auto gr = ref::layernorm_backward(rows, dim, x, dy, g, eps);
    for (double& v : gr.dgamma) v += 1.0;
    EXPECT_TRUE(close(host(dx), gr.dx, 1e-4, 1e-4));
    EXPECT_TRUE(close(host(dgamma), gr.dgamma, 1e-4, 1e-4));
    EXPECT_TRUE(close(host(dbeta), gr.dbeta, 1e-4, 1e-4));
  }
}

// gpt-mini's and GPT-2's shapes: 8,192 rows, the parameter gradients as
// two-stage column sums; same bits when repeated.
TEST_F(CudaRowOps, LayerNormParamGradsOverManyRows) {
  for (int64_t dim : {256, 768}) {
    const int64_t rows = 8192;
    const float eps = 1e-5f;
    SCOPED_TRACE(::testing::Message() << "dim " << dim);
    auto x = random_floats(rows * dim, 11, -3.0f, 2.0f), g = random_floats(dim, 12, 0.5f, 1.5f),
         b = random_floats(dim, 13), dy = random_floats(rows * dim, 14);
    Tensor dx_ = on_gpu(x), dg = on_gpu(g), db = on_gpu(b), y = gpu_zeros(x.size()), mean = gpu_zeros(rows),
           rstd = gpu_zeros(rows), ddy = on_gpu(dy);
    ops->layernorm_forward(rows, dim, dx_.f32(), dg.f32(), db.f32(), eps, y.f32(), mean.f32(), rstd.f32());
    Tensor g1 = gpu_zeros(dim), b1 = gpu_zeros(dim), g2 = gpu_zeros(dim), b2 = gpu_zeros(dim);
    ops->layernorm_backward_params_accum(rows, dim, dx_.f32(), ddy.f32(), mean.f32(), rstd.f32(), g1.f32(), b1.f32());
    ops->layernorm_backward_params_accum(rows, dim, dx_.f32(), ddy.f32(), mean.f32(), rstd.f32(), g2.f32(), b2.f32());
    auto gr = ref::layernorm_backward(rows, dim, x, dy, g, eps);
    EXPECT_TRUE(close(host(g1), gr.dgamma, 3e-3, 1e-4));
    EXPECT_TRUE(close(host(b1), gr.dbeta, 3e-3, 1e-4));
    EXPECT_EQ(host(g1), host(g2));
    EXPECT_EQ(host(b1), host(b2));
  }
}

TEST_F(CudaRowOps, SoftmaxCrossEntropyLossAccuracyAndGrad) {
  for (int64_t C : {10, 257, 1000}) {
    const int64_t rows = 50;
    auto logits = random_floats(rows * C, 5, -4.0f, 4.0f);
    auto labels = random_ints(rows, 6, static_cast<int32_t>(C));
    // Make some rows correct so accuracy is not trivially 0.
    for (int64_t r = 0; r < rows; r += 3) logits[r * C + labels[r]] = 10.0f;
    Tensor dl = on_gpu(logits), dlab = on_gpu_ints(labels), grad = gpu_zeros(logits.size());
    double loss = 0;
    int64_t correct = 0;
    ops->softmax_cross_entropy(rows, C, dl.f32(), dlab.data<int32_t>(), 1.0f / rows, grad.f32(), &loss, &correct);
    auto want = ref::softmax_cross_entropy(rows, C, logits, labels, 1.0 / rows);
    SCOPED_TRACE(::testing::Message() << "classes " << C);
    EXPECT_NEAR(loss, want.loss_sum, 1e-5 * std::fabs(want.loss_sum) + 1e-5);
    EXPECT_EQ(correct, want.correct);
    EXPECT_GE(correct, 17);
    EXPECT_TRUE(close(host(grad), want.grad, 1e-6, 1e-4));
  }
}

TEST_F(CudaRowOps, SoftmaxCrossEntropyRejectsLabelOutOfRange) {
  Tensor dl = on_gpu(random_floats(20, 7)), dlab = on_gpu_ints({1, 10});
  double loss = 0;
  int64_t correct = 0;
  EXPECT_THROW(ops->softmax_cross_entropy(2, 10, dl.f32(), dlab.data<int32_t>(), 1.0f, nullptr, &loss, &correct),
               RuntimeFailure);
}

TEST_F(CudaRowOps, CausalSoftmaxForwardBackward) {
  for (int64_t T : {7, 128, 300}) {
    const int64_t batch = 6;
    const float scale = 0.125f;
    auto s = random_floats(batch * T * T, 8, -5.0f, 5.0f), dp = random_floats(batch * T * T, 9);
    Tensor ds_ = on_gpu(s), p = gpu_zeros(s.size()), ddp = on_gpu(dp), ds = gpu_zeros(s.size());
    ops->causal_softmax_forward(batch, T, scale, ds_.f32(), p.f32());
    auto wp = ref::causal_softmax(batch, T, scale, s);
    SCOPED_TRACE(::testing::Message() << "T " << T);
    auto hp = host(p);
    EXPECT_TRUE(close(hp, wp, 1e-6, 1e-5));
    ops->causal_softmax_backward(batch, T, scale, p.f32(), ddp.f32(), ds.f32());
    EXPECT_TRUE(close(host(ds), ref::causal_softmax_backward(batch, T, scale, hp, dp), 1e-6, 1e-4));
    ops->causal_softmax_forward(batch, T, scale, ds_.f32(), ds_.f32());  // in place
    EXPECT_EQ(host(ds_), hp);
  }
}

using CudaEmbedding = GpuTest;

TEST_F(CudaEmbedding, LookupAndDeterministicBackward) {
  const int64_t B = 4, T = 33, D = 300, V = 50;
  auto tokens = random_ints(B * T, 10, V);
  tokens[0] = tokens[1] = tokens[2] = 7;  // repeated ids exercise the grouping
  auto wte = random_floats(V * D, 11), wpe = random_floats(T * D, 12), dy = random_floats(B * T * D, 13);
  Tensor dt = on_gpu_ints(tokens), dwte_p = on_gpu(wte), dwpe_p = on_gpu(wpe), y = gpu_zeros(B * T * D);
  ops->embedding_forward(B, T, D, V, dt.data<int32_t>(), dwte_p.f32(), dwpe_p.f32(), y.f32());
  std::vector<float> wy(B * T * D);
  for (int64_t i = 0; i < B * T; ++i)
    for (int64_t d = 0; d < D; ++d) wy[i * D + d] = wte[tokens[i] * D + d] + wpe[(i % T) * D + d];
  EXPECT_EQ(host(y), wy);

  Tensor ddy = on_gpu(dy);
  std::vector<std::vector<float>> runs;
  std::vector<double> want_te(V * D, 0.5), want_pe(T * D, 0.0);
  for (int64_t i = 0; i < B * T; ++i)
    for (int64_t d = 0; d < D; ++d) {
      want_te[tokens[i] * D + d] += dy[i * D + d];
      want_pe[(i % T) * D + d] += dy[i * D + d];
    }
  for (int rep = 0; rep < 2; ++rep) {
    Tensor gte = on_gpu(std::vector<float>(V * D, 0.5f)), gpe = gpu_zeros(T * D);
    ops->embedding_backward_accum(B, T, D, V, dt.data<int32_t>(), ddy.f32(), gte.f32(), gpe.f32());
    EXPECT_TRUE(close(host(gte), want_te, 1e-5, 1e-5));
    EXPECT_TRUE(close(host(gpe), want_pe, 1e-5, 1e-5));
    runs.push_back(host(gte));
  }
  EXPECT_EQ(runs[0], runs[1]);
}

TEST_F(CudaEmbedding, RejectsTokenOutOfRange) {
  Tensor dt = on_gpu_ints({0, 3, 5}), wte = gpu_zeros(5 * 2), wpe = gpu_zeros(3 * 2), y = gpu_zeros(3 * 2);
  EXPECT_THROW(ops->embedding_forward(1, 3, 2, 5, dt.data<int32_t>(), wte.f32(), wpe.f32(), y.f32()), RuntimeFailure);
}

}  // namespace pd::gputest

#endif  // PIPEDREAM_HAVE_CUDA

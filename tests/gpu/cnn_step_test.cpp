// One training step of a small CNN (conv-relu-maxpool-linear-softmax CE,
// SGD) composed from DeviceOps exactly as the layers compose it, against the
// same composition of the CPU references. Catches layout mistakes between
// kernels (NCHW flatten into a linear layer, gradient accumulation, the
// optimizer touching the right buffers) that per-kernel tests cannot.
// Tolerance: atol 1e-4 + rtol 1e-3 on the updated weights and the loss.
#if defined(PIPEDREAM_HAVE_CUDA)  // the whole file needs the CUDA backend
#include "tests/gpu/gpu_test.h"
#include "tests/gpu/reference.h"

namespace pd::gputest {

namespace {

std::vector<float> to_f(const std::vector<double>& v) { return std::vector<float>(v.begin(), v.end()); }

}  // namespace

using CudaCnnStep = GpuTest;

TEST_F(CudaCnnStep, ForwardBackwardSgdMatchesCpuComposition) {
  const int64_t N = 4, classes = 10;
  Conv2dGeometry cg;
  cg.batch = N;
  cg.in_channels = 1;
  cg.in_h = cg.in_w = 12;
  cg.out_channels = 4;
  cg.square_window(5, 1, 2);
  Pool2dGeometry pg;
  pg.batch = N;
  pg.channels = 4;
  pg.in_h = pg.in_w = 12;
  pg.kernel_h = pg.kernel_w = pg.stride_h = pg.stride_w = 2;
  const int64_t feat = 4 * 6 * 6, conv_out = N * 4 * 12 * 12;
  const float lr = 0.05f, momentum = 0.9f;

  auto x = random_floats(N * 144, 1), cw = random_floats(4 * 25, 2, -0.3f, 0.3f), cb = random_floats(4, 3, -0.1f, 0.1f);
  auto fw = random_floats(classes * feat, 4, -0.1f, 0.1f), fb = random_floats(classes, 5, -0.1f, 0.1f);
  auto labels = random_ints(N, 6, classes);

  // --- GPU ---
  Tensor gx = on_gpu(x), gcw = on_gpu(cw), gcb = on_gpu(cb), gfw = on_gpu(fw), gfb = on_gpu(fb);
  Tensor glab = on_gpu_ints(labels);
  Tensor c = gpu_zeros(conv_out), r = gpu_zeros(conv_out), p = gpu_zeros(N * feat), logits = gpu_zeros(N * classes);
  ops->conv2d_forward(Precision::FP32, cg, gx.f32(), gcw.f32(), gcb.f32(), c.f32());
  ops->relu_forward(conv_out, c.f32(), r.f32());
  ops->pool2d_forward(PoolKind::Max, pg, r.f32(), p.f32());
  ops->gemm(false, true, N, classes, feat, 1.0f, p.f32(), feat, gfw.f32(), feat, 0.0f, logits.f32(), classes);
  ops->add_bias_rows(N, classes, gfb.f32(), logits.f32());
  Tensor dlogits = gpu_zeros(N * classes);
  double loss = 0;
  int64_t correct = 0;
  ops->softmax_cross_entropy(N, classes, logits.f32(), glab.data<int32_t>(), 1.0f / N, dlogits.f32(), &loss, &correct);
  Tensor gdfw = gpu_zeros(fw.size()), gdfb = gpu_zeros(fb.size()), gdcw = gpu_zeros(cw.size()), gdcb = gpu_zeros(4);
  Tensor dp = gpu_zeros(N * feat), dr = gpu_zeros(conv_out), dc = gpu_zeros(conv_out);
  ops->gemm(true, false, classes, feat, N, 1.0f, dlogits.f32(), classes, p.f32(), feat, 1.0f, gdfw.f32(), feat);
  ops->sum_rows_accum(N, classes, dlogits.f32(), gdfb.f32());
  ops->gemm(false, false, N, feat, classes, 1.0f, dlogits.f32(), classes, gfw.f32(), feat, 0.0f, dp.f32(), feat);
  ops->pool2d_backward(PoolKind::Max, pg, r.f32(), p.f32(), dp.f32(), dr.f32());
  ops->relu_backward(conv_out, r.f32(), dr.f32(), dc.f32());
  ops->conv2d_backward_params_accum(Precision::FP32, cg, gx.f32(), dc.f32(), gdcw.f32(), gdcb.f32());
  Tensor bufs[4] = {gpu_zeros(cw.size()), gpu_zeros(4), gpu_zeros(fw.size()), gpu_zeros(classes)};
  ops->sgd_step(cw.size(), lr, momentum, 0.0f, false, gcw.f32(), gdcw.f32(), bufs[0].f32());
  ops->sgd_step(4, lr, momentum, 0.0f, false, gcb.f32(), gdcb.f32(), bufs[1].f32());
  ops->sgd_step(fw.size(), lr, momentum, 0.0f, false, gfw.f32(), gdfw.f32(), bufs[2].f32());
  ops->sgd_step(classes, lr, momentum, 0.0f, false, gfb.f32(), gdfb.f32(), bufs[3].f32());

  // --- CPU composition of the references ---
  auto rc = to_f(ref::conv2d_forward(cg, x, cw, cb));
  std::vector<float> rr(rc.size());
  for (size_t i = 0; i < rc.size(); ++i) rr[i] = rc[i] > 0 ? rc[i] : 0.0f;
  auto rp = to_f(ref::pool2d_forward(PoolKind::Max, pg, rr));
  auto rl = ref::gemm(false, true, N, classes, feat, 1.0, rp, feat, fw, feat, 0.0, std::vector<float>(N * classes), classes);
  for (int64_t i = 0; i < N; ++i)
    for (int64_t j = 0; j < classes; ++j) rl[i * classes + j] += fb[j];
  auto ce = ref::softmax_cross_entropy(N, classes, to_f(rl), labels, 1.0 / N);
  auto rdl = to_f(ce.grad);
  auto rdfw = ref::gemm(true, false, classes, feat, N, 1.0, rdl, classes, rp, feat, 0.0, std::vector<float>(fw.size()), feat);
  std::vector<double> rdfb(classes);
  for (int64_t i = 0; i < N; ++i)
    for (int64_t j = 0; j < classes; ++j) rdfb[j] += rdl[i * classes + j];
  auto rdp = to_f(ref::gemm(false, false, N, feat, classes, 1.0, rdl, classes, fw, feat, 0.0, std::vector<float>(N * feat), feat));
  auto rdr = to_f(ref::pool2d_backward(PoolKind::Max, pg, rr, rdp));
  std::vector<float> rdc(rdr.size());
  for (size_t i = 0; i < rdr.size(); ++i) rdc[i] = rr[i] > 0 ? rdr[i] : 0.0f;
  auto cgr = ref::conv2d_backward(cg, x, cw, rdc);
  auto step = [&](const std::vector<float>& w, const std::vector<double>& g) {
    std::vector<double> out(w.size());
    for (size_t i = 0; i < w.size(); ++i) out[i] = w[i] - lr * g[i];  // first step: buffer = grad
    return out;
  };

  EXPECT_NEAR(loss, ce.loss_sum, 1e-4 * std::fabs(ce.loss_sum) + 1e-4);
  EXPECT_EQ(correct, ce.correct);
  EXPECT_TRUE(close(host(gcw), step(cw, cgr.dw), 1e-4, 1e-3));
  EXPECT_TRUE(close(host(gcb), step(cb, cgr.db), 1e-4, 1e-3));
  EXPECT_TRUE(close(host(gfw), step(fw, rdfw), 1e-4, 1e-3));
  EXPECT_TRUE(close(host(gfb), step(fb, rdfb), 1e-4, 1e-3));
}

}  // namespace pd::gputest

#endif  // PIPEDREAM_HAVE_CUDA

// bf16 storage on the GPU: the DeviceOps *_bf16 entries against the CPU's
// (which are the BF16 entries between unpacking and packing, bit for bit),
// at gpt-mini's, the zoo gpt's and a ragged shape; and the transformer block
// with bf16 storage against the same block without it, on the GPU.
// Tolerances:
//   pack/unpack: exact (nearest, ties to even, as pd::bf16_bits);
//   GEMM entries: inputs are multiples of 1/16 in [-0.5, 0.5], whose
//     products and sums are exact in FP32, so FP32 outputs are exact and
//     bf16 outputs within one bf16 ulp (cuBLAS's conversion of the exact
//     sum, against round-to-nearest-even); GELU's output within one ulp +
//     1e-6 (tanhf against the CPU's tanh);
//   gelu backward: one ulp + 1e-6; layer norm: as fused_block_test.cpp;
//   the block: relative L2 error 3e-2 and largest error 1e-1 of the
//     largest value (the GEMMs' FP32 sums in another order before rounding
//     to bf16 move values by an ulp, and that propagates).
#if defined(PIPEDREAM_HAVE_CUDA)  // the whole file needs the CUDA backend
#include <cmath>
#include <string>

#include "core/bf16_rounding.h"
#include "core/layers.h"
#include "core/precision.h"
#include "tests/gpu/bf16_compare.h"
#include "tests/gpu/gpu_test.h"

namespace pd::gputest {

namespace {

std::vector<uint16_t> bits(const std::vector<float>& v) {
  std::vector<uint16_t> b(v.size());
  for (size_t i = 0; i < v.size(); ++i) b[i] = bf16_bits(v[i]);
  return b;
}

// A bf16 tensor on the GPU holding v rounded.
Tensor gpu_bf16(const std::vector<float>& v) {
  Tensor h = Tensor::empty({static_cast<int64_t>(v.size())}, DType::BF16);
  const std::vector<uint16_t> b = bits(v);
  std::copy(b.begin(), b.end(), h.bf16());
  return h.to(Device::cuda(0));
}
Tensor gpu_bf16_zeros(size_t n) { return Tensor::zeros({static_cast<int64_t>(n)}, DType::BF16, Device::cuda(0)); }

std::vector<float> floats_of(const std::vector<uint16_t>& b) {
  std::vector<float> v(b.size());
  for (size_t i = 0; i < b.size(); ++i) v[i] = bf16_value(b[i]);
  return v;
}

}  // namespace

using Bf16StorageOps = GpuTest;

TEST_F(Bf16StorageOps, PackRoundsToNearestEvenAndUnpackIsExactAsOnTheCpu) {
  std::vector<float> x = random_floats(100003, 21, -100.0f, 100.0f);
  x[0] = 1.00390625f;  // ties
  x[1] = 1.01171875f;
  const Tensor gx = on_gpu(x);
  Tensor g16 = gpu_bf16_zeros(x.size()), back = gpu_zeros(x.size());
  ops->pack_bf16(static_cast<int64_t>(x.size()), gx.f32(), g16.bf16());
  ops->unpack_bf16(static_cast<int64_t>(x.size()), g16.bf16(), back.f32());
  EXPECT_EQ(host(back), cpu_bf16(x));
}

TEST_F(Bf16StorageOps, LinearEntriesMatchTheCpu) {
  const DeviceOps& cpu = cpu_device_ops();
  for (const BlockShape& s : kBlockShapes) {
    SCOPED_TRACE(::testing::Message() << "rows " << s.rows << " in " << s.in << " out " << s.out);
    const size_t nx = static_cast<size_t>(s.rows * s.in), ny = static_cast<size_t>(s.rows * s.out),
                 nw = static_cast<size_t>(s.out * s.in);
    const auto x = sixteenths(nx, 1), w = sixteenths(nw, 2), b = sixteenths(static_cast<size_t>(s.out), 3),
               dy = sixteenths(ny, 4);
    const std::vector<uint16_t> x16 = bits(x), dy16 = bits(dy);
    const Tensor gx = gpu_bf16(x), gw = on_gpu(w), gb = on_gpu(b), gdy = gpu_bf16(dy);

    std::vector<float> y(ny);
    cpu.linear_forward_bf16(s.rows, s.in, s.out, x16.data(), w.data(), b.data(), y.data(), nullptr);
    Tensor gy = gpu_zeros(ny);
    ops->linear_forward_bf16(s.rows, s.in, s.out, gx.bf16(), gw.f32(), gb.f32(), gy.f32(), nullptr);
    EXPECT_EQ(host(gy), y) << "linear_forward_bf16";
    std::vector<uint16_t> y16(ny);
    cpu.linear_forward_bf16(s.rows, s.in, s.out, x16.data(), w.data(), b.data(), nullptr, y16.data());
    EXPECT_EQ(floats_of(y16), y);
    Tensor gy16 = gpu_bf16_zeros(ny);
    ops->linear_forward_bf16(s.rows, s.in, s.out, gx.bf16(), gw.f32(), gb.f32(), nullptr, gy16.bf16());
    EXPECT_EQ(host(gy16), y) << "linear_forward_bf16 into bf16";
    std::vector<uint16_t> y16_nobias(ny);  // no bias: cuBLAS writes bf16 itself
    cpu.linear_forward_bf16(s.rows, s.in, s.out, x16.data(), w.data(), nullptr, nullptr, y16_nobias.data());
    ops->linear_forward_bf16(s.rows, s.in, s.out, gx.bf16(), gw.f32(), nullptr, nullptr, gy16.bf16());
    EXPECT_TRUE(within_bf16_ulps(host(gy16), floats_of(y16_nobias), 1, 0)) << "linear_forward_bf16 without bias";

    std::vector<uint16_t> pre(ny), act(ny);
    cpu.linear_gelu_forward_bf16(s.rows, s.in, s.out, x16.data(), w.data(), b.data(), pre.data(), act.data());
    Tensor gpre = gpu_bf16_zeros(ny), gact = gpu_bf16_zeros(ny);
    ops->linear_gelu_forward_bf16(s.rows, s.in, s.out, gx.bf16(), gw.f32(), gb.f32(), gpre.bf16(), gact.bf16());
    EXPECT_EQ(host(gpre), floats_of(pre)) << "linear_gelu_forward_bf16: pre";
    EXPECT_TRUE(within_bf16_ulps(host(gact), floats_of(act), 1, 1e-6)) << "linear_gelu_forward_bf16: y";

    std::vector<uint16_t> dx(nx);
    cpu.linear_backward_input_bf16(s.rows, s.in, s.out, dy16.data(), w.data(), nullptr, dx.data());
    Tensor gdx = gpu_bf16_zeros(nx);
    ops->linear_backward_input_bf16(s.rows, s.in, s.out, gdy.bf16(), gw.f32(), nullptr, gdx.bf16());
    EXPECT_TRUE(within_bf16_ulps(host(gdx), floats_of(dx), 1, 0)) << "linear_backward_input_bf16";
    Tensor gdx32 = gpu_zeros(nx);
    ops->linear_backward_input_bf16(s.rows, s.in, s.out, gdy.bf16(), gw.f32(), gdx32.f32(), nullptr);
    EXPECT_TRUE(within_bf16_ulps(host(gdx32), floats_of(dx), 1, 0)) << "linear_backward_input_bf16 into FP32 storage";

    std::vector<float> dw = sixteenths(nw, 5), db = sixteenths(static_cast<size_t>(s.out), 6);
    Tensor gdw = on_gpu(dw), gdb = on_gpu(db);
    cpu.linear_backward_params_accum_bf16(s.rows, s.in, s.out, x16.data(), dy16.data(), dw.data(), db.data());
    ops->linear_backward_params_accum_bf16(s.rows, s.in, s.out, gx.bf16(), gdy.bf16(), gdw.f32(), gdb.f32());
    EXPECT_EQ(host(gdw), dw) << "linear_backward_params_accum_bf16: dw";
    EXPECT_EQ(host(gdb), db) << "linear_backward_params_accum_bf16: db";
  }
}

TEST_F(Bf16StorageOps, GeluAndLayerNormEntriesMatchTheCpu) {
  const DeviceOps& cpu = cpu_device_ops();
  const float eps = 1e-5f;
  for (const BlockShape& s : kBlockShapes) {
    const int64_t rows = s.rows, dim = s.in == 20 ? 83 : s.in;
    SCOPED_TRACE(::testing::Message() << "rows " << rows << " dim " << dim);
    const size_t n = static_cast<size_t>(rows * dim), nr = static_cast<size_t>(rows);

    const auto pre = random_floats(n, 7, -4.0f, 4.0f), gdy_v = random_floats(n, 8);
    std::vector<uint16_t> dgelu(n);
    cpu.gelu_backward_bf16(static_cast<int64_t>(n), bits(pre).data(), bits(gdy_v).data(), dgelu.data());
    Tensor gg16 = gpu_bf16_zeros(n);
    ops->gelu_backward_bf16(static_cast<int64_t>(n), gpu_bf16(pre).bf16(), gpu_bf16(gdy_v).bf16(), gg16.bf16());
    EXPECT_TRUE(within_bf16_ulps(host(gg16), floats_of(dgelu), 1, 1e-6)) << "gelu_backward_bf16";

    const auto a = random_floats(n, 9, -3.0f, 2.0f), r = cpu_bf16(random_floats(n, 10)),
               g = random_floats(static_cast<size_t>(dim), 11, 0.5f, 1.5f),
               be = random_floats(static_cast<size_t>(dim), 12);
    std::vector<float> sum(n), mean(nr), rstd(nr);
    std::vector<uint16_t> y(n);
    cpu.add_layernorm_forward_bf16(rows, dim, a.data(), r.data(), g.data(), be.data(), eps, sum.data(), y.data(),
                                   mean.data(), rstd.data());
    const Tensor ga = on_gpu(a), gr = on_gpu(r), gg = on_gpu(g), gbe = on_gpu(be);
    Tensor gs = gpu_zeros(n), gy = gpu_bf16_zeros(n), gm = gpu_zeros(nr), grs = gpu_zeros(nr);
    ops->add_layernorm_forward_bf16(rows, dim, ga.f32(), gr.f32(), gg.f32(), gbe.f32(), eps, gs.f32(), gy.bf16(),
                                    gm.f32(), grs.f32());
    EXPECT_EQ(host(gs), sum);
    EXPECT_TRUE(within_bf16_ulps(host(gy), floats_of(y), 1, 1e-5)) << "add_layernorm_forward_bf16";
    EXPECT_TRUE(close(host(gm), mean, 1e-6, 1e-5));
    EXPECT_TRUE(close(host(grs), rstd, 1e-6, 1e-5));

    // Backward from the CPU's statistics, on the sum as x.
    const auto dy = random_floats(n, 13), dres = random_floats(n, 14);
    const std::vector<uint16_t> dy16 = bits(dy);
    const Tensor gdy = gpu_bf16(dy), gx = on_gpu(sum), gmean = on_gpu(mean), grstd = on_gpu(rstd);
    std::vector<float> dx(n), lnb(n);
    cpu.layernorm_backward_input_add_bf16(rows, dim, sum.data(), dy16.data(), g.data(), mean.data(), rstd.data(),
                                          dres.data(), dx.data());
    cpu.layernorm_backward_input_add_bf16(rows, dim, sum.data(), dy16.data(), g.data(), mean.data(), rstd.data(),
                                          nullptr, lnb.data());
    Tensor gdx = gpu_zeros(n), gdres = on_gpu(dres);
    ops->layernorm_backward_input_add_bf16(rows, dim, gx.f32(), gdy.bf16(), gg.f32(), gmean.f32(), grstd.f32(),
                                           gdres.f32(), gdx.f32());
    const std::vector<float> got = host(gdx);
    int bad = 0;
    for (size_t i = 0; i < n; ++i)  // dres + the rounded layer-norm gradient, within an ulp of the latter
      bad += !(std::fabs(static_cast<double>(got[i]) - dx[i]) <= bf16_ulp(lnb[i]) + 1e-4);
    EXPECT_EQ(bad, 0) << "layernorm_backward_input_add_bf16";

    std::vector<float> dgamma = random_floats(static_cast<size_t>(dim), 15), dbeta = random_floats(static_cast<size_t>(dim), 16);
    Tensor gdgamma = on_gpu(dgamma), gdbeta = on_gpu(dbeta);
    cpu.layernorm_backward_params_accum_bf16(rows, dim, sum.data(), dy16.data(), mean.data(), rstd.data(),
                                             dgamma.data(), dbeta.data());
    ops->layernorm_backward_params_accum_bf16(rows, dim, gx.f32(), gdy.bf16(), gmean.f32(), grstd.f32(),
                                              gdgamma.f32(), gdbeta.f32());
    EXPECT_TRUE(close(host(gdgamma), dgamma, 1e-3, 1e-4)) << "layernorm_backward_params_accum_bf16: dgamma";
    EXPECT_TRUE(close(host(gdbeta), dbeta, 1e-3, 1e-4)) << "layernorm_backward_params_accum_bf16: dbeta";
  }
}

// The loss on bf16 logits (a language model's head under bf16 storage): the
// loss and correct count as the CPU's, the gradient within one bf16 ulp +
// 1e-9 (expf against the CPU's exp). The zoo gpt's vocabulary at 2 of its
// 8 x 1024 rows: the rows are independent, and the host's share of the
// test (random logits, the CPU's loss, the comparison) grows with them.
TEST_F(Bf16StorageOps, CrossEntropyOnBf16LogitsMatchesTheCpu) {
  const DeviceOps& cpu = cpu_device_ops();
  for (const auto& [rows, classes] : {std::pair<int64_t, int64_t>{8 * 128, 1000}, {2 * 1024, 50304}, {37, 83}}) {
    SCOPED_TRACE(::testing::Message() << "rows " << rows << " classes " << classes);
    const size_t n = static_cast<size_t>(rows * classes);
    const auto logits = cpu_bf16(random_floats(n, 31, -6.0f, 6.0f));
    std::vector<int32_t> labels = random_ints(static_cast<size_t>(rows), 32, static_cast<int32_t>(classes));
    std::vector<uint16_t> grad(n);
    double loss = 0, gloss = 0;
    int64_t correct = 0, gcorrect = 0;
    const float scale = 1.0f / static_cast<float>(rows);
    cpu.softmax_cross_entropy_bf16(rows, classes, bits(logits).data(), labels.data(), scale, grad.data(), &loss,
                                   &correct);
    const Tensor glogits = gpu_bf16(logits), glabels = on_gpu_ints(labels);
    Tensor ggrad = gpu_bf16_zeros(n);
    ops->softmax_cross_entropy_bf16(rows, classes, glogits.bf16(), glabels.data<int32_t>(), scale, ggrad.bf16(),
                                    &gloss, &gcorrect);
    EXPECT_NEAR(gloss, loss, 1e-5 * std::fabs(loss));
    EXPECT_EQ(gcorrect, correct);
    EXPECT_TRUE(within_bf16_ulps(host(ggrad), floats_of(grad), 1, 1e-9));
  }
}

namespace {

struct BlockRun {
  std::vector<float> y, dx;
  std::vector<std::vector<float>> grads;
  size_t saved_bytes = 0;
};

BlockRun run_block_on_gpu(const Layer& block, const std::vector<Tensor>& params_h, const Tensor& x_h,
                          const Tensor& dy_h, Bf16Storage storage) {
  const Device dev = Device::cuda(0);
  set_bf16_storage(storage);
  std::vector<Tensor> params, grads;
  for (const Tensor& t : params_h) {
    params.push_back(t.to(dev));
    grads.push_back(Tensor::zeros(t.shape(), DType::F32, dev));
  }
  StepInfo step;
  step.precision = Precision::BF16;
  LayerContext ctx;
  BlockRun r;
  r.y = block.forward({params, {}, step}, x_h.to(dev), ctx).to_floats();
  r.saved_bytes = ctx.saved_bytes();
  r.dx = block.backward({params, grads, step, true}, dy_h.to(dev), ctx).to_floats();
  for (const Tensor& g : grads) r.grads.push_back(g.to_floats());
  set_bf16_storage(Bf16Storage::WhereItPays);
  return r;
}

}  // namespace

TEST_F(Bf16StorageOps, TheBlockWithBf16StorageMatchesTheBlockWithoutAndSavesLess) {
  EXPECT_TRUE(ops->bf16_storage_pays);
  const int64_t B = 2, T = 64, dim = 256, heads = 4;
  LayerPtr block = make_transformer_block(dim, heads, 0.1f);
  std::vector<Tensor> params;
  uint32_t key = 70;
  for (const ParamSpec& s : block->param_specs())
    params.push_back(Tensor::from_floats(cpu_bf16(random_floats(static_cast<size_t>(shape_numel(s.shape)), key++, -0.2f, 0.2f)),
                                         s.shape));
  const Tensor x = Tensor::from_floats(cpu_bf16(random_floats(static_cast<size_t>(B * T * dim), 41)), {B, T, dim});
  const Tensor dy = Tensor::from_floats(cpu_bf16(random_floats(static_cast<size_t>(B * T * dim), 42)), {B, T, dim});
  const BlockRun without = run_block_on_gpu(*block, params, x, dy, Bf16Storage::Never);
  const BlockRun with = run_block_on_gpu(*block, params, x, dy, Bf16Storage::Always);
  EXPECT_TRUE(close_l2(with.y, without.y, 3e-2, 1e-1)) << "y";
  EXPECT_TRUE(close_l2(with.dx, without.dx, 3e-2, 1e-1)) << "dx";
  const std::vector<ParamSpec> specs = block->param_specs();
  for (size_t i = 0; i < specs.size(); ++i)
    EXPECT_TRUE(close_l2(with.grads[i], without.grads[i], 3e-2, 1e-1)) << "gradient of " << specs[i].name;
  EXPECT_EQ(without.saved_bytes - with.saved_bytes, static_cast<size_t>(B * T * 14 * dim * 2));
}

}  // namespace pd::gputest

#endif  // PIPEDREAM_HAVE_CUDA

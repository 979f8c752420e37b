// The fused transformer-block entries (linear_gelu_forward,
// gelu_backward_rounded, add_layernorm_forward,
// layernorm_backward_input_add) on the GPU against the CPU's entries, at
// gpt-mini's shape (8 x 128 tokens, width 256), the zoo gpt's (8 x 1024,
// width 768) and a ragged one; and the transformer block on cuda against
// cpu under FP32 and BF16. Tolerances:
//   linear_gelu_forward: the inputs are multiples of 1/16 in [-0.5, 0.5] (bf16
//     values whose products and sums are exact in FP32), so pre is the
//     same on both devices (exact); y: FP32 atol 1e-6 rtol 1e-5 (tanhf vs
//     the CPU's tanh), BF16 within one bf16 ulp + 1e-6 (the tanh forms
//     differ by ~1e-7 absolute, many ulps of GELU's tiny negative tail);
//   gelu_backward_rounded: FP32 atol 1e-6 rtol 1e-5, BF16 one bf16 ulp + 1e-6;
//   add_layernorm_forward: s exact (one addition); y FP32 atol 1e-5 rtol
//     1e-4, BF16 one bf16 ulp + 1e-5; mean, rstd atol 1e-6 rtol 1e-5;
//   layernorm_backward_input_add: FP32 atol 1e-4 rtol 1e-4, BF16 one bf16
//     ulp of the layer-norm gradient + 1e-4;
//   every entry: the same bits on a second run;
//   the block: FP32 relative L2 error 1e-4 and largest error 1e-3 of the
//     largest value (cuBLAS accumulation order); BF16
//     relative L2 error 3e-2 and largest error 1e-1 of the largest value
//     (bf16 GEMMs and cuDNN's fused attention against the CPU's FP32
//     products of the same bf16 operands).
#if defined(PIPEDREAM_HAVE_CUDA)  // the whole file needs the CUDA backend
#include <cmath>
#include <string>

#include "core/layers.h"
#include "core/precision.h"
#include "tests/gpu/bf16_compare.h"
#include "tests/gpu/gpu_test.h"

namespace pd::gputest {

namespace {

const char* name(Precision p) { return p == Precision::BF16 ? "bf16" : "fp32"; }

}  // namespace

using FusedBlockOps = GpuTest;

TEST_F(FusedBlockOps, LinearGeluForwardMatchesTheCpuEntry) {
  const DeviceOps& cpu = cpu_device_ops();
  for (const BlockShape& s : kBlockShapes) {
    const auto x = sixteenths(static_cast<size_t>(s.rows * s.in), 1), w = sixteenths(static_cast<size_t>(s.out * s.in), 2),
               b = sixteenths(static_cast<size_t>(s.out), 3);
    const size_t n = static_cast<size_t>(s.rows * s.out);
    const Tensor gx = on_gpu(x), gw = on_gpu(w), gb = on_gpu(b);
    for (Precision p : {Precision::FP32, Precision::BF16}) {
      SCOPED_TRACE(::testing::Message() << name(p) << " rows " << s.rows << " in " << s.in << " out " << s.out);
      std::vector<float> pre(n), y(n);
      cpu.linear_gelu_forward(p, s.rows, s.in, s.out, x.data(), w.data(), b.data(), pre.data(), y.data());
      Tensor gpre = gpu_zeros(n), gy = gpu_zeros(n), gpre2 = gpu_zeros(n), gy2 = gpu_zeros(n);
      ops->linear_gelu_forward(p, s.rows, s.in, s.out, gx.f32(), gw.f32(), gb.f32(), gpre.f32(), gy.f32());
      ops->linear_gelu_forward(p, s.rows, s.in, s.out, gx.f32(), gw.f32(), gb.f32(), gpre2.f32(), gy2.f32());
      EXPECT_EQ(host(gpre), pre);
      if (p == Precision::BF16) {
        EXPECT_EQ(host(gy), cpu_bf16(host(gy))) << "y is not rounded to bf16";
        EXPECT_TRUE(within_bf16_ulps(host(gy), y, 1, 1e-6));
      } else {
        EXPECT_TRUE(close(host(gy), y, 1e-6, 1e-5));
      }
      EXPECT_EQ(host(gpre), host(gpre2));
      EXPECT_EQ(host(gy), host(gy2));
    }
  }
}

TEST_F(FusedBlockOps, GeluBackwardRoundedMatchesTheCpuEntry) {
  const DeviceOps& cpu = cpu_device_ops();
  for (const BlockShape& s : kBlockShapes) {
    const size_t n = static_cast<size_t>(s.rows * s.out);
    const auto pre = cpu_bf16(random_floats(n, 4, -4.0f, 4.0f)), dy = cpu_bf16(random_floats(n, 5));
    const Tensor gpre = on_gpu(pre), gdy = on_gpu(dy);
    for (Precision p : {Precision::FP32, Precision::BF16}) {
      SCOPED_TRACE(::testing::Message() << name(p) << " n " << n);
      std::vector<float> dx(n);
      cpu.gelu_backward_rounded(p, static_cast<int64_t>(n), pre.data(), dy.data(), dx.data());
      Tensor gdx = gpu_zeros(n), gdx2 = gpu_zeros(n);
      ops->gelu_backward_rounded(p, static_cast<int64_t>(n), gpre.f32(), gdy.f32(), gdx.f32());
      ops->gelu_backward_rounded(p, static_cast<int64_t>(n), gpre.f32(), gdy.f32(), gdx2.f32());
      if (p == Precision::BF16) {
        EXPECT_EQ(host(gdx), cpu_bf16(host(gdx))) << "dx is not rounded to bf16";
        EXPECT_TRUE(within_bf16_ulps(host(gdx), dx, 1, 1e-6));
      } else {
        EXPECT_TRUE(close(host(gdx), dx, 1e-6, 1e-5));
      }
      EXPECT_EQ(host(gdx), host(gdx2));
    }
  }
}

TEST_F(FusedBlockOps, AddLayerNormForwardMatchesTheCpuEntry) {
  const DeviceOps& cpu = cpu_device_ops();
  const float eps = 1e-5f;
  for (const BlockShape& s : kBlockShapes) {
    const int64_t rows = s.rows, dim = s.in == 20 ? 83 : s.in;  // ragged: 83 features
    const size_t n = static_cast<size_t>(rows * dim);
    const auto a = random_floats(n, 6, -3.0f, 2.0f), r = cpu_bf16(random_floats(n, 7)),
               g = random_floats(static_cast<size_t>(dim), 8, 0.5f, 1.5f), be = random_floats(static_cast<size_t>(dim), 9);
    const Tensor ga = on_gpu(a), gr = on_gpu(r), gg = on_gpu(g), gbe = on_gpu(be);
    for (Precision p : {Precision::FP32, Precision::BF16}) {
      for (bool with_residual : {true, false}) {
        SCOPED_TRACE(::testing::Message() << name(p) << " rows " << rows << " dim " << dim
                                          << (with_residual ? " with" : " without") << " residual");
        std::vector<float> sum(n), y(n), mean(static_cast<size_t>(rows)), rstd(static_cast<size_t>(rows));
        cpu.add_layernorm_forward(p, rows, dim, a.data(), with_residual ? r.data() : nullptr, g.data(), be.data(), eps,
                                  with_residual ? sum.data() : nullptr, y.data(), mean.data(), rstd.data());
        Tensor gs = gpu_zeros(n), gy = gpu_zeros(n), gm = gpu_zeros(static_cast<size_t>(rows)),
               grs = gpu_zeros(static_cast<size_t>(rows)), gy2 = gpu_zeros(n);
        auto run = [&](Tensor& out) {
          ops->add_layernorm_forward(p, rows, dim, ga.f32(), with_residual ? gr.f32() : nullptr, gg.f32(), gbe.f32(),
                                     eps, with_residual ? gs.f32() : nullptr, out.f32(), gm.f32(), grs.f32());
        };
        run(gy);
        if (with_residual) EXPECT_EQ(host(gs), sum);
        if (p == Precision::BF16) {
          EXPECT_EQ(host(gy), cpu_bf16(host(gy))) << "y is not rounded to bf16";
          EXPECT_TRUE(within_bf16_ulps(host(gy), y, 1, 1e-5));
        } else {
          EXPECT_TRUE(close(host(gy), y, 1e-5, 1e-4));
        }
        EXPECT_TRUE(close(host(gm), mean, 1e-6, 1e-5));
        EXPECT_TRUE(close(host(grs), rstd, 1e-6, 1e-5));
        run(gy2);
        EXPECT_EQ(host(gy), host(gy2));
      }
    }
  }
}

TEST_F(FusedBlockOps, LayerNormBackwardInputAddMatchesTheCpuEntry) {
  const DeviceOps& cpu = cpu_device_ops();
  const float eps = 1e-5f;
  for (const BlockShape& s : kBlockShapes) {
    const int64_t rows = s.rows, dim = s.in == 20 ? 83 : s.in;
    const size_t n = static_cast<size_t>(rows * dim), nr = static_cast<size_t>(rows);
    const auto x = random_floats(n, 10, -3.0f, 2.0f), dy = cpu_bf16(random_floats(n, 11)),
               dres = random_floats(n, 12), g = random_floats(static_cast<size_t>(dim), 13, 0.5f, 1.5f),
               be = random_floats(static_cast<size_t>(dim), 14);
    std::vector<float> y(n), mean(nr), rstd(nr);
    cpu.layernorm_forward(rows, dim, x.data(), g.data(), be.data(), eps, y.data(), mean.data(), rstd.data());
    const Tensor gx = on_gpu(x), gdy = on_gpu(dy), gdres = on_gpu(dres), gg = on_gpu(g), gm = on_gpu(mean),
                 grs = on_gpu(rstd);
    for (Precision p : {Precision::FP32, Precision::BF16}) {
      SCOPED_TRACE(::testing::Message() << name(p) << " rows " << rows << " dim " << dim);
      std::vector<float> dx(n), lnb(n);
      cpu.layernorm_backward_input_add(p, rows, dim, x.data(), dy.data(), g.data(), mean.data(), rstd.data(),
                                       dres.data(), dx.data());
      cpu.layernorm_backward_input_add(p, rows, dim, x.data(), dy.data(), g.data(), mean.data(), rstd.data(), nullptr,
                                       lnb.data());
      Tensor gdx = gpu_zeros(n), gdx2 = gpu_zeros(n), glnb = gpu_zeros(n);
      ops->layernorm_backward_input_add(p, rows, dim, gx.f32(), gdy.f32(), gg.f32(), gm.f32(), grs.f32(), gdres.f32(),
                                        gdx.f32());
      ops->layernorm_backward_input_add(p, rows, dim, gx.f32(), gdy.f32(), gg.f32(), gm.f32(), grs.f32(), gdres.f32(),
                                        gdx2.f32());
      ops->layernorm_backward_input_add(p, rows, dim, gx.f32(), gdy.f32(), gg.f32(), gm.f32(), grs.f32(), nullptr,
                                        glnb.f32());
      if (p == Precision::BF16) {
        EXPECT_EQ(host(glnb), cpu_bf16(host(glnb))) << "the layer-norm gradient is not rounded to bf16";
        EXPECT_TRUE(within_bf16_ulps(host(glnb), lnb, 1, 1e-4));
        EXPECT_TRUE(within_bf16_ulps(host(gdx), dx, 1, 1e-4, &lnb));
      } else {
        EXPECT_TRUE(close(host(glnb), lnb, 1e-4, 1e-4));
        EXPECT_TRUE(close(host(gdx), dx, 1e-4, 1e-4));
      }
      EXPECT_EQ(host(gdx), host(gdx2));
      // In place on dres: the same values.
      Tensor inplace = on_gpu(dres);
      ops->layernorm_backward_input_add(p, rows, dim, gx.f32(), gdy.f32(), gg.f32(), gm.f32(), grs.f32(),
                                        inplace.f32(), inplace.f32());
      EXPECT_EQ(host(inplace), host(gdx));
    }
  }
}

namespace {

struct BlockResult {
  std::vector<float> y, dx;
  std::vector<std::vector<float>> grads;
};

BlockResult run_block(const Layer& block, Device dev, const std::vector<Tensor>& params_h, const Tensor& x_h,
                      const Tensor& dy_h, Precision p) {
  std::vector<Tensor> params, grads;
  for (const Tensor& t : params_h) {
    params.push_back(t.to(dev));
    grads.push_back(Tensor::zeros(t.shape(), DType::F32, dev));
  }
  StepInfo step;
  step.training = true;
  step.precision = p;
  LayerContext ctx;
  BlockResult r;
  r.y = block.forward({params, {}, step}, x_h.to(dev), ctx).to_floats();
  r.dx = block.backward({params, grads, step, true}, dy_h.to(dev), ctx).to_floats();
  for (const Tensor& g : grads) r.grads.push_back(g.to_floats());
  return r;
}

}  // namespace

// The block (the fused entries, attention, fc2, dropout) forward + backward
// on cuda against cpu, with bf16-valued parameters and data as the layer
// range runner hands them under BF16.
TEST_F(FusedBlockOps, TransformerBlockOnCudaMatchesCpuUnderBothPrecisions) {
  const int64_t B = 2, T = 64, dim = 256, heads = 4;
  LayerPtr block = make_transformer_block(dim, heads, 0.1f);
  std::vector<Tensor> params = allocate_params(*block);
  block->init(params, {}, CounterRng(9, 0, 0));
  for (size_t i = 0; i < params.size(); ++i)
    params[i] = Tensor::from_floats(cpu_bf16(random_floats(static_cast<size_t>(params[i].numel()), static_cast<uint32_t>(50 + i), -0.2f, 0.2f)),
                                    params[i].shape());
  const Tensor x = Tensor::from_floats(cpu_bf16(random_floats(static_cast<size_t>(B * T * dim), 41)), {B, T, dim});
  const Tensor dy = Tensor::from_floats(cpu_bf16(random_floats(static_cast<size_t>(B * T * dim), 42)), {B, T, dim});
  const std::vector<ParamSpec> specs = block->param_specs();
  for (Precision p : {Precision::FP32, Precision::BF16}) {
    SCOPED_TRACE(name(p));
    const BlockResult c = run_block(*block, Device::cpu(), params, x, dy, p);
    const BlockResult g = run_block(*block, Device::cuda(0), params, x, dy, p);
    auto check = [&](const std::vector<float>& got, const std::vector<float>& want, const std::string& what) {
      if (p == Precision::FP32)
        EXPECT_TRUE(close_l2(got, want, 1e-4, 1e-3)) << what;
      else
        EXPECT_TRUE(close_l2(got, want, 3e-2, 1e-1)) << what;
    };
    check(g.y, c.y, "y");
    check(g.dx, c.dx, "dx");
    for (size_t i = 0; i < c.grads.size(); ++i) check(g.grads[i], c.grads[i], "gradient of " + specs[i].name);
  }
}

}  // namespace pd::gputest

#endif  // PIPEDREAM_HAVE_CUDA

// Convolution beyond the core conv2d: rectangular kernels (Inception's 1x7
// and 7x1), different strides per axis, per-side pads. Per sample: im2col
// into [C*kh*kw, OH*OW], then one GEMM with the weight [O, C*kh*kw];
// backward by the transposed GEMMs and col2im.
#include <algorithm>

#include "core/cpu/gemm.h"
#include "onnx/ops/op_util.h"
#include "onnx/ops/ops.h"

namespace pd::onnx {

namespace {

struct ConvGeometry : Window2d {
  int64_t oh(int64_t H) const { return (H + top + bottom - kh) / sh + 1; }
  int64_t ow(int64_t W) const { return (W + left + right - kw) / sw + 1; }
};

class GeneralConvOp : public Op {
 public:
  explicit GeneralConvOp(ConvGeometry g) : g_(g) {}
  std::string type() const override { return "Conv"; }

  std::vector<Tensor> forward(std::span<const Tensor> in, const StepInfo&, LayerContext& ctx) const override {
    const Tensor &x = in[0], &w = in[1];
    require_cpu_f32(x, "Conv");
    const bool bias = in.size() > 2 && in[2].defined();
    const int64_t N = x.dim(0), C = x.dim(1), H = x.dim(2), W = x.dim(3), O = w.dim(0);
    const int64_t OH = g_.oh(H), OW = g_.ow(W), P = OH * OW, K = C * g_.kh * g_.kw;
    Tensor y = Tensor::empty({N, O, OH, OW});
    std::vector<float> col(static_cast<size_t>(K * P));
    for (int64_t n = 0; n < N; ++n) {
      im2col(x.f32() + n * C * H * W, C, H, W, col.data());
      float* yn = y.f32() + n * O * P;
      if (bias)
        for (int64_t o = 0; o < O; ++o) std::fill(yn + o * P, yn + (o + 1) * P, in[2].f32()[o]);
      cpu::gemm(false, false, O, P, K, 1.0f, w.f32(), K, col.data(), P, bias ? 1.0f : 0.0f, yn, P);
    }
    ctx.saved = {x, w};
    return {y};
  }

  std::vector<Tensor> backward(std::span<const Tensor> dys, const std::vector<bool>& need, const StepInfo&,
                               LayerContext& ctx) const override {
    const Tensor &x = ctx.saved[0], &w = ctx.saved[1], &dy = dys[0];
    const int64_t N = x.dim(0), C = x.dim(1), H = x.dim(2), W = x.dim(3), O = w.dim(0);
    const int64_t P = dy.dim(2) * dy.dim(3), K = C * g_.kh * g_.kw;
    std::vector<Tensor> g(need.size());
    Tensor dx = need[0] ? Tensor::zeros(x.shape()) : Tensor();
    Tensor dw = Tensor::zeros(w.shape());
    Tensor db = need.size() > 2 && need[2] ? Tensor::zeros({O}) : Tensor();
    std::vector<float> col(static_cast<size_t>(K * P));
    for (int64_t n = 0; n < N; ++n) {
      const float* dyn = dy.f32() + n * O * P;
      im2col(x.f32() + n * C * H * W, C, H, W, col.data());
      cpu::gemm(false, true, O, K, P, 1.0f, dyn, P, col.data(), P, 1.0f, dw.f32(), K);  // dW += dy col^T
      if (db.defined())
        for (int64_t o = 0; o < O; ++o)
          for (int64_t p = 0; p < P; ++p) db.f32()[o] += dyn[o * P + p];
      if (need[0]) {
        cpu::gemm(true, false, K, P, O, 1.0f, w.f32(), K, dyn, P, 0.0f, col.data(), P);  // dcol = W^T dy
        col2im_add(col.data(), C, H, W, dx.f32() + n * C * H * W);
      }
    }
    g[0] = dx;
    if (need.size() > 1 && need[1]) g[1] = dw;
    if (db.defined()) g[2] = db;
    ctx.clear();
    return g;
  }

 private:
  // Row (c, i, j) of col, column (oh, ow) = x[c, oh*sh - top + i, ow*sw - left + j] (0 outside).
  void im2col(const float* x, int64_t C, int64_t H, int64_t W, float* col) const {
    const int64_t OH = g_.oh(H), OW = g_.ow(W);
    for (int64_t c = 0; c < C; ++c)
      for (int64_t i = 0; i < g_.kh; ++i)
        for (int64_t j = 0; j < g_.kw; ++j) {
          float* row = col + ((c * g_.kh + i) * g_.kw + j) * OH * OW;
          for (int64_t oh = 0; oh < OH; ++oh) {
            const int64_t h = oh * g_.sh - g_.top + i;
            for (int64_t ow = 0; ow < OW; ++ow) {
              const int64_t v = ow * g_.sw - g_.left + j;
              row[oh * OW + ow] = h >= 0 && h < H && v >= 0 && v < W ? x[(c * H + h) * W + v] : 0.0f;
            }
          }
        }
  }
  void col2im_add(const float* col, int64_t C, int64_t H, int64_t W, float* dx) const {
    const int64_t OH = g_.oh(H), OW = g_.ow(W);
    for (int64_t c = 0; c < C; ++c)
      for (int64_t i = 0; i < g_.kh; ++i)
        for (int64_t j = 0; j < g_.kw; ++j) {
          const float* row = col + ((c * g_.kh + i) * g_.kw + j) * OH * OW;
          for (int64_t oh = 0; oh < OH; ++oh) {
            const int64_t h = oh * g_.sh - g_.top + i;
            if (h < 0 || h >= H) continue;
            for (int64_t ow = 0; ow < OW; ++ow) {
              const int64_t v = ow * g_.sw - g_.left + j;
              if (v >= 0 && v < W) dx[(c * H + h) * W + v] += row[oh * OW + ow];
            }
          }
        }
  }
  ConvGeometry g_;
};

}  // namespace

OpPtr make_general_conv_op(const Node& n, const OpInputs& in) {
  const Tensor &x = in.at(0), &w = in.at(1);
  const std::vector<int64_t> k = n.ints_attr("kernel_shape"), d = n.ints_attr("dilations");
  for (int64_t v : d)
    if (v != 1) unsupported(n, "dilation is not supported");
  if (n.int_attr("group", 1) != 1) unsupported(n, "grouped convolution needs a square kernel and equal strides and pads");
  ConvGeometry g;
  g.kh = k.size() == 2 ? k[0] : w.dim(2);
  g.kw = k.size() == 2 ? k[1] : w.dim(3);
  if (w.ndim() != 4 || w.dim(1) != x.dim(1) || w.dim(2) != g.kh || w.dim(3) != g.kw)
    unsupported(n, "weight shape does not match the input and kernel");
  read_strides_and_pads(n, /*pads_below_kernel=*/false, g);
  if (g.oh(x.dim(2)) < 1 || g.ow(x.dim(3)) < 1) unsupported(n, cat("the kernel does not fit the input ", shape_str(x.shape())));
  return std::make_unique<GeneralConvOp>(g);
}

}  // namespace pd::onnx

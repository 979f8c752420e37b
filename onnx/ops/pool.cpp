// MaxPool and AveragePool where the core pools do not fit: ceil_mode
// (SqueezeNet), rectangular windows, per-side pads, count_include_pad=0.
// Output sizes and divisors follow PyTorch, whose exports these are.
#include <algorithm>
#include <cmath>

#include "onnx/ops/op_util.h"
#include "onnx/ops/ops.h"

namespace pd::onnx {

namespace {

struct Geometry : Window2d {
  bool ceil = false, include_pad = false;

  int64_t out(int64_t size, int64_t k, int64_t s, int64_t before, int64_t after) const {
    const int64_t span = size + before + after - k;
    int64_t o = (ceil ? (span + s - 1) / s : span / s) + 1;
    if (ceil && (o - 1) * s >= size + before) --o;  // the last window must start inside the input or its leading pad
    return o;
  }
  int64_t oh(int64_t H) const { return out(H, kh, sh, top, bottom); }
  int64_t ow(int64_t W) const { return out(W, kw, sw, left, right); }
};

class PoolOp : public Op {
 public:
  PoolOp(std::string type, Geometry g) : type_(std::move(type)), g_(g) {}
  std::string type() const override { return type_; }

  std::vector<Tensor> forward(std::span<const Tensor> in, const StepInfo&, LayerContext& ctx) const override {
    const Tensor& x = in[0];
    require_cpu_f32(x, type_.c_str());
    const int64_t planes = x.dim(0) * x.dim(1), H = x.dim(2), W = x.dim(3), OH = g_.oh(H), OW = g_.ow(W);
    Tensor y = Tensor::empty({x.dim(0), x.dim(1), OH, OW});
    const bool max = type_ == "MaxPool";
    Tensor arg = max ? Tensor::empty(y.shape(), DType::I32) : Tensor();
    for (int64_t p = 0; p < planes; ++p) {
      const float* xp = x.f32() + p * H * W;
      for (int64_t i = 0; i < OH; ++i)
        for (int64_t j = 0; j < OW; ++j) {
          const int64_t o = p * OH * OW + i * OW + j;
          Window w = window(i, j, H, W);
          if (max) {
            float best = -INFINITY;
            int32_t at = -1;
            for (int64_t r = w.h0; r < w.h1; ++r)
              for (int64_t c = w.w0; c < w.w1; ++c)
                if (xp[r * W + c] > best || at < 0) {
                  best = xp[r * W + c];
                  at = static_cast<int32_t>(r * W + c);
                }
            y.f32()[o] = best;
            arg.data<int32_t>()[o] = at;
          } else {
            float sum = 0;
            for (int64_t r = w.h0; r < w.h1; ++r)
              for (int64_t c = w.w0; c < w.w1; ++c) sum += xp[r * W + c];
            y.f32()[o] = sum / static_cast<float>(w.divisor);
          }
        }
    }
    std::vector<int32_t> d(x.shape().begin(), x.shape().end());
    ctx.saved = {Tensor::from_ints(d, {4}), arg};
    return {y};
  }

  std::vector<Tensor> backward(std::span<const Tensor> dys, const std::vector<bool>& need, const StepInfo&,
                               LayerContext& ctx) const override {
    std::vector<Tensor> g(need.size());
    if (need[0]) {
      const int32_t* d = ctx.saved[0].data<int32_t>();
      const Tensor& dy = dys[0];
      const int64_t planes = int64_t(d[0]) * d[1], H = d[2], W = d[3], OH = dy.dim(2), OW = dy.dim(3);
      Tensor dx = Tensor::zeros({d[0], d[1], d[2], d[3]});
      const bool max = type_ == "MaxPool";
      for (int64_t p = 0; p < planes; ++p) {
        float* dp = dx.f32() + p * H * W;
        for (int64_t i = 0; i < OH; ++i)
          for (int64_t j = 0; j < OW; ++j) {
            const int64_t o = p * OH * OW + i * OW + j;
            if (max) {
              dp[ctx.saved[1].data<int32_t>()[o]] += dy.f32()[o];
            } else {
              Window w = window(i, j, H, W);
              const float v = dy.f32()[o] / static_cast<float>(w.divisor);
              for (int64_t r = w.h0; r < w.h1; ++r)
                for (int64_t c = w.w0; c < w.w1; ++c) dp[r * W + c] += v;
            }
          }
      }
      g[0] = dx;
    }
    ctx.clear();
    return g;
  }

 private:
  struct Window {
    int64_t h0, h1, w0, w1, divisor;
  };
  // As PyTorch's avg_pool2d: the divisor counts the padded window (clipped
  // to the padded input) or only the real cells.
  Window window(int64_t i, int64_t j, int64_t H, int64_t W) const {
    int64_t h0 = i * g_.sh - g_.top, w0 = j * g_.sw - g_.left;
    int64_t h1 = std::min(h0 + g_.kh, H + g_.bottom), w1 = std::min(w0 + g_.kw, W + g_.right);
    const int64_t padded = (h1 - h0) * (w1 - w0);
    h0 = std::max<int64_t>(h0, 0);
    w0 = std::max<int64_t>(w0, 0);
    h1 = std::min(h1, H);
    w1 = std::min(w1, W);
    return {h0, h1, w0, w1, std::max<int64_t>(1, g_.include_pad ? padded : (h1 - h0) * (w1 - w0))};
  }
  std::string type_;
  Geometry g_;
};

}  // namespace

OpPtr make_pool_op(const Node& n, const OpInputs& in) {
  const Tensor& x = in.at(0);
  if (x.ndim() != 4) unsupported(n, "only 2-d pooling (NCHW) is supported");
  const std::vector<int64_t> k = n.ints_attr("kernel_shape"), d = n.ints_attr("dilations");
  const Attribute* pad_mode = n.attribute("auto_pad");
  if (pad_mode && pad_mode->s != "NOTSET") unsupported(n, "auto_pad " + pad_mode->s + " is not supported (use explicit pads)");
  for (int64_t v : d)
    if (v != 1) unsupported(n, "dilation is not supported");
  if (k.size() != 2 || k[0] < 1 || k[1] < 1) unsupported(n, "kernel_shape must have two positive sizes");
  Geometry g;
  g.kh = k[0];
  g.kw = k[1];
  read_strides_and_pads(n, /*pads_below_kernel=*/true, g);
  g.ceil = n.int_attr("ceil_mode", 0) != 0;
  g.include_pad = n.int_attr("count_include_pad", 0) != 0;
  if (g.oh(x.dim(2)) < 1 || g.ow(x.dim(3)) < 1) unsupported(n, cat("the window does not fit the input ", shape_str(x.shape())));
  return std::make_unique<PoolOp>(n.op_type, g);
}

}  // namespace pd::onnx

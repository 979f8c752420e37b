// Pad in constant mode (PyTorch exports some pooling paddings this way):
// the input copied into a tensor filled with the constant. Backward takes
// the inner window of dy.
#include "onnx/ops/op_util.h"
#include "onnx/ops/ops.h"

namespace pd::onnx {

namespace {

class PadOp : public Op {
 public:
  PadOp(std::vector<int64_t> before, std::vector<int64_t> after, float value)
      : before_(std::move(before)), after_(std::move(after)), value_(value) {}
  std::string type() const override { return "Pad"; }

  std::vector<Tensor> forward(std::span<const Tensor> in, const StepInfo&, LayerContext& ctx) const override {
    const Tensor& x = in[0];
    require_cpu_f32(x, "Pad");
    Shape out = x.shape();
    for (size_t d = 0; d < out.size(); ++d) out[d] += before_[d] + after_[d];
    Tensor y = Tensor::full(out, value_);
    const auto dst = inner_strides(out);
    const float* xp = x.f32();
    float* yp = y.f32() + offset(out);
    for_each_broadcast(x.shape(), dst, dst, [&](int64_t i, int64_t o, int64_t) { yp[o] = xp[i]; });
    ctx.saved = {shape_tensor(x.shape())};
    return {y};
  }

  std::vector<Tensor> backward(std::span<const Tensor> dys, const std::vector<bool>& need, const StepInfo&,
                               LayerContext& ctx) const override {
    std::vector<Tensor> g(need.size());
    if (need[0]) {
      const Shape in = shape_from_tensor(ctx.saved[0]);
      const Tensor& dy = dys[0];
      Tensor dx = Tensor::empty(in);
      const auto src = inner_strides(dy.shape());
      const float* gp = dy.f32() + offset(dy.shape());
      for_each_broadcast(in, src, src, [&](int64_t i, int64_t o, int64_t) { dx.f32()[i] = gp[o]; });
      g[0] = dx;
    }
    ctx.clear();
    return g;
  }

 private:
  static std::vector<int64_t> inner_strides(const Shape& padded) {
    std::vector<int64_t> s(padded.size(), 1);
    for (size_t d = padded.size(); d-- > 1;) s[d - 1] = s[d] * padded[d];
    return s;
  }
  int64_t offset(const Shape& padded) const {
    const auto s = inner_strides(padded);
    int64_t o = 0;
    for (size_t d = 0; d < padded.size(); ++d) o += before_[d] * s[d];
    return o;
  }
  std::vector<int64_t> before_, after_;
  float value_;
};

}  // namespace

OpPtr make_pad_op(const Node& n, const OpInputs& in) {
  const Tensor& x = in.at(0);
  if (x.dtype() != DType::F32) unsupported(n, "expects a float input");
  const Attribute* mode = n.attribute("mode");
  if (mode && mode->s != "constant") unsupported(n, "mode " + mode->s + " is not supported (only constant)");
  const std::vector<int64_t> pads = const_ints(n, in, 1);
  const size_t r = static_cast<size_t>(x.ndim());
  if (in.example.size() > 3 && in.example[3].defined()) unsupported(n, "the axes input is not supported");
  if (pads.size() != 2 * r) unsupported(n, cat("pads has ", pads.size(), " values for a rank-", r, " input"));
  std::vector<int64_t> before(pads.begin(), pads.begin() + static_cast<std::ptrdiff_t>(r)),
      after(pads.begin() + static_cast<std::ptrdiff_t>(r), pads.end());
  for (size_t d = 0; d < r; ++d) {
    if (before[d] < 0 || after[d] < 0) unsupported(n, "negative pads (cropping) are not supported");
    if (int(d) == in.batch_axis(0) && (before[d] || after[d])) unsupported(n, "padding the batch dimension is not supported");
  }
  float value = 0;
  if (in.example.size() > 2 && in.example[2].defined()) value = const_scalar(n, in, 2);
  return std::make_unique<PadOp>(before, after, value);
}

}  // namespace pd::onnx

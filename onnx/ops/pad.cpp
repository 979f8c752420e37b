// Pad in constant mode (PyTorch exports some pooling paddings this way):
// the input copied into a tensor filled with the constant. Backward takes
// the inner window of dy.
#include "onnx/ops/op_util.h"
#include "onnx/ops/ops.h"
#include "onnx/ops/strided.h"

namespace pd::onnx {

namespace {

class PadOp : public Op {
 public:
  PadOp(std::vector<int64_t> before, std::vector<int64_t> after, float value)
      : before_(std::move(before)), after_(std::move(after)), value_(value) {}
  std::string type() const override { return "Pad"; }

  std::vector<Tensor> forward(std::span<const Tensor> in, const StepInfo&, LayerContext& ctx) const override {
    const Tensor& x = in[0];
    Shape out = x.shape();
    for (size_t d = 0; d < out.size(); ++d) out[d] += before_[d] + after_[d];
    Tensor y = Tensor::full(out, value_, x.device());
    copy_strided(x.shape(), x, 0, contiguous_strides(x.shape()), y, offset(out), contiguous_strides(out));
    ctx.saved = {shape_tensor(x.shape())};
    return {y};
  }

  std::vector<Tensor> backward(std::span<const Tensor> dys, const std::vector<bool>& need, const StepInfo&,
                               LayerContext& ctx) const override {
    std::vector<Tensor> g(need.size());
    if (need[0]) {
      const Shape in = shape_from_tensor(ctx.saved[0]);
      const Tensor& dy = dys[0];
      Tensor dx = Tensor::empty(in, DType::F32, dy.device());
      copy_strided(in, dy, offset(dy.shape()), contiguous_strides(dy.shape()), dx, 0, contiguous_strides(in));
      g[0] = dx;
    }
    ctx.clear();
    return g;
  }

 private:
  // Where the input's first element lies in the padded tensor.
  int64_t offset(const Shape& padded) const {
    const std::vector<int64_t> s = contiguous_strides(padded);
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
  if (x.ndim() > kMaxStridedRank) unsupported(n, cat("rank ", r, " is above the ", kMaxStridedRank, " supported"));
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

// Expand of a run-time tensor, or of a parameter to the batch (ViT's class
// token: class_token.expand(N, -1, -1)). The target shape is resolved at
// import; its batch dimension follows the run-time batch: the input's, or,
// for a parameter expanded to the batch, the segment's (an extra input the
// segment fills, see InputRef::BatchSize). Backward sums dy back to the
// input's shape.
#include "onnx/ops/op_util.h"
#include "onnx/ops/ops.h"
#include "onnx/ops/strided.h"

namespace pd::onnx {

namespace {

class ExpandOp : public Op {
 public:
  // batch_axis: the output dimension holding the input's batch (-1: none);
  // creates_batch: dimension 0 is the batch, read from the last input.
  ExpandOp(Shape target, int batch_axis, bool creates_batch)
      : target_(std::move(target)), batch_axis_(batch_axis), creates_batch_(creates_batch) {}
  std::string type() const override { return "Expand"; }

  std::vector<Tensor> forward(std::span<const Tensor> in, const StepInfo&, LayerContext& ctx) const override {
    const Tensor& x = in[0];
    Shape t = target_;
    if (creates_batch_) t[0] = in.back().data<int64_t>()[0];
    if (batch_axis_ >= 0) t[size_t(batch_axis_)] = 1;  // broadcasts to the input's
    const Shape out = broadcast_shapes_rt(x.shape(), t);
    Tensor y = Tensor::empty(out, DType::F32, x.device());
    copy_strided(out, x, 0, broadcast_strides(x.shape(), out), y, 0, contiguous_strides(out));
    ctx.saved = {shape_tensor(x.shape())};
    return {y};
  }

  std::vector<Tensor> backward(std::span<const Tensor> dys, const std::vector<bool>& need, const StepInfo&,
                               LayerContext& ctx) const override {
    std::vector<Tensor> g(need.size());
    if (need[0]) {
      g[0] = reduce_to(dys[0], shape_from_tensor(ctx.saved[0]));
      if (g[0].same_storage(dys[0])) g[0] = g[0].clone();
    }
    ctx.clear();
    return g;
  }

 private:
  Shape target_;
  int batch_axis_;
  bool creates_batch_;
};

}  // namespace

bool expand_creates_batch(const OpInputs& in, const Shape& out) {
  if (in.example.empty() || !in.example[0].defined() || in.batched[0] || out.empty() || in.batch < 2) return false;
  const Tensor& x = in.example[0];
  const int64_t lead = x.ndim() == int(out.size()) ? x.dim(0) : 1;  // x's dimension under out's first
  return out[0] == in.batch && lead == 1;
}

OpPtr make_expand_op(const Node& n, const OpInputs& in) {
  const Tensor& x = in.at(0);
  if (x.dtype() != DType::F32) unsupported(n, "expanding an integer tensor at run time is not supported");
  const std::vector<int64_t> target = const_ints(n, in, 1);
  const Shape out = broadcast_shapes(n, x.shape(), target);
  if (static_cast<int>(out.size()) > kMaxStridedRank)
    unsupported(n, cat("rank ", out.size(), " is above the ", kMaxStridedRank, " supported"));
  int64_t elements = 1;
  for (int64_t d : out) {
    if (d < 0 || (d > 0 && elements > (int64_t(1) << 28) / d)) unsupported(n, cat("the target shape ", shape_str(out), " is implausibly large"));
    elements *= d;
  }
  int batch_axis = -1;
  if (in.batched[0]) batch_axis = int(out.size()) - (x.ndim() - in.layout_of(0).axis);
  return std::make_unique<ExpandOp>(out, batch_axis, expand_creates_batch(in, out));
}

}  // namespace pd::onnx

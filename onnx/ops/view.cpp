// Reshape, Flatten, Squeeze, Unsqueeze: the data unchanged, a new shape.
// The shape is resolved at import (fixed sizes); the dimension holding the
// batch (see BatchLayout) is rescaled at run time, so the op works at any
// batch size.
#include <algorithm>

#include "onnx/ops/op_util.h"
#include "onnx/ops/ops.h"

namespace pd::onnx {

namespace {

class ViewOp : public Op {
 public:
  // shape: the output at the export batch; the batch's dimension in it is
  // rescaled at run time by the batch read off the input.
  ViewOp(std::string type, Shape shape, bool batched, BatchLayout in, BatchLayout out)
      : type_(std::move(type)), shape_(std::move(shape)), batched_(batched), in_(in), out_(out) {}
  std::string type() const override { return type_; }
  std::vector<Tensor> forward(std::span<const Tensor> in, const StepInfo&, LayerContext& ctx) const override {
    const Tensor& x = in[0];
    Shape out = shape_;
    if (batched_) out[size_t(out_.axis)] = out_.outer * out_.inner * (x.dim(in_.axis) / (in_.outer * in_.inner));
    ctx.saved = {shape_tensor(x.shape())};
    return {x.reshape(out)};
  }
  std::vector<Tensor> backward(std::span<const Tensor> dys, const std::vector<bool>& need, const StepInfo&,
                               LayerContext& ctx) const override {
    Shape in = shape_from_tensor(ctx.saved[0]);
    ctx.clear();
    return {need[0] ? dys[0].reshape(in) : Tensor()};
  }

 private:
  std::string type_;
  Shape shape_;
  bool batched_;
  BatchLayout in_, out_;
};

Shape reshape_target(const Node& n, const OpInputs& in) {
  const Shape& s = in.at(0).shape();
  std::vector<int64_t> t = const_ints(n, in, 1);
  if (n.int_attr("allowzero", 0) != 0) unsupported(n, "allowzero=1 is not supported");
  int infer = -1;
  int64_t known = 1;
  for (size_t d = 0; d < t.size(); ++d) {
    if (t[d] == 0) {
      if (d >= s.size()) unsupported(n, "a 0 in the shape beyond the input's rank");
      t[d] = s[d];
    }
    if (t[d] == -1) {
      if (infer >= 0) unsupported(n, "more than one -1 in the shape");
      infer = static_cast<int>(d);
    } else if (t[d] < 0) {
      unsupported(n, cat("bad dimension ", t[d], " in the shape"));
    } else {
      known *= t[d];
    }
  }
  if (infer >= 0) {
    if (known == 0 || shape_numel(s) % known != 0) unsupported(n, "the shape does not divide the input's size");
    t[size_t(infer)] = shape_numel(s) / known;
  }
  return t;
}

Shape squeeze_shape(const Node& n, const OpInputs& in, bool unsqueeze) {
  Shape s = in.at(0).shape();
  std::vector<int64_t> axes = in.example.size() > 1 && in.example[1].defined() ? const_ints(n, in, 1) : n.ints_attr("axes");
  if (unsqueeze) {
    const int r = static_cast<int>(s.size() + axes.size());
    std::vector<int> a;
    for (int64_t v : axes) a.push_back(normalize_axis(n, v, r));
    std::sort(a.begin(), a.end());
    for (int v : a) s.insert(s.begin() + v, 1);
    return s;
  }
  const int r = static_cast<int>(s.size());
  std::vector<bool> drop(s.size(), false);
  if (axes.empty())
    for (size_t d = 0; d < s.size(); ++d) drop[d] = s[d] == 1;
  for (int64_t v : axes) {
    const int a = normalize_axis(n, v, r);
    if (s[size_t(a)] != 1) unsupported(n, cat("axis ", v, " has size ", s[size_t(a)], ", not 1"));
    drop[size_t(a)] = true;
  }
  Shape out;
  for (size_t d = 0; d < s.size(); ++d)
    if (!drop[d]) out.push_back(s[d]);
  return out;
}

}  // namespace

OpPtr make_view_op(const Node& n, const OpInputs& in) {
  const Tensor& x = in.at(0);
  const Shape& s = x.shape();
  Shape out;
  if (n.op_type == "Reshape") {
    out = reshape_target(n, in);
  } else if (n.op_type == "Flatten") {
    const int r = static_cast<int>(s.size());
    int64_t axis = n.int_attr("axis", 1);
    if (axis < 0) axis += r;
    if (axis < 0 || axis > r) unsupported(n, "axis out of range");
    int64_t a = 1, b = 1;
    for (int d = 0; d < r; ++d) (d < axis ? a : b) *= s[size_t(d)];
    out = {a, b};
  } else {
    out = squeeze_shape(n, in, n.op_type == "Unsqueeze");
  }
  if (shape_numel(out) != x.numel())
    unsupported(n, cat("cannot view ", shape_str(s), " as ", shape_str(out)));
  const bool batched = in.batched[0];
  BatchLayout layout;
  if (batched) {
    std::optional<BatchLayout> l;
    if (in.batch >= 2)
      l = reshaped_layout(s, in.layout_of(0), out, in.batch);
    else if (in.layout_of(0).standard() && !out.empty() && out[0] == 1)
      l = BatchLayout{};
    if (!l && in.batch < 2)
      unsupported(n, cat("cannot follow the batch dimension from ", shape_str(s), " to ", shape_str(out),
                         " at export batch 1; export with a batch of 2 or more"));
    if (!l)
      unsupported(n, cat("the output ", shape_str(out), " splits the batch dimension (", in.batch, ") of ", shape_str(s),
                         " (a reshape must keep each sample's elements together)"));
    layout = *l;
  }
  return std::make_unique<ViewOp>(n.op_type, out, batched, in.layout_of(0), layout);
}

}  // namespace pd::onnx

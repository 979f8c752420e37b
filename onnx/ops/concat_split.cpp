// Concat and Split along one axis (never the batch): blocks of `inner`
// contiguous elements per outer index, copied in order.
#include <algorithm>

#include "onnx/ops/op_util.h"
#include "onnx/ops/ops.h"
#include "onnx/ops/strided.h"

namespace pd::onnx {

namespace {

// outer = product of dims before axis, inner = product after it.
void around(const Shape& s, int axis, int64_t& outer, int64_t& inner) {
  outer = inner = 1;
  for (int d = 0; d < axis; ++d) outer *= s[size_t(d)];
  for (size_t d = size_t(axis) + 1; d < s.size(); ++d) inner *= s[d];
}

// Copies parts (sizes[k] along axis each) into their slabs of `whole`; an
// undefined part leaves its slab as it is (zeros, for Split's backward).
void join_into(const std::vector<Tensor>& parts, const std::vector<int64_t>& sizes, int axis, Tensor& whole) {
  int64_t outer, inner;
  around(whole.shape(), axis, outer, inner);
  const std::vector<int64_t> ws = contiguous_strides(whole.shape());
  int64_t at = 0;
  for (size_t k = 0; k < parts.size(); ++k) {
    const Tensor& p = parts[k];
    if (p.defined()) copy_strided(p.shape(), p, 0, contiguous_strides(p.shape()), whole, at * inner, ws);
    at += sizes[k];
  }
}

Tensor join(const std::vector<Tensor>& parts, int axis) {
  Shape out = parts[0].shape();
  out[size_t(axis)] = 0;
  for (const Tensor& p : parts) out[size_t(axis)] += p.dim(axis);
  std::vector<int64_t> sizes;
  for (const Tensor& p : parts) sizes.push_back(p.dim(axis));
  Tensor y = Tensor::empty(out, DType::F32, parts[0].device());
  join_into(parts, sizes, axis, y);
  return y;
}

std::vector<Tensor> cut(const Tensor& x, int axis, const std::vector<int64_t>& sizes) {
  int64_t outer, inner;
  around(x.shape(), axis, outer, inner);
  const std::vector<int64_t> xs = contiguous_strides(x.shape());
  std::vector<Tensor> parts;
  int64_t at = 0;
  for (int64_t s : sizes) {
    Shape ps = x.shape();
    ps[size_t(axis)] = s;
    Tensor p = Tensor::empty(ps, DType::F32, x.device());
    copy_strided(ps, x, at * inner, xs, p, 0, contiguous_strides(ps));
    at += s;
    parts.push_back(p);
  }
  return parts;
}

class ConcatOp : public Op {
 public:
  explicit ConcatOp(int axis_from_end) : axis_(axis_from_end) {}
  std::string type() const override { return "Concat"; }
  std::vector<Tensor> forward(std::span<const Tensor> in, const StepInfo&, LayerContext& ctx) const override {
    std::vector<Tensor> parts(in.begin(), in.end());
    const int axis = axis_ + parts[0].ndim();
    std::vector<int32_t> sizes;
    for (const Tensor& p : parts) sizes.push_back(static_cast<int32_t>(p.dim(axis)));
    ctx.saved = {Tensor::from_ints(sizes, {static_cast<int64_t>(sizes.size())})};
    return {join(parts, axis)};
  }
  std::vector<Tensor> backward(std::span<const Tensor> dys, const std::vector<bool>& need, const StepInfo&,
                               LayerContext& ctx) const override {
    const Tensor& s = ctx.saved[0];
    std::vector<int64_t> sizes(s.data<int32_t>(), s.data<int32_t>() + s.numel());
    std::vector<Tensor> g = cut(dys[0], axis_ + dys[0].ndim(), sizes);
    for (size_t k = 0; k < g.size(); ++k)
      if (!need[k]) g[k] = Tensor();
    ctx.clear();
    return g;
  }

 private:
  int axis_;  // negative: counted from the end, the same at any batch size
};

class SplitOp : public Op {
 public:
  SplitOp(int axis_from_end, std::vector<int64_t> sizes) : axis_(axis_from_end), sizes_(std::move(sizes)) {}
  std::string type() const override { return "Split"; }
  std::vector<Tensor> forward(std::span<const Tensor> in, const StepInfo&, LayerContext& ctx) const override {
    ctx.saved.clear();
    return cut(in[0], axis_ + in[0].ndim(), sizes_);
  }
  std::vector<Tensor> backward(std::span<const Tensor> dys, const std::vector<bool>& need, const StepInfo&,
                               LayerContext& ctx) const override {
    std::vector<Tensor> g(need.size());
    if (need[0]) {
      // A part no gradient reached contributes zeros.
      const Tensor* any = nullptr;
      bool all = true;
      for (const Tensor& d : dys) {
        if (d.defined()) any = &d;
        all = all && d.defined();
      }
      PD_CHECK(any, "Split backward without any gradient");
      const int axis = axis_ + any->ndim();
      Shape whole = any->shape();
      whole[size_t(axis)] = 0;
      for (int64_t s : sizes_) whole[size_t(axis)] += s;
      Tensor dx = all ? Tensor::empty(whole, DType::F32, any->device()) : Tensor::zeros(whole, DType::F32, any->device());
      std::vector<Tensor> parts(dys.begin(), dys.end());
      join_into(parts, sizes_, axis, dx);
      g[0] = dx;
    }
    ctx.clear();
    return g;
  }

 private:
  int axis_;
  std::vector<int64_t> sizes_;
};

// The axis counted from the end: the same at any batch size.
int axis_from_end(const Node& n, const Tensor& x, int batch_axis) {
  if (x.ndim() > kMaxStridedRank) unsupported(n, cat("rank ", x.ndim(), " is above the ", kMaxStridedRank, " supported"));
  const int axis = normalize_axis(n, n.int_attr("axis", 0), x.ndim());
  if (axis == batch_axis) unsupported(n, "along the batch dimension is not supported");
  return axis - x.ndim();
}

}  // namespace

OpPtr make_concat_op(const Node& n, const OpInputs& in) {
  const Tensor& x = in.at(0);
  bool batched = false;
  int batch_axis = -1;
  for (size_t k = 0; k < in.example.size(); ++k) {
    if (in.batch_axis(k) >= 0) batch_axis = in.batch_axis(k);
    const Tensor& p = in.at(k);
    if (p.dtype() != DType::F32) unsupported(n, "concatenating integer tensors at run time is not supported");
    batched = batched || in.batched[k];
    if (p.ndim() != x.ndim()) unsupported(n, "inputs differ in rank");
  }
  for (size_t k = 0; k < in.example.size(); ++k)
    if (batched && !in.batched[k]) unsupported(n, "concatenating a constant with a run-time tensor is not supported");
  return std::make_unique<ConcatOp>(axis_from_end(n, x, batch_axis));
}

OpPtr make_split_op(const Node& n, const OpInputs& in) {
  const Tensor& x = in.at(0);
  if (x.dtype() != DType::F32) unsupported(n, "expects a float input");
  const int axis = axis_from_end(n, x, in.batch_axis(0));
  std::vector<int64_t> sizes = in.example.size() > 1 && in.example[1].defined() ? const_ints(n, in, 1) : n.ints_attr("split");
  const int64_t len = x.dim(axis);
  if (sizes.empty()) {
    const int64_t parts = static_cast<int64_t>(n.outputs.size());
    if (parts == 0 || len % parts != 0) unsupported(n, "cannot split evenly");
    sizes.assign(static_cast<size_t>(parts), len / parts);
  }
  int64_t total = 0;
  for (int64_t s : sizes) total += s;
  if (total != len || sizes.size() != n.outputs.size()) unsupported(n, "split sizes do not match the input or the outputs");
  return std::make_unique<SplitOp>(axis, sizes);
}

}  // namespace pd::onnx

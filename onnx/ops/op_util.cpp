#include "onnx/ops/op_util.h"

#include <algorithm>

#include "core/device_ops.h"

namespace pd::onnx {

void unsupported(const Node& n, const std::string& why) {
  throw UserError(cat(n.label(), ": ", why));
}

const Tensor& OpInputs::at(size_t k) const {
  PD_CHECK(k < example.size() && example[k].defined(), "input ", k, " missing");
  return example[k];
}

int OpInputs::batch_axis(size_t k) const {
  if (k >= batched.size() || !batched[k]) return -1;
  return layout_of(k).axis;
}

std::optional<BatchLayout> reshaped_layout(const Shape& in, const BatchLayout& l, const Shape& out, int64_t batch) {
  // Row-major, the input is [P, batch, Q]; the view keeps the batch iff
  // some output dimension k starts at a divisor of P and spans P * batch.
  int64_t before = l.outer;
  for (int d = 0; d < l.axis; ++d) before *= in[size_t(d)];
  int64_t pre = 1;
  for (size_t k = 0; k < out.size(); ++k) {
    if (pre > before) break;
    if (before % pre == 0) {
      const int64_t outer = before / pre;
      if (out[k] % (outer * batch) == 0 && out[k] >= outer * batch)
        return BatchLayout{static_cast<int>(k), outer, out[k] / (outer * batch)};
    }
    pre *= out[k];
  }
  return std::nullopt;
}

std::vector<int64_t> const_ints(const Node& n, const OpInputs& in, size_t k) {
  if (k >= in.example.size() || !in.example[k].defined()) unsupported(n, cat("input ", k, " is required"));
  if (!in.constant[k])
    unsupported(n, cat("input ", k, " ('", n.inputs[k], "') must be a constant known at import (fixed shapes; export with fixed input sizes)"));
  const Tensor& t = in.example[k];
  std::vector<int64_t> v(static_cast<size_t>(t.numel()));
  for (int64_t i = 0; i < t.numel(); ++i)
    v[static_cast<size_t>(i)] = t.dtype() == DType::I64 ? t.data<int64_t>()[i] : static_cast<int64_t>(t.f32()[i]);
  return v;
}

float const_scalar(const Node& n, const OpInputs& in, size_t k) {
  if (!in.constant[k]) unsupported(n, cat("input ", k, " must be a constant"));
  const Tensor& t = in.example[k];
  if (t.numel() != 1) unsupported(n, cat("input ", k, " must be a scalar, has shape ", shape_str(t.shape())));
  return t.dtype() == DType::I64 ? static_cast<float>(t.data<int64_t>()[0]) : t.f32()[0];
}

int normalize_axis(const Node& n, int64_t axis, int rank) {
  if (axis < -rank || axis >= rank) unsupported(n, cat("axis ", axis, " out of range for rank ", rank));
  return static_cast<int>(axis < 0 ? axis + rank : axis);
}

static bool broadcast_into(const Shape& a, const Shape& b, Shape& out) {
  const size_t r = std::max(a.size(), b.size());
  out.assign(r, 1);
  for (size_t i = 0; i < r; ++i) {
    int64_t da = i < r - a.size() ? 1 : a[i - (r - a.size())];
    int64_t db = i < r - b.size() ? 1 : b[i - (r - b.size())];
    if (da != db && da != 1 && db != 1) return false;
    out[i] = da == 1 ? db : da;
  }
  return true;
}

Shape broadcast_shapes(const Node& n, const Shape& a, const Shape& b) {
  Shape out;
  if (!broadcast_into(a, b, out)) unsupported(n, cat("shapes ", shape_str(a), " and ", shape_str(b), " do not broadcast"));
  return out;
}

Shape broadcast_shapes_rt(const Shape& a, const Shape& b) {
  Shape out;
  PD_CHECK(broadcast_into(a, b, out), "shapes ", shape_str(a), " and ", shape_str(b), " do not broadcast");
  return out;
}

Tensor reduce_to(const Tensor& g, const Shape& in) {
  if (g.shape() == in) return g;
  const Shape& full = g.shape();
  PD_CHECK(full.size() <= size_t(kMaxStridedRank), "reduce_to: rank ", full.size(), " above ", kMaxStridedRank);
  Tensor r = Tensor::empty(in, DType::F32, g.device());
  const std::vector<int64_t> s = broadcast_strides(in, full);
  device_ops(g.device()).reduce_sum_strided(static_cast<int>(full.size()), full.data(), s.data(), g.f32(), r.f32());
  return r;
}

void check_strided_rank(const Node& n, const Shape& s) {
  if (s.size() > size_t(kMaxStridedRank))
    unsupported(n, cat("tensors of rank ", s.size(), " are not supported (at most ", kMaxStridedRank, ")"));
}

Tensor shape_tensor(const Shape& s) {
  std::vector<int32_t> d(s.begin(), s.end());
  return Tensor::from_ints(d, {static_cast<int64_t>(d.size())});
}

Shape shape_from_tensor(const Tensor& t) { return Shape(t.data<int32_t>(), t.data<int32_t>() + t.numel()); }

template <class Geometry>
void read_window(const Node& n, bool pads_below_kernel, Geometry& g) {
  const Attribute* pad_mode = n.attribute("auto_pad");
  if (pad_mode && pad_mode->s != "NOTSET") unsupported(n, "auto_pad " + pad_mode->s + " is not supported (use explicit pads)");
  for (int64_t v : n.ints_attr("dilations"))
    if (v != 1) unsupported(n, "dilation is not supported");
  const std::vector<int64_t> s = n.ints_attr("strides"), p = n.ints_attr("pads");
  if (!s.empty()) {
    if (s.size() != 2 || s[0] < 1 || s[1] < 1) unsupported(n, "strides must have two positive values");
    g.stride_h = s[0];
    g.stride_w = s[1];
  }
  if (p.empty()) return;
  if (p.size() != 4) unsupported(n, "pads must have four values");
  for (int64_t v : p) {
    if (v < 0) unsupported(n, "negative pads are not supported");
    if (pads_below_kernel && v >= std::max(g.kernel_h, g.kernel_w)) unsupported(n, "pads must be below the kernel size");
  }
  g.pad = {p[0], p[1], p[2], p[3]};
}

template void read_window(const Node&, bool, Conv2dGeometry&);
template void read_window(const Node&, bool, Pool2dGeometry&);

}  // namespace pd::onnx

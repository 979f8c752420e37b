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

std::vector<int64_t> broadcast_strides(const Shape& in, const Shape& out) {
  std::vector<int64_t> s(out.size(), 0);
  int64_t stride = 1;
  for (size_t k = 0; k < in.size(); ++k) {
    const size_t i = in.size() - 1 - k, o = out.size() - 1 - k;
    s[o] = in[i] == 1 ? 0 : stride;
    stride *= in[i];
  }
  return s;
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

void read_strides_and_pads(const Node& n, bool pads_below_kernel, Window2d& w) {
  const std::vector<int64_t> s = n.ints_attr("strides"), p = n.ints_attr("pads");
  if (!s.empty()) {
    if (s.size() != 2 || s[0] < 1 || s[1] < 1) unsupported(n, "strides must have two positive values");
    w.sh = s[0];
    w.sw = s[1];
  }
  if (p.empty()) return;
  if (p.size() != 4) unsupported(n, "pads must have four values");
  for (int64_t v : p) {
    if (v < 0) unsupported(n, "negative pads are not supported");
    if (pads_below_kernel && v >= std::max(w.kh, w.kw)) unsupported(n, "pads must be below the kernel size");
  }
  w.top = p[0];
  w.left = p[1];
  w.bottom = p[2];
  w.right = p[3];
}

}  // namespace pd::onnx

// Gather along one axis: embedding lookups (a parameter table indexed by
// run-time token ids) and constant position indices. The gradient of the
// data is a scatter-add; indices get none.
#include "onnx/ops/op_util.h"
#include "onnx/ops/ops.h"

namespace pd::onnx {

namespace {

int64_t index_at(const Tensor& idx, int64_t i) {
  return idx.dtype() == DType::I64 ? idx.data<int64_t>()[i] : idx.data<int32_t>()[i];
}

class GatherOp : public Op {
 public:
  explicit GatherOp(int axis) : axis_(axis) {}
  std::string type() const override { return "Gather"; }

  std::vector<Tensor> forward(std::span<const Tensor> in, const StepInfo&, LayerContext& ctx) const override {
    const Tensor &data = in[0], &idx = in[1];
    require_cpu_f32(data, "Gather");
    int64_t outer, len, inner;
    split(data.shape(), outer, len, inner);
    Shape out(data.shape().begin(), data.shape().begin() + axis_);
    out.insert(out.end(), idx.shape().begin(), idx.shape().end());
    out.insert(out.end(), data.shape().begin() + axis_ + 1, data.shape().end());
    Tensor y = Tensor::empty(out);
    const int64_t m = idx.numel();
    const float* dp = data.f32();
    float* yp = y.f32();
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t j = 0; j < m; ++j) {
        const int64_t k = resolve(index_at(idx, j), len);
        std::copy(dp + (o * len + k) * inner, dp + (o * len + k + 1) * inner, yp + (o * m + j) * inner);
      }
    ctx.saved = {idx, shape_tensor(data.shape())};
    return {y};
  }

  std::vector<Tensor> backward(std::span<const Tensor> dys, const std::vector<bool>& need, const StepInfo&,
                               LayerContext& ctx) const override {
    std::vector<Tensor> g(2);
    if (need[0]) {
      const Tensor &idx = ctx.saved[0], &dims = ctx.saved[1], &dy = dys[0];
      Shape ds(dims.data<int32_t>(), dims.data<int32_t>() + dims.numel());
      int64_t outer, len, inner;
      split(ds, outer, len, inner);
      Tensor dd = Tensor::zeros(ds);
      const int64_t m = idx.numel();
      const float* gp = dy.f32();
      float* dp = dd.f32();
      for (int64_t o = 0; o < outer; ++o)
        for (int64_t j = 0; j < m; ++j) {
          const int64_t k = resolve(index_at(idx, j), len);
          float* row = dp + (o * len + k) * inner;
          const float* src = gp + (o * m + j) * inner;
          for (int64_t e = 0; e < inner; ++e) row[e] += src[e];
        }
      g[0] = dd;
    }
    ctx.clear();
    return g;
  }

 private:
  static int64_t resolve(int64_t k, int64_t len) {
    if (k < 0) k += len;
    if (k < 0 || k >= len) throw UserError(cat("Gather: index ", k, " out of range [0, ", len, ") (a token id beyond the vocabulary?)"));
    return k;
  }
  void split(const Shape& s, int64_t& outer, int64_t& len, int64_t& inner) const {
    outer = inner = 1;
    for (int d = 0; d < axis_; ++d) outer *= s[size_t(d)];
    len = s[size_t(axis_)];
    for (size_t d = size_t(axis_) + 1; d < s.size(); ++d) inner *= s[d];
  }
  int axis_;
};

}  // namespace

OpPtr make_gather_op(const Node& n, const OpInputs& in) {
  const Tensor &data = in.at(0), &idx = in.at(1);
  if (data.dtype() != DType::F32) unsupported(n, "gathering from an integer tensor at run time is not supported");
  if (idx.dtype() == DType::F32) unsupported(n, "indices must be integers");
  const int axis = normalize_axis(n, n.int_attr("axis", 0), data.ndim());
  if (axis == in.batch_axis(0)) unsupported(n, "gathering along the batch dimension is not supported");
  if (in.batched[0] && in.batched[1]) unsupported(n, "run-time indices into a run-time tensor are not supported");
  if (in.batched[1] && axis != 0) unsupported(n, "run-time indices are supported along axis 0 (embeddings) only");
  if (in.batched[1] && !in.layout_of(1).standard()) unsupported(n, "run-time indices must hold the batch first");
  return std::make_unique<GatherOp>(axis);
}

}  // namespace pd::onnx

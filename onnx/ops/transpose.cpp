// Transpose: any permutation (the importer follows where the batch goes).
#include "onnx/ops/op_util.h"
#include "onnx/ops/ops.h"

namespace pd::onnx {

namespace {

Tensor permute(const Tensor& x, const std::vector<int>& perm) {
  const Shape& s = x.shape();
  const int r = x.ndim();
  std::vector<int64_t> in_stride(static_cast<size_t>(r), 1);
  for (int d = r - 2; d >= 0; --d) in_stride[size_t(d)] = in_stride[size_t(d + 1)] * s[size_t(d + 1)];
  Shape out(static_cast<size_t>(r));
  std::vector<int64_t> src(static_cast<size_t>(r));
  for (int d = 0; d < r; ++d) {
    out[size_t(d)] = s[size_t(perm[size_t(d)])];
    src[size_t(d)] = in_stride[size_t(perm[size_t(d)])];
  }
  Tensor y = Tensor::empty(out);
  const float* xp = x.f32();
  float* yp = y.f32();
  for_each_broadcast(out, src, src, [&](int64_t i, int64_t o, int64_t) { yp[i] = xp[o]; });
  return y;
}

class TransposeOp : public Op {
 public:
  explicit TransposeOp(std::vector<int> perm) : perm_(std::move(perm)), inverse_(perm_.size()) {
    for (size_t d = 0; d < perm_.size(); ++d) inverse_[size_t(perm_[d])] = static_cast<int>(d);
  }
  std::string type() const override { return "Transpose"; }
  std::vector<Tensor> forward(std::span<const Tensor> in, const StepInfo&, LayerContext& ctx) const override {
    require_cpu_f32(in[0], "Transpose");
    ctx.saved.clear();
    return {permute(in[0], perm_)};
  }
  std::vector<Tensor> backward(std::span<const Tensor> dys, const std::vector<bool>& need, const StepInfo&,
                               LayerContext& ctx) const override {
    ctx.clear();
    return {need[0] ? permute(dys[0], inverse_) : Tensor()};
  }

 private:
  std::vector<int> perm_, inverse_;
};

}  // namespace

OpPtr make_transpose_op(const Node& n, const OpInputs& in) {
  const Tensor& x = in.at(0);
  if (x.dtype() != DType::F32) unsupported(n, "expects a float input");
  const int r = x.ndim();
  std::vector<int64_t> p = n.ints_attr("perm");
  std::vector<int> perm;
  if (p.empty())
    for (int d = r - 1; d >= 0; --d) perm.push_back(d);
  else
    for (int64_t v : p) perm.push_back(normalize_axis(n, v, r));
  std::vector<bool> seen(static_cast<size_t>(r), false);
  if (static_cast<int>(perm.size()) != r) unsupported(n, "perm does not match the input's rank");
  for (int v : perm) {
    if (seen[size_t(v)]) unsupported(n, "perm is not a permutation");
    seen[size_t(v)] = true;
  }
  return std::make_unique<TransposeOp>(perm);
}

}  // namespace pd::onnx

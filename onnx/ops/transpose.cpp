// Transpose: any permutation (the importer follows where the batch goes).
#include "onnx/ops/op_util.h"
#include "onnx/ops/ops.h"
#include "onnx/ops/strided.h"

namespace pd::onnx {

namespace {

// y = x with y's dimension d being x's dimension perm[d]: x read at permuted strides.
Tensor permute(const Tensor& x, const std::vector<int>& perm) {
  const Shape& s = x.shape();
  const std::vector<int64_t> in_stride = contiguous_strides(s);
  Shape out(s.size());
  std::vector<int64_t> src(s.size());
  for (size_t d = 0; d < s.size(); ++d) {
    out[d] = s[size_t(perm[d])];
    src[d] = in_stride[size_t(perm[d])];
  }
  Tensor y = Tensor::empty(out, DType::F32, x.device());
  copy_strided(out, x, 0, src, y, 0, contiguous_strides(out));
  return y;
}

class TransposeOp : public Op {
 public:
  explicit TransposeOp(std::vector<int> perm) : perm_(std::move(perm)), inverse_(perm_.size()) {
    for (size_t d = 0; d < perm_.size(); ++d) inverse_[size_t(perm_[d])] = static_cast<int>(d);
  }
  std::string type() const override { return "Transpose"; }
  std::vector<Tensor> forward(std::span<const Tensor> in, const StepInfo&, LayerContext& ctx) const override {
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
  if (r > kMaxStridedRank) unsupported(n, cat("rank ", r, " is above the ", kMaxStridedRank, " supported"));
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

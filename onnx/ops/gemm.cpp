// Gemm in full: Y = alpha * op(A) op(B) + beta * C, op = transpose where
// transA / transB say so, C broadcast to [M, N] (a scalar, a row [N], a
// column [M, 1] or the full matrix). Hugging Face's GPT-2 Conv1D exports
// as Gemm with transB=0 (its weight is [in, out]). The plain linear layer
// (transA=0, transB=1, alpha=beta=1, a bias [out]) stays the core linear
// layer (core_layer_ops.cpp).
#include "core/device_ops.h"
#include "onnx/ops/op_util.h"
#include "onnx/ops/ops.h"
#include "onnx/ops/strided.h"

namespace pd::onnx {

namespace {

// y = alpha * op(a) op(b) + beta * y; op(x) = x^T where trans_x. a and b are 2-d, y [M, N].
void matmul_into(const DeviceOps& ops, bool ta, const Tensor& a, bool tb, const Tensor& b, float alpha, float beta,
                 Tensor& y) {
  const int64_t M = ta ? a.dim(1) : a.dim(0), K = ta ? a.dim(0) : a.dim(1), N = tb ? b.dim(0) : b.dim(1);
  PD_CHECK((tb ? b.dim(1) : b.dim(0)) == K && y.dim(0) == M && y.dim(1) == N, "Gemm: shapes do not match");
  ops.gemm(ta, tb, M, N, K, alpha, a.f32(), a.dim(1), b.f32(), b.dim(1), beta, y.f32(), N);
}

Tensor matmul(const DeviceOps& ops, bool ta, const Tensor& a, bool tb, const Tensor& b, float alpha) {
  Tensor y = Tensor::empty({ta ? a.dim(1) : a.dim(0), tb ? b.dim(0) : b.dim(1)}, DType::F32, a.device());
  if (y.numel() > 0) matmul_into(ops, ta, a, tb, b, alpha, 0.0f, y);
  return y;
}

class GemmOp : public Op {
 public:
  GemmOp(bool trans_a, bool trans_b, float alpha, float beta)
      : ta_(trans_a), tb_(trans_b), alpha_(alpha), beta_(beta) {}
  std::string type() const override { return "Gemm"; }

  std::vector<Tensor> forward(std::span<const Tensor> in, const StepInfo&, LayerContext& ctx) const override {
    const Tensor &a = in[0], &b = in[1];
    const DeviceOps& ops = device_ops(a.device());
    const bool has_c = in.size() > 2 && in[2].defined(), with_c = has_c && beta_ != 0.0f;
    Tensor y;
    if (with_c) {  // y = C broadcast to [M, N], then BLAS's y = alpha AB + beta y
      const Shape out{ta_ ? a.dim(1) : a.dim(0), tb_ ? b.dim(0) : b.dim(1)};
      y = Tensor::empty(out, DType::F32, a.device());
      copy_strided(out, in[2], 0, broadcast_strides(in[2].shape(), out), y, 0, contiguous_strides(out));
      if (y.numel() > 0) matmul_into(ops, ta_, a, tb_, b, alpha_, beta_, y);
    } else {
      y = matmul(ops, ta_, a, tb_, b, alpha_);
    }
    ctx.saved = {a, b, shape_tensor(has_c ? in[2].shape() : Shape{})};
    ctx.saved.push_back(Tensor::from_ints({with_c ? 1 : 0}, {1}));
    return {y};
  }

  std::vector<Tensor> backward(std::span<const Tensor> dys, const std::vector<bool>& need, const StepInfo&,
                               LayerContext& ctx) const override {
    const Tensor &a = ctx.saved[0], &b = ctx.saved[1], &dy = dys[0];
    const bool with_c = ctx.saved[3].data<int32_t>()[0] != 0;
    const DeviceOps& ops = device_ops(dy.device());
    std::vector<Tensor> g(need.size());
    // op(A)' = alpha dY op(B)^T, op(B)' = alpha op(A)^T dY, then transposed back where op transposed.
    if (need[0]) g[0] = ta_ ? matmul(ops, tb_, b, true, dy, alpha_) : matmul(ops, false, dy, !tb_, b, alpha_);
    if (need[1]) g[1] = tb_ ? matmul(ops, true, dy, ta_, a, alpha_) : matmul(ops, !ta_, a, false, dy, alpha_);
    if (need.size() > 2 && need[2]) {
      if (!with_c) {  // beta = 0: C does not reach Y
        g[2] = Tensor::zeros(shape_from_tensor(ctx.saved[2]), DType::F32, dy.device());
      } else {
        Tensor dc = reduce_to(dy, shape_from_tensor(ctx.saved[2]));
        if (beta_ != 1.0f) dc = scaled(ops, dc, beta_);
        g[2] = dc;
      }
    }
    ctx.clear();
    return g;
  }

 private:
  static Tensor scaled(const DeviceOps& ops, const Tensor& x, float s) {
    Tensor factor = Tensor::full({1}, s, x.device());
    Tensor y = Tensor::empty(x.shape(), DType::F32, x.device());
    const Shape flat{x.numel()};
    const int64_t one = 1, zero = 0;
    ops.broadcast_binary(BinaryArith::Mul, 1, flat.data(), &one, &zero, x.f32(), factor.f32(), y.f32());
    return y;
  }

  bool ta_, tb_;
  float alpha_, beta_;
};

}  // namespace

OpPtr make_gemm_op(const Node& n, const OpInputs& in) {
  const Tensor &a = in.at(0), &b = in.at(1);
  const bool ta = n.int_attr("transA", 0) != 0, tb = n.int_attr("transB", 0) != 0;
  if (a.ndim() != 2 || b.ndim() != 2)
    unsupported(n, cat("A and B must be matrices, got ", shape_str(a.shape()), " and ", shape_str(b.shape())));
  for (size_t k = 0; k < 2; ++k)
    if (in.at(k).dtype() != DType::F32) unsupported(n, "A and B must be float");
  const int64_t M = ta ? a.dim(1) : a.dim(0), K = ta ? a.dim(0) : a.dim(1), N = tb ? b.dim(0) : b.dim(1);
  if ((tb ? b.dim(1) : b.dim(0)) != K)
    unsupported(n, cat("inner dimensions differ: op(A) is [", M, ", ", K, "], op(B) [", tb ? b.dim(1) : b.dim(0), ", ",
                       N, "] (transA=", ta, ", transB=", tb, ")"));
  // The batch may be in op(A)'s rows only: in B it would be contracted or
  // land in Y's columns.
  if (in.batched.size() > 1 && in.batched[1]) unsupported(n, "B holds the batch; only A (its rows) may");
  const int ba = in.batch_axis(0);
  if (ba >= 0 && ba != (ta ? 1 : 0)) unsupported(n, "contracting over the batch dimension is not supported");
  const bool with_c = in.example.size() > 2 && in.example[2].defined();
  if (with_c) {
    const Tensor& c = in.example[2];
    if (c.dtype() != DType::F32) unsupported(n, "C must be float");
    if (c.ndim() > 2 || broadcast_shapes(n, c.shape(), {M, N}) != Shape{M, N})
      unsupported(n, cat("C ", shape_str(c.shape()), " does not broadcast to Y [", M, ", ", N, "]"));
    if (in.batched.size() > 2 && in.batched[2] && (ba < 0 || c.ndim() != 2 || c.dim(0) != M || in.batch_axis(2) != 0))
      unsupported(n, "C holds the batch but is not the full [M, N] matrix beside a batched A");
    if (ba >= 0 && !(in.batched.size() > 2 && in.batched[2]) && c.ndim() == 2 && c.dim(0) != 1)
      unsupported(n, cat("C ", shape_str(c.shape()), " is a constant with a row per sample of the export batch; "
                         "make it a row [N] or [1, N]"));
  }
  return std::make_unique<GemmOp>(ta, tb, n.float_attr("alpha", 1.0f), n.float_attr("beta", 1.0f));
}

}  // namespace pd::onnx

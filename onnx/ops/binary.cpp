// Add, Sub, Mul, Div with numpy broadcasting: residual joins, bias adds,
// scaling by constants, and the pieces of decomposed LayerNorm and GELU.
#include "core/cpu/elementwise_kernels.h"
#include "onnx/ops/op_util.h"
#include "onnx/ops/ops.h"

namespace pd::onnx {

namespace {

enum class Arith { Add, Sub, Mul, Div };

class BinaryOp : public Op {
 public:
  BinaryOp(std::string type, Arith f) : type_(std::move(type)), f_(f) {}
  std::string type() const override { return type_; }

  std::vector<Tensor> forward(std::span<const Tensor> in, const StepInfo&, LayerContext& ctx) const override {
    const Tensor &a = in[0], &b = in[1];
    require_cpu_f32(a, type_.c_str());
    require_cpu_f32(b, type_.c_str());
    const Shape out = broadcast_shapes_rt(a.shape(), b.shape());
    Tensor y = Tensor::empty(out);
    const float *ap = a.f32(), *bp = b.f32();
    float* yp = y.f32();
    if (a.shape() == b.shape()) {
      const int64_t n = y.numel();
      switch (f_) {
        case Arith::Add: for (int64_t i = 0; i < n; ++i) yp[i] = ap[i] + bp[i]; break;
        case Arith::Sub: for (int64_t i = 0; i < n; ++i) yp[i] = ap[i] - bp[i]; break;
        case Arith::Mul: for (int64_t i = 0; i < n; ++i) yp[i] = ap[i] * bp[i]; break;
        case Arith::Div: for (int64_t i = 0; i < n; ++i) yp[i] = ap[i] / bp[i]; break;
      }
    } else {
      const auto sa = broadcast_strides(a.shape(), out), sb = broadcast_strides(b.shape(), out);
      const Arith f = f_;
      for_each_broadcast(out, sa, sb, [&](int64_t i, int64_t oa, int64_t ob) {
        switch (f) {
          case Arith::Add: yp[i] = ap[oa] + bp[ob]; break;
          case Arith::Sub: yp[i] = ap[oa] - bp[ob]; break;
          case Arith::Mul: yp[i] = ap[oa] * bp[ob]; break;
          case Arith::Div: yp[i] = ap[oa] / bp[ob]; break;
        }
      });
    }
    // Add and Sub need only the shapes (a few ints); Mul and Div the operands.
    if (f_ == Arith::Add || f_ == Arith::Sub)
      ctx.saved = {shape_of(a), shape_of(b)};
    else
      ctx.saved = {a, b};
    return {y};
  }

  std::vector<Tensor> backward(std::span<const Tensor> dys, const std::vector<bool>& need, const StepInfo&,
                               LayerContext& ctx) const override {
    const Tensor& dy = dys[0];
    std::vector<Tensor> g(2);
    if (f_ == Arith::Add || f_ == Arith::Sub) {
      const Shape sa = shape_from(ctx.saved[0]), sb = shape_from(ctx.saved[1]);
      if (need[0]) g[0] = reduce_to(dy, sa);
      if (need[1]) {
        Tensor db = reduce_to(dy, sb);
        if (f_ == Arith::Sub) {
          Tensor neg = Tensor::empty(db.shape());
          for (int64_t i = 0; i < db.numel(); ++i) neg.f32()[i] = -db.f32()[i];
          db = neg;
        }
        g[1] = db;
      }
    } else {
      const Tensor &a = ctx.saved[0], &b = ctx.saved[1];
      const Shape& out = dy.shape();
      const auto sa = broadcast_strides(a.shape(), out), sb = broadcast_strides(b.shape(), out);
      const float *ap = a.f32(), *bp = b.f32(), *gp = dy.f32();
      Tensor da = need[0] ? Tensor::zeros(a.shape()) : Tensor(), db = need[1] ? Tensor::zeros(b.shape()) : Tensor();
      float* dap = need[0] ? da.f32() : nullptr;
      float* dbp = need[1] ? db.f32() : nullptr;
      const bool mul = f_ == Arith::Mul;
      for_each_broadcast(out, sa, sb, [&](int64_t i, int64_t oa, int64_t ob) {
        if (mul) {
          if (dap) dap[oa] += gp[i] * bp[ob];
          if (dbp) dbp[ob] += gp[i] * ap[oa];
        } else {
          if (dap) dap[oa] += gp[i] / bp[ob];
          if (dbp) dbp[ob] -= gp[i] * ap[oa] / (bp[ob] * bp[ob]);
        }
      });
      g[0] = da;
      g[1] = db;
    }
    ctx.clear();
    return g;
  }

 private:
  static Tensor shape_of(const Tensor& t) {
    return shape_tensor(t.shape());
  }
  static Shape shape_from(const Tensor& t) { return shape_from_tensor(t); }
  std::string type_;
  Arith f_;
};

}  // namespace

OpPtr make_binary_op(const Node& n, const OpInputs& in) {
  broadcast_shapes(n, in.at(0).shape(), in.at(1).shape());
  for (size_t k = 0; k < 2; ++k)
    if (in.at(k).dtype() != DType::F32) unsupported(n, "integer arithmetic on run-time tensors is not supported");
  const std::string& t = n.op_type;
  Arith f = t == "Add" ? Arith::Add : t == "Sub" ? Arith::Sub : t == "Mul" ? Arith::Mul : Arith::Div;
  return std::make_unique<BinaryOp>(t, f);
}

}  // namespace pd::onnx

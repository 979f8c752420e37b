// Add, Sub, Mul, Div with numpy broadcasting: residual joins, bias adds,
// scaling by constants, and the pieces of decomposed LayerNorm and GELU.
// The kernels are the DeviceOps broadcast_binary entries of the operands'
// device.
#include "core/device_ops.h"
#include "onnx/ops/op_util.h"
#include "onnx/ops/ops.h"

namespace pd::onnx {

namespace {

// The operands viewed at the output's rank: strides 0 on broadcast dimensions.
struct Broadcast {
  Shape out;
  std::vector<int64_t> sa, sb;
  Broadcast(const Shape& a, const Shape& b)
      : out(broadcast_shapes_rt(a, b)), sa(broadcast_strides(a, out)), sb(broadcast_strides(b, out)) {}
  int rank() const { return static_cast<int>(out.size()); }
};

class BinaryOp : public Op {
 public:
  BinaryOp(std::string type, BinaryArith f) : type_(std::move(type)), f_(f) {}
  std::string type() const override { return type_; }

  std::vector<Tensor> forward(std::span<const Tensor> in, const StepInfo&, LayerContext& ctx) const override {
    const Tensor &a = in[0], &b = in[1];
    PD_CHECK(a.device() == b.device(), type_, ": operands on ", a.device().str(), " and ", b.device().str());
    const Broadcast bc(a.shape(), b.shape());
    Tensor y = Tensor::empty(bc.out, DType::F32, a.device());
    device_ops(a.device()).broadcast_binary(f_, bc.rank(), bc.out.data(), bc.sa.data(), bc.sb.data(), a.f32(),
                                            b.f32(), y.f32());
    // Add and Sub need only the shapes (a few ints); Mul and Div the operands.
    if (f_ == BinaryArith::Add || f_ == BinaryArith::Sub)
      ctx.saved = {shape_tensor(a.shape()), shape_tensor(b.shape())};
    else
      ctx.saved = {a, b};
    return {y};
  }

  std::vector<Tensor> backward(std::span<const Tensor> dys, const std::vector<bool>& need, const StepInfo&,
                               LayerContext& ctx) const override {
    const Tensor& dy = dys[0];
    const DeviceOps& ops = device_ops(dy.device());
    std::vector<Tensor> g(2);
    if (f_ == BinaryArith::Add || f_ == BinaryArith::Sub) {
      const Shape sa = shape_from_tensor(ctx.saved[0]), sb = shape_from_tensor(ctx.saved[1]);
      if (need[0]) g[0] = reduce_to(dy, sa);
      if (need[1]) {
        Tensor db = reduce_to(dy, sb);
        if (f_ == BinaryArith::Sub) {
          Tensor neg = Tensor::empty(db.shape(), DType::F32, db.device());
          ops.unary_forward(UnaryParams{UnaryFn::Neg}, db.numel(), db.f32(), neg.f32());
          db = neg;
        }
        g[1] = db;
      }
    } else {
      const Tensor &a = ctx.saved[0], &b = ctx.saved[1];
      const Broadcast bc(a.shape(), b.shape());
      Tensor da = need[0] ? Tensor::empty(a.shape(), DType::F32, dy.device()) : Tensor();
      Tensor db = need[1] ? Tensor::empty(b.shape(), DType::F32, dy.device()) : Tensor();
      ops.broadcast_binary_backward(f_, bc.rank(), bc.out.data(), bc.sa.data(), bc.sb.data(), a.f32(), b.f32(),
                                    dy.f32(), need[0] ? da.f32() : nullptr, need[1] ? db.f32() : nullptr);
      g[0] = da;
      g[1] = db;
    }
    ctx.clear();
    return g;
  }

 private:
  std::string type_;
  BinaryArith f_;
};

}  // namespace

OpPtr make_binary_op(const Node& n, const OpInputs& in) {
  check_strided_rank(n, broadcast_shapes(n, in.at(0).shape(), in.at(1).shape()));
  for (size_t k = 0; k < 2; ++k)
    if (in.at(k).dtype() != DType::F32) unsupported(n, "integer arithmetic on run-time tensors is not supported");
  const std::string& t = n.op_type;
  const BinaryArith f = t == "Add"   ? BinaryArith::Add
                        : t == "Sub" ? BinaryArith::Sub
                        : t == "Mul" ? BinaryArith::Mul
                                     : BinaryArith::Div;
  return std::make_unique<BinaryOp>(t, f);
}

}  // namespace pd::onnx

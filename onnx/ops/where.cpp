// Where(cond, X, Y): the causal mask of attention (cond a constant, one
// branch a constant -inf). Gradients go to X where cond holds, else to Y.
#include "onnx/ops/op_util.h"
#include "onnx/ops/ops.h"

namespace pd::onnx {

namespace {

class WhereOp : public Op {
 public:
  std::string type() const override { return "Where"; }

  std::vector<Tensor> forward(std::span<const Tensor> in, const StepInfo&, LayerContext& ctx) const override {
    const Tensor &c = in[0], &x = in[1], &y = in[2];
    require_cpu_f32(x, "Where");
    require_cpu_f32(y, "Where");
    const Shape out = broadcast_shapes_rt(broadcast_shapes_rt(c.shape(), x.shape()), y.shape());
    // The condition broadcast to the output once: backward reuses it.
    Tensor mask = expand_condition(c, out);
    Tensor r = Tensor::empty(out);
    const auto sx = broadcast_strides(x.shape(), out), sy = broadcast_strides(y.shape(), out);
    const float *xp = x.f32(), *yp = y.f32();
    const uint8_t* mp = mask_bits(mask);
    float* rp = r.f32();
    for_each_broadcast(out, sx, sy, [&](int64_t i, int64_t ox, int64_t oy) { rp[i] = mp[i] ? xp[ox] : yp[oy]; });
    std::vector<int32_t> xs(x.shape().begin(), x.shape().end()), ys(y.shape().begin(), y.shape().end());
    ctx.saved = {mask, Tensor::from_ints(xs, {int64_t(xs.size())}), Tensor::from_ints(ys, {int64_t(ys.size())})};
    return {r};
  }

  std::vector<Tensor> backward(std::span<const Tensor> dys, const std::vector<bool>& need, const StepInfo&,
                               LayerContext& ctx) const override {
    const Tensor& dy = dys[0];
    const uint8_t* mp = mask_bits(ctx.saved[0]);
    std::vector<Tensor> g(3);
    for (int side = 1; side <= 2; ++side) {
      if (!need[size_t(side)]) continue;
      const Tensor& d = ctx.saved[size_t(side)];
      Tensor full = Tensor::empty(dy.shape());
      for (int64_t i = 0; i < dy.numel(); ++i) full.f32()[i] = (mp[i] != 0) == (side == 1) ? dy.f32()[i] : 0.0f;
      g[size_t(side)] = reduce_to(full, shape_from_tensor(d));
    }
    ctx.clear();
    return g;
  }

 private:
  // One byte per output element, packed into an I32 tensor.
  static Tensor expand_condition(const Tensor& c, const Shape& out) {
    const int64_t n = shape_numel(out);
    Tensor m = Tensor::zeros({(n + 3) / 4}, DType::I32);
    uint8_t* mp = reinterpret_cast<uint8_t*>(m.data<int32_t>());
    const auto sc = broadcast_strides(c.shape(), out);
    for_each_broadcast(out, sc, sc, [&](int64_t i, int64_t oc, int64_t) {
      mp[i] = c.dtype() == DType::I64 ? c.data<int64_t>()[oc] != 0
              : c.dtype() == DType::I32 ? c.data<int32_t>()[oc] != 0
                                         : c.f32()[oc] != 0.0f;
    });
    return m;
  }
  static const uint8_t* mask_bits(const Tensor& m) { return reinterpret_cast<const uint8_t*>(m.data<int32_t>()); }
};

}  // namespace

OpPtr make_where_op(const Node& n, const OpInputs& in) {
  broadcast_shapes(n, broadcast_shapes(n, in.at(0).shape(), in.at(1).shape()), in.at(2).shape());
  if (in.at(1).dtype() != DType::F32 || in.at(2).dtype() != DType::F32) unsupported(n, "X and Y must be float");
  return std::make_unique<WhereOp>();
}

}  // namespace pd::onnx

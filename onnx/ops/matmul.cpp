// MatMul with numpy semantics: [..., M, K] x [..., K, N], batch dims
// broadcast. A 2-d right operand (a weight, as PyTorch exports a Linear
// without Gemm) folds the left operand's batch dims into M: one GEMM.
#include "core/cpu/gemm.h"
#include "onnx/ops/op_util.h"
#include "onnx/ops/ops.h"

namespace pd::onnx {

namespace {

struct MatmulDims {
  Shape batch;                    // broadcast batch shape
  int64_t M = 0, K = 0, N = 0;
  std::vector<int64_t> sa, sb;    // per batch dim: matrix offsets (in matrices) of A and B
};

MatmulDims dims_of(const Shape& a, const Shape& b) {
  MatmulDims d;
  d.M = a[a.size() - 2];
  d.K = a.back();
  d.N = b.back();
  PD_CHECK(b[b.size() - 2] == d.K, "MatMul inner dims differ: ", shape_str(a), " x ", shape_str(b));
  Shape ba(a.begin(), a.end() - 2), bb(b.begin(), b.end() - 2);
  d.batch = broadcast_shapes_rt(ba, bb);
  d.sa = broadcast_strides(ba, d.batch);
  d.sb = broadcast_strides(bb, d.batch);
  return d;
}

class MatMulOp : public Op {
 public:
  std::string type() const override { return "MatMul"; }

  std::vector<Tensor> forward(std::span<const Tensor> in, const StepInfo&, LayerContext& ctx) const override {
    const Tensor &a = in[0], &b = in[1];
    require_cpu_f32(a, "MatMul");
    require_cpu_f32(b, "MatMul");
    if (b.ndim() == 2) {  // weight: one GEMM over every row of A
      const int64_t K = a.dim(-1), N = b.dim(1), rows = a.numel() / K;
      Shape out = a.shape();
      out.back() = N;
      Tensor y = Tensor::empty(out);
      cpu::gemm(false, false, rows, N, K, 1.0f, a.f32(), K, b.f32(), N, 0.0f, y.f32(), N);
      ctx.saved = {a, b};
      return {y};
    }
    const MatmulDims d = dims_of(a.shape(), b.shape());
    Shape out = d.batch;
    out.push_back(d.M);
    out.push_back(d.N);
    Tensor y = Tensor::empty(out);
    const float *ap = a.f32(), *bp = b.f32();
    float* yp = y.f32();
    for_each_broadcast(d.batch, d.sa, d.sb, [&](int64_t i, int64_t oa, int64_t ob) {
      cpu::gemm(false, false, d.M, d.N, d.K, 1.0f, ap + oa * d.M * d.K, d.K, bp + ob * d.K * d.N, d.N, 0.0f,
                yp + i * d.M * d.N, d.N);
    });
    ctx.saved = {a, b};
    return {y};
  }

  std::vector<Tensor> backward(std::span<const Tensor> dys, const std::vector<bool>& need, const StepInfo&,
                               LayerContext& ctx) const override {
    const Tensor &a = ctx.saved[0], &b = ctx.saved[1], &dy = dys[0];
    std::vector<Tensor> g(2);
    if (b.ndim() == 2) {
      const int64_t K = a.dim(-1), N = b.dim(1), rows = a.numel() / K;
      if (need[0]) {  // dA = dY B^T
        g[0] = Tensor::empty(a.shape());
        cpu::gemm(false, true, rows, K, N, 1.0f, dy.f32(), N, b.f32(), N, 0.0f, g[0].f32(), K);
      }
      if (need[1]) {  // dB = A^T dY
        g[1] = Tensor::empty(b.shape());
        cpu::gemm(true, false, K, N, rows, 1.0f, a.f32(), K, dy.f32(), N, 0.0f, g[1].f32(), N);
      }
      ctx.clear();
      return g;
    }
    const MatmulDims d = dims_of(a.shape(), b.shape());
    Tensor da = need[0] ? Tensor::zeros(a.shape()) : Tensor(), db = need[1] ? Tensor::zeros(b.shape()) : Tensor();
    const float *ap = a.f32(), *bp = b.f32(), *gp = dy.f32();
    // beta = 1 accumulates over batch entries that broadcast onto one matrix.
    for_each_broadcast(d.batch, d.sa, d.sb, [&](int64_t i, int64_t oa, int64_t ob) {
      const float* gi = gp + i * d.M * d.N;
      if (need[0])
        cpu::gemm(false, true, d.M, d.K, d.N, 1.0f, gi, d.N, bp + ob * d.K * d.N, d.N, 1.0f,
                  da.f32() + oa * d.M * d.K, d.K);
      if (need[1])
        cpu::gemm(true, false, d.K, d.N, d.M, 1.0f, ap + oa * d.M * d.K, d.K, gi, d.N, 1.0f,
                  db.f32() + ob * d.K * d.N, d.N);
    });
    g[0] = da;
    g[1] = db;
    ctx.clear();
    return g;
  }
};

}  // namespace

OpPtr make_matmul_op(const Node& n, const OpInputs& in) {
  const Tensor &a = in.at(0), &b = in.at(1);
  if (a.ndim() < 2 || b.ndim() < 2) unsupported(n, "1-d operands are not supported");
  if (a.dim(-1) != b.dim(-2)) unsupported(n, cat("inner dimensions differ: ", shape_str(a.shape()), " x ", shape_str(b.shape())));
  if (b.ndim() > 2) {
    Shape ba(a.shape().begin(), a.shape().end() - 2), bb(b.shape().begin(), b.shape().end() - 2);
    broadcast_shapes(n, ba, bb);
  }
  // The batch may sit in the broadcast dimensions, A's rows or B's
  // columns, never in the contracted dimension.
  const int ba = in.batch_axis(0), bb = in.batch_axis(1);
  if ((ba >= 0 && ba == a.ndim() - 1) || (bb >= 0 && bb == b.ndim() - 2))
    unsupported(n, "contracting over the batch dimension is not supported");
  if (ba >= 0 && bb >= 0 && (ba >= a.ndim() - 2 || bb >= b.ndim() - 2))
    unsupported(n, "both operands hold the batch, but not in their broadcast dimensions");
  return std::make_unique<MatMulOp>();
}

}  // namespace pd::onnx

// MatMul with numpy semantics: [..., M, K] x [..., K, N], batch dims
// broadcast. A 2-d right operand (a weight, as PyTorch exports a Linear
// without Gemm) folds the left operand's batch dims into M: one GEMM.
#include "core/device_ops.h"
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

// The batch as calls of gemm_strided_batched: the longest run of trailing
// batch dimensions over which each operand's matrices lie at one stride
// (0 where it broadcasts) is one call; the leading dimensions loop.
struct BatchedCalls {
  Shape outer;                            // the looped dimensions
  std::vector<int64_t> outer_sa, outer_sb;  // their matrix offsets in A and B
  int64_t count = 1;                      // matrices per call
  int64_t step_a = 0, step_b = 0;         // matrix stride of A and B within a call
};

BatchedCalls batched_calls(const MatmulDims& d) {
  BatchedCalls c;
  size_t split = d.batch.size();
  bool started = false;
  for (; split > 0; --split) {
    const size_t k = split - 1;
    if (d.batch[k] == 1) continue;  // joins any run
    if (!started) {  // the innermost dimension sets the steps
      c.step_a = d.sa[k];
      c.step_b = d.sb[k];
      started = true;
    } else if (d.sa[k] != c.step_a * c.count || d.sb[k] != c.step_b * c.count) {
      break;
    }
    c.count *= d.batch[k];
  }
  c.outer.assign(d.batch.begin(), d.batch.begin() + static_cast<std::ptrdiff_t>(split));
  c.outer_sa.assign(d.sa.begin(), d.sa.begin() + static_cast<std::ptrdiff_t>(split));
  c.outer_sb.assign(d.sb.begin(), d.sb.begin() + static_cast<std::ptrdiff_t>(split));
  return c;
}

// Whether an operand with matrix offsets s over the batch is read once per
// batch entry (no broadcast dimension of size > 1).
bool unbroadcast(const std::vector<int64_t>& s, const Shape& batch) {
  for (size_t k = 0; k < s.size(); ++k)
    if (s[k] == 0 && batch[k] > 1) return false;
  return true;
}

class MatMulOp : public Op {
 public:
  std::string type() const override { return "MatMul"; }

  std::vector<Tensor> forward(std::span<const Tensor> in, const StepInfo&, LayerContext& ctx) const override {
    const Tensor &a = in[0], &b = in[1];
    const DeviceOps& ops = device_ops(a.device());
    if (b.ndim() == 2) {  // weight: one GEMM over every row of A
      const int64_t K = a.dim(-1), N = b.dim(1), rows = a.numel() / K;
      Shape out = a.shape();
      out.back() = N;
      Tensor y = Tensor::empty(out, DType::F32, a.device());
      ops.gemm(false, false, rows, N, K, 1.0f, a.f32(), K, b.f32(), N, 0.0f, y.f32(), N);
      ctx.saved = {a, b};
      return {y};
    }
    const MatmulDims d = dims_of(a.shape(), b.shape());
    Shape out = d.batch;
    out.push_back(d.M);
    out.push_back(d.N);
    Tensor y = Tensor::empty(out, DType::F32, a.device());
    if (y.numel() == 0) {
      ctx.saved = {a, b};
      return {y};
    }
    // y = A B per batch entry; y's matrices in batch order.
    const BatchedCalls c = batched_calls(d);
    const int64_t mk = d.M * d.K, kn = d.K * d.N, mn = d.M * d.N;
    const float *ap = a.f32(), *bp = b.f32();
    float* yp = y.f32();
    for_each_broadcast(c.outer, c.outer_sa, c.outer_sb, [&](int64_t i, int64_t oa, int64_t ob) {
      ops.gemm_strided_batched(false, false, d.M, d.N, d.K, 1.0f, ap + oa * mk, d.K, c.step_a * mk, bp + ob * kn, d.N,
                               c.step_b * kn, 0.0f, yp + i * c.count * mn, d.N, mn, c.count);
    });
    ctx.saved = {a, b};
    return {y};
  }

  std::vector<Tensor> backward(std::span<const Tensor> dys, const std::vector<bool>& need, const StepInfo&,
                               LayerContext& ctx) const override {
    const Tensor &a = ctx.saved[0], &b = ctx.saved[1], &dy = dys[0];
    const DeviceOps& ops = device_ops(dy.device());
    std::vector<Tensor> g(2);
    if (b.ndim() == 2) {
      const int64_t K = a.dim(-1), N = b.dim(1), rows = a.numel() / K;
      if (need[0]) {  // dA = dY B^T
        g[0] = Tensor::empty(a.shape(), DType::F32, dy.device());
        ops.gemm(false, true, rows, K, N, 1.0f, dy.f32(), N, b.f32(), N, 0.0f, g[0].f32(), K);
      }
      if (need[1]) {  // dB = A^T dY
        g[1] = Tensor::empty(b.shape(), DType::F32, dy.device());
        ops.gemm(true, false, K, N, rows, 1.0f, a.f32(), K, dy.f32(), N, 0.0f, g[1].f32(), N);
      }
      ctx.clear();
      return g;
    }
    const MatmulDims d = dims_of(a.shape(), b.shape());
    const BatchedCalls c = batched_calls(d);
    const int64_t mk = d.M * d.K, kn = d.K * d.N, mn = d.M * d.N;
    const float *ap = a.f32(), *bp = b.f32(), *gp = dy.f32();
    // Per batch entry into gradients of the full batch shape; an operand
    // broadcast over the batch then sums its entries (reduce_to).
    auto full = [&](int64_t rows, int64_t cols) {
      Shape s = d.batch;
      s.push_back(rows);
      s.push_back(cols);
      return Tensor::empty(s, DType::F32, dy.device());
    };
    if (need[0]) {  // dA = dY B^T
      Tensor da = full(d.M, d.K);
      float* dp = da.f32();
      for_each_broadcast(c.outer, c.outer_sa, c.outer_sb, [&](int64_t i, int64_t, int64_t ob) {
        ops.gemm_strided_batched(false, true, d.M, d.K, d.N, 1.0f, gp + i * c.count * mn, d.N, mn, bp + ob * kn, d.N,
                                 c.step_b * kn, 0.0f, dp + i * c.count * mk, d.K, mk, c.count);
      });
      g[0] = unbroadcast(d.sa, d.batch) ? da.reshape(a.shape()) : reduce_to(da, a.shape());
    }
    if (need[1]) {  // dB = A^T dY
      Tensor db = full(d.K, d.N);
      float* dp = db.f32();
      for_each_broadcast(c.outer, c.outer_sa, c.outer_sb, [&](int64_t i, int64_t oa, int64_t) {
        ops.gemm_strided_batched(true, false, d.K, d.N, d.M, 1.0f, ap + oa * mk, d.K, c.step_a * mk, gp + i * c.count * mn,
                                 d.N, mn, 0.0f, dp + i * c.count * kn, d.N, kn, c.count);
      });
      g[1] = unbroadcast(d.sb, d.batch) ? db.reshape(b.shape()) : reduce_to(db, b.shape());
    }
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

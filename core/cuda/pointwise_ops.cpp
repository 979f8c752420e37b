#include "core/cuda/pointwise_ops.h"

#include "core/cuda/context.h"
#include "core/cuda/strided_kernels.h"

namespace pd::cuda {

namespace {

static_assert(kernels::kMaxRank == kMaxStridedRank, "strided kernels and DeviceOps disagree on the rank limit");

cudaStream_t cs() { return context().compute; }

void broadcast_binary(BinaryArith op, int rank, const int64_t* shape, const int64_t* sa, const int64_t* sb,
                      const float* a, const float* b, float* y) {
  kernels::broadcast_binary(op, rank, shape, sa, sb, a, b, y, cs());
}
void broadcast_binary_backward(BinaryArith op, int rank, const int64_t* shape, const int64_t* sa, const int64_t* sb,
                               const float* a, const float* b, const float* dy, float* da, float* db) {
  kernels::broadcast_binary_backward(op, rank, shape, sa, sb, a, b, dy, da, db, cs());
}
void reduce_sum_strided(int rank, const int64_t* shape, const int64_t* y_strides, const float* x, float* y) {
  kernels::reduce_sum_strided(rank, shape, y_strides, x, y, cs());
}
void unary_forward(UnaryParams f, int64_t n, const float* x, float* y) { kernels::unary_forward(f, n, x, y, cs()); }
void unary_backward(UnaryParams f, int64_t n, const float* saved, const float* dy, float* dx) {
  kernels::unary_backward(f, n, saved, dy, dx, cs());
}
void where_forward(int rank, const int64_t* shape, const int64_t* sc, const int64_t* sx, const int64_t* sy,
                   const uint8_t* cond, const float* x, const float* y, float* out) {
  kernels::where_forward(rank, shape, sc, sx, sy, cond, x, y, out, cs());
}
void where_backward(int rank, const int64_t* shape, const int64_t* sc, const uint8_t* cond, const float* dout,
                    float* dx, float* dy) {
  kernels::where_backward(rank, shape, sc, cond, dout, dx, dy, cs());
}
void softmax_axis_forward(int64_t outer, int64_t len, int64_t inner, const float* x, float* y) {
  kernels::softmax_axis_forward(outer, len, inner, x, y, cs());
}
void softmax_axis_backward(int64_t outer, int64_t len, int64_t inner, const float* y, const float* dy, float* dx) {
  kernels::softmax_axis_backward(outer, len, inner, y, dy, dx, cs());
}

}  // namespace

void fill_pointwise_ops(DeviceOps& o) {
  o.broadcast_binary = &broadcast_binary;
  o.broadcast_binary_backward = &broadcast_binary_backward;
  o.reduce_sum_strided = &reduce_sum_strided;
  o.unary_forward = &unary_forward;
  o.unary_backward = &unary_backward;
  o.where_forward = &where_forward;
  o.where_backward = &where_backward;
  o.softmax_axis_forward = &softmax_axis_forward;
  o.softmax_axis_backward = &softmax_axis_backward;
}

}  // namespace pd::cuda

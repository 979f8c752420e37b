#pragma once
// Linear algebra of the layers on a device (core/device_ops.h), shared by
// Linear and attention's projections: y = x Wᵀ + b over rows of x.
#include <cstdint>

#include "core/device_ops.h"

namespace pd {

// x [rows, in], W [out, in], b [out] or null -> y [rows, out] (overwritten).
inline void device_linear_forward(const DeviceOps& ops, const float* x, const float* w, const float* b,
                                  float* y, int64_t rows, int64_t in, int64_t out) {
  if (rows == 0) return;
  ops.gemm(false, true, rows, out, in, 1.0f, x, in, w, in, 0.0f, y, out);
  if (b) ops.add_bias_rows(rows, out, b, y);
}

// dW += dyᵀ x; db += column sums of dy (db may be null); dx = dy W (dx may be null).
inline void device_linear_backward(const DeviceOps& ops, const float* x, const float* w, const float* dy,
                                   float* dx, float* dw, float* db, int64_t rows, int64_t in,
                                   int64_t out) {
  if (rows == 0) return;
  ops.gemm(true, false, out, in, rows, 1.0f, dy, out, x, in, 1.0f, dw, in);
  if (db) ops.sum_rows_accum(rows, out, dy, db);
  if (dx) ops.gemm(false, false, rows, in, out, 1.0f, dy, out, w, in, 0.0f, dx, in);
}

}  // namespace pd

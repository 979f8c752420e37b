#include "core/cpu/broadcast_kernels.h"

#include <algorithm>
#include <cstring>

#include "core/device_ops.h"
#include "core/error.h"

namespace pd::cpu {

namespace {

constexpr int kMaxRank = kMaxStridedRank;

int64_t numel(int rank, const int64_t* shape) {
  int64_t n = 1;
  for (int d = 0; d < rank; ++d) n *= shape[d];
  return n;
}

// Elements of a dense operand whose broadcast strides are `s`.
int64_t operand_numel(int rank, const int64_t* shape, const int64_t* s) {
  int64_t n = 1;
  for (int d = 0; d < rank; ++d)
    if (s[d] != 0) n *= shape[d];
  return n;
}

// Whether strides s read `shape` densely (row-major, no broadcasting).
bool is_dense(int rank, const int64_t* shape, const int64_t* s) {
  int64_t want = 1;
  for (int d = rank - 1; d >= 0; --d) {
    if (shape[d] != 1 && s[d] != want) return false;
    want *= shape[d];
  }
  return true;
}

// Calls row(i, off, len, step) for each row (last dimension) of `shape` in
// row-major order: i the flat output index of the row's first element,
// off[k] operand k's offset there, step[k] its stride along the row. The
// offsets advance incrementally (an odometer over the other dimensions).
template <int K, class Row>
void for_each_row(int rank, const int64_t* shape, const int64_t* const (&strides)[K], Row&& row) {
  PD_CHECK(rank >= 0 && rank <= kMaxRank, "strided op: rank ", rank, " outside [0, ", kMaxRank, "]");
  const int64_t n = numel(rank, shape);
  if (n == 0) return;
  int64_t off[K] = {}, step[K] = {};
  if (rank == 0) {
    row(int64_t{0}, off, int64_t{1}, step);
    return;
  }
  const int64_t len = shape[rank - 1];
  for (int k = 0; k < K; ++k) step[k] = strides[k][rank - 1];
  int64_t idx[kMaxRank] = {};
  for (int64_t i = 0; i < n; i += len) {
    row(i, off, len, step);
    for (int d = rank - 2; d >= 0; --d) {
      if (++idx[d] < shape[d]) {
        for (int k = 0; k < K; ++k) off[k] += strides[k][d];
        break;
      }
      for (int k = 0; k < K; ++k) off[k] -= strides[k][d] * (shape[d] - 1);
      idx[d] = 0;
    }
  }
}

template <BinaryArith Op>
inline float arith(float a, float b) {
  if constexpr (Op == BinaryArith::Add) return a + b;
  if constexpr (Op == BinaryArith::Sub) return a - b;
  if constexpr (Op == BinaryArith::Mul) return a * b;
  return a / b;
}

template <BinaryArith Op>
void binary_forward(int rank, const int64_t* shape, const int64_t* sa, const int64_t* sb, const float* ap,
                    const float* bp, float* yp) {
  if (is_dense(rank, shape, sa) && is_dense(rank, shape, sb)) {
    const int64_t n = numel(rank, shape);
    for (int64_t i = 0; i < n; ++i) yp[i] = arith<Op>(ap[i], bp[i]);
    return;
  }
  const int64_t* const strides[2] = {sa, sb};
  for_each_row<2>(rank, shape, strides, [&](int64_t i, const int64_t* off, int64_t len, const int64_t* step) {
    const float* ar = ap + off[0];
    const float* br = bp + off[1];
    float* yr = yp + i;
    const int64_t ia = step[0], ib = step[1];
    for (int64_t j = 0; j < len; ++j) yr[j] = arith<Op>(ar[j * ia], br[j * ib]);
  });
}

}  // namespace

void broadcast_binary(BinaryArith op, int rank, const int64_t* shape, const int64_t* a_strides,
                      const int64_t* b_strides, const float* a, const float* b, float* y) {
  switch (op) {
    case BinaryArith::Add: return binary_forward<BinaryArith::Add>(rank, shape, a_strides, b_strides, a, b, y);
    case BinaryArith::Sub: return binary_forward<BinaryArith::Sub>(rank, shape, a_strides, b_strides, a, b, y);
    case BinaryArith::Mul: return binary_forward<BinaryArith::Mul>(rank, shape, a_strides, b_strides, a, b, y);
    case BinaryArith::Div: return binary_forward<BinaryArith::Div>(rank, shape, a_strides, b_strides, a, b, y);
  }
}

void broadcast_binary_backward(BinaryArith op, int rank, const int64_t* shape, const int64_t* a_strides,
                               const int64_t* b_strides, const float* ap, const float* bp, const float* gp,
                               float* dap, float* dbp) {
  PD_CHECK(op == BinaryArith::Mul || op == BinaryArith::Div,
           "broadcast_binary_backward: Mul and Div only (Add and Sub gradients are sums of dy)");
  if (dap) std::fill_n(dap, operand_numel(rank, shape, a_strides), 0.0f);
  if (dbp) std::fill_n(dbp, operand_numel(rank, shape, b_strides), 0.0f);
  const int64_t* const strides[2] = {a_strides, b_strides};
  const bool mul = op == BinaryArith::Mul;
  for_each_row<2>(rank, shape, strides, [&](int64_t i0, const int64_t* off, int64_t len, const int64_t* step) {
    for (int64_t j = 0; j < len; ++j) {
      const int64_t i = i0 + j, oa = off[0] + j * step[0], ob = off[1] + j * step[1];
      if (mul) {
        if (dap) dap[oa] += gp[i] * bp[ob];
        if (dbp) dbp[ob] += gp[i] * ap[oa];
      } else {
        if (dap) dap[oa] += gp[i] / bp[ob];
        if (dbp) dbp[ob] -= gp[i] * ap[oa] / (bp[ob] * bp[ob]);
      }
    }
  });
}

void reduce_sum_strided(int rank, const int64_t* shape, const int64_t* y_strides, const float* x, float* y) {
  std::fill_n(y, operand_numel(rank, shape, y_strides), 0.0f);
  const int64_t* const strides[1] = {y_strides};
  for_each_row<1>(rank, shape, strides, [&](int64_t i, const int64_t* off, int64_t len, const int64_t* step) {
    const float* xr = x + i;
    float* yr = y + off[0];
    const int64_t iy = step[0];
    for (int64_t j = 0; j < len; ++j) yr[j * iy] += xr[j];
  });
}

void where_forward(int rank, const int64_t* shape, const int64_t* cond_strides, const int64_t* x_strides,
                   const int64_t* y_strides, const uint8_t* cond, const float* x, const float* y, float* out) {
  const int64_t* const strides[3] = {cond_strides, x_strides, y_strides};
  for_each_row<3>(rank, shape, strides, [&](int64_t i, const int64_t* off, int64_t len, const int64_t* step) {
    for (int64_t j = 0; j < len; ++j)
      out[i + j] = cond[off[0] + j * step[0]] ? x[off[1] + j * step[1]] : y[off[2] + j * step[2]];
  });
}

void where_backward(int rank, const int64_t* shape, const int64_t* cond_strides, const uint8_t* cond,
                    const float* dout, float* dx, float* dy) {
  const int64_t* const strides[1] = {cond_strides};
  for_each_row<1>(rank, shape, strides, [&](int64_t i, const int64_t* off, int64_t len, const int64_t* step) {
    for (int64_t j = 0; j < len; ++j) {
      const bool c = cond[off[0] + j * step[0]] != 0;
      if (dx) dx[i + j] = c ? dout[i + j] : 0.0f;
      if (dy) dy[i + j] = c ? 0.0f : dout[i + j];
    }
  });
}

}  // namespace pd::cpu

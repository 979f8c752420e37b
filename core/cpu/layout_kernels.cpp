#include "core/cpu/layout_kernels.h"

#include <cstring>

#include "core/cpu/parallel.h"
#include "core/device_ops.h"
#include "core/error.h"
#include "core/strided_dims.h"

namespace pd::cpu {

static_assert(StridedDims::kMaxRank == kMaxStridedRank);

namespace {

// One run: the last dimension.
inline void copy_run(int64_t n, const float* x, int64_t xs, float* y, int64_t ys) {
  if (xs == 1 && ys == 1) {
    std::memcpy(y, x, static_cast<size_t>(n) * sizeof(float));
  } else if (xs == 0) {
    const float v = *x;
    for (int64_t j = 0; j < n; ++j) y[j * ys] = v;
  } else {
    for (int64_t j = 0; j < n; ++j) y[j * ys] = x[j * xs];
  }
}

// Runs [begin, end) of the outer dimensions, offsets advanced like an odometer.
void copy_runs(const StridedDims& s, int64_t begin, int64_t end, const float* x, float* y) {
  const int outer_rank = s.rank - 1;
  int64_t idx[StridedDims::kMaxRank] = {};
  int64_t xo = 0, yo = 0, rest = begin;
  for (int d = outer_rank - 1; d >= 0; --d) {
    idx[d] = rest % s.shape[d];
    rest /= s.shape[d];
    xo += idx[d] * s.x_stride[d];
    yo += idx[d] * s.y_stride[d];
  }
  const int last = s.rank - 1;
  for (int64_t r = begin; r < end; ++r) {
    copy_run(s.shape[last], x + xo, s.x_stride[last], y + yo, s.y_stride[last]);
    for (int d = outer_rank - 1; d >= 0; --d) {
      if (++idx[d] < s.shape[d]) {
        xo += s.x_stride[d];
        yo += s.y_stride[d];
        break;
      }
      xo -= s.x_stride[d] * (s.shape[d] - 1);
      yo -= s.y_stride[d] * (s.shape[d] - 1);
      idx[d] = 0;
    }
  }
}

template <class I>
int64_t index_at(const void* index, int64_t j) {
  return static_cast<int64_t>(static_cast<const I*>(index)[j]);
}

int64_t read_index(DType t, const void* index, int64_t j) {
  return t == DType::I64 ? index_at<int64_t>(index, j) : index_at<int32_t>(index, j);
}

void check_index_dtype(DType t) {
  PD_CHECK(t == DType::I32 || t == DType::I64, "index selection takes I32 or I64 indices, got ", dtype_name(t));
}

}  // namespace

void strided_copy(int rank, const int64_t* shape, const float* x, const int64_t* x_strides, float* y,
                  const int64_t* y_strides) {
  PD_CHECK(rank >= 0 && rank <= StridedDims::kMaxRank, "strided_copy takes rank 0..", StridedDims::kMaxRank,
           ", got ", rank);
  const StridedDims s = simplify_strided(rank, shape, x_strides, y_strides);
  if (s.empty) return;
  if (s.rank == 0) {
    *y = *x;
    return;
  }
  const int64_t runs = s.outer();
  parallel_ranges(runs, s.elements(), [&](int64_t begin, int64_t end) { copy_runs(s, begin, end, x, y); });
}

bool index_select_forward(int64_t outer, int64_t len, int64_t inner, int64_t count, DType index_dtype,
                          const void* index, const float* x, float* y) {
  check_index_dtype(index_dtype);
  for (int64_t j = 0; j < count; ++j) {
    const int64_t k = read_index(index_dtype, index, j);
    if (k < -len || k >= len) return false;
  }
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t j = 0; j < count; ++j) {
      int64_t k = read_index(index_dtype, index, j);
      if (k < 0) k += len;
      std::memcpy(y + (o * count + j) * inner, x + (o * len + k) * inner, static_cast<size_t>(inner) * sizeof(float));
    }
  return true;
}

void index_select_backward_accum(int64_t outer, int64_t len, int64_t inner, int64_t count, DType index_dtype,
                                 const void* index, const float* dy, float* dx) {
  check_index_dtype(index_dtype);
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t j = 0; j < count; ++j) {
      int64_t k = read_index(index_dtype, index, j);
      if (k < -len || k >= len) throw RuntimeFailure(cat("index selection: index ", k, " outside [", -len, ", ", len, ")"));
      if (k < 0) k += len;
      float* row = dx + (o * len + k) * inner;
      const float* src = dy + (o * count + j) * inner;
      for (int64_t e = 0; e < inner; ++e) row[e] += src[e];
    }
}

}  // namespace pd::cpu

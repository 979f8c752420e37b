#include "core/cuda/layout_ops.h"

#include <memory>
#include <vector>

#include "core/cuda/allocator.h"
#include "core/cuda/check.h"
#include "core/cuda/context.h"
#include "core/cuda/layout_kernels.h"
#include "core/error.h"
#include "core/strided_dims.h"

namespace pd::cuda {

namespace {

cudaStream_t cs() { return context().compute; }

void check_index_dtype(DType t) {
  PD_CHECK(t == DType::I32 || t == DType::I64, "index selection takes I32 or I64 indices, got ", dtype_name(t));
}

// The indices on the host, resolved to [0, len); RuntimeFailure on one outside [-len, len).
std::vector<int64_t> host_indices(int64_t len, int64_t count, DType t, const void* index) {
  const size_t width = dtype_size(t);
  std::vector<char> raw(static_cast<size_t>(count) * width);
  if (count > 0) {
    CUDA_CHECK(cudaMemcpyAsync(raw.data(), index, raw.size(), cudaMemcpyDeviceToHost, cs()));
    CUDA_CHECK(cudaStreamSynchronize(cs()));
  }
  std::vector<int64_t> k(static_cast<size_t>(count));
  for (size_t j = 0; j < k.size(); ++j) {
    int64_t v = t == DType::I64 ? reinterpret_cast<const int64_t*>(raw.data())[j]
                                : reinterpret_cast<const int32_t*>(raw.data())[j];
    if (v < -len || v >= len) throw RuntimeFailure(cat("index selection: index ", v, " outside [", -len, ", ", len, ")"));
    k[j] = v < 0 ? v + len : v;
  }
  return k;
}

}  // namespace

void strided_copy(int rank, const int64_t* shape, const float* x, const int64_t* x_strides, float* y,
                  const int64_t* y_strides) {
  PD_CHECK(rank >= 0 && rank <= StridedDims::kMaxRank, "strided_copy takes rank 0..", StridedDims::kMaxRank,
           ", got ", rank);
  kernels::strided_copy(simplify_strided(rank, shape, x_strides, y_strides), x, y, cs());
}

bool index_select_forward(int64_t outer, int64_t len, int64_t inner, int64_t count, DType index_dtype,
                          const void* index, const float* x, float* y) {
  check_index_dtype(index_dtype);
  if (count == 0) return true;
  const std::shared_ptr<Storage> bad = device_allocator().allocate(sizeof(int32_t));
  int32_t* flag = static_cast<int32_t*>(bad->data);
  CUDA_CHECK(cudaMemsetAsync(flag, 0, sizeof(int32_t), cs()));
  kernels::index_select(outer, len, inner, count, index_dtype == DType::I64, index, x, y, flag, cs());
  int32_t flag_host = 0;
  CUDA_CHECK(cudaMemcpyAsync(&flag_host, flag, sizeof(int32_t), cudaMemcpyDeviceToHost, cs()));
  CUDA_CHECK(cudaStreamSynchronize(cs()));
  return flag_host == 0;
}

// Groups the positions j by the row they select (a stable counting sort),
// then one thread per element of each selected row adds its positions' dy
// in increasing j.
void index_select_backward_accum(int64_t outer, int64_t len, int64_t inner, int64_t count, DType index_dtype,
                                 const void* index, const float* dy, float* dx) {
  check_index_dtype(index_dtype);
  if (count == 0 || outer == 0 || inner == 0) return;
  const std::vector<int64_t> k = host_indices(len, count, index_dtype, index);
  std::vector<int32_t> start(static_cast<size_t>(len) + 1, 0);
  for (int64_t v : k) ++start[static_cast<size_t>(v) + 1];
  std::vector<int32_t> rows, offsets{0};
  for (int64_t v = 0; v < len; ++v)
    if (start[static_cast<size_t>(v) + 1]) {
      rows.push_back(static_cast<int32_t>(v));
      offsets.push_back(offsets.back() + start[static_cast<size_t>(v) + 1]);
    }
  for (int64_t v = 0; v < len; ++v) start[static_cast<size_t>(v) + 1] += start[static_cast<size_t>(v)];
  std::vector<int32_t> positions(static_cast<size_t>(count));
  for (size_t j = 0; j < k.size(); ++j) positions[static_cast<size_t>(start[static_cast<size_t>(k[j])]++)] = static_cast<int32_t>(j);
  // rows | offsets | positions in one upload.
  std::vector<int32_t> packed(rows);
  packed.insert(packed.end(), offsets.begin(), offsets.end());
  packed.insert(packed.end(), positions.begin(), positions.end());
  const std::shared_ptr<Storage> d = device_allocator().allocate(packed.size() * sizeof(int32_t));
  int32_t* dp = static_cast<int32_t*>(d->data);
  CUDA_CHECK(cudaMemcpyAsync(dp, packed.data(), packed.size() * sizeof(int32_t), cudaMemcpyHostToDevice, cs()));
  const int64_t distinct = static_cast<int64_t>(rows.size());
  kernels::index_select_grad(outer, len, inner, count, distinct, dp, dp + distinct, dp + distinct + offsets.size(), dy,
                             dx, cs());
  // `packed` is pageable host memory freed on return: wait until the copy has read it.
  CUDA_CHECK(cudaStreamSynchronize(cs()));
}

}  // namespace pd::cuda

#pragma once
// Row-major GEMM on cuBLAS (column-major underneath), on the compute stream.
#include <cstdint>
#include <memory>

#include "core/precision.h"
#include "core/tensor.h"  // Storage

namespace pd::cuda {

// A bf16 copy of n floats (pack_bf16: exact for bf16 values), queued on
// the compute stream; the caching allocator orders its reuse there.
class Bf16Copy {
 public:
  Bf16Copy(const float* x, int64_t n);
  const uint16_t* get() const { return static_cast<const uint16_t*>(s_->data); }

 private:
  std::shared_ptr<Storage> s_;
};

// gemm with bf16 A and B and FP32 accumulation; C FP32 or, with c_bf16,
// bf16 (uint16_t) rounded from the FP32 result.
void gemm_bf16(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const uint16_t* A,
               int64_t lda, const uint16_t* B, int64_t ldb, float beta, void* C, bool c_bf16, int64_t ldc);

// Under BF16 (the caller's StepInfo::precision) on bf16 copies of A and B
// with FP32 accumulation (exact for bf16-valued operands, others rounded
// to nearest even first); under FP32 cublasSgemm (TF32 with --allow-tf32).
void gemm(Precision p, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
          int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc);
void gemm_strided_batched(Precision p, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                          const float* A, int64_t lda, int64_t stride_a, const float* B, int64_t ldb, int64_t stride_b,
                          float beta, float* C, int64_t ldc, int64_t stride_c, int64_t batch);

}  // namespace pd::cuda

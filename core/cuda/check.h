#pragma once
// Every CUDA, cuBLAS, cuDNN and NCCL call goes through one of these macros:
// a failure throws RuntimeFailure naming the call, the file and the line.
#include <cuda_runtime.h>
#include <cublas_v2.h>

#include "core/error.h"

namespace pd::cuda {

[[noreturn]] void throw_cuda_error(const char* what, const char* detail, const char* file, int line);
const char* cublas_status_name(cublasStatus_t s);

}  // namespace pd::cuda

#define CUDA_CHECK(call)                                                                  \
  do {                                                                                    \
    cudaError_t pd_err_ = (call);                                                         \
    if (pd_err_ != cudaSuccess)                                                           \
      ::pd::cuda::throw_cuda_error(#call, cudaGetErrorString(pd_err_), __FILE__, __LINE__); \
  } while (0)

#define CUBLAS_CHECK(call)                                                                        \
  do {                                                                                            \
    cublasStatus_t pd_st_ = (call);                                                               \
    if (pd_st_ != CUBLAS_STATUS_SUCCESS)                                                          \
      ::pd::cuda::throw_cuda_error(#call, ::pd::cuda::cublas_status_name(pd_st_), __FILE__, __LINE__); \
  } while (0)

// Checks the launch of the kernel just queued (bad configuration etc.).
#define CUDA_CHECK_LAUNCH() CUDA_CHECK(cudaGetLastError())

#if defined(PIPEDREAM_HAVE_CUDNN)
#include <cudnn.h>
#define CUDNN_CHECK(call)                                                                   \
  do {                                                                                      \
    cudnnStatus_t pd_st_ = (call);                                                          \
    if (pd_st_ != CUDNN_STATUS_SUCCESS)                                                     \
      ::pd::cuda::throw_cuda_error(#call, cudnnGetErrorString(pd_st_), __FILE__, __LINE__); \
  } while (0)
#endif

#if defined(PIPEDREAM_HAVE_NCCL)
#include <nccl.h>
#define NCCL_CHECK(call)                                                                    \
  do {                                                                                      \
    ncclResult_t pd_st_ = (call);                                                           \
    if (pd_st_ != ncclSuccess && pd_st_ != ncclInProgress)                                  \
      ::pd::cuda::throw_cuda_error(#call, ncclGetErrorString(pd_st_), __FILE__, __LINE__);  \
  } while (0)
#endif

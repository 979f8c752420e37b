// Embedding lookup and its deterministic backward; SGD and Adam updates.
#include <cmath>

#include "core/cuda/kernels.h"
#include "core/cuda/launch.cuh"
#include "core/cuda/optim_math.cuh"

namespace pd::cuda::kernels {

namespace {

__global__ void embedding_fwd_kernel(int64_t T, int64_t dim, int64_t vocab, const int32_t* tokens,
                                     const float* wte, const float* wpe, float* y, int64_t n,
                                     int32_t* bad_token) {
  PD_GRID_STRIDE(i, n) {
    int64_t pos = i / dim, d = i % dim;
    int64_t t = pos % T;
    int32_t tok = tokens[pos];
    if (tok < 0 || tok >= vocab) {
      *bad_token = 1;
      y[i] = 0.0f;
    } else {
      y[i] = wte[static_cast<int64_t>(tok) * dim + d] + wpe[t * dim + d];
    }
  }
}

// Block k owns token rows[k]; its threads own columns; positions are summed
// in order, so no two threads write the same element and no atomics are used.
__global__ void embedding_token_grad_kernel(int64_t dim, const int32_t* rows, const int32_t* offsets,
                                            const int32_t* positions, const float* dy, float* dwte) {
  int64_t k = blockIdx.x;
  int64_t row = rows[k];
  for (int64_t d = threadIdx.x; d < dim; d += blockDim.x) {
    float acc = 0.0f;
    for (int32_t j = offsets[k]; j < offsets[k + 1]; ++j) acc += dy[static_cast<int64_t>(positions[j]) * dim + d];
    dwte[row * dim + d] += acc;
  }
}

__global__ void embedding_pos_grad_kernel(int64_t batch, int64_t T, int64_t dim, const float* dy, float* dwpe) {
  PD_GRID_STRIDE(i, T * dim) {
    float acc = 0.0f;
    for (int64_t b = 0; b < batch; ++b) acc += dy[b * T * dim + i];
    dwpe[i] += acc;
  }
}

__global__ void sgd_kernel(int64_t n, SgdRule r, float* p, const float* grad, float* buf) {
  PD_GRID_STRIDE(i, n) sgd_element(r, p, grad, buf, i);
}

__global__ void adam_kernel(int64_t n, AdamRule r, float* p, const float* grad, float* m, float* v) {
  PD_GRID_STRIDE(i, n) adam_element(r, p, grad, m, v, i);
}

}  // namespace

void embedding_forward(int64_t batch, int64_t T, int64_t dim, int64_t vocab, const int32_t* tokens,
                       const float* wte, const float* wpe, float* y, int32_t* bad_token, cudaStream_t s) {
  int64_t n = batch * T * dim;
  if (n == 0) return;
  embedding_fwd_kernel<<<grid_for(n), kThreads, 0, s>>>(T, dim, vocab, tokens, wte, wpe, y, n, bad_token);
  CUDA_CHECK_LAUNCH();
}

void embedding_token_grad(int64_t n_tokens, int64_t dim, const int32_t* rows, const int32_t* offsets,
                          const int32_t* positions, const float* dy, float* dwte, cudaStream_t s) {
  if (n_tokens == 0 || dim == 0) return;
  int threads = dim >= kThreads ? kThreads : static_cast<int>((dim + 31) / 32 * 32);
  embedding_token_grad_kernel<<<static_cast<unsigned>(n_tokens), threads, 0, s>>>(dim, rows, offsets, positions,
                                                                                  dy, dwte);
  CUDA_CHECK_LAUNCH();
}

void embedding_position_grad(int64_t batch, int64_t T, int64_t dim, const float* dy, float* dwpe,
                             cudaStream_t s) {
  if (T * dim == 0) return;
  embedding_pos_grad_kernel<<<grid_for(T * dim), kThreads, 0, s>>>(batch, T, dim, dy, dwpe);
  CUDA_CHECK_LAUNCH();
}

void sgd_step(int64_t n, float lr, float momentum, float weight_decay, bool nesterov, float* p, const float* grad,
              float* buf, cudaStream_t s) {
  if (n == 0) return;
  sgd_kernel<<<grid_for(n), kThreads, 0, s>>>(n, SgdRule{lr, momentum, weight_decay, nesterov}, p, grad, buf);
  CUDA_CHECK_LAUNCH();
}

void adam_step(int64_t n, float lr, float beta1, float beta2, float eps, float weight_decay, bool decoupled,
               float bias_c1, float bias_c2, float* p, const float* grad, float* m, float* v, cudaStream_t s) {
  if (n == 0) return;
  adam_kernel<<<grid_for(n), kThreads, 0, s>>>(
      n, AdamRule{lr, beta1, beta2, eps, weight_decay, decoupled, bias_c1, bias_c2}, p, grad, m, v);
  CUDA_CHECK_LAUNCH();
}

}  // namespace pd::cuda::kernels

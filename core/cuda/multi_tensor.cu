// The optimizer's update over many tensors in a few launches: a launch
// takes up to kTensorsPerLaunch tensors, blockIdx.y picks the tensor and
// the blocks along x stride over its elements. The element code is the
// per-tensor kernels' (optim_math.cuh), so the bits are the same.
#include "core/cuda/kernels.h"
#include "core/cuda/launch.cuh"
#include "core/cuda/optim_math.cuh"

namespace pd::cuda::kernels {

namespace {

constexpr int kTensorsPerLaunch = 48;  // the list below stays well under 4 KB of kernel parameters

struct TensorList {
  int64_t n[kTensorsPerLaunch];
  float* p[kTensorsPerLaunch];
  const float* g[kTensorsPerLaunch];
  float* s1[kTensorsPerLaunch];
  float* s2[kTensorsPerLaunch];
};

__global__ void sgd_multi_kernel(TensorList t, SgdRule r) {
  const int k = blockIdx.y;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < t.n[k]; i += (int64_t)gridDim.x * blockDim.x)
    sgd_element(r, t.p[k], t.g[k], t.s1[k], i);
}

__global__ void adam_multi_kernel(TensorList t, AdamRule r) {
  const int k = blockIdx.y;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < t.n[k]; i += (int64_t)gridDim.x * blockDim.x)
    adam_element(r, t.p[k], t.g[k], t.s1[k], t.s2[k], i);
}

// Calls launch(list, grid) for each group of up to kTensorsPerLaunch tensors.
template <class Launch>
void for_each_group(int64_t count, const int64_t* sizes, float* const* p, const float* const* g,
                    float* const* s1, float* const* s2, Launch launch) {
  for (int64_t first = 0; first < count; first += kTensorsPerLaunch) {
    TensorList t{};
    int used = 0;
    int64_t largest = 0;
    for (int64_t k = first; k < count && used < kTensorsPerLaunch; ++k, ++used) {
      t.n[used] = sizes[k];
      t.p[used] = p[k];
      t.g[used] = g[k];
      t.s1[used] = s1 ? s1[k] : nullptr;
      t.s2[used] = s2 ? s2[k] : nullptr;
      if (sizes[k] > largest) largest = sizes[k];
    }
    if (largest > 0) launch(t, dim3(grid_for(largest), static_cast<unsigned>(used)));
  }
}

}  // namespace

void sgd_step_multi(int64_t count, const int64_t* sizes, float* const* params, const float* const* grads,
                    float* const* bufs, float lr, float momentum, float weight_decay, bool nesterov,
                    cudaStream_t s) {
  const SgdRule r{lr, momentum, weight_decay, nesterov};
  for_each_group(count, sizes, params, grads, bufs, nullptr, [&](const TensorList& t, dim3 grid) {
    sgd_multi_kernel<<<grid, kThreads, 0, s>>>(t, r);
    CUDA_CHECK_LAUNCH();
  });
}

void adam_step_multi(int64_t count, const int64_t* sizes, float* const* params, const float* const* grads,
                     float* const* m, float* const* v, float lr, float beta1, float beta2, float eps,
                     float weight_decay, bool decoupled, float bias_c1, float bias_c2, cudaStream_t s) {
  const AdamRule r{lr, beta1, beta2, eps, weight_decay, decoupled, bias_c1, bias_c2};
  for_each_group(count, sizes, params, grads, m, v, [&](const TensorList& t, dim3 grid) {
    adam_multi_kernel<<<grid, kThreads, 0, s>>>(t, r);
    CUDA_CHECK_LAUNCH();
  });
}

namespace {

// Sums of squares: block b of tensor k sums elements [b, b + 1) * kSquaresChunk
// in a fixed order into partials[first_partial[k] + b]; a second launch adds
// each tensor's partials in a fixed tree. Same bits on every run.
constexpr int64_t kSquaresChunk = kSumSquaresChunk;
static_assert(kSquaresChunk % kThreads == 0, "a chunk is whole rounds of the block's threads");

struct SquaresList {
  int64_t n[kTensorsPerLaunch];
  const float* x[kTensorsPerLaunch];
  int64_t first_partial[kTensorsPerLaunch];
};

__device__ double block_sum_double(double v, double* sh) {
  sh[threadIdx.x] = v;
  __syncthreads();
  for (int s = kThreads / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) sh[threadIdx.x] += sh[threadIdx.x + s];
    __syncthreads();
  }
  const double r = sh[0];
  __syncthreads();
  return r;
}

__global__ void squares_partial_kernel(SquaresList t, double* partials) {
  __shared__ double sh[kThreads];
  const int k = blockIdx.y;
  const int64_t begin = blockIdx.x * kSquaresChunk;
  if (begin >= t.n[k]) return;  // the whole block leaves together
  const int64_t end = min(t.n[k], begin + kSquaresChunk);
  double acc = 0;
  for (int64_t i = begin + threadIdx.x; i < end; i += kThreads) {
    const double v = t.x[k][i];
    acc += v * v;
  }
  const double total = block_sum_double(acc, sh);
  if (threadIdx.x == 0) partials[t.first_partial[k] + blockIdx.x] = total;
}

__global__ void squares_total_kernel(const double* partials, const int64_t* first, const int64_t* count,
                                     double* sums) {
  __shared__ double sh[kThreads];
  const int k = blockIdx.x;
  double acc = 0;
  for (int64_t i = threadIdx.x; i < count[k]; i += kThreads) acc += partials[first[k] + i];
  const double total = block_sum_double(acc, sh);
  if (threadIdx.x == 0) sums[k] = total;
}

}  // namespace

void sum_squares_multi(int64_t count, const int64_t* sizes, const float* const* xs,
                       const int64_t* first_partial_host, const int64_t* partials_index_dev, double* partials,
                       double* sums_dev, cudaStream_t s) {
  for (int64_t first = 0; first < count; first += kTensorsPerLaunch) {
    SquaresList t{};
    int used = 0;
    int64_t largest = 0;
    for (int64_t k = first; k < count && used < kTensorsPerLaunch; ++k, ++used) {
      t.n[used] = sizes[k];
      t.x[used] = xs[k];
      t.first_partial[used] = first_partial_host[k];
      largest = max(largest, sizes[k]);
    }
    if (largest == 0) continue;
    const dim3 grid(static_cast<unsigned>((largest + kSquaresChunk - 1) / kSquaresChunk), static_cast<unsigned>(used));
    squares_partial_kernel<<<grid, kThreads, 0, s>>>(t, partials);
    CUDA_CHECK_LAUNCH();
  }
  squares_total_kernel<<<static_cast<unsigned>(count), kThreads, 0, s>>>(partials, partials_index_dev,
                                                                       partials_index_dev + count, sums_dev);
  CUDA_CHECK_LAUNCH();
}

}  // namespace pd::cuda::kernels

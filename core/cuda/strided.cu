// Broadcasting arithmetic and its gradients, strided sums and Where.
// Elementwise kernels decode each output index into operand offsets. Sums
// (a broadcast operand's gradient, reduce_sum_strided) give each output
// element one thread that walks the summed dimensions in row-major order,
// from 0: the CPU's order, a function of the shape alone, no atomics.
#include "core/cuda/launch.cuh"
#include "core/cuda/strided_kernels.h"
#include "core/error.h"

namespace pd::cuda::kernels {

namespace {

// A shape and up to three operands' strides, passed to kernels by value.
struct Dims {
  int rank = 0;
  int64_t shape[kMaxRank] = {};
  int64_t stride[3][kMaxRank] = {};
};

Dims make_dims(int rank, const int64_t* shape, const int64_t* s0, const int64_t* s1 = nullptr,
               const int64_t* s2 = nullptr) {
  PD_CHECK(rank >= 0 && rank <= kMaxRank, "strided op: rank ", rank, " outside [0, ", kMaxRank, "]");
  Dims d;
  d.rank = rank;
  const int64_t* s[3] = {s0, s1, s2};
  for (int k = 0; k < rank; ++k) {
    d.shape[k] = shape[k];
    for (int j = 0; j < 3; ++j) d.stride[j][k] = s[j] ? s[j][k] : 0;
  }
  return d;
}

int64_t numel(int rank, const int64_t* shape) {
  int64_t n = 1;
  for (int d = 0; d < rank; ++d) n *= shape[d];
  return n;
}

// Offsets of flat output index i in operands 0..K-1.
template <int K>
__device__ void offsets_of(const Dims& d, int64_t i, int64_t* off) {
  for (int k = 0; k < K; ++k) off[k] = 0;
  for (int a = d.rank - 1; a >= 0; --a) {
    const int64_t q = i / d.shape[a], c = i - q * d.shape[a];
    i = q;
    for (int k = 0; k < K; ++k) off[k] += c * d.stride[k][a];
  }
}

template <BinaryArith Op>
__device__ float arith(float a, float b) {
  if (Op == BinaryArith::Add) return __fadd_rn(a, b);
  if (Op == BinaryArith::Sub) return __fsub_rn(a, b);
  if (Op == BinaryArith::Mul) return __fmul_rn(a, b);
  return __fdiv_rn(a, b);
}

template <BinaryArith Op>
__global__ void binary_kernel(Dims d, int64_t n, const float* a, const float* b, float* y) {
  PD_GRID_STRIDE(i, n) {
    int64_t off[2];
    offsets_of<2>(d, i, off);
    y[i] = arith<Op>(a[off[0]], b[off[1]]);
  }
}

// What one term of a sum is, at output element o (dense), `other` read at
// the second stride set, `self` the target's own operand at the target offset.
enum class Term { Plain, Times, Over, DivNumerator };

template <Term T>
__device__ float term(float g, float other, float self) {
  if (T == Term::Plain) return g;
  if (T == Term::Times) return g * other;  // Mul: dy * b to a, dy * a to b
  if (T == Term::Over) return g / other;   // Div, to a: dy / b
  return -(g * other / (self * self));     // Div, to b: -(dy * a / (b * b))
}

// Sum kernel. d.stride[0]: the target's dense broadcast strides (0 on
// summed dims); d.stride[1]: the other operand's; d.stride[2]: the dense
// row-major strides of the output `g` is laid out in. One thread per
// target element; kept/summed: the dimensions it indexes / sums over.
struct SumPlan {
  int kept_rank = 0, summed_rank = 0;
  int kept[kMaxRank] = {}, summed[kMaxRank] = {};
  int64_t summed_count = 1;
};

SumPlan make_plan(const Dims& d) {
  SumPlan p;
  for (int a = 0; a < d.rank; ++a) {
    if (d.stride[0][a] != 0) {
      p.kept[p.kept_rank++] = a;
    } else if (d.shape[a] != 1) {  // a size-0 dimension too: nothing to sum
      p.summed[p.summed_rank++] = a;
      p.summed_count *= d.shape[a];
    }
  }
  return p;
}

template <Term T>
__global__ void sum_kernel(Dims d, SumPlan p, int64_t targets, const float* g, const float* other, const float* self,
                           float* target) {
  PD_GRID_STRIDE(t, targets) {
    // Decode t over the kept dimensions (row-major): the target offset and
    // the first contributing element's offsets.
    int64_t rest = t, to = 0, go = 0, oo = 0;
    for (int k = p.kept_rank - 1; k >= 0; --k) {
      const int a = p.kept[k];
      const int64_t q = rest / d.shape[a], c = rest - q * d.shape[a];
      rest = q;
      to += c * d.stride[0][a];
      oo += c * d.stride[1][a];
      go += c * d.stride[2][a];
    }
    const float s = T == Term::DivNumerator ? self[to] : 0.0f;
    int64_t idx[kMaxRank] = {};
    float acc = 0.0f;
    for (int64_t j = 0; j < p.summed_count; ++j) {
      acc += term<T>(g[go], T == Term::Plain ? 0.0f : other[oo], s);
      for (int k = p.summed_rank - 1; k >= 0; --k) {  // odometer over the summed dims
        const int a = p.summed[k];
        if (++idx[k] < d.shape[a]) {
          go += d.stride[2][a];
          oo += d.stride[1][a];
          break;
        }
        go -= d.stride[2][a] * (d.shape[a] - 1);
        oo -= d.stride[1][a] * (d.shape[a] - 1);
        idx[k] = 0;
      }
    }
    target[to] = acc;
  }
}

// Runs sum_kernel<T> for a target with strides ts (other operand: os).
template <Term T>
void launch_sum(int rank, const int64_t* shape, const int64_t* ts, const int64_t* os, const float* g,
                const float* other, const float* self, float* target, cudaStream_t s) {
  int64_t dense[kMaxRank];
  int64_t stride = 1;
  for (int a = rank - 1; a >= 0; --a) {
    dense[a] = stride;
    stride *= shape[a];
  }
  const Dims d = make_dims(rank, shape, ts, os, dense);
  const SumPlan p = make_plan(d);
  int64_t targets = 1;
  for (int k = 0; k < p.kept_rank; ++k) targets *= d.shape[p.kept[k]];
  if (targets == 0) return;
  if (p.summed_count == 0) {  // an empty output: every target element sums nothing
    CUDA_CHECK(cudaMemsetAsync(target, 0, static_cast<size_t>(targets) * sizeof(float), s));
    return;
  }
  sum_kernel<T><<<grid_for(targets), kThreads, 0, s>>>(d, p, targets, g, other, self, target);
  CUDA_CHECK_LAUNCH();
}

__global__ void where_fwd_kernel(Dims d, int64_t n, const uint8_t* cond, const float* x, const float* y, float* out) {
  PD_GRID_STRIDE(i, n) {
    int64_t off[3];
    offsets_of<3>(d, i, off);
    out[i] = cond[off[0]] ? x[off[1]] : y[off[2]];
  }
}

__global__ void where_bwd_kernel(Dims d, int64_t n, const uint8_t* cond, const float* dout, float* dx, float* dy) {
  PD_GRID_STRIDE(i, n) {
    int64_t off[1];
    offsets_of<1>(d, i, off);
    const bool c = cond[off[0]] != 0;
    if (dx) dx[i] = c ? dout[i] : 0.0f;
    if (dy) dy[i] = c ? 0.0f : dout[i];
  }
}

}  // namespace

void broadcast_binary(BinaryArith op, int rank, const int64_t* shape, const int64_t* a_strides,
                      const int64_t* b_strides, const float* a, const float* b, float* y, cudaStream_t s) {
  const Dims d = make_dims(rank, shape, a_strides, b_strides);
  const int64_t n = numel(rank, shape);
  if (n == 0) return;
  switch (op) {
    case BinaryArith::Add: binary_kernel<BinaryArith::Add><<<grid_for(n), kThreads, 0, s>>>(d, n, a, b, y); break;
    case BinaryArith::Sub: binary_kernel<BinaryArith::Sub><<<grid_for(n), kThreads, 0, s>>>(d, n, a, b, y); break;
    case BinaryArith::Mul: binary_kernel<BinaryArith::Mul><<<grid_for(n), kThreads, 0, s>>>(d, n, a, b, y); break;
    case BinaryArith::Div: binary_kernel<BinaryArith::Div><<<grid_for(n), kThreads, 0, s>>>(d, n, a, b, y); break;
  }
  CUDA_CHECK_LAUNCH();
}

void broadcast_binary_backward(BinaryArith op, int rank, const int64_t* shape, const int64_t* a_strides,
                               const int64_t* b_strides, const float* a, const float* b, const float* dy,
                               float* da, float* db, cudaStream_t s) {
  PD_CHECK(op == BinaryArith::Mul || op == BinaryArith::Div,
           "broadcast_binary_backward: Mul and Div only (Add and Sub gradients are sums of dy)");
  if (op == BinaryArith::Mul) {
    if (da) launch_sum<Term::Times>(rank, shape, a_strides, b_strides, dy, b, nullptr, da, s);
    if (db) launch_sum<Term::Times>(rank, shape, b_strides, a_strides, dy, a, nullptr, db, s);
  } else {
    if (da) launch_sum<Term::Over>(rank, shape, a_strides, b_strides, dy, b, nullptr, da, s);
    if (db) launch_sum<Term::DivNumerator>(rank, shape, b_strides, a_strides, dy, a, b, db, s);
  }
}

void reduce_sum_strided(int rank, const int64_t* shape, const int64_t* y_strides, const float* x, float* y,
                        cudaStream_t s) {
  launch_sum<Term::Plain>(rank, shape, y_strides, y_strides, x, nullptr, nullptr, y, s);
}

void where_forward(int rank, const int64_t* shape, const int64_t* cond_strides, const int64_t* x_strides,
                   const int64_t* y_strides, const uint8_t* cond, const float* x, const float* y, float* out,
                   cudaStream_t s) {
  const Dims d = make_dims(rank, shape, cond_strides, x_strides, y_strides);
  const int64_t n = numel(rank, shape);
  if (n == 0) return;
  where_fwd_kernel<<<grid_for(n), kThreads, 0, s>>>(d, n, cond, x, y, out);
  CUDA_CHECK_LAUNCH();
}

void where_backward(int rank, const int64_t* shape, const int64_t* cond_strides, const uint8_t* cond,
                    const float* dout, float* dx, float* dy, cudaStream_t s) {
  const Dims d = make_dims(rank, shape, cond_strides);
  const int64_t n = numel(rank, shape);
  if (n == 0 || (!dx && !dy)) return;
  where_bwd_kernel<<<grid_for(n), kThreads, 0, s>>>(d, n, cond, dout, dx, dy);
  CUDA_CHECK_LAUNCH();
}

}  // namespace pd::cuda::kernels

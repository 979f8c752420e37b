#include "core/cpu/optimizer_kernels.h"

#if defined(__AVX__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "core/cpu/parallel.h"
#include "core/error.h"

namespace pd::cpu {

namespace {

// Writes out[k] = new_value(k) for k < n, `out` in place (== p) or not.
// The values are made a chunk at a time in an L1 buffer that aliases
// nothing, so the update loop vectorizes, then stored. Into other buffers (a
// stage keeping the old version) the stores are non-temporal: a plain store
// first reads each line of `out` from memory, a quarter more traffic for
// this memory-bound update. The arithmetic is the same code either way, so
// the results are bitwise equal.
template <class NewValue>
void write_updated(const float* p, float* out, int64_t n, NewValue new_value) {
  constexpr int64_t kChunk = 1024;
  alignas(32) float chunk[kChunk];
#if defined(__AVX__)
  const bool stream = out != p && reinterpret_cast<uintptr_t>(out) % 32 == 0;
#else
  const bool stream = false;  // built without AVX (a Debug build): plain stores
#endif
  for (int64_t k0 = 0; k0 < n; k0 += kChunk) {
    const int64_t len = std::min(kChunk, n - k0);
    for (int64_t k = 0; k < len; ++k) chunk[k] = new_value(k0 + k);
#if defined(__AVX__)
    if (stream && len == kChunk) {
      for (int64_t k = 0; k < kChunk; k += 8) _mm256_stream_ps(out + k0 + k, _mm256_load_ps(chunk + k));
      continue;
    }
#endif
    std::memcpy(out + k0, chunk, static_cast<size_t>(len) * sizeof(float));
  }
#if defined(__AVX__)
  if (stream) _mm_sfence();
#endif
}

}  // namespace

void sgd_step_multi(int64_t count, const int64_t* sizes, const float* const* params_in, float* const* params_out,
                    const float* const* grads, float* const* bufs, float lr, float momentum, float weight_decay,
                    bool nesterov) {
  PD_CHECK(momentum == 0.0f || bufs, "sgd with momentum needs momentum buffers");
  const float mu = momentum, wd = weight_decay;
  for (int64_t i = 0; i < count; ++i) {
    const float* p = params_in[i];
    const float* g = grads[i];
    const int64_t n = sizes[i];
    if (momentum == 0.0f) {
      write_updated(p, params_out[i], n, [&](int64_t k) { return p[k] - lr * (g[k] + wd * p[k]); });
      continue;
    }
    // The buffers start at zero, so the first step's mu * 0 + d is d:
    // torch.optim.SGD's buf = d.
    float* buf = bufs[i];
    write_updated(p, params_out[i], n, [&](int64_t k) {
      const float d = g[k] + wd * p[k];
      buf[k] = mu * buf[k] + d;
      const float upd = nesterov ? d + mu * buf[k] : buf[k];
      return p[k] - lr * upd;
    });
  }
}

void adam_step_multi(int64_t count, const int64_t* sizes, const float* const* params_in, float* const* params_out,
                     const float* const* grads, float* const* m, float* const* v, float lr, float beta1, float beta2,
                     float eps, float weight_decay, bool decoupled, int64_t step_count) {
  PD_CHECK(step_count >= 1, "adam step count is 1-based");
  const float b1 = beta1, b2 = beta2, wd = weight_decay;
  const float bc1 = 1.0f - static_cast<float>(std::pow(static_cast<double>(b1), static_cast<double>(step_count)));
  const float bc2 = 1.0f - static_cast<float>(std::pow(static_cast<double>(b2), static_cast<double>(step_count)));
  const float step_size = lr / bc1;
  const float bc2_sqrt = std::sqrt(bc2);
  for (int64_t i = 0; i < count; ++i) {
    const float* p_in = params_in[i];
    const float* g = grads[i];
    float* mi = m[i];
    float* vi = v[i];
    write_updated(p_in, params_out[i], sizes[i], [&](int64_t k) {
      float d = g[k];
      float p = p_in[k];
      if (decoupled) {
        p *= 1.0f - lr * wd;
      } else {
        d += wd * p;
      }
      mi[k] = b1 * mi[k] + (1.0f - b1) * d;
      vi[k] = b2 * vi[k] + (1.0f - b2) * d * d;
      const float denom = std::sqrt(vi[k]) / bc2_sqrt + eps;
      return p - step_size * (mi[k] / denom);
    });
  }
}

void sum_squares_multi(int64_t count, const int64_t* sizes, const float* const* xs, double* sums) {
  // Blocks of a fixed size, whatever the thread count: each block's sum is
  // one thread's, and the blocks are added in order.
  constexpr int64_t kBlock = 4096;
  std::vector<double> block_sums;
  for (int64_t i = 0; i < count; ++i) {
    const float* x = xs[i];
    const int64_t n = sizes[i], blocks = (n + kBlock - 1) / kBlock;
    block_sums.assign(static_cast<size_t>(blocks), 0.0);
    parallel_ranges(blocks, n, [&](int64_t first, int64_t last) {
      for (int64_t b = first; b < last; ++b) {
        double acc = 0;
        for (int64_t k = b * kBlock, end = std::min(n, k + kBlock); k < end; ++k)
          acc += static_cast<double>(x[k]) * static_cast<double>(x[k]);
        block_sums[static_cast<size_t>(b)] = acc;
      }
    });
    double total = 0;
    for (double b : block_sums) total += b;
    sums[i] = total;
  }
}

}  // namespace pd::cpu

#pragma once
// Pooling over NCHW planes on raw host pointers. Every plane (sample,
// channel) is independent, so kernels parallelise over planes and each
// thread writes only its own planes: deterministic for any thread count.
#include <cstdint>

namespace pd::cpu {

struct PoolShape {
  int64_t planes = 0;  // batch * channels
  int64_t height = 0, width = 0;
  int kernel = 1, stride = 1, padding = 0;
  int64_t out_height() const { return (height + 2 * padding - kernel) / stride + 1; }
  int64_t out_width() const { return (width + 2 * padding - kernel) / stride + 1; }
};

// Padding never wins the max (it is -inf, as in PyTorch). argmax receives
// the flat in-plane index (ih * W + iw) of each output's maximum; ties
// keep the first in row-major window order.
void maxpool2d_forward(const PoolShape& s, const float* x, float* y, int32_t* argmax);
// dx (overwritten) from dy and the forward's argmax.
void maxpool2d_backward(const PoolShape& s, const float* dy, const int32_t* argmax, float* dx);

// Average over the window with padding counted as zeros in the divisor
// (PyTorch's count_include_pad=True): divisor is kernel*kernel.
void avgpool2d_forward(const PoolShape& s, const float* x, float* y);
void avgpool2d_backward(const PoolShape& s, const float* dy, float* dx);

// Output cell (i, j) averages rows [floor(i*H/OH), ceil((i+1)*H/OH)) and
// the same for columns, as torch.nn.AdaptiveAvgPool2d.
void adaptive_avgpool2d_forward(int64_t planes, int64_t H, int64_t W, int64_t OH, int64_t OW,
                                const float* x, float* y);
void adaptive_avgpool2d_backward(int64_t planes, int64_t H, int64_t W, int64_t OH, int64_t OW,
                                 const float* dy, float* dx);

}  // namespace pd::cpu

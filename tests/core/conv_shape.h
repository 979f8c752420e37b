#pragma once
// A convolution's geometry in one call, for the convolution tests.
#include <cstdint>

#include "core/cpu/conv_kernels.h"

namespace pd::testing {

inline cpu::ConvShape conv_shape(int64_t n, int64_t c, int64_t h, int64_t w, int64_t o, int k, int s, int p) {
  cpu::ConvShape cs;
  cs.batch = n;
  cs.in_channels = c;
  cs.in_h = h;
  cs.in_w = w;
  cs.out_channels = o;
  cs.kernel_h = cs.kernel_w = k;
  cs.stride = s;
  cs.padding = p;
  return cs;
}

}  // namespace pd::testing

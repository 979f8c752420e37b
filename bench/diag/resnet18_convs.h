#pragma once
// What the convolution diagnostics (conv_split.cpp, conv_direct_split.cpp)
// share: resnet18's convolutions (torchvision layout) at image size S, their
// geometry at batch N, and the thread's CPU clock they are timed with.
#include <cstdint>
#include <ctime>
#include <vector>

#include "core/cpu/conv_kernels.h"

namespace pd::diag {

inline double cpu_ms() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) * 1e3 + static_cast<double>(t.tv_nsec) * 1e-6;
}

struct ResnetConv {
  const char* name;
  int64_t c, h, o, k, s, p, count;
  bool first;  // the stem: no input gradient
  cpu::ConvShape shape(int64_t batch) const {
    cpu::ConvShape g;
    g.batch = batch;
    g.in_channels = c;
    g.in_h = g.in_w = h;
    g.out_channels = o;
    g.kernel_h = g.kernel_w = k;
    g.stride = s;
    g.padding = p;
    return g;
  }
};

inline std::vector<ResnetConv> resnet18_convs(int64_t S) {
  const int64_t a = S / 4, b = S / 8, c = S / 16, d = S / 32;
  return {{"stem 7x7s2 3->64", 3, S, 64, 7, 2, 3, 1, true},
          {"l1 3x3 64", 64, a, 64, 3, 1, 1, 4, false},
          {"l2 3x3s2 64->128", 64, a, 128, 3, 2, 1, 1, false},
          {"l2 1x1s2 down", 64, a, 128, 1, 2, 0, 1, false},
          {"l2 3x3 128", 128, b, 128, 3, 1, 1, 3, false},
          {"l3 3x3s2 128->256", 128, b, 256, 3, 2, 1, 1, false},
          {"l3 1x1s2 down", 128, b, 256, 1, 2, 0, 1, false},
          {"l3 3x3 256", 256, c, 256, 3, 1, 1, 3, false},
          {"l4 3x3s2 256->512", 256, c, 512, 3, 2, 1, 1, false},
          {"l4 1x1s2 down", 256, c, 512, 1, 2, 0, 1, false},
          {"l4 3x3 512", 512, d, 512, 3, 1, 1, 3, false}};
}

}  // namespace pd::diag

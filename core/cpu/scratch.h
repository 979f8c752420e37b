#pragma once
// Per-thread scratch memory for kernels (im2col columns, transposed
// gradients). Reused across calls so large kernels do not page-fault fresh
// memory every step; never holds state between calls.
#include <cstddef>
#include <memory>

namespace pd::cpu {

class Scratch {
 public:
  // slot lets one kernel hold several buffers at once.
  static float* floats(size_t count, int slot = 0);
};

}  // namespace pd::cpu

#include "core/cpu/scratch.h"

#include <cstdlib>
#include <new>

namespace pd::cpu {

namespace {
constexpr int kSlots = 6;
struct FreeDeleter {
  void operator()(float* p) const { std::free(p); }
};
struct Buffers {
  std::unique_ptr<float, FreeDeleter> data[kSlots];
  size_t size[kSlots] = {};
};
thread_local Buffers t_buffers;
}  // namespace

float* Scratch::floats(size_t count, int slot) {
  Buffers& b = t_buffers;
  if (count > b.size[slot]) {
    size_t bytes = (count * sizeof(float) + 63) / 64 * 64;
    b.data[slot].reset();
    float* p = static_cast<float*>(std::aligned_alloc(64, bytes));
    if (!p) throw std::bad_alloc();
    b.data[slot].reset(p);
    b.size[slot] = count;
  }
  return b.data[slot].get();
}

}  // namespace pd::cpu

#pragma once
// When to split a CPU kernel's loop across threads. Below this many
// elements a parallel region (and waiting for a busy core) costs more than
// it saves. Splitting never changes results: each output is computed by
// one thread in a fixed order.
#include <cstdint>

namespace pd::cpu {
constexpr int64_t kParallelMinElements = int64_t{1} << 15;
}  // namespace pd::cpu

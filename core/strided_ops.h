#pragma once
// The closed sets the pointwise DeviceOps entries (core/device_ops.h) take:
// binary arithmetic and the unary maps with their constant attributes.
// Plain C++ without CUDA or tensor headers, so that nvcc compiles it too.
#include <cstdint>

namespace pd {

enum class BinaryArith : uint8_t { Add, Sub, Mul, Div };

enum class UnaryFn : uint8_t {
  Erf, Tanh, Sqrt, Sigmoid, Neg,
  Pow,          // x^p0 (x * x when p0 == 2)
  Clip,         // min(max(x, p0), p1); gradient 0 at the bounds (PyTorch's hardtanh)
  Sin, Cos, Exp, Reciprocal,
  HardSigmoid,  // min(1, max(0, p0 * x + p1)): p0 = alpha, p1 = beta
  HardSwish,    // x * min(1, max(0, x / 6 + 1/2))
};

// A unary map and its constants (unused ones ignored).
struct UnaryParams {
  UnaryFn fn = UnaryFn::Neg;
  float p0 = 0.0f, p1 = 0.0f;
};

// Whether unary_backward takes the forward's output (true) or its input:
// the maps whose derivative is cheapest in terms of their value.
inline constexpr bool unary_backward_reads_output(UnaryFn f) {
  return f == UnaryFn::Tanh || f == UnaryFn::Sqrt || f == UnaryFn::Sigmoid || f == UnaryFn::Exp ||
         f == UnaryFn::Reciprocal;
}

}  // namespace pd

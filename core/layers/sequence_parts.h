#pragma once
// Pieces the sequence layers share, and variants of public layers that the
// transformer block composes (not part of the public layers.h API).
#include <cstdint>

#include "core/device_ops.h"
#include "core/error.h"
#include "core/layer.h"

namespace pd {

enum class LinearInit {
  Uniform,     // PyTorch's default: U(-1/sqrt(in), 1/sqrt(in)) for weight and bias
  GptNormal,   // GPT-2: weight N(0, 0.02), bias 0
};
LayerPtr make_linear(int64_t in_features, int64_t out_features, bool bias, LinearInit init);

// A dropout drawing from substream `substream` of the top-level layer's
// key, so several dropouts inside one block get independent masks.
LayerPtr make_dropout(float p, uint32_t substream);

DropoutKey dropout_key(const StepInfo& step, uint32_t substream);

// Rows of a [..., last] tensor; a wrong last dimension is a bug in the
// caller (shapes were validated by output_shape when the model was built).
inline int64_t rows_over_last_dim(const Tensor& x, int64_t last, const char* layer) {
  PD_CHECK(x.ndim() >= 1 && x.dim(-1) == last, layer, " expects last dimension ", last, ", got ",
           shape_str(x.shape()));
  return x.numel() / last;
}

// Fills t with N(0, std) from elements [offset, offset + numel) of rng.
void fill_normal(Tensor& t, const CounterRng& rng, uint64_t offset, float std);
// Fills t with U(-bound, bound) from elements [offset, offset + numel) of rng.
void fill_uniform(Tensor& t, const CounterRng& rng, uint64_t offset, float bound);

}  // namespace pd

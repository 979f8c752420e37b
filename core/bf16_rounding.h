#pragma once
// The rounding points of --precision bf16 (core/precision.h, docs/design.md
// §3), shared by the layer-range runner and the composite layers. Every
// helper does nothing under FP32, so FP32 runs pay no rounding work.
#include <span>
#include <vector>

#include "core/precision.h"
#include "core/tensor.h"

namespace pd {

// Rounds t's elements to bf16 in place (device_ops().round_bf16) when p is
// BF16 and t is a defined F32 tensor; integer tensors (token ids) are left alone.
void round_in_place_if_bf16(Precision p, Tensor& t);

// t itself under FP32 (or for non-F32 t); a rounded copy under BF16, for
// tensors the caller must not change (a data batch, the loss gradient).
Tensor rounded_copy_if_bf16(Precision p, const Tensor& t);

// The tensors a layer computes with: `params` itself under FP32; under BF16
// rounded copies in `storage` (the master weights are never rounded).
std::span<const Tensor> operand_params(Precision p, std::span<const Tensor> params, std::vector<Tensor>& storage);

}  // namespace pd

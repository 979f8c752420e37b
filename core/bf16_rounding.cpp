#include "core/bf16_rounding.h"

#include "core/device_ops.h"

namespace pd {

namespace {
bool rounds(Precision p, const Tensor& t) { return p == Precision::BF16 && t.defined() && t.dtype() == DType::F32; }
}  // namespace

void round_in_place_if_bf16(Precision p, Tensor& t) {
  if (!rounds(p, t) || t.numel() == 0) return;
  device_ops(t.device()).round_bf16(t.numel(), t.f32(), t.f32());
}

Tensor rounded_copy_if_bf16(Precision p, const Tensor& t) {
  if (!rounds(p, t)) return t;
  Tensor r = Tensor::empty(t.shape(), DType::F32, t.device());
  if (t.numel() > 0) device_ops(t.device()).round_bf16(t.numel(), t.f32(), r.f32());
  return r;
}

std::span<const Tensor> operand_params(Precision p, std::span<const Tensor> params, std::vector<Tensor>& storage) {
  if (p != Precision::BF16 || params.empty()) return params;
  storage.clear();
  storage.reserve(params.size());
  for (const Tensor& t : params) storage.push_back(rounded_copy_if_bf16(p, t));
  return storage;
}

}  // namespace pd

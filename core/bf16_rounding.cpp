#include "core/bf16_rounding.h"

#include <atomic>
#include <cstdlib>
#include <string>

#include "core/device_ops.h"
#include "core/error.h"
#include "core/layer.h"

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

bool round_layer_output_if_bf16(Precision p, const Layer& l, const Layer* next, const LayerContext& ctx, Tensor& h,
                                bool input_exact) {
  if (p != Precision::BF16) return true;
  if (l.forward_rounds_bf16() || (input_exact && l.forward_keeps_bf16())) return true;
  if (next && next->forward_absorbs_input_rounding() && !ctx.keeps(h)) return false;
  round_in_place_if_bf16(p, h);
  return true;
}

void round_layer_input_grad_if_bf16(Precision p, const Layer& l, Tensor& g) {
  if (!l.backward_keeps_bf16()) round_in_place_if_bf16(p, g);
}

std::span<const Tensor> operand_params(Precision p, std::span<const Tensor> params, std::vector<Tensor>& storage) {
  if (p != Precision::BF16 || params.empty()) return params;
  storage.clear();
  storage.reserve(params.size());
  for (const Tensor& t : params) storage.push_back(rounded_copy_if_bf16(p, t));
  return storage;
}

namespace {
std::atomic<Bf16Storage>& storage_mode() {
  static std::atomic<Bf16Storage> mode{[] {
    const char* v = std::getenv("PIPEDREAM_BF16_STORAGE");
    const std::string s = v ? v : "";
    if (s.empty()) return Bf16Storage::WhereItPays;
    if (s == "1") return Bf16Storage::Always;
    if (s == "0") return Bf16Storage::Never;
    throw UserError(cat("PIPEDREAM_BF16_STORAGE=", s, ": use 1 (always), 0 (never) or leave it unset"));
  }()};
  return mode;
}
}  // namespace

void set_bf16_storage(Bf16Storage mode) { storage_mode().store(mode); }
bool uses_bf16_storage(const DeviceOps& ops) {
  const Bf16Storage m = storage_mode().load(std::memory_order_relaxed);
  return m == Bf16Storage::Always || (m == Bf16Storage::WhereItPays && ops.bf16_storage_pays);
}

Tensor packed_bf16(const Tensor& t) {
  PD_CHECK(t.dtype() == DType::F32, "packed_bf16 takes an f32 tensor, got ", dtype_name(t.dtype()));
  Tensor r = Tensor::empty(t.shape(), DType::BF16, t.device());
  if (t.numel() > 0) device_ops(t.device()).pack_bf16(t.numel(), t.f32(), r.bf16());
  return r;
}

Tensor unpacked_bf16(const Tensor& t) {
  PD_CHECK(t.dtype() == DType::BF16, "unpacked_bf16 takes a bf16 tensor, got ", dtype_name(t.dtype()));
  Tensor r = Tensor::empty(t.shape(), DType::F32, t.device());
  if (t.numel() > 0) device_ops(t.device()).unpack_bf16(t.numel(), t.bf16(), r.f32());
  return r;
}

}  // namespace pd

#include "runtime/wire_format.h"

#include <cstring>
#include <limits>

#include "core/error.h"

namespace pd {

namespace {

constexpr int32_t kPackedBf16Marker = 0x42463136;  // "BF16"

}  // namespace

Tensor pack_for_wire(const Tensor& t, Precision p) {
  if (p != Precision::BF16 || !t.defined() || t.dtype() != DType::F32) return t;
  const Tensor host = t.device().is_cpu() ? t : t.to(Device::cpu());
  const Shape& shape = host.shape();
  const int64_t n = host.numel(), head = 2 + static_cast<int64_t>(shape.size());
  Tensor out = Tensor::empty({head + (n + 1) / 2}, DType::I32);
  int32_t* w = out.data<int32_t>();
  w[0] = kPackedBf16Marker;
  w[1] = static_cast<int32_t>(shape.size());
  for (size_t d = 0; d < shape.size(); ++d) {
    PD_CHECK(shape[d] <= std::numeric_limits<int32_t>::max(), "a dimension of ", shape[d], " is too large to send packed");
    w[2 + d] = static_cast<int32_t>(shape[d]);
  }
  const float* x = host.f32();
  uint32_t* payload = reinterpret_cast<uint32_t*>(w + head);
  for (int64_t i = 0; i + 1 < n; i += 2)
    payload[i / 2] = static_cast<uint32_t>(bf16_bits(x[i])) | (static_cast<uint32_t>(bf16_bits(x[i + 1])) << 16);
  if (n % 2) payload[n / 2] = bf16_bits(x[n - 1]);
  return out;
}

Tensor unpack_from_wire(const Tensor& t) {
  if (!t.defined() || t.dtype() != DType::I32 || t.ndim() != 1 || t.numel() < 2) return t;
  const Tensor host = t.device().is_cpu() ? t : t.to(Device::cpu());
  const int32_t* w = host.data<int32_t>();
  if (w[0] != kPackedBf16Marker) return t;
  const int64_t ndim = w[1];
  PD_CHECK(ndim >= 0 && 2 + ndim <= host.numel(), "malformed packed bf16 message");
  Shape shape(static_cast<size_t>(ndim));
  for (int64_t d = 0; d < ndim; ++d) shape[static_cast<size_t>(d)] = w[2 + d];
  Tensor out = Tensor::empty(shape, DType::F32);
  const int64_t n = out.numel();
  PD_CHECK(host.numel() == 2 + ndim + (n + 1) / 2, "malformed packed bf16 message");
  const uint32_t* payload = reinterpret_cast<const uint32_t*>(w + 2 + ndim);
  float* y = out.f32();
  for (int64_t i = 0; i < n; ++i) y[i] = bf16_value(static_cast<uint16_t>(payload[i / 2] >> (16 * (i % 2))));
  return out;
}

namespace {
bool holds_bf16_values_only(const Tensor& t) {
  if (!t.defined() || t.dtype() != DType::F32 || !t.device().is_cpu() || t.numel() < 2) return false;
  const float* x = t.f32();
  for (int64_t i = 0, n = t.numel(); i < n; ++i) {
    uint32_t u;
    std::memcpy(&u, x + i, sizeof u);
    if (u & 0xFFFFu) return false;
  }
  return true;
}
}  // namespace

void pack_saved_bf16(LayerContext& ctx) {
  for (Tensor& t : ctx.saved)
    if (holds_bf16_values_only(t)) t = pack_for_wire(t, Precision::BF16);
  for (LayerContext& c : ctx.children) pack_saved_bf16(c);
}

void unpack_saved_bf16(LayerContext& ctx) {
  for (Tensor& t : ctx.saved) t = unpack_from_wire(t);
  for (LayerContext& c : ctx.children) unpack_saved_bf16(c);
}

}  // namespace pd

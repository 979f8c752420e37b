#include "core/tensor.h"

#include <cstdlib>
#include <cstring>

#include "core/cpu/host_allocator.h"
#include "core/error.h"
#include "core/precision.h"

namespace pd {

size_t dtype_size(DType t) {
  switch (t) {
    case DType::F32: return 4;
    case DType::I32: return 4;
    case DType::I64: return 8;
    case DType::BF16: return 2;
  }
  return 0;
}

const char* dtype_name(DType t) {
  switch (t) {
    case DType::F32: return "f32";
    case DType::I32: return "i32";
    case DType::I64: return "i64";
    case DType::BF16: return "bf16";
  }
  return "?";
}

std::string Device::str() const { return is_cpu() ? "cpu" : cat("cuda:", index); }

Device Device::parse(const std::string& s) {
  if (s == "cpu") return cpu();
  if (s == "cuda") return cuda(0);
  if (s.rfind("cuda:", 0) == 0) {
    try {
      size_t used = 0;
      int i = std::stoi(s.substr(5), &used);
      if (used == s.size() - 5 && i >= 0) return cuda(i);
    } catch (const std::exception&) {
    }
  }
  throw UserError(cat("unknown device '", s, "': use cpu, cuda or cuda:N"));
}

int64_t shape_numel(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

std::vector<int64_t> contiguous_strides(const Shape& s) {
  std::vector<int64_t> st(s.size(), 1);
  for (size_t d = s.size(); d-- > 1;) st[d - 1] = st[d] * s[d];
  return st;
}

std::vector<int64_t> broadcast_strides(const Shape& in, const Shape& out) {
  std::vector<int64_t> s(out.size(), 0);
  int64_t stride = 1;
  for (size_t k = 0; k < in.size(); ++k) {
    const size_t i = in.size() - 1 - k, o = out.size() - 1 - k;
    s[o] = in[i] == 1 ? 0 : stride;
    stride *= in[i];
  }
  return s;
}

std::string shape_str(const Shape& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

namespace {

Allocator* g_cuda_allocator = nullptr;

}  // namespace

void register_allocator(DeviceKind kind, Allocator* a) {
  PD_CHECK(kind == DeviceKind::CUDA, "only the CUDA allocator can be registered");
  g_cuda_allocator = a;
}

Allocator& allocator_for(Device d) {
  if (d.is_cpu()) return cpu::host_allocator();
  if (!g_cuda_allocator)
    throw UserError("this pipedream was built without CUDA (or no GPU is visible): use --device cpu");
  return *g_cuda_allocator;
}

void check_dtype(const Tensor& t, DType want) {
  PD_CHECK(t.defined(), "tensor is undefined");
  PD_CHECK(t.dtype() == want, "tensor has dtype ", dtype_name(t.dtype()), ", expected ", dtype_name(want));
}

Tensor Tensor::empty(const Shape& shape, DType dtype, Device dev) {
  for (int64_t d : shape) PD_CHECK(d >= 0, "negative dimension in ", shape_str(shape));
  Tensor t;
  t.shape_ = shape;
  t.dtype_ = dtype;
  t.storage_ = allocator_for(dev).allocate(static_cast<size_t>(shape_numel(shape)) * dtype_size(dtype));
  t.storage_->device = dev;
  return t;
}

Tensor Tensor::zeros(const Shape& shape, DType dtype, Device dev) {
  Tensor t = empty(shape, dtype, dev);
  t.zero();
  return t;
}

Tensor Tensor::full(const Shape& shape, float value, Device dev) {
  Tensor t = empty(shape, DType::F32, dev);
  t.fill(value);
  return t;
}

Tensor Tensor::from_floats(const std::vector<float>& v, const Shape& shape) {
  PD_CHECK(static_cast<int64_t>(v.size()) == shape_numel(shape), "size mismatch");
  Tensor t = empty(shape, DType::F32);
  if (!v.empty()) std::memcpy(t.raw(), v.data(), v.size() * sizeof(float));
  return t;
}

Tensor Tensor::from_ints(const std::vector<int32_t>& v, const Shape& shape) {
  PD_CHECK(static_cast<int64_t>(v.size()) == shape_numel(shape), "size mismatch");
  Tensor t = empty(shape, DType::I32);
  if (!v.empty()) std::memcpy(t.raw(), v.data(), v.size() * sizeof(int32_t));
  return t;
}

int64_t Tensor::dim(int i) const {
  int n = ndim();
  if (i < 0) i += n;
  PD_CHECK(i >= 0 && i < n, "dim ", i, " out of range for shape ", shape_str(shape_));
  return shape_[i];
}

Device Tensor::device() const { return storage_ ? storage_->device : Device::cpu(); }

char* Tensor::bytes() const {
  return storage_ ? static_cast<char*>(storage_->data) + offset_ : nullptr;
}

Tensor Tensor::reshape(const Shape& s) const {
  PD_CHECK(shape_numel(s) == numel(), "cannot reshape ", shape_str(shape_), " to ", shape_str(s));
  Tensor t = *this;
  t.shape_ = s;
  return t;
}

Tensor Tensor::slice_rows(int64_t begin, int64_t end) const {
  PD_CHECK(ndim() >= 1 && begin >= 0 && begin <= end && end <= shape_[0], "bad row slice");
  int64_t row = numel() / std::max<int64_t>(shape_[0], 1);
  Tensor t = *this;
  t.shape_[0] = end - begin;
  t.offset_ += static_cast<size_t>(begin * row) * dtype_size(dtype_);
  return t;
}

// Cross-device copies are provided by the CUDA backend when linked in.
using CopyFn = void (*)(void* dst, Device dd, const void* src, Device sd, size_t bytes);
CopyFn g_device_copy = nullptr;
void register_device_copy(CopyFn f) { g_device_copy = f; }

static void copy_bytes(void* dst, Device dd, const void* src, Device sd, size_t n) {
  if (n == 0) return;
  if (dd.is_cpu() && sd.is_cpu()) {
    std::memcpy(dst, src, n);
    return;
  }
  PD_CHECK(g_device_copy, "device copy without a CUDA backend");
  g_device_copy(dst, dd, src, sd, n);
}

Tensor Tensor::clone() const { return to(device()); }

Tensor Tensor::to(Device d) const {
  Tensor t = empty(shape_, dtype_, d);
  t.copy_from(*this);
  return t;
}

void Tensor::copy_from(const Tensor& src) {
  PD_CHECK(src.numel() == numel() && src.dtype() == dtype(), "copy_from: ", shape_str(src.shape()),
           " ", dtype_name(src.dtype()), " into ", shape_str(shape_), " ", dtype_name(dtype_));
  copy_bytes(raw(), device(), src.raw(), src.device(), nbytes());
}

using FillFn = void (*)(Tensor& t, float v);
FillFn g_device_fill = nullptr;
void register_device_fill(FillFn f) { g_device_fill = f; }

void Tensor::fill(float v) {
  if (!device().is_cpu()) {
    PD_CHECK(g_device_fill, "device fill without a CUDA backend");
    g_device_fill(*this, v);
    return;
  }
  int64_t n = numel();
  if (dtype_ == DType::F32) {
    float* p = f32();
    for (int64_t i = 0; i < n; ++i) p[i] = v;
  } else if (dtype_ == DType::I32) {
    int32_t* p = data<int32_t>();
    for (int64_t i = 0; i < n; ++i) p[i] = static_cast<int32_t>(v);
  } else if (dtype_ == DType::BF16) {
    uint16_t* p = bf16();
    for (int64_t i = 0; i < n; ++i) p[i] = bf16_bits(v);
  } else {
    int64_t* p = data<int64_t>();
    for (int64_t i = 0; i < n; ++i) p[i] = static_cast<int64_t>(v);
  }
}

void Tensor::zero() {
  if (device().is_cpu()) {
    if (nbytes()) std::memset(raw(), 0, nbytes());
  } else {
    fill(0.0f);
  }
}

std::vector<float> Tensor::to_floats() const {
  Tensor h = device().is_cpu() ? *this : to(Device::cpu());
  std::vector<float> v(static_cast<size_t>(numel()));
  if (dtype_ == DType::F32) {
    if (!v.empty()) std::memcpy(v.data(), h.raw(), v.size() * 4);
  } else if (dtype_ == DType::I32) {
    const int32_t* p = h.data<int32_t>();
    for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(p[i]);
  } else if (dtype_ == DType::BF16) {
    const uint16_t* p = h.bf16();
    for (size_t i = 0; i < v.size(); ++i) v[i] = bf16_value(p[i]);
  } else {
    const int64_t* p = h.data<int64_t>();
    for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(p[i]);
  }
  return v;
}

}  // namespace pd

#pragma once
// Tensor: a contiguous, row-major n-d array on a device, with shared storage.
// There is no autograd: layers compute their own backward (see layer.h).
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace pd {

// BF16: bfloat16 storage for --precision bf16's activations (uint16_t, the
// upper half of the float's bits; core/precision.h bf16_bits/bf16_value).
enum class DType : uint8_t { F32, I32, I64, BF16 };
size_t dtype_size(DType t);
const char* dtype_name(DType t);

enum class DeviceKind : uint8_t { CPU, CUDA };

struct Device {
  DeviceKind kind = DeviceKind::CPU;
  int index = 0;
  static Device cpu() { return {}; }
  static Device cuda(int i = 0) { return {DeviceKind::CUDA, i}; }
  bool is_cpu() const { return kind == DeviceKind::CPU; }
  bool is_cuda() const { return kind == DeviceKind::CUDA; }
  std::string str() const;                 // "cpu", "cuda:0"
  static Device parse(const std::string&);  // throws UserError on junk
  bool operator==(const Device&) const = default;
};

using Shape = std::vector<int64_t>;
int64_t shape_numel(const Shape& s);
std::string shape_str(const Shape& s);  // "[64, 1, 28, 28]"
// Row-major strides (in elements) of a contiguous tensor of shape s.
std::vector<int64_t> contiguous_strides(const Shape& s);
// Strides of a contiguous `in` read as the numpy broadcast to `out` (in
// right-aligned to out): 0 on the dimensions in lacks or has size 1.
std::vector<int64_t> broadcast_strides(const Shape& in, const Shape& out);

// Raw bytes on one device. Allocators hand these out (CPU: aligned malloc;
// CUDA: the caching allocator in core/cuda).
struct Storage {
  void* data = nullptr;
  size_t bytes = 0;
  Device device;
  virtual ~Storage() = default;
};

class Allocator {
 public:
  virtual ~Allocator() = default;
  virtual std::shared_ptr<Storage> allocate(size_t bytes) = 0;
  virtual size_t current_bytes() const = 0;
  virtual size_t peak_bytes() const = 0;
  virtual void reset_peak() = 0;
};
Allocator& allocator_for(Device d);
// The CUDA backend registers its allocator here when it is linked in.
void register_allocator(DeviceKind kind, Allocator* a);

class Tensor {
 public:
  Tensor() = default;
  static Tensor empty(const Shape& shape, DType dtype = DType::F32, Device dev = Device::cpu());
  static Tensor zeros(const Shape& shape, DType dtype = DType::F32, Device dev = Device::cpu());
  static Tensor full(const Shape& shape, float value, Device dev = Device::cpu());
  static Tensor from_floats(const std::vector<float>& v, const Shape& shape);
  static Tensor from_ints(const std::vector<int32_t>& v, const Shape& shape);

  bool defined() const { return storage_ != nullptr; }
  const Shape& shape() const { return shape_; }
  int ndim() const { return static_cast<int>(shape_.size()); }
  int64_t dim(int i) const;  // negative i counts from the end
  int64_t numel() const { return shape_numel(shape_); }
  DType dtype() const { return dtype_; }
  Device device() const;
  size_t nbytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype_); }

  void* raw() { return bytes(); }
  const void* raw() const { return bytes(); }
  template <class T> T* data();
  template <class T> const T* data() const;
  float* f32() { return data<float>(); }
  const float* f32() const { return data<float>(); }
  uint16_t* bf16() { return data<uint16_t>(); }
  const uint16_t* bf16() const { return data<uint16_t>(); }

  // Same storage, new shape (numel must match).
  Tensor reshape(const Shape& s) const;
  // Rows [begin, end) of dim 0, sharing storage.
  Tensor slice_rows(int64_t begin, int64_t end) const;
  Tensor clone() const;
  Tensor to(Device d) const;
  void copy_from(const Tensor& src);  // same numel and dtype, any devices
  void fill(float v);
  void zero();
  std::vector<float> to_floats() const;  // copies to host

  bool same_storage(const Tensor& o) const { return storage_ == o.storage_; }
  // Whether this tensor is the only holder of its storage (no other tensor or view).
  bool sole_owner() const { return storage_ && storage_.use_count() == 1; }

 private:
  char* bytes() const;
  std::shared_ptr<Storage> storage_;
  size_t offset_ = 0;  // bytes
  Shape shape_;
  DType dtype_ = DType::F32;
};

template <class T> constexpr DType dtype_of();
template <> constexpr DType dtype_of<float>() { return DType::F32; }
template <> constexpr DType dtype_of<int32_t>() { return DType::I32; }
template <> constexpr DType dtype_of<int64_t>() { return DType::I64; }
template <> constexpr DType dtype_of<uint16_t>() { return DType::BF16; }

// The CUDA backend registers cross-device copies (any pair of devices other
// than cpu-cpu; copies to the host complete before returning) and device
// fills here when it initialises (defined in tensor.cpp).
void register_device_copy(void (*copy)(void* dst, Device dst_dev, const void* src, Device src_dev,
                                       size_t bytes));
void register_device_fill(void (*fill)(Tensor& t, float v));

void check_dtype(const Tensor& t, DType want);  // throws logic_error
template <class T> T* Tensor::data() {
  check_dtype(*this, dtype_of<T>());
  return reinterpret_cast<T*>(bytes());
}
template <class T> const T* Tensor::data() const {
  check_dtype(*this, dtype_of<T>());
  return reinterpret_cast<const T*>(bytes());
}

}  // namespace pd

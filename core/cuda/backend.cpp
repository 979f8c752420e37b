// Backend initialisation: per-process context, registration with pd_core
// (allocator, copy, fill, kernel table), deterministic/TF32 switches.
#include "core/cuda/backend.h"

#include <memory>
#include <mutex>
#include <string>

#include "core/cuda/allocator.h"
#include "core/cuda/check.h"
#include "core/cuda/context.h"
#include "core/cuda/kernels.h"
#include "core/device_ops.h"

namespace pd::cuda {

const DeviceOps& cuda_device_ops();  // ops_table.cpp

namespace {

std::mutex g_init_mu;
Context* g_ctx = nullptr;               // leaked on purpose: outlives static tensors
CachingAllocator* g_allocator = nullptr;  // likewise
thread_local int t_bound_device = -1;

void bind_thread(int device) {
  if (t_bound_device != device) {
    CUDA_CHECK(cudaSetDevice(device));
    t_bound_device = device;
  }
}

void apply_math_mode(Context& c) {
  // cublasSgemm runs FP32 calls only (BF16 ones go through cublasGemmEx).
  CUBLAS_CHECK(cublasSetMathMode(c.cublas, c.allow_tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH));
}

// Copies between the host and the GPU, or within the GPU, ordered on the
// compute stream. A copy to the host waits, as the caller reads it next; a
// copy from the host waits too, so the (pageable) source may be freed.
void device_copy(void* dst, Device dd, const void* src, Device sd, size_t n) {
  Context& c = context();
  for (Device d : {dd, sd})
    if (d.is_cuda() && d.index != c.device)
      throw UserError(cat("a tensor on ", d.str(), " in a process that drives cuda:", c.device,
                          ": one process uses one GPU"));
  if (dd.is_cuda() && sd.is_cuda()) {
    CUDA_CHECK(cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToDevice, c.compute));
    return;
  }
  cudaMemcpyKind kind = dd.is_cuda() ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost;
  CUDA_CHECK(cudaMemcpyAsync(dst, src, n, kind, c.compute));
  CUDA_CHECK(cudaStreamSynchronize(c.compute));
}

void device_fill(Tensor& t, float v) {
  cudaStream_t s = context().compute;
  switch (t.dtype()) {
    case DType::F32: kernels::fill_f32(t.f32(), t.numel(), v, s); break;
    case DType::I32: kernels::fill_i32(t.data<int32_t>(), t.numel(), static_cast<int32_t>(v), s); break;
    case DType::I64: kernels::fill_i64(t.data<int64_t>(), t.numel(), static_cast<int64_t>(v), s); break;
    case DType::BF16:  // activations' storage: only ever zeroed
      PD_CHECK(v == 0.0f, "bf16 tensors on the GPU are filled with zeros only, not ", v);
      CUDA_CHECK(cudaMemsetAsync(t.raw(), 0, t.nbytes(), s));
      break;
  }
}

}  // namespace

Context& context() {
  Context* c = g_ctx;
  if (!c) throw UserError("the CUDA backend is not initialised: call pd::cuda::initialize_backend() first");
  bind_thread(c->device);
  return *c;
}

CachingAllocator& device_allocator() {
  context();
  return *g_allocator;
}

int visible_device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear the error so later calls start clean
    return 0;
  }
  return n;
}

bool backend_initialized() { return g_ctx != nullptr; }

void initialize_backend(int device) {
  std::lock_guard<std::mutex> lock(g_init_mu);
  if (g_ctx) {
    if (g_ctx->device != device)
      throw UserError(cat("the CUDA backend is already using cuda:", g_ctx->device, "; one process drives one GPU"));
    return;
  }
  int n = visible_device_count();
  if (n == 0) throw UserError("no GPU is visible (cudaGetDeviceCount reports none): use --device cpu");
  if (device < 0 || device >= n)
    throw UserError(cat("cuda:", device, " does not exist: ", n, " GPU(s) visible"));
  CUDA_CHECK(cudaSetDevice(device));
  t_bound_device = device;
  auto c = std::make_unique<Context>();
  c->device = device;
  CUDA_CHECK(cudaStreamCreateWithFlags(&c->compute, cudaStreamNonBlocking));
  CUDA_CHECK(cudaStreamCreateWithFlags(&c->comm, cudaStreamNonBlocking));
  CUBLAS_CHECK(cublasCreate(&c->cublas));
  CUBLAS_CHECK(cublasSetStream(c->cublas, c->compute));
  apply_math_mode(*c);
#if defined(PIPEDREAM_HAVE_CUDNN)
  CUDNN_CHECK(cudnnCreate(&c->cudnn));
  CUDNN_CHECK(cudnnSetStream(c->cudnn, c->compute));
#endif
  g_ctx = c.release();
  g_allocator = new CachingAllocator(device);
  register_allocator(DeviceKind::CUDA, g_allocator);
  register_device_copy(&device_copy);
  register_device_fill(&device_fill);
  register_device_ops(DeviceKind::CUDA, &cuda_device_ops());
}

void set_deterministic(bool on) { context().deterministic = on; }
bool deterministic() { return g_ctx && g_ctx->deterministic; }

void set_allow_tf32(bool on) {
  Context& c = context();
  c.allow_tf32 = on;
  apply_math_mode(c);
}

const char* versions() {
  static const std::string v = [] {
    std::string s = cat("CUDA ", CUDART_VERSION / 1000, ".", (CUDART_VERSION % 1000) / 10);
#if defined(PIPEDREAM_HAVE_CUDNN)
    s += cat(", cuDNN ", CUDNN_MAJOR, ".", CUDNN_MINOR, ".", CUDNN_PATCHLEVEL);
#endif
#if defined(PIPEDREAM_HAVE_NCCL)
    s += cat(", NCCL ", NCCL_MAJOR, ".", NCCL_MINOR, ".", NCCL_PATCH);
#endif
    return s;
  }();
  return v.c_str();
}

}  // namespace pd::cuda

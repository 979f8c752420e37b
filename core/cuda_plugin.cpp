#include "core/cuda_plugin.h"

#include <dlfcn.h>

#include <cstdlib>
#include <mutex>

#include "core/build_info.h"
#include "core/device_ops.h"
#include "core/error.h"

namespace pd {

namespace {

// Folder of the shared object that holds this function (libpd_core.so).
std::string own_folder() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&own_folder), &info) == 0 || !info.dli_fname) return ".";
  std::string path = info.dli_fname;
  size_t slash = path.rfind('/');
  return slash == std::string::npos ? "." : path.substr(0, slash);
}

struct PluginState {
  const CudaPluginApi* api = nullptr;
  std::string why;
};

PluginState load_plugin() {
  PluginState s;
  if (!PIPEDREAM_HAVE_CUDA_BUILD) {
    s.why = "this pipedream was built without CUDA (configure with -DPIPEDREAM_CUDA=ON where nvcc exists)";
    return s;
  }
  const char* env = std::getenv("PIPEDREAM_CUDA_PLUGIN");
  std::string path = env ? env : own_folder() + "/libpipedream_cuda.so";
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    s.why = cat("cannot load the CUDA backend ", path, ": ", dlerror(),
                " (build it: cmake --build build --target pd_cuda_plugin)");
    return s;
  }
  using Entry = const CudaPluginApi* (*)();
  auto entry = reinterpret_cast<Entry>(dlsym(handle, "pipedream_cuda_plugin"));
  const CudaPluginApi* api = entry ? entry() : nullptr;
  if (!api || api->abi_version != kCudaPluginAbi) {
    s.why = cat(path, " is not a CUDA backend of this pipedream version (rebuild it)");
    return s;
  }
  s.api = api;
  return s;
}

}  // namespace

const CudaPluginApi* cuda_plugin(std::string* why) {
  static std::once_flag once;
  static PluginState state;
  std::call_once(once, [] { state = load_plugin(); });
  if (!state.api && why) *why = state.why;
  return state.api;
}

void initialize_cuda_device(int device) {
  std::string why;
  const CudaPluginApi* api = cuda_plugin(&why);
  if (!api) throw UserError(cat("cannot use cuda:", device, ": ", why, "; use --device cpu"));
  api->initialize_backend(device);
}

int launcher_local_rank() {
  for (const char* name : {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "PMI_LOCAL_RANK", "SLURM_LOCALID"}) {
    if (const char* v = std::getenv(name)) {
      char* end = nullptr;
      long r = std::strtol(v, &end, 10);
      if (end != v && *end == '\0' && r >= 0) return static_cast<int>(r);
    }
  }
  return 0;
}

Device resolve_compute_device(const std::string& arg) {
  const Device d = Device::parse(arg);
  if (d.is_cpu() || arg.find(':') != std::string::npos) return d;
  try {
    std::string why;
    const CudaPluginApi* api = cuda_plugin(&why);
    if (!api) throw UserError(cat(why, "; use --device cpu"));
    const int visible = api->visible_device_count();
    if (visible == 0) throw UserError("no GPU is visible (cudaGetDeviceCount reports none): use --device cpu");
    return Device::cuda(launcher_local_rank() % visible);
  } catch (const UserError& e) {
    throw UserError(cat("--device ", arg, ": ", e.what()));
  }
}

void open_device(Device d, const std::string& arg, bool deterministic, bool allow_tf32) {
  if (d.is_cpu() && allow_tf32)
    throw UserError(cat("--allow-tf32 applies to CUDA only (--device cuda or cuda:N), not --device ", arg));
  if (d.is_cpu()) return;
  try {
    std::string why;
    const CudaPluginApi* api = cuda_plugin(&why);
    if (!api) throw UserError(cat(why, "; use --device cpu"));
    api->initialize_backend(d.index);
    api->set_deterministic(deterministic);
    api->set_allow_tf32(allow_tf32);
  } catch (const UserError& e) {
    throw UserError(cat("--device ", arg, ": ", e.what()));
  }
}

Device open_compute_device(const std::string& arg, bool deterministic, bool allow_tf32) {
  const Device d = resolve_compute_device(arg);
  open_device(d, arg, deterministic, allow_tf32);
  return d;
}

void require_compute_device(const std::string& arg) {
  const Device d = Device::parse(arg);
  if (d.is_cpu()) return;
  std::string why;
  const CudaPluginApi* api = cuda_plugin(&why);
  if (!api) throw UserError(cat("--device ", arg, ": ", why, "; use --device cpu"));
  const int visible = api->visible_device_count();
  if (visible == 0)
    throw UserError(cat("--device ", arg, ": no GPU is visible (cudaGetDeviceCount reports none): use --device cpu"));
  if (arg.find(':') != std::string::npos && d.index >= visible)
    throw UserError(cat("--device ", arg, ": cuda:", d.index, " does not exist: ", visible, " GPU(s) visible"));
}

void synchronize_device(Device d) {
  if (d.is_cuda()) device_ops(d).synchronize();
}

}  // namespace pd

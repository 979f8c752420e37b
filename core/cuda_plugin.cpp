#include "core/cuda_plugin.h"

#include <dlfcn.h>

#include <mutex>

#include "core/build_info.h"
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
    s.why = cat("cannot load the CUDA backend ", path, ": ", dlerror());
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

}  // namespace pd

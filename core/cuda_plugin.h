#pragma once
// The CUDA backend is a plugin (libpipedream_cuda.so next to libpd_core.so)
// loaded with dlopen only when a command asks for a GPU. Linking cuBLAS,
// cuDNN and NCCL into every binary cost ~0.1 s and ~200 MB at each process
// start — more than a whole `pipedream plan` — for users who never touch a GPU.
#include <string>

namespace pd {

struct CudaPluginApi {
  int abi_version;  // kCudaPluginAbi
  const char* (*versions)();
  int (*visible_device_count)();
  void (*initialize_backend)(int device);  // throws UserError without a GPU
  void (*set_deterministic)(bool on);
};
inline constexpr int kCudaPluginAbi = 1;

// The loaded plugin, or nullptr when this build has none or it cannot be
// loaded; *why (if given) then says which and why. Loads at most once.
const CudaPluginApi* cuda_plugin(std::string* why = nullptr);

// Loads the plugin and initialises GPU `device`; throws UserError with the
// reason when that is impossible (no CUDA build, no GPU, bad index).
void initialize_cuda_device(int device);

}  // namespace pd

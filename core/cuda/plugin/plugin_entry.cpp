// The one symbol libpipedream_cuda.so exports for pd_core's dlopen
// (core/cuda_plugin.h): a table of the backend's entry points.
#include "core/cuda/backend.h"
#include "core/cuda_plugin.h"

namespace pd::cuda {
const CudaNcclApi* nccl_plugin_api();  // nccl_plugin_api.cpp
}

namespace {

const pd::CudaPluginApi kApi = {
    pd::kCudaPluginAbi,
    &pd::cuda::versions,
    &pd::cuda::visible_device_count,
    [](int device) { pd::cuda::initialize_backend(device); },
    &pd::cuda::set_deterministic,
    &pd::cuda::set_allow_tf32,
    &pd::cuda::nccl_plugin_api,
};

}  // namespace

extern "C" __attribute__((visibility("default"))) const pd::CudaPluginApi* pipedream_cuda_plugin() {
  return &kApi;
}

// CUDA backend entry: device count query. Kernels arrive with the CUDA issue.
#include <cuda_runtime.h>

namespace pd::cuda {

// Number of visible GPUs; 0 when the driver or a GPU is missing.
int visible_device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) return 0;
  return n;
}

}  // namespace pd::cuda

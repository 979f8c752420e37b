#pragma once
// Public entry of the CUDA backend, includable from plain C++ (no CUDA
// headers). Link pd_backends; call initialize_backend() once per process
// before creating a CUDA tensor (the CLI does it for --device cuda).
#include <cstddef>

#include "core/precision.h"

namespace pd::cuda {

// Number of visible GPUs; 0 when the driver or a GPU is missing.
int visible_device_count();

// Selects GPU `device` for this process, creates its compute and
// communication streams, cuBLAS and cuDNN handles, and registers with
// pd_core: the caching allocator (register_allocator), device copy and fill
// (register_device_copy/fill) and the kernel table (register_device_ops).
// Idempotent for the same device. Throws UserError when no GPU is visible or
// the index is out of range.
void initialize_backend(int device = 0);
bool backend_initialized();

// Convolutions restricted to deterministic cuDNN algorithms.
void set_deterministic(bool on);
bool deterministic();
// TF32 tensor cores for cuBLAS GEMMs and cuDNN convolutions (off by
// default: results then match the CPU to FP32 rounding).
void set_allow_tf32(bool on);

// Versions compiled in, for `pipedream --version`: "CUDA 13.0, cuDNN 9.x, NCCL 2.x".
const char* versions();

}  // namespace pd::cuda

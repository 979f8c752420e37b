#pragma once
// What a process computes with: the device, the CPU's compute threads, the
// precision and whether GPU kernels must be deterministic. The commands
// (cli/) build one ComputeSettings from their flags and apply it once, at
// the start; the runtime and the profiler then compute on it and never set
// a thread count or open a device themselves.
//
// Precision is recorded here for the command to hand on (RunSpec,
// TrainOptions, ProfileOptions), not set in any backend: it travels with
// every call, as StepInfo::precision (core/layer.h) and the precision
// argument of the DeviceOps entries whose results depend on it, because
// one process computes in both (an imported graph's nodes run FP32 inside a
// bf16 run; tests and the profiler compare the two).

#include <string>

#include "core/precision.h"
#include "core/tensor.h"

namespace pd {

// Most compute threads a process may ask for: OpenMP crashes on tens of
// thousands of threads, and past a thousand no machine we target speeds up.
inline constexpr int kMaxComputeThreads = 1024;

struct ComputeSettings {
  Device device = Device::cpu();
  int threads = 1;  // CPU compute threads (OpenMP and OpenBLAS), 1..kMaxComputeThreads
  Precision precision = Precision::FP32;
  bool deterministic = false;  // --deterministic: deterministic cuDNN algorithms only
  bool allow_tf32 = false;     // --allow-tf32: TF32 tensor-core math for FP32 GEMMs and convolutions (CUDA)

  bool operator==(const ComputeSettings&) const = default;
};

// "cuda:0, 1 thread, bf16, deterministic": for messages.
std::string describe(const ComputeSettings& s);

// --threads as the commands take it: 0 means every core.
int threads_or_all_cores(int threads);

// Applies s to this process: opens s.device (CUDA: loads the plugin,
// initialises the GPU, sets deterministic convolutions and TF32 math as
// asked) and sets the CPU compute threads. Once per process: a later call
// with equal settings does nothing; one with different settings throws
// RuntimeFailure naming both, because what the first opened (a GPU, kernels
// chosen and timed under it) cannot be taken back. Bad values throw
// UserError (threads out of range, --allow-tf32 or a missing GPU) and leave
// nothing applied.
void apply_compute_settings(const ComputeSettings& s);

// The settings applied in this process; nullptr before apply_compute_settings.
const ComputeSettings* applied_compute_settings();

// The CPU compute threads this process computes with (1 until settings are
// applied).
int compute_threads();

}  // namespace pd

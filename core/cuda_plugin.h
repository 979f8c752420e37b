#pragma once
// The CUDA backend is a plugin (libpipedream_cuda.so next to libpd_core.so)
// loaded with dlopen only when a command asks for a GPU. Linking cuBLAS,
// cuDNN and NCCL into every binary cost ~0.1 s and ~200 MB at each process
// start — more than a whole `pipedream plan` — for users who never touch a GPU.
#include <cstddef>
#include <string>

#include "core/tensor.h"

namespace pd {

// NCCL through the plugin, for runtime/comm/nccl_transport.cpp (which must
// not link NCCL). Handles are opaque: a communicator (one per process and
// job subset, each with its own CUDA stream) and an event. Failures throw
// RuntimeFailure naming the NCCL/CUDA call, file and line; a build without
// NCCL throws UserError from every entry but available().
struct CudaNcclApi {
  bool (*available)();
  // 128 bytes (NCCL_UNIQUE_ID_BYTES); rank 0 of a communicator makes it.
  void (*make_unique_id)(char* out);
  // Collective over the nranks members: returns once all have joined.
  void* (*create)(const char* id, int nranks, int rank);
  void (*destroy)(void* comm);  // after abort(): frees what is left
  // Point to point on the communicator's stream, after the compute work
  // queued so far (so a sent tensor is complete and a receive buffer is no
  // longer read by earlier kernels).
  void (*send)(void* comm, const void* buf, size_t bytes, int peer);
  void (*recv)(void* comm, void* buf, size_t bytes, int peer);
  // In-place f32 all-reduce (sum or average) on the communicator's stream.
  void (*all_reduce_f32)(void* comm, float* buf, size_t count, bool average);
  // An event after the work queued on comm's stream so far; done() polls
  // it and throws RuntimeFailure when NCCL reported an asynchronous error
  // (a peer died).
  void* (*record_event)(void* comm);
  bool (*event_done)(void* comm, void* event);
  void (*event_release)(void* event);
  void (*abort)(void* comm);  // tears down without waiting for peers; idempotent
  // Identifies this process's GPU ("GPU-<uuid>"): NCCL refuses two ranks of
  // one communicator on the same GPU, so the transport checks first.
  void (*device_uuid)(char* out, size_t len);
};

struct CudaPluginApi {
  int abi_version;  // kCudaPluginAbi
  const char* (*versions)();
  int (*visible_device_count)();
  void (*initialize_backend)(int device);  // throws UserError without a GPU
  void (*set_deterministic)(bool on);
  // Added in ABI 2.
  void (*set_allow_tf32)(bool on);
  const CudaNcclApi* (*nccl)();
};
inline constexpr int kCudaPluginAbi = 3;  // 3: DeviceOps gained the upload entries

// The loaded plugin, or nullptr when this build has none or it cannot be
// loaded; *why (if given) then says which and why. Loads at most once.
const CudaPluginApi* cuda_plugin(std::string* why = nullptr);

// Loads the plugin and initialises GPU `device`; throws UserError with the
// reason when that is impossible (no CUDA build, no GPU, bad index).
void initialize_cuda_device(int device);

// --device as the commands take it: "cpu", "cuda" (this process's GPU: the
// launcher's local rank modulo the visible GPUs, so one process per GPU on
// a node) or "cuda:N". For a GPU it loads the plugin, initialises the
// device and sets deterministic convolutions and TF32 tensor-core math for
// FP32 GEMMs and convolutions (cuBLAS and cuDNN) as asked: both are set on
// every call, so a call without them turns them off. Returns the device to
// compute on; throws UserError starting "--device ARG:" and naming what is
// missing (CUDA build, plugin, GPU, index), and UserError naming
// --allow-tf32 when TF32 is asked for on the CPU (nothing there to switch).
Device open_compute_device(const std::string& arg, bool deterministic = false, bool allow_tf32 = false);

// The two halves of open_compute_device: the device "cpu", "cuda" or
// "cuda:N" names in this process, and opening it (arg: the --device text
// for messages). A command opens its device through apply_compute_settings
// (core/compute_settings.h), which calls open_device once per process.
Device resolve_compute_device(const std::string& arg);
void open_device(Device d, const std::string& arg, bool deterministic, bool allow_tf32);

// The checks of open_compute_device that need no GPU context (plugin
// loadable, a GPU visible), for a process that only launches the workers.
void require_compute_device(const std::string& arg);

// Waits until the work queued on `d` has finished (no-op on the CPU): what
// a timer must call before it reads the clock.
void synchronize_device(Device d);

// This process's index among the ranks on its node, from the launcher's
// environment (Open MPI, MPICH/Hydra, Slurm); 0 outside a launcher.
int launcher_local_rank();

}  // namespace pd

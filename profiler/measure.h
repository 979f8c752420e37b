#pragma once
// Measures a model's per-layer costs on a device (docs/design.md §4): what
// `pipedream profile` writes and `pipedream run --plan auto` plans from.
//
// Layers are timed inside full training steps, in model order, so each
// layer sees the caches and allocator state it sees in training. The
// boundary layers run the way they run in a pipeline stage: the first
// layer's backward computes no input gradient, and the last layer's
// backward time includes the loss (softmax cross-entropy and its gradient).
// Independently, the whole forward+backward step is timed with the code the
// trainer runs (forward_layers, loss, backward_layers), so the per-layer sum
// can be checked against it.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/optimizer.h"
#include "core/precision.h"
#include "core/tensor.h"
#include "models/model.h"
#include "profiler/profile.h"

namespace pd {

struct ProfileProgress {
  bool warmup = false;    // a warm-up iteration (not measured)
  int iteration = 0;      // 1-based within its phase
  int iterations = 0;     // of its phase; with min_seconds, the least it will run
  bool last = false;      // the last iteration of its phase
  double elapsed_s = 0;   // since the measured phase began (0 in warm-up)
  int64_t batch = 0;      // the batch being measured (a microbatch size after the minibatch)
};

struct ProfileOptions {
  int64_t batch = 64;
  Device device = Device::cpu();
  int threads = 0;  // compute threads; 0 = all cores (what train/run use by default)
  int warmup = 2;   // unmeasured iterations first (allocator, caches, OpenBLAS buffers)
  int iters = 10;   // measured iterations; per-layer times are their median and p90
  // Keep measuring (more than `iters` iterations) until the measured phase
  // has lasted this long. On a host whose speed drifts over seconds (a
  // shared VM) a few iterations catch one moment of it; medians over tens of
  // seconds repeat. 0: exactly `iters` iterations.
  double min_seconds = 0;
  uint64_t seed = 0;
  // --precision: bf16 runs every layer with the rounding points training
  // uses, and the profile records bf16 sizes (2 bytes an element) for the
  // activations sent and saved.
  Precision precision = Precision::FP32;
  // Also measure every layer at batch / M for each M here (M >= 2 dividing
  // the batch), after the batch itself: the microbatches of a flush schedule
  // with M per batch, recorded as the nodes' at_batch times, which
  // `simulate` uses instead of a linear share of the batch's times.
  std::vector<int> microbatches;
  // The optimizer whose state the profile's optimizer_state_bytes counts:
  // by default train's and run's default (SGD with momentum 0.9, one slot per
  // parameter). Only kind and momentum matter here.
  OptimizerConfig optimizer = default_profile_optimizer();
  // On a GPU: TF32 tensor cores for FP32 GEMMs and convolutions (--allow-tf32).
  bool allow_tf32 = false;
  // --memory: profile one layer at a time, never holding more than this.
  // Each layer is built alone (weights, gradients, optimizer state), timed
  // on a synthetic input of its recorded shape (and a synthetic gradient of
  // its output's), and freed before the next; a layer whose state alone
  // exceeds the bound is a UserError naming it. 0: the whole model at once,
  // as a training step runs it (a whole-step time beside the layer sum).
  uint64_t memory_bytes = 0;
  // Called after every iteration (from the calling thread).
  std::function<void(const ProfileProgress&)> progress;

  static OptimizerConfig default_profile_optimizer() {
    OptimizerConfig c;
    c.kind = OptimizerKind::sgd;
    c.momentum = 0.9f;
    return c;
  }
};

// Per-iteration samples behind the profile's medians, for explaining a gap
// between the per-layer sum and the whole step (noise on a busy machine
// makes the sum of per-layer medians smaller than the median of sums).
struct MeasureDetails {
  std::vector<double> whole_step_ms;         // uninstrumented steps
  std::vector<double> instrumented_step_ms;  // per-iteration sum of the layer times
  // A fixed 256^3 GEMM timed after every measured iteration (CPU only): the
  // host's speed over the measurement (see Profile::host_probe_ms).
  std::vector<double> host_probe_ms;
};

// Throws UserError for options that cannot be measured (batch < 1,
// iters < 1, warmup < 0, threads < 0, a microbatch count that does not
// divide the batch, a bad optimizer setting, a CUDA device in a build without
// CUDA or on a machine without that GPU).
void check_profile_options(const ProfileOptions& options);

// Checks the options as above, then measures (details: of the batch
// itself) on the process's compute settings, which the caller applied
// (apply_compute_settings, core/compute_settings.h) with the options'
// device, threads (0: all cores) and TF32; else RuntimeFailure.
Profile measure_profile(const Model& model, const ProfileOptions& options, MeasureDetails* details = nullptr);

double sample_median(std::vector<double> v);  // mean of the middle two for an even count
double sample_p90(std::vector<double> v);     // nearest rank

// |median of the first half - median of the second half| / the smaller, in
// measurement order; 0 for fewer than 4 samples. Of the host probe: how far
// the machine's speed moved while measuring.
double drift_between_halves(const std::vector<double>& samples);

// Sum over nodes of forward_ms + backward_ms.
double layer_time_sum_ms(const Profile& p);

// "sgd (momentum 0.9): 1 slot per parameter" - what optimizer_state_bytes assumes.
std::string optimizer_state_description(const OptimizerConfig& c);

}  // namespace pd

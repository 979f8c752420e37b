#pragma once
// Single-worker training as a library: `pipedream train` is a thin CLI over
// train(); the pipelined runtime and the benchmarks reuse the pieces
// (compute_gradients, evaluate, the step numbering).
//
// Step numbering shared with `run`: global step s (0-based) trains on
// minibatch s mod P of epoch s div P, where P = minibatches per epoch of the
// batch size; StepInfo.minibatch_id = s (it keys dropout masks).
#include <cstdint>
#include <span>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/optimizer.h"
#include "models/dataset.h"
#include "models/layer_range.h"
#include "models/model.h"
#include "models/parameters.h"

namespace pd {

struct TrainOptions {
  int64_t epochs = 0;       // give exactly one of epochs and minibatches
  int64_t minibatches = 0;  // optimizer steps
  int64_t batch = 64;
  OptimizerConfig optimizer;
  LrSchedule schedule;      // base_lr is taken from optimizer.lr; cosine total = the run's steps
  uint64_t seed = 0;        // init, sample order, dropout
  // Each step's gradient is computed on the weights of `gradient_delay`
  // steps earlier (delayed SGD: w_{t+1} = w_t - lr·g(w_{t-d}; b_t), with
  // w_{t-d} = w_0 while t < d) - what vertical sync must reproduce.
  int gradient_delay = 0;
  // Gradient accumulation: each minibatch of `batch` samples runs as this
  // many microbatches (BatchNorm statistics and dropout masks per
  // microbatch), their gradients summed and divided by the count - what a
  // flush pipeline with as many microbatches of batch / microbatches computes.
  int microbatches = 1;
  // Gradient clipping (--clip-grad-norm): when positive, each step's
  // averaged gradient is scaled to this global L2 norm if it is larger
  // (torch.nn.utils.clip_grad_norm_; core/optimizer.h). 0: off.
  float clip_grad_norm = 0;
  Device device = Device::cpu();  // where weights, gradients and optimizer state live
  Precision precision = Precision::FP32;  // --precision: bf16 rounding points (core/bf16_rounding.h)
  bool evaluate = true;     // test split after every epoch and at the end
  int64_t eval_batch = 500;
  // Threads that fetch (decode, augment, batch) minibatches ahead of the
  // training thread (models/loader.h); 0 fetches each on the training
  // thread when its step starts. Either way the same bits are trained.
  int loader_threads = 0;
  // Checkpoints (runtime/checkpoint.h, the format `run` writes, one stage):
  // every checkpoint_every steps (0: only at the end) when checkpoint_dir
  // is set. `resume` continues from one; epochs / minibatches still count
  // the whole run, the steps before the checkpoint included.
  std::string checkpoint_dir, resume;
  int64_t checkpoint_every = 0;
  int64_t keep_checkpoints = 0;  // the newest kept in checkpoint_dir; 0: all
};

struct EvalResult {
  double loss = 0, accuracy = 0;  // mean over samples (tokens for a language model)
  int64_t count = 0;
};

struct StepLoss {
  float loss = 0;
  int64_t correct = 0, count = 0;
};

// Forward, loss and backward over the whole model on one batch; adds the
// gradients of the mean loss into grads.
StepLoss compute_gradients(const Model& m, const ParameterStore& w, ParameterStore& grads, const Batch& b,
                           const StepInfo& step);

// Divides gradients summed over `count` microbatches (or minibatches) by
// the count: x / n on the CPU, bit for bit the same in `train
// --microbatches` and a pipeline's optimizer step; x * (1 / n) on a GPU.
void average_gradients(std::span<Tensor> grads, int count);

// Loss and accuracy on a dataset in order, eval mode, batches of `batch`.
// Throws RuntimeFailure naming the step when a training loss is NaN or
// infinite: continuing would only write NaN weights.
void require_finite_loss(float loss, int64_t step);

EvalResult evaluate(const Model& m, const ParameterStore& w, const Dataset& data, int64_t batch,
                    Precision precision = Precision::FP32);

// Steps a run takes; UserError when the options do not make a run.
int64_t planned_steps(const TrainOptions& o, int64_t train_size);

// Minibatch m's position: which epoch and which minibatch within it.
struct MinibatchRef {
  int64_t epoch = 0, index = 0;
};
inline MinibatchRef locate_minibatch(int64_t global_step, int64_t per_epoch) {
  return {global_step / per_epoch, global_step % per_epoch};
}

class TrainObserver {
 public:
  virtual ~TrainObserver() = default;
  // Called after every step; samples_per_s is measured since the run started.
  virtual void on_step(int64_t step, int64_t epoch, float loss, double samples_per_s) {}
  virtual void on_eval(int64_t epoch, const EvalResult& r) {}
  // Called before on_step: how long the step waited for its minibatch (with
  // no loader threads, the time to fetch it; on a GPU, until its copy was queued).
  virtual void on_data_wait(int64_t step, double ms) {}
  // Called before on_step: the learning rate the step's update used.
  virtual void on_learning_rate(int64_t step, float lr) {}
  // Polled before each step: true (Ctrl-C) ends training with Interrupted,
  // naming the step and, with checkpoints, how to resume.
  virtual bool stop_requested() { return false; }
  // With clipping on, before on_step: the step's gradient norm before
  // clipping, and the factor applied (1: none).
  virtual void on_grad_norm(int64_t step, double norm, float factor) {}
};

struct TrainResult {
  ParameterStore weights;      // final
  std::vector<float> losses;   // per step taken (from first_step)
  std::vector<EvalResult> evals;
  int64_t steps = 0;
  int64_t first_step = 0;      // 0, or the checkpoint's step when resumed
  double seconds = 0;          // training steps only, evaluation excluded
  double samples_per_s = 0;
  double data_wait_s = 0;      // of `seconds`, the steps' waits for their minibatches
};

// What a `train` checkpoint records of its run, and what resuming compares.
nlohmann::json train_checkpoint_identity(const Model& m, const TrainOptions& o);

// Trains from the seed's initial weights (or from `initial` when given).
TrainResult train(const Model& m, const Dataset& train_data, const Dataset* test_data, const TrainOptions& o,
                  TrainObserver* observer = nullptr, const ParameterStore* initial = nullptr);

}  // namespace pd

#pragma once
// Everything `pipedream run` was asked to do, resolved and validated, and
// the arithmetic of its step numbering (shared by the MPI workers and the
// single-process reference).
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/optimizer.h"
#include "core/precision.h"
#include "models/dataset.h"
#include "models/model.h"
#include "planner/plan.h"
#include "runtime/schedule/schedule.h"

namespace pd {

// How a GPU worker's tensors travel between stages: staged through host
// memory over MPI (bitwise equal to --reference), or NCCL (`run --transport`).
enum class DeviceTransport { staged, nccl };

struct RunSpec {
  Plan plan;
  ScheduleOptions schedule;  // minibatches: total steps (flush: batches)
  // `run --schedule-file`: every rank's list, checked, run as one segment
  // instead of the generated lists (the file sets `schedule`).
  std::shared_ptr<const std::vector<std::vector<Action>>> schedule_lists;
  int64_t batch = 64;        // minibatch (flush: microbatch) size
  uint64_t seed = 0;
  OptimizerConfig optimizer;
  LrSchedule lr;             // base_lr and total_steps filled in
  // --clip-grad-norm (TrainOptions::clip_grad_norm); 0: off. Every stage
  // scales by the whole model's norm, so the stages of a plan exchange
  // their norms at each optimizer step.
  float clip_grad_norm = 0;
  int threads = 1;           // compute threads per worker (applied by the command: core/compute_settings.h)
  int loader_threads = 0;    // first stage: threads fetching its inputs ahead
  // Where each worker computes (a GPU: the process's own, initialised by
  // the command before the workers start) and how device tensors travel.
  Device device = Device::cpu();
  DeviceTransport transport = DeviceTransport::staged;
  Precision precision = Precision::FP32;  // --precision (core/precision.h)
  double timeout_s = 60;
  // Evaluation on the test split through the pipeline: every eval_every
  // steps (0: at every epoch end) and at the end.
  bool evaluate = true;
  int64_t eval_every = 0;
  int64_t eval_batch = 500;
  // Weights every stage starts from (--init: files matched by name onto the
  // model, models/parameters.h); empty: the seed's initialisation.
  std::vector<std::string> init;
  // Outputs.
  std::string metrics, save, trace, checkpoint_dir, resume;
  std::string svg;              // the measured timeline, drawn as `simulate --svg` draws it
  int64_t svg_minibatches = 0;  // minibatches (flush: batches) it spans; 0: a few
  int64_t checkpoint_every = 0;  // steps; 0: no periodic checkpoints
  int64_t keep_checkpoints = 0;  // the newest kept in checkpoint_dir; 0: all
  int64_t log_every = 10;
  bool progress_bar = false;

  int64_t steps() const { return schedule.minibatches; }
  // Every rank records its actions' spans (for --trace or --svg).
  bool tracing() const { return !trace.empty() || !svg.empty(); }
  // Samples one step (one optimizer update of the first stage) takes.
  int64_t samples_per_step() const { return batch * schedule.microbatches; }
  int64_t steps_per_epoch(int64_t train_size) const { return train_size / samples_per_step(); }
};

// Whether the run's checkpoints are taken inside its one schedule, leaving
// the result unchanged: the flush schedules (between batches, where their
// pipeline is empty anyway) and 1f1b-rr with stash or vertical weights
// (with minibatches in flight, their weight versions stored; replicated
// stages: at multiples of every replica count). 1f1b-rr without weight
// versions (--weights none) drains the pipeline at every checkpoint.
bool checkpoints_inside_schedule(const RunSpec& spec);

// UserError when --clip-grad-norm is set where no optimizer step sees the
// whole model's gradient at once: 1f1b-rr and 2bw on several stages, whose
// stages step each at their own time (2bw's would wait for the first
// stage's backward).
void require_clipping_supported(const RunSpec& spec);

// The run's segments, each one schedule from a drained pipeline: one when
// checkpoints_inside_schedule, else a new one after every checkpoint.
struct Segment {
  int64_t first = 0, end = 0;  // global steps [first, end)
};
std::vector<Segment> run_segments(const RunSpec& spec, int64_t start_step);

// Global steps (versions) after which the test set is evaluated: epoch ends
// (or every eval_every) and the last step.
std::vector<int64_t> evaluation_points(const RunSpec& spec, int64_t train_size);

}  // namespace pd

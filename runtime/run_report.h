#pragma once
// What the last stage reports while a pipeline trains: per-step loss and
// accuracy (a flush batch's microbatches averaged), throughput, test
// evaluations - as metrics lines (same names as `train`) and the progress bar.
#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <vector>

#include "runtime/executor.h"
#include "runtime/metrics.h"
#include "runtime/schedule/schedule.h"

namespace pd {

// Seconds per step over the middle half of the steps in `done_at_s` (step
// -> when its loss arrived; a replica of a replicated last stage sees every
// k-th step): the window `simulate` calls its steady state, so the
// pipeline's fill and drain and the first steps' one-time costs (first
// touch of every buffer, MPI's connection set-up) fall outside it. 0 when
// fewer than 8 steps were seen.
double steady_seconds_per_step(const std::map<int64_t, double>& done_at_s);

// How a run steps, for its summary line: schedule_summary (runtime/schedule/schedule.h).
// The steps that window spans, [first, last] (both 0 when there is none).
struct StepWindow {
  int64_t first = 0, last = 0;
};
StepWindow steady_window(const std::map<int64_t, double>& done_at_s);

class RunReporter final : public ExecutorObserver {
 public:
  // `steps_per_epoch` converts steps to epochs; `microbatches` per step.
  RunReporter(MetricsWriter& metrics, ProgressBar* bar, int64_t total_steps, int64_t steps_per_epoch,
              int microbatches, int64_t samples_per_step, int64_t log_every);

  // Step lines then carry the schedule's learning rate at each step (a
  // replicated 1f1b-rr stage updates once per replica count of steps, at
  // the rate of the first).
  void set_learning_rates(const LrSchedule& s) { lr_ = s; }
  // Versions arrive schedule-local: the caller sets the segment's first step.
  void set_segment_start(int64_t step) { segment_start_ = step; }
  void on_loss(int64_t step, int microbatch, const StepLoss& loss) override;
  void on_eval(int64_t version, const EvalResult& result) override;
  void on_grad_norm(int64_t step, double norm, float factor) override;

  const std::map<int64_t, float>& losses() const { return losses_; }
  const std::vector<std::pair<int64_t, EvalResult>>& evals() const { return evals_; }
  double samples_per_s() const;
  double seconds() const;
  double steady_seconds_per_step() const { return pd::steady_seconds_per_step(done_at_s_); }
  // Test-set evaluations that ran inside the steady window (between two of
  // its steps): their time is in steady_seconds_per_step.
  int evaluations_in_steady_window() const;

 private:
  struct Partial {
    std::vector<float> losses;  // per microbatch
    int64_t correct = 0, count = 0;
    int parts = 0;
  };
  MetricsWriter& metrics_;
  ProgressBar* bar_;
  int64_t total_, per_epoch_;
  int microbatches_;
  int64_t samples_per_step_, log_every_;
  int64_t segment_start_ = 0;
  int64_t first_step_ = -1, last_step_ = -1;  // steps whose losses this rank saw
  std::map<int64_t, Partial> partial_;
  std::map<int64_t, float> losses_;
  std::map<int64_t, double> done_at_s_;  // when each step's loss arrived
  std::vector<std::pair<int64_t, EvalResult>> evals_;
  std::optional<LrSchedule> lr_;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
};

}  // namespace pd

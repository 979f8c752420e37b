#include "runtime/run_report.h"

#include <algorithm>
#include <cstdio>

#include "core/error.h"

namespace pd {

RunReporter::RunReporter(MetricsWriter& metrics, ProgressBar* bar, int64_t total_steps, int64_t steps_per_epoch,
                         int microbatches, int64_t samples_per_step, int64_t log_every)
    : metrics_(metrics),
      bar_(bar),
      total_(total_steps),
      per_epoch_(std::max<int64_t>(1, steps_per_epoch)),
      microbatches_(microbatches),
      samples_per_step_(samples_per_step),
      log_every_(std::max<int64_t>(1, log_every)) {}

double RunReporter::seconds() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
}

double RunReporter::samples_per_s() const {
  // Every step up to the newest one seen counts (losses may arrive out of
  // step order from the last stage's replicas).
  const double s = seconds();
  const int64_t steps = last_step_ < 0 ? 0 : last_step_ + 1 - first_step_;
  return s > 0 ? static_cast<double>(steps * samples_per_step_) / s : 0;
}

StepWindow steady_window(const std::map<int64_t, double>& done_at_s) {
  if (done_at_s.size() < 8) return {};
  const int64_t first = done_at_s.begin()->first, steps = done_at_s.rbegin()->first - first + 1;
  // The seen steps nearest inside the window.
  const auto lo = done_at_s.lower_bound(first + steps / 4);
  auto hi = done_at_s.upper_bound(first + steps * 3 / 4);
  --hi;
  if (hi->first <= lo->first) return {};
  return {lo->first, hi->first};
}

double steady_seconds_per_step(const std::map<int64_t, double>& done_at_s) {
  const StepWindow w = steady_window(done_at_s);
  if (w.last <= w.first) return 0;
  return (done_at_s.at(w.last) - done_at_s.at(w.first)) / static_cast<double>(w.last - w.first);
}

int RunReporter::evaluations_in_steady_window() const {
  const StepWindow w = steady_window(done_at_s_);
  int n = 0;
  // An evaluation after `step` steps runs between steps step - 1 and step.
  for (const auto& [step, result] : evals_) n += step > w.first && step <= w.last;
  return n;
}

void RunReporter::on_loss(int64_t step, int microbatch, const StepLoss& l) {
  float loss = l.loss;
  int64_t correct = l.correct, count = l.count;
  if (microbatches_ > 1) {
    // Microbatches arrive in any order (from the stage's replicas too), and
    // are added in microbatch order: the same mean whatever the order.
    Partial& p = partial_[step];
    if (p.losses.empty()) p.losses.assign(static_cast<size_t>(microbatches_), 0.0f);
    PD_CHECK(microbatch >= 0 && microbatch < microbatches_, "loss of microbatch ", microbatch, " of ", microbatches_);
    p.losses[static_cast<size_t>(microbatch)] = l.loss;
    p.correct += l.correct;
    p.count += l.count;
    if (++p.parts < microbatches_) return;
    double sum = 0;
    for (float x : p.losses) sum += x;
    loss = static_cast<float>(sum / microbatches_);
    correct = p.correct;
    count = p.count;
    partial_.erase(step);
  }
  losses_[step] = loss;
  done_at_s_[step] = seconds();
  if (first_step_ < 0) first_step_ = step;
  last_step_ = std::max(last_step_, step);
  const double sps = samples_per_s();
  const int64_t epoch = step / per_epoch_;
  if ((step + 1) % log_every_ == 0 || step + 1 == total_) {
    nlohmann::json line = {{"event", "step"}, {"step", step}, {"epoch", epoch}, {"loss", static_cast<double>(loss)},
                           {"accuracy", count > 0 ? static_cast<double>(correct) / static_cast<double>(count) : 0.0},
                           {"samples_per_s", sps}, {"seconds", seconds()}};
    if (lr_) line["lr"] = lr_->lr_at(step);
    metrics_.write(line);
  }
  if (bar_) bar_->update(step + 1, epoch, loss, sps);
}

void RunReporter::on_grad_norm(int64_t step, double norm, float factor) {
  if ((step + 1) % log_every_ == 0 || step + 1 == total_) metrics_.grad_norm(step, norm, factor);
}

void RunReporter::on_eval(int64_t version, const EvalResult& r) {
  const int64_t step = segment_start_ + version;
  const int64_t epoch = (step - 1) / per_epoch_;
  evals_.emplace_back(step, r);
  metrics_.write({{"event", "eval"}, {"step", step}, {"epoch", epoch}, {"test_loss", r.loss},
                  {"test_accuracy", r.accuracy}, {"seconds", seconds()}});
  char line[200];
  std::snprintf(line, sizeof line, "step %lld (epoch %lld): test loss %.4f, test accuracy %.2f%%",
                static_cast<long long>(step), static_cast<long long>(epoch), r.loss, 100.0 * r.accuracy);
  if (bar_) bar_->message(line);
  else std::fprintf(stderr, "%s\n", line);
}

}  // namespace pd

#include "runtime/trainer.h"

#include <chrono>
#include <cstdio>
#include <cmath>
#include <deque>
#include <filesystem>

#include "core/device_ops.h"
#include "core/error.h"
#include "core/checked.h"
#include "core/loss.h"
#include "core/precision_names.h"
#include "models/loader.h"
#include "runtime/checkpoint.h"

namespace pd {

void require_finite_loss(float loss, int64_t step) {
  if (!std::isfinite(loss))
    throw RuntimeFailure(cat("the training loss became ", loss, " at step ", step,
                             ": training diverged; lower --lr or add --warmup"));
}

StepLoss compute_gradients(const Model& m, const ParameterStore& w, ParameterStore& grads, const Batch& b,
                           const StepInfo& step) {
  RangeContext ctx;
  const int last = m.size() - 1;
  StepInfo to_loss = step;
  to_loss.output_to_loss = true;
  Tensor logits = forward_layers(m, w, 0, last, b.inputs, to_loss, ctx);
  LossResult r = softmax_cross_entropy(std::move(logits), b.labels);
  require_finite_loss(r.loss, static_cast<int64_t>(step.minibatch_id));
  backward_layers(m, w, grads, 0, last, r.grad, step, ctx, false);
  return {r.loss, r.correct, r.count};
}

void average_gradients(std::span<Tensor> grads, int count) {
  if (count <= 1) return;
  const float n = static_cast<float>(count);
  for (Tensor& g : grads) device_ops(g.device()).divide(g.numel(), n, g.f32(), g.f32());
}

namespace {

// One step's gradient over its minibatch, as `microbatches` row ranges
// whose gradients add up, then divided by their count as a flush
// pipeline's optimizer step divides them. Dropout keys:
// the step alone, or step x microbatches + piece as the flush schedules key them.
StepLoss accumulate_gradients(const Model& m, const ParameterStore& w, ParameterStore& grads, const Batch& batch,
                              int64_t step, uint64_t seed, int microbatches, Precision precision) {
  const int64_t b = batch.inputs.dim(0) / microbatches;
  StepLoss total{0, 0, 0};
  // The mean of the microbatches' losses added in order in double: what a
  // pipeline's reporter logs for the same batch (runtime/run_report.cpp).
  double loss_sum = 0;
  for (int k = 0; k < microbatches; ++k) {
    const uint64_t id = static_cast<uint64_t>(microbatches > 1 ? step * microbatches + k : step);
    const Batch piece = microbatches == 1 ? batch
                                          : Batch{batch.inputs.slice_rows(k * b, (k + 1) * b),
                                                  batch.labels.slice_rows(k * b, (k + 1) * b)};
    const StepLoss l = compute_gradients(m, w, grads, piece, {.training = true, .seed = seed, .minibatch_id = id, .precision = precision});
    loss_sum += l.loss;
    total.correct += l.correct;
    total.count += l.count;
  }
  total.loss = static_cast<float>(loss_sum / microbatches);
  average_gradients(grads.all_params(), microbatches);
  sum_tied_gradients(m, grads);  // after averaging, as a pipeline's step sums them (models/ties.h)
  return total;
}

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

}  // namespace

EvalResult evaluate(const Model& m, const ParameterStore& w, const Dataset& data, int64_t batch,
                    Precision precision) {
  PD_CHECK(batch > 0, "evaluation batch must be positive");
  double loss_sum = 0;
  int64_t correct = 0, count = 0;
  RangeContext ctx;
  StepInfo step{.training = false, .precision = precision};
  std::vector<int64_t> idx;
  for (int64_t first = 0; first < data.size(); first += batch) {
    const int64_t n = std::min(batch, data.size() - first);
    idx.resize(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) idx[static_cast<size_t>(i)] = first + i;
    Batch b = fetch(data, idx);
    Tensor logits = forward_layers(m, w, 0, m.size() - 1, b.inputs, step, ctx);
    LossResult r = softmax_cross_entropy(logits, b.labels, false);
    loss_sum += static_cast<double>(r.loss) * static_cast<double>(r.count);
    correct += r.correct;
    count += r.count;
  }
  EvalResult out;
  out.count = count;
  if (count > 0) {
    out.loss = loss_sum / static_cast<double>(count);
    out.accuracy = static_cast<double>(correct) / static_cast<double>(count);
  }
  return out;
}

int64_t planned_steps(const TrainOptions& o, int64_t train_size) {
  if (o.batch <= 0) throw UserError(cat("--batch must be positive, got ", o.batch));
  if ((o.epochs > 0) == (o.minibatches > 0))
    throw UserError("give exactly one of --epochs N and --minibatches K (both positive)");
  if (o.gradient_delay < 0) throw UserError(cat("--gradient-delay must be >= 0, got ", o.gradient_delay));
  if (o.microbatches < 1 || o.batch % o.microbatches != 0)
    throw UserError(cat("--microbatches must be >= 1 and divide --batch ", o.batch, ", got ", o.microbatches));
  const int64_t per_epoch = train_size / o.batch;
  if (per_epoch == 0)
    throw UserError(cat("--batch ", o.batch, " is larger than the training set (", train_size, " samples)"));
  return o.epochs > 0 ? o.epochs * per_epoch : o.minibatches;
}

nlohmann::json train_checkpoint_identity(const Model& m, const TrainOptions& o) {
  return {{"model", m.name},
          {"config", "1"},
          {"layers", nlohmann::json::array({nlohmann::json::array({0, m.size() - 1})})},
          {"schedule", "train"},
          {"microbatches", o.microbatches},
          {"batch", o.batch},
          {"seed", o.seed},
          {"optimizer", to_string(o.optimizer.kind)},
          {"checkpoint_every", o.checkpoint_every},
          {"precision", to_string(o.precision)},  // a note on resume, not refused: master weights are FP32
          {"model_spec", model_fingerprint(m)},
          {"lr_total_steps", o.schedule.total_steps},  // a note on resume (lr_schedule_note), not refused
          {"drained", true}};
}

namespace {

void check_checkpoint_options(const TrainOptions& o) {
  if (o.checkpoint_every < 0) throw UserError(cat("--checkpoint-every must be >= 0, got ", o.checkpoint_every));
  if (o.checkpoint_every > 0 && o.checkpoint_dir.empty()) throw UserError("--checkpoint-every needs --checkpoint-dir");
  if (o.gradient_delay > 0 && (!o.checkpoint_dir.empty() || !o.resume.empty()))
    throw UserError("--gradient-delay keeps older weight versions that checkpoints do not store: drop "
                    "--checkpoint-dir / --resume or the delay");
}

// The step to start at: 0, or the checkpoint's (weights and optimizer loaded).
int64_t resume_training(const Model& m, const TrainOptions& o, int64_t steps, ParameterStore& w,
                        OptimizerState& opt) {
  if (o.resume.empty()) return 0;
  const ResumePoint p = find_checkpoint(o.resume);
  if (!p.note.empty()) std::fprintf(stderr, "%s\n", p.note.c_str());
  require_same_run(p, train_checkpoint_identity(m, o), {"model", "schedule", "microbatches", "batch", "seed", "optimizer"});
  require_same_model(p, m);
  if (const std::string n = precision_note(p, to_string(o.precision)); !n.empty()) std::fprintf(stderr, "%s\n", n.c_str());
  LrSchedule lr = o.schedule;
  lr.base_lr = o.optimizer.lr;
  if (const std::string n = lr_schedule_note(p, lr); !n.empty()) std::fprintf(stderr, "%s\n", n.c_str());
  if (p.step > steps)
    throw UserError(cat("--resume ", p.dir, ": the checkpoint is at step ", p.step, ", past this run's ", steps,
                        " steps (--minibatches and --epochs count the whole run, the checkpoint's steps included)"));
  load_checkpoint_state(checkpoint_tensors(p), p.dir, w, opt);
  const auto meta = stage_checkpoint_metadata(p, 0);
  opt.step = checked::parse_integer(meta.count("optimizer_step") ? meta.at("optimizer_step") : "",
                                    {p.dir + "/stage-0.safetensors", "metadata 'optimizer_step'"}, 0, checked::kMaxCount);
  return p.step;
}

void checkpoint_training(const Model& m, const TrainOptions& o, int64_t done, int64_t steps, const ParameterStore& w,
                         const OptimizerState& opt) {
  if (o.checkpoint_dir.empty()) return;
  const bool due = done == steps || (o.checkpoint_every > 0 && done % o.checkpoint_every == 0);
  if (!due) return;
  write_stage_checkpoint(o.checkpoint_dir, done,
                         StageCheckpoint{.stage = 0, .weights = &w, .optimizer = &opt, .updates = done,
                                         .newest_version = done});
  commit_checkpoint(o.checkpoint_dir, done, train_checkpoint_identity(m, o), o.keep_checkpoints);
}

}  // namespace

TrainResult train(const Model& m, const Dataset& train_data, const Dataset* test_data, const TrainOptions& options,
                  TrainObserver* observer, const ParameterStore* initial) {
  TrainOptions o = options;
  const int64_t steps = planned_steps(o, train_data.size());
  if (o.schedule.total_steps == 0) o.schedule.total_steps = steps;  // checkpoints record it
  const int64_t per_epoch = train_data.size() / o.batch;
  LrSchedule schedule = o.schedule;
  schedule.base_lr = o.optimizer.lr;
  if (schedule.total_steps == 0) schedule.total_steps = steps;
  validate(schedule);
  auto optimizer = make_optimizer(o.optimizer);
  const SampleOrder order(train_data.size(), o.seed);

  // versions.front() is w_{t-d} (or w_0 early on), versions.back() is w_t.
  // With d = 0 there is one version, updated in place.
  std::deque<ParameterStore> versions;
  versions.push_back(initial ? initial->clone_params() : ParameterStore::create(m, o.seed, o.device));
  PD_CHECK(versions.back().device() == o.device, "initial weights on ", versions.back().device().str(),
           " for a run on ", o.device.str());
  ParameterStore grads = versions.back().zeros_like_params();
  OptimizerState opt_state = optimizer->make_state(versions.back().all_params());
  check_checkpoint_options(o);
  const int64_t first_step = resume_training(m, o, steps, versions.back(), opt_state);

  TrainResult result;
  result.losses.reserve(static_cast<size_t>(steps));
  auto run_eval = [&](int64_t epoch) {
    if (!o.evaluate || !test_data) return;
    EvalResult r = evaluate(m, versions.back(), *test_data, o.eval_batch, o.precision);
    result.evals.push_back(r);
    if (observer) observer->on_eval(epoch, r);
  };

  // Step s's minibatch: a function of (seed, epoch, index) alone, so the
  // loader threads may compute it whenever they like.
  BatchLoader loader(
      [&](int64_t s) {
        const MinibatchRef ref = locate_minibatch(s, per_epoch);
        return fetch_training(train_data, order.minibatch(ref.epoch, ref.index, o.batch), o.seed, ref.epoch);
      },
      first_step, steps, o.loader_threads);
  InputStager stager(o.device);

  double train_seconds = 0, data_wait_seconds = 0;
  for (int64_t s = first_step; s < steps; ++s) {
    if (observer && observer->stop_requested()) {
      std::error_code ec;
      const bool saved = !o.checkpoint_dir.empty() && std::filesystem::exists(o.checkpoint_dir + "/latest", ec);
      throw Interrupted(cat("interrupted (Ctrl-C) before step ", s, " of ", steps,
                            saved ? cat("; resume from the latest checkpoint with --resume ", o.checkpoint_dir)
                                  : std::string(o.checkpoint_dir.empty() ? "" : "; no checkpoint written yet")));
    }
    const auto t0 = std::chrono::steady_clock::now();
    const MinibatchRef ref = locate_minibatch(s, per_epoch);
    // On a GPU the next minibatch's copy is queued before this step's work.
    Batch batch;
    if (o.device.is_cpu()) {
      batch = loader.next();
    } else {
      if (s == first_step) stager.stage(loader.next());
      batch = stager.take();
      if (s + 1 < steps) stager.stage(loader.next());
    }
    const double waited = seconds_since(t0);
    data_wait_seconds += waited;
    grads.zero_params();
    const StepLoss l = accumulate_gradients(m, versions.front(), grads, batch, s, o.seed, o.microbatches, o.precision);
    if (o.clip_grad_norm > 0) {
      const double norm = global_norm(squared_norms(grads.params_counted_once()));
      const float factor = clip_to_norm(grads.all_params(), norm, o.clip_grad_norm);
      if (observer) observer->on_grad_norm(s, norm, factor);
    }
    if (o.gradient_delay == 0) {
      optimizer->step(versions.back().all_params(), grads.all_params(), opt_state, schedule.lr_at(s));
    } else {
      // w_{t+1} goes into the tensors of w_{t-d} once the window is full:
      // this step's gradients were its last reader. step_into writes the
      // same bits as a copy followed by step.
      const bool window_full = static_cast<int>(versions.size()) > o.gradient_delay;
      ParameterStore next = window_full ? std::move(versions.front()) : versions.back().clone_params();
      if (window_full) versions.pop_front();
      optimizer->step_into(versions.back().all_params(), next.all_params(), grads.all_params(), opt_state,
                           schedule.lr_at(s));
      versions.push_back(std::move(next));
    }

    train_seconds += seconds_since(t0);
    result.losses.push_back(l.loss);
    if (observer) {
      observer->on_data_wait(s, 1e3 * waited);
      observer->on_learning_rate(s, schedule.lr_at(s));
      observer->on_step(s, ref.epoch, l.loss, static_cast<double>((s + 1 - first_step) * o.batch) / train_seconds);
    }
    checkpoint_training(m, o, s + 1, steps, versions.back(), opt_state);
    if ((s + 1) % per_epoch == 0 || s + 1 == steps) run_eval(ref.epoch);
  }
  result.steps = steps;
  result.first_step = first_step;
  result.seconds = train_seconds;
  result.data_wait_s = data_wait_seconds;
  result.samples_per_s = train_seconds > 0 ? static_cast<double>((steps - first_step) * o.batch) / train_seconds : 0;
  result.weights = std::move(versions.back());
  return result;
}

}  // namespace pd

#include "runtime/pipeline_worker.h"

#include "core/text.h"

#include <chrono>
#include <cstdio>
#include <numeric>

#include "core/cpu/gemm.h"
#include "core/error.h"
#include "core/safetensors.h"
#include "core/text.h"
#include "runtime/checkpoint.h"
#include "runtime/gather.h"
#include "runtime/run_report.h"
#include "runtime/trace.h"

namespace pd {

nlohmann::json checkpoint_identity(const RunSpec& spec, const Model& model) {
  return {{"model", model.name},
          {"config", spec.plan.config},
          {"layers", [&] {
             nlohmann::json l = nlohmann::json::array();
             for (const auto& s : spec.plan.stages) l.push_back({s.first_layer, s.last_layer});
             return l;
           }()},
          {"schedule", to_string(spec.schedule.kind)},
          {"weights", to_string(spec.schedule.policy)},
          {"microbatches", spec.schedule.microbatches},
          {"batch", spec.batch},
          {"seed", spec.seed},
          {"optimizer", spec.optimizer.kind},
          {"checkpoint_every", spec.checkpoint_every}};
}

namespace {

double steady_now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

void check_resumable(const ResumePoint& p, const RunSpec& spec, const Model& model) {
  const nlohmann::json want = checkpoint_identity(spec, model);
  for (auto it = want.begin(); it != want.end(); ++it) {
    if (!p.run.contains(it.key()) || p.run[it.key()] != it.value())
      throw UserError(cat("--resume ", p.dir, ": the checkpoint has ", it.key(), " = ",
                          p.run.contains(it.key()) ? p.run[it.key()].dump() : "(missing)", " but this run has ",
                          it.value().dump(), "; resume with the same settings"));
  }
  if (p.step > spec.steps())
    throw UserError(cat("--resume ", p.dir, ": the checkpoint is at step ", p.step, ", past this run's ", spec.steps(),
                        " steps"));
}

}  // namespace

WorkerSummary run_pipeline_worker(const RunSpec& spec, const Model& model, const DataSplits& data, Transport& t) {
  const int rank = t.rank();
  // What the plan's memory counts excludes the data set, loaded already.
  const double resident_before = double(allocator_for(spec.device).current_bytes());
  const Plan& plan = spec.plan;
  const PlanStage& my = plan.stages[static_cast<size_t>(plan.stage_of_rank(rank))];
  const bool leader = my.ranks.front() == rank;  // replica 0 of its stage
  const int reporter = plan.stages.back().ranks.front();
  cpu::set_compute_threads(spec.threads);
  t.set_timeout(spec.timeout_s);

  auto optimizer = make_optimizer(spec.optimizer);
  StageState state =
      make_stage_state(model, my.index, my.first_layer, my.last_layer, spec.seed, *optimizer, spec.device);
  int64_t start_step = 0;
  if (!spec.resume.empty()) {
    const ResumePoint p = find_checkpoint(spec.resume);
    check_resumable(p, spec, model);
    load_stage_checkpoint(p, state);
    start_step = p.step;
    if (rank == reporter) std::fprintf(stderr, "resuming from %s (step %lld)\n", p.dir.c_str(), static_cast<long long>(p.step));
  }

  const int64_t per_epoch = spec.steps_per_epoch(data.train->size());
  MetricsWriter metrics(rank == reporter ? spec.metrics : "");
  ProgressBar bar(spec.steps(), rank == reporter && spec.progress_bar);
  RunReporter report(metrics, &bar, spec.steps(), per_epoch, spec.schedule.microbatches, spec.samples_per_step(),
                     spec.log_every);
  ExecutorObserver* observer = rank == reporter ? &report : nullptr;
  const std::vector<int64_t> eval_points = evaluation_points(spec, data.train->size());

  StageTraining training;
  training.model = &model;
  training.train = data.train.get();
  training.batch = spec.batch;
  training.seed = spec.seed;
  training.optimizer = optimizer.get();
  training.lr = spec.lr;

  int64_t common = 1;  // least common multiple of the replica counts (1f1b-rr versions)
  if (!is_flush(spec.schedule.kind))
    for (const PlanStage& s : plan.stages) common = std::lcm(common, static_cast<int64_t>(s.replicas));

  t.barrier();  // everyone built its stage: start the common clock
  const double zero = steady_now();
  ExecutorStats total;
  std::vector<ActionSpan> events;
  for (const Segment& seg : run_segments(spec, start_step)) {
    ScheduleOptions o = spec.schedule;
    o.minibatches = seg.end - seg.first;
    const Schedule schedule(plan, o);
    training.first_item = seg.first;
    StageExecutor ex(schedule, rank, state, training, t, observer);
    StageEvaluation ev;
    ev.test = data.test.get();
    ev.batch = spec.eval_batch;
    // An evaluation waits for the input stage to reach the version, so it
    // must be one every stage passes after sending every gradient the input
    // stage needs for it: a multiple of every replica count (or the end).
    for (int64_t p : eval_points) {
      if (p <= seg.first || p > seg.end) continue;
      const int64_t local = std::min(seg.end - seg.first, (p - seg.first + common - 1) / common * common);
      if (ev.at_versions.empty() || ev.at_versions.back() < local) ev.at_versions.push_back(local);
    }
    if (ev.test && !ev.at_versions.empty()) ex.set_evaluation(ev);
    if (!spec.trace.empty()) ex.enable_trace(zero);
    report.set_segment_start(seg.first);
    if (!ex.run(&Transport::stop_requested)) {
      bar.finish();
      t.abort(cat("interrupted (Ctrl-C) during steps ", seg.first, "..", seg.end - 1,
                  seg.first > 0 && !spec.checkpoint_dir.empty()
                      ? cat("; resume with --resume ", spec.checkpoint_dir, " (last checkpoint: step ", seg.first, ")")
                      : std::string()),
              130);
    }
    total.busy_s += ex.stats().busy_s;
    total.wait_s += ex.stats().wait_s;
    total.actions += ex.stats().actions;
    total.peak_versions = std::max(total.peak_versions, ex.stats().peak_versions);
    total.peak_context_bytes = std::max(total.peak_context_bytes, ex.stats().peak_context_bytes);
    events.insert(events.end(), ex.trace().begin(), ex.trace().end());

    const bool checkpoint_now = !spec.checkpoint_dir.empty() && spec.checkpoint_every > 0 &&
                                (seg.end % spec.checkpoint_every == 0 || seg.end == spec.steps());
    if (checkpoint_now) {
      if (leader) write_stage_checkpoint(spec.checkpoint_dir, seg.end, state);
      t.barrier();
      if (rank == reporter) {
        nlohmann::json run = checkpoint_identity(spec, model);
        commit_checkpoint(spec.checkpoint_dir, seg.end, run);
        bar.message(cat("checkpoint: ", spec.checkpoint_dir, "/step-", seg.end));
      }
    }
  }
  const double wall = steady_now() - zero;
  bar.finish();

  // Stats, trace and weights go to the reporter.
  const nlohmann::json mine = {{"event", "rank"},
                               {"rank", rank},
                               {"stage", my.index},
                               {"busy_fraction", wall > 0 ? total.busy_s / wall : 0.0},
                               {"busy_s", total.busy_s},
                               {"wait_s", total.wait_s},
                               {"actions", total.actions},
                               {"peak_memory_bytes", allocator_for(spec.device).peak_bytes()},
                               {"peak_training_bytes", double(allocator_for(spec.device).peak_bytes()) - resident_before},
                               {"device", spec.device.str()},
                               {"peak_weight_versions", total.peak_versions},
                               {"peak_stashed_activation_bytes", total.peak_context_bytes}};
  WorkerSummary out;
  if (rank != reporter) {
    send_text(t, reporter, mine.dump());
    if (!spec.trace.empty()) send_text(t, reporter, trace_events_json(events).dump());
    if (!spec.save.empty() && leader) send_named_tensors(t, reporter, state.weights.named_tensors());
    return out;
  }
  out.reporter = true;
  out.seconds = report.seconds();
  // Every sample of every step, whichever replica trained it.
  const int64_t steps = spec.steps() - start_step;
  out.samples_per_s = out.seconds > 0 ? double(steps * spec.samples_per_step()) / out.seconds : 0;
  std::vector<nlohmann::json> per_rank(static_cast<size_t>(t.world_size())), traces(per_rank.size());
  for (int r = 0; r < t.world_size(); ++r) {
    if (r == rank) {
      per_rank[r] = mine;
      if (!spec.trace.empty()) traces[r] = trace_events_json(events);
      continue;
    }
    per_rank[r] = nlohmann::json::parse(recv_text(t, r));
    if (!spec.trace.empty()) traces[r] = nlohmann::json::parse(recv_text(t, r));
  }
  for (const auto& line : per_rank) metrics.write(line);
  if (!spec.save.empty()) {
    NamedTensors all;
    for (const PlanStage& s : plan.stages) {
      NamedTensors part = s.ranks.front() == rank ? state.weights.named_tensors()
                                                  : recv_named_tensors(t, s.ranks.front());
      all.insert(all.end(), part.begin(), part.end());
    }
    save_safetensors(spec.save, all,
                     {{"model", model.name}, {"spec", model.spec.dump()}, {"steps", std::to_string(spec.steps())}});
  }
  if (!spec.trace.empty()) {
    std::vector<int> stage_of(per_rank.size());
    for (int r = 0; r < t.world_size(); ++r) stage_of[r] = plan.stage_of_rank(r);
    write_chrome_trace(spec.trace, traces, stage_of);
  }
  nlohmann::json summary = {{"event", "summary"},
                            {"steps", spec.steps() - start_step},
                            {"seconds", out.seconds},
                            {"samples_per_s", out.samples_per_s},
                            {"workers", t.world_size()},
                            {"config", plan.config},
                            {"schedule", to_string(spec.schedule.kind)},
                            {"weights", to_string(spec.schedule.policy)}};
  std::printf("trained %lld steps on %d workers (plan %s, %s, weights %s) in %.1f s: %.0f samples/s",
              static_cast<long long>(spec.steps() - start_step), t.world_size(), plan.config.c_str(),
              to_string(spec.schedule.kind).c_str(), to_string(spec.schedule.policy).c_str(), out.seconds,
              out.samples_per_s);
  if (!report.evals().empty()) {
    const EvalResult& e = report.evals().back().second;
    std::printf(", test loss %.4f, test accuracy %.2f%%", e.loss, 100.0 * e.accuracy);
    summary["test_loss"] = e.loss;
    summary["test_accuracy"] = e.accuracy;
  }
  std::printf("\n");
  const double measured = steps > 0 ? out.seconds / double(steps) : 0;
  summary["measured_time_per_minibatch_s"] = measured;
  if (plan.time_per_minibatch_s > 0 && !is_flush(spec.schedule.kind)) {
    std::printf("time per minibatch: predicted %s (%s), measured %s (%+.1f%%)\n",
                seconds_text(plan.time_per_minibatch_s).c_str(), plan.predicted_by.c_str(),
                seconds_text(measured).c_str(), 100 * (measured / plan.time_per_minibatch_s - 1));
    summary["predicted_time_per_minibatch_s"] = plan.time_per_minibatch_s;
  }
  for (const auto& line : per_rank) {
    const PlanStage& st = plan.stages[line["stage"].get<int>()];
    const double peak = line["peak_training_bytes"].get<double>();
    std::printf("  rank %d (stage %d): busy %.0f%%, peak memory %s beyond the data set", line["rank"].get<int>(),
                st.index, 100.0 * line["busy_fraction"].get<double>(), bytes_text(peak).c_str());
    if (st.memory_bytes > 0)
      std::printf(" (plan: %s, %+.0f%%)", bytes_text(double(st.memory_bytes)).c_str(),
                  100 * (peak / double(st.memory_bytes) - 1));
    std::printf(", up to %d weight versions\n", line["peak_weight_versions"].get<int>());
  }
  metrics.write(summary);
  if (!spec.save.empty()) std::printf("saved weights to %s\n", spec.save.c_str());
  if (!spec.metrics.empty()) std::printf("metrics: %s\n", spec.metrics.c_str());
  if (!spec.trace.empty()) std::printf("trace: %s (open in https://ui.perfetto.dev or chrome://tracing)\n", spec.trace.c_str());
  std::fflush(stdout);
  return out;
}

}  // namespace pd

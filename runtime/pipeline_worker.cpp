#include "runtime/pipeline_worker.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <numeric>

#include "core/compute_settings.h"
#include "core/device_ops.h"
#include "core/error.h"
#include "core/precision_names.h"
#include "core/safetensors.h"
#include "core/text.h"
#include "models/sharded_weights.h"
#include "runtime/checkpoint.h"
#include "runtime/clocks.h"
#include "runtime/comm/loopback_transport.h"
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
          {"batch", spec.samples_per_step()},  // the minibatch, as --batch means it
          {"seed", spec.seed},
          {"optimizer", to_string(spec.optimizer.kind)},
          {"checkpoint_every", spec.checkpoint_every},
          {"precision", to_string(spec.precision)},  // a note on resume, not refused: master weights are FP32
          {"model_spec", model_fingerprint(model)},
          {"lr_total_steps", spec.lr.total_steps},  // a note on resume (lr_schedule_note), not refused
          {"drained", true}};
}

void require_resumable(const ResumePoint& p, const RunSpec& spec, const Model& model) {
  const nlohmann::json want = checkpoint_identity(spec, model);
  require_same_run(p, want, {"model", "schedule", "weights", "batch", "microbatches", "seed", "optimizer"});
  require_same_model(p, model);
  const bool drained = p.run.value("drained", false);
  if (!drained) {
    // Minibatches in flight belong to the stages that hold them.
    try {
      require_same_run(p, want, {"config", "layers"});
    } catch (const UserError& e) {
      throw UserError(cat(e.what(), ": a ", to_string(spec.schedule.kind),
                          " checkpoint taken with minibatches in flight resumes under its own plan only; another "
                          "plan resumes from a drained one (the checkpoint a run writes at its end)"));
    }
  }
  if (p.step > spec.steps())
    throw UserError(cat("--resume ", p.dir, ": the checkpoint is at step ", p.step, ", past this run's ", spec.steps(),
                        " steps (--minibatches and --epochs count the whole run, the checkpoint's steps included)"));
}

namespace {

// The moment every rank's trace counts from. Each rank's own moment after
// the start barrier can lag another's by a time slice on a busy host (4
// ranks on 2 cores: up to 5 ms), which draws a message taken before it was
// sent. Ranks on one host share its steady clock, so they take the moment
// of their host's first rank; across hosts the barrier is the reference.
// `mine`: this rank's moment after the barrier.
double shared_trace_zero(Transport& t, double mine) {
  const int me = t.rank();
  const std::string host = t.host_of(me);
  int first = me;
  for (int r = 0; r < me; ++r)
    if (t.host_of(r) == host) {
      first = r;
      break;
    }
  if (first != me) {
    Request r = t.irecv_any(first, gather_tag(t));
    r.wait();
    return static_cast<double>(r.meta()) * 1e-9;
  }
  const Tensor token = Tensor::zeros({1}, DType::I32);
  const auto ns = static_cast<int64_t>(mine * 1e9);
  std::vector<Request> sends;
  for (int r = me + 1; r < t.world_size(); ++r)
    if (t.host_of(r) == host) sends.push_back(t.isend(token, r, gather_tag(t), ns));
  wait_all(sends);
  return static_cast<double>(ns) * 1e-9;
}

// Where this rank sits in the plan.
struct WorkerRole {
  int rank = 0;
  const PlanStage* stage = nullptr;
  bool leader = false;    // replica 0 of its stage: writes its checkpoints, sends its weights
  int replica = 0;        // index in its stage's ranks
  bool reporter = false;  // the last stage's first replica: gathers and prints the results
};

// Where the run's schedule places the plan's stages (one step: the
// placement does not depend on the length).
Schedule placement(const RunSpec& spec) {
  ScheduleOptions o = spec.schedule;
  o.minibatches = 1;
  return Schedule(spec.plan, o);
}

// The rank holding the last stage: it gathers and prints the results.
int reporter_rank(const RunSpec& spec) {
  return placement(spec).place(static_cast<int>(spec.plan.stages.size()) - 1).worker;
}

// The plan stages a rank runs: its stage, or its chunks' (interleaved-1f1b,
// the V shapes), in chunk order.
std::vector<const PlanStage*> stages_of(const RunSpec& spec, int rank) {
  const Schedule placed = placement(spec);
  if (placed.chunks() == 1) return {&spec.plan.stages[static_cast<size_t>(spec.plan.stage_of_rank(rank))]};
  std::vector<const PlanStage*> out;
  for (int c = 0; c < placed.chunks(); ++c)
    out.push_back(&spec.plan.stages[static_cast<size_t>(placed.stage_of(rank, c))]);
  return out;
}

WorkerRole role_of(const RunSpec& spec, int rank) {
  WorkerRole r;
  r.rank = rank;
  const std::vector<const PlanStage*> stages = stages_of(spec, rank);
  r.stage = stages.front();
  r.leader = stages.size() > 1 || r.stage->ranks.front() == rank;
  if (stages.size() == 1)
    r.replica = static_cast<int>(std::find(r.stage->ranks.begin(), r.stage->ranks.end(), rank) - r.stage->ranks.begin());
  r.reporter = reporter_rank(spec) == rank;
  return r;
}

// --init: each stage takes its layers' tensors from the whole model's.
void load_initial_weights(const RunSpec& spec, const Model& model, std::vector<StageState>& states) {
  if (spec.init.empty()) return;
  const NamedTensors w = load_named_weights(model, spec.init);
  for (StageState& s : states) s.weights.load(w, "--init");
}

// Where training starts: step 0, a drained checkpoint's step (weights,
// buffers and optimizer state loaded by name: any plan's stage finds its
// tensors), or a 1f1b-rr checkpoint with minibatches in flight (also the
// weight versions they need).
struct ResumeFrom {
  int64_t step = 0;
  bool in_flight = false;  // resume inside the schedule (StageExecutor::resume_at)
  std::map<int64_t, ParameterStore> older;
};

// `states`: the rank's stages (interleaved-1f1b: its chunks', each loaded by name).
ResumeFrom resume_if_asked(const RunSpec& spec, const Model& model, const WorkerRole& role,
                           std::vector<StageState>& states) {
  ResumeFrom from;
  if (spec.resume.empty()) return from;
  const ResumePoint p = find_checkpoint(spec.resume);
  require_resumable(p, spec, model);
  std::vector<const ParameterStore*> own;
  for (const StageState& state : states) own.push_back(&state.weights);
  const NamedTensors all = checkpoint_tensors_of(p, own);  // this rank's stages' tensors alone
  for (StageState& state : states) {
    load_checkpoint_state(all, p.dir, state.weights, state.optimizer);
    // Optimizer steps this stage would have taken by then: one per batch
    // (flush), one per round of `replicas` minibatches (1f1b-rr).
    const int64_t replicas = role.stage->replicas;
    state.updates = rounds_after(spec.schedule, static_cast<int>(replicas), p.step);
    state.optimizer.step = state.updates;
  }
  from.step = p.step;
  from.in_flight = !p.run.value("drained", false);
  if (from.in_flight) {
    PD_CHECK(states.size() == 1, "a checkpoint with minibatches in flight is 1f1b-rr's: one stage per rank");
    StageState& state = states.front();
    from.older = load_older_versions(p, state.stage, role.replica, all, state.weights);
  }
  if (role.reporter && !p.note.empty()) std::fprintf(stderr, "%s\n", p.note.c_str());
  if (const std::string n = precision_note(p, to_string(spec.precision)); role.reporter && !n.empty())
    std::fprintf(stderr, "%s\n", n.c_str());
  if (const std::string n = lr_schedule_note(p, spec.lr); role.reporter && !n.empty()) std::fprintf(stderr, "%s\n", n.c_str());
  if (role.reporter)
    std::fprintf(stderr, "resuming from %s (step %lld of %lld%s)\n", p.dir.c_str(), static_cast<long long>(p.step),
                 static_cast<long long>(spec.steps()), from.in_flight ? ", minibatches in flight rebuilt" : "");
  return from;
}

StageTraining training_of(const RunSpec& spec, const Model& model, const DataSplits& data, const Optimizer& optimizer) {
  StageTraining training;
  training.model = &model;
  training.train = data.train.get();
  training.batch = spec.batch;
  training.seed = spec.seed;
  training.optimizer = &optimizer;
  training.lr = spec.lr;
  training.loader_threads = spec.loader_threads;
  training.precision = spec.precision;
  training.clip_grad_norm = spec.clip_grad_norm;
  training.ties = tied_stages(model, spec.plan, spec.schedule.kind);
  training.loss_reporter = reporter_rank(spec);
  return training;
}

// Least common multiple of the replica counts: 1f1b-rr's weight versions
// line up across stages only at its multiples.
int64_t replica_count_lcm(const RunSpec& spec) {
  int64_t common = 1;
  for (const PlanStage& s : spec.plan.stages) common = std::lcm(common, version_stride(spec.schedule, s.replicas));
  return common;
}

// The evaluations inside one segment, at segment-local versions.
StageEvaluation evaluation_in(const Segment& seg, const std::vector<int64_t>& eval_points, int64_t common,
                              const RunSpec& spec, const DataSplits& data) {
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
  return ev;
}

[[noreturn]] void abort_interrupted(const RunSpec& spec, const Segment& seg, Transport& t) {
  t.abort(cat("interrupted (Ctrl-C) during steps ", seg.first, "..", seg.end - 1,
              !spec.checkpoint_dir.empty()
                  ? cat("; resume from the latest checkpoint with --resume ", spec.checkpoint_dir)
                  : std::string()),
          130);
  std::abort();  // not reached: GCC does not carry [[noreturn]] through the virtual call
}

void add_stats(ExecutorStats& total, const ExecutorStats& segment) {
  total.busy_s += segment.busy_s;
  total.busy_cpu_s += segment.busy_cpu_s;
  total.wait_s += segment.wait_s;
  total.data_s += segment.data_s;
  total.actions += segment.actions;
  total.peak_versions = std::max(total.peak_versions, segment.peak_versions);
  total.peak_context_bytes = std::max(total.peak_context_bytes, segment.peak_context_bytes);
  total.sent_bytes += segment.sent_bytes;
}

// Every leader writes its stage, then the reporter commits the step once
// all stage files exist.
// `versions`: a checkpoint inside the schedule, whose older versions are
// stored unless the pipeline is drained there.
void write_stage_files(int64_t step, const RunSpec& spec, const WorkerRole& role, const StageState& state,
                       const WeightVersionStore* versions, bool drained) {
  StageCheckpoint c{.stage = state.stage, .weights = &state.weights, .optimizer = &state.optimizer,
                    .updates = state.updates, .newest_version = versions ? versions->newest_version() : 0};
  if (versions && !drained)
    for (const auto& [v, w] : versions->older()) c.older.emplace(v, &w);
  if (role.leader) write_stage_checkpoint(spec.checkpoint_dir, step, c);
  else if (!c.older.empty()) write_replica_versions(spec.checkpoint_dir, step, state.stage, role.replica, c.older);
}

// Once every rank has written its files, the reporter commits the step.
void commit_when_written(int64_t step, const RunSpec& spec, const Model& model, const WorkerRole& role, bool drained,
                         Transport& t, ProgressBar& bar) {
  t.barrier();
  if (role.reporter) {
    nlohmann::json run = checkpoint_identity(spec, model);
    run["drained"] = drained;
    commit_checkpoint(spec.checkpoint_dir, step, run, spec.keep_checkpoints);
    bar.message(cat("checkpoint: ", spec.checkpoint_dir, "/step-", step));
  }
}

void write_checkpoint(int64_t step, const RunSpec& spec, const Model& model, const WorkerRole& role,
                      const StageState& state, const WeightVersionStore* versions, bool drained, Transport& t,
                      ProgressBar& bar) {
  write_stage_files(step, spec, role, state, versions, drained);
  commit_when_written(step, spec, model, role, drained, t, bar);
}

bool checkpoint_step(const RunSpec& spec, int64_t step) {
  return !spec.checkpoint_dir.empty() && spec.checkpoint_every > 0 &&
         (step % spec.checkpoint_every == 0 || step == spec.steps());
}

// At a segment's end.
void checkpoint_after(const Segment& seg, const RunSpec& spec, const Model& model, const WorkerRole& role,
                      const StageState& state, Transport& t, ProgressBar& bar) {
  if (checkpoint_step(spec, seg.end)) write_checkpoint(seg.end, spec, model, role, state, nullptr, true, t, bar);
}

// The checkpoints strictly inside a segment, as its schedule's versions.
std::vector<int64_t> checkpoint_versions_inside(const Segment& seg, const RunSpec& spec) {
  std::vector<int64_t> at;
  for (int64_t step = seg.first + 1; step < seg.end; ++step)
    if (checkpoint_step(spec, step)) at.push_back(step - seg.first);
  return at;
}

// Inside a segment: the checkpoints before its end, taken where the stage
// passes them without changing the schedule (flush: between batches, where
// the pipeline is drained; 1f1b-rr: with minibatches in flight).
void checkpoint_inside(const Segment& seg, const RunSpec& spec, const Model& model, const WorkerRole& role,
                       const StageState& state, Transport& t, ProgressBar& bar, StageExecutor& ex) {
  std::vector<int64_t> at = checkpoint_versions_inside(seg, spec);
  if (at.empty()) return;
  ex.set_checkpoints(std::move(at), [&, first = seg.first](int64_t version, const WeightVersionStore& versions) {
    write_checkpoint(first + version, spec, model, role, state, &versions, drained_between_steps(spec.schedule), t, bar);
  });
}

// interleaved-1f1b (flush, so drained between batches): every chunk writes
// its stage's files, run_chunks calling them in chunk order, and the last
// one commits; at the segment's end, the same for all of them.
void checkpoint_chunks_inside(const Segment& seg, const RunSpec& spec, const Model& model, const WorkerRole& role,
                              const std::vector<StageState>& states, Transport& t, ProgressBar& bar,
                              const std::vector<StageExecutor*>& chunks) {
  const std::vector<int64_t> at = checkpoint_versions_inside(seg, spec);
  if (at.empty()) return;
  for (size_t c = 0; c < chunks.size(); ++c)
    chunks[c]->set_checkpoints(at, [&, c, first = seg.first](int64_t version, const WeightVersionStore& versions) {
      write_stage_files(first + version, spec, role, states[c], &versions, true);
      if (c + 1 == states.size()) commit_when_written(first + version, spec, model, role, true, t, bar);
    });
}

void checkpoint_chunks_after(const Segment& seg, const RunSpec& spec, const Model& model, const WorkerRole& role,
                             const std::vector<StageState>& states, Transport& t, ProgressBar& bar) {
  if (!checkpoint_step(spec, seg.end)) return;
  for (const StageState& state : states) write_stage_files(seg.end, spec, role, state, nullptr, true);
  commit_when_written(seg.end, spec, model, role, true, t, bar);
}

// What one rank did, for the reporter's metrics line of it.
nlohmann::json rank_stats(const RunSpec& spec, const WorkerRole& role, const ExecutorStats& total, double wall,
                          double comm_cpu_s, double process_cpu_s, double resident_before) {
  const Allocator& alloc = allocator_for(spec.device);
  return {{"event", "rank"},
          {"rank", role.rank},
          {"stage", role.stage->index},
          {"busy_fraction", wall > 0 ? total.busy_s / wall : 0.0},
          {"busy_s", total.busy_s},
          {"busy_cpu_s", total.busy_cpu_s},
          {"comm_cpu_s", comm_cpu_s},
          {"process_cpu_s", process_cpu_s},
          {"wait_s", total.wait_s},
          {"data_s", total.data_s},
          {"actions", total.actions},
          {"peak_memory_bytes", alloc.peak_bytes()},
          {"peak_training_bytes", double(alloc.peak_bytes()) - resident_before},
          {"device", spec.device.str()},
          {"peak_weight_versions", total.peak_versions},
          {"peak_stashed_activation_bytes", total.peak_context_bytes},
          {"sent_bytes", total.sent_bytes},
          {"precision", to_string(spec.precision)}};
}

// Segment by segment, checkpointing between them; the stats of all.
struct TrainingOutcome {
  ExecutorStats total;
  std::vector<ActionSpan> events;  // trace spans, when tracing
  double wall_s = 0;
  double comm_cpu_s = 0;  // the communication threads' CPU over the same span
  double process_cpu_s = 0;  // every thread of the process over the same span
};

TrainingOutcome train_segments(const RunSpec& spec, const Model& model, const DataSplits& data,
                               const WorkerRole& role, std::vector<StageState>& states, StageTraining& training,
                               ResumeFrom& from, RunReporter& report, ProgressBar& bar, Transport& t) {
  ExecutorObserver* observer = role.reporter ? &report : nullptr;
  const std::vector<int64_t> eval_points = evaluation_points(spec, data.train->size());
  const int64_t common = replica_count_lcm(spec);
  t.barrier();  // everyone built its stage: start the common clock
  const double zero = steady_seconds(), comm_cpu_zero = comm_threads_cpu_s(), process_cpu_zero = process_cpu_seconds();
  const double trace_zero = spec.tracing() ? shared_trace_zero(t, zero) : zero;
  TrainingOutcome out;
  for (const Segment& seg : run_segments(spec, from.in_flight ? 0 : from.step)) {
    ScheduleOptions o = spec.schedule;
    o.minibatches = seg.end - seg.first;
    Schedule schedule(spec.plan, o);
    if (spec.schedule_lists) schedule.use_lists(spec.schedule_lists.get());  // one segment: the whole run
    training.first_item = seg.first;
    if (states.size() > 1) {
      // interleaved-1f1b: one executor per chunk, driven in the rank's order.
      std::vector<std::unique_ptr<StageExecutor>> chunks;
      std::vector<StageExecutor*> drive;
      const bool last_rank = role.reporter;
      const StageEvaluation ev = evaluation_in(seg, eval_points, common, spec, data);
      if (training.clip_grad_norm > 0) training.local_norms = std::make_shared<LocalNormBoard>();
      for (size_t c = 0; c < states.size(); ++c) {
        const bool last_stage = last_rank && c + 1 == states.size();
        chunks.push_back(std::make_unique<StageExecutor>(schedule, role.rank, states[c], training, t,
                                                         last_stage ? observer : nullptr, static_cast<int>(c)));
        if (ev.test && !ev.at_versions.empty()) chunks.back()->set_evaluation(ev);
        if (spec.tracing()) chunks.back()->enable_trace(trace_zero);
        drive.push_back(chunks.back().get());
      }
      checkpoint_chunks_inside(seg, spec, model, role, states, t, bar, drive);
      report.set_segment_start(seg.first);
      if (!run_chunks(schedule, role.rank, drive, &Transport::stop_requested)) {
        bar.finish();
        abort_interrupted(spec, seg, t);
      }
      for (StageExecutor* ex : drive) {
        add_stats(out.total, ex->stats());
        out.events.insert(out.events.end(), ex->trace().begin(), ex->trace().end());
      }
      checkpoint_chunks_after(seg, spec, model, role, states, t, bar);
      continue;
    }
    StageState& state = states.front();
    StageExecutor ex(schedule, role.rank, state, training, t, observer);
    const StageEvaluation ev = evaluation_in(seg, eval_points, common, spec, data);
    if (ev.test && !ev.at_versions.empty()) ex.set_evaluation(ev);
    if (spec.tracing()) ex.enable_trace(trace_zero);
    checkpoint_inside(seg, spec, model, role, state, t, bar, ex);
    if (from.in_flight && seg.first == 0) ex.resume_at(from.step, std::move(from.older));
    report.set_segment_start(seg.first);
    if (!ex.run(&Transport::stop_requested)) {
      bar.finish();
      abort_interrupted(spec, seg, t);
    }
    add_stats(out.total, ex.stats());
    out.events.insert(out.events.end(), ex.trace().begin(), ex.trace().end());
    checkpoint_after(seg, spec, model, role, state, t, bar);
  }
  out.wall_s = steady_seconds() - zero;
  out.comm_cpu_s = comm_threads_cpu_s() - comm_cpu_zero;
  out.process_cpu_s = process_cpu_seconds() - process_cpu_zero;
  bar.finish();
  return out;
}

// Not the reporter: stats, trace and weights go to the reporter.
// Whether --save writes one shard per stage (models/sharded_weights.h).
bool sharded_save(const RunSpec& spec, const Model& model) {
  return save_is_sharded(spec.save, int(spec.plan.stages.size()), uint64_t(model.parameter_count()) * sizeof(float));
}

// A stage leader's --save shards: its own stages' tensors, written here.
void save_own_shards(const RunSpec& spec, const Model& model, const std::vector<StageState>& states) {
  const std::string index = weight_index_path(spec.save);
  for (const StageState& state : states)
    save_safetensors(weight_shard_path(index, state.stage, int(spec.plan.stages.size())), state.weights.named_tensors(),
                     {{"model", model.name}, {"stage", std::to_string(state.stage)}, {"steps", std::to_string(spec.steps())}});
}

void send_results(const RunSpec& spec, const Model& model, const WorkerRole& role, const nlohmann::json& mine,
                  const std::vector<ActionSpan>& events, const std::vector<StageState>& states, Transport& t,
                  int reporter) {
  // Shards are written before the results go: the reporter, once it has
  // every rank's, writes the index over complete shards.
  if (!spec.save.empty() && role.leader && sharded_save(spec, model)) save_own_shards(spec, model, states);
  send_text(t, reporter, mine.dump());
  if (spec.tracing()) send_text(t, reporter, trace_events_json(events).dump());
  if (!spec.save.empty() && role.leader && !sharded_save(spec, model))
    for (const StageState& state : states) send_named_tensors(t, reporter, state.weights.named_tensors());
}

// The reporter: every rank's stats line (and trace), in rank order.
struct GatheredResults {
  std::vector<nlohmann::json> per_rank, traces;
};

GatheredResults gather_results(const RunSpec& spec, const WorkerRole& role, const nlohmann::json& mine,
                               const std::vector<ActionSpan>& events, Transport& t) {
  GatheredResults g;
  g.per_rank.resize(static_cast<size_t>(t.world_size()));
  g.traces.resize(g.per_rank.size());
  for (int r = 0; r < t.world_size(); ++r) {
    if (r == role.rank) {
      g.per_rank[r] = mine;
      if (spec.tracing()) g.traces[r] = trace_events_json(events);
      continue;
    }
    g.per_rank[r] = nlohmann::json::parse(recv_text(t, r));
    if (spec.tracing()) g.traces[r] = nlohmann::json::parse(recv_text(t, r));
  }
  return g;
}

// The reporter, for a sharded save: its own shards and the index, whose
// names and sizes come from the model (every stage's layers), not from
// the other stages' tensors.
void save_weight_index(const RunSpec& spec, const Model& model, const WorkerRole& role,
                       const std::vector<StageState>& states) {
  if (role.leader) save_own_shards(spec, model, states);
  const std::string index = weight_index_path(spec.save);
  std::map<std::string, std::string> file_of;
  uint64_t total = 0;
  const int shards = int(spec.plan.stages.size());
  for (const PlanStage& s : spec.plan.stages)
    for (int i = s.first_layer; i <= s.last_layer; ++i) {
      const Layer& l = model.layer(i);
      for (const auto& specs : {l.param_specs(), l.buffer_specs()})
        for (const ParamSpec& p : specs) {
          file_of[stored_tensor_name(i, p.name)] = weight_shard_path(index, s.index, shards);
          total += uint64_t(shape_numel(p.shape)) * sizeof(float);
        }
    }
  write_weight_index(index, file_of, total);
}

// The reporter: every stage's weights, from their leaders, in one file.
void save_merged_weights(const RunSpec& spec, const Model& model, const WorkerRole& role,
                         const std::vector<StageState>& states, Transport& t) {
  NamedTensors all;
  const Schedule placed = placement(spec);
  for (const PlanStage& s : spec.plan.stages) {
    // Stages in order: a rank's chunks arrive in the order it sends them.
    const StagePlace at = placed.place(s.index);
    const int holder = placed.chunks() > 1 ? at.worker : s.ranks.front();
    NamedTensors part = holder == role.rank ? states[static_cast<size_t>(at.chunk)].weights.named_tensors()
                                            : recv_named_tensors(t, holder);
    all.insert(all.end(), part.begin(), part.end());
  }
  save_safetensors(spec.save, all,
                   {{"model", model.name}, {"spec", model.spec.dump()}, {"steps", std::to_string(spec.steps())}});
}

void write_trace(const RunSpec& spec, const GatheredResults& g, Transport& t) {
  std::vector<int> stage_of(g.per_rank.size());
  for (int r = 0; r < t.world_size(); ++r) stage_of[r] = stages_of(spec, r).front()->index;
  write_chrome_trace(spec.trace, g.traces, stage_of);
}

// Why the plan's per-stage memory says nothing about this run, or "": it is
// 1f1b-rr's with stashed weights, at the profiled batch, for training alone.
std::string memory_not_comparable(const RunSpec& spec, bool evaluated) {
  const Plan& plan = spec.plan;
  if (std::string why = plan_memory_differs(plan, spec.schedule); !why.empty()) return why;
  const int64_t planned_batch = plan.batch > 0 ? plan.batch : plan.profile.batch_size;
  if (planned_batch > 0 && spec.samples_per_step() != planned_batch)
    return cat("the plan's figure is for batch ", planned_batch, ", this run's is ", spec.samples_per_step());
  if (evaluated) return "the peak includes test-set evaluation; --no-eval measures training alone";
  return "";
}

// One line per rank: how busy it was and its peak memory, against the plan's
// where that figure describes this run.
void print_rank_lines(const RunSpec& spec, const std::vector<nlohmann::json>& per_rank, bool evaluated) {
  const Plan& plan = spec.plan;
  const std::string not_comparable = memory_not_comparable(spec, evaluated);
  bool planned = false;
  const Schedule placed = placement(spec);
  for (const auto& line : per_rank) {
    const PlanStage& st = plan.stages[line["stage"].get<int>()];
    const double peak = line["peak_training_bytes"].get<double>();
    const double busy = line["busy_fraction"].get<double>(), busy_s = line["busy_s"].get<double>();
    // Several stages per worker (interleaved-1f1b, the V shapes): all of them.
    std::string stages = cat("stage ", st.index);
    if (placed.chunks() > 1) {
      stages = "stages ";
      for (int c = 0; c < placed.chunks(); ++c) stages += cat(c ? "," : "", placed.stage_of(line["rank"].get<int>(), c));
    }
    std::printf("  rank %d (%s): busy %.0f%%", line["rank"].get<int>(), stages.c_str(), 100.0 * busy);
    // On a CPU, CPU time below busy time: the rank waited for a core inside
    // its actions (more workers than cores, or other programs). A GPU
    // rank's host thread mostly waits for its device, so it says nothing.
    if (line["device"].get<std::string>() == "cpu" && busy_s > 0)
      std::printf(" (on a core %.0f%%)", 100.0 * busy * line["busy_cpu_s"].get<double>() / busy_s);
    std::printf(", peak memory %s beyond the data set", bytes_text(peak).c_str());
    if (st.memory_bytes > 0 && not_comparable.empty())
      std::printf(" (plan: %s, %+.0f%%)", bytes_text(double(st.memory_bytes)).c_str(),
                  100 * (peak / double(st.memory_bytes) - 1));
    planned = planned || st.memory_bytes > 0;
    const int versions = line["peak_weight_versions"].get<int>();
    std::printf(", up to %s\n", counted(versions, "weight version", "weight versions").c_str());
  }
  if (planned && !not_comparable.empty())
    std::printf("  (peak memory not compared with the plan's: %s)\n", not_comparable.c_str());
}

// Why the plan's time per minibatch says nothing about this run's steady
// state, or "".
std::string time_not_comparable(const RunSpec& spec, const RunReporter& report, double steady) {
  const Plan& plan = spec.plan;
  // A flush schedule's prediction holds for the microbatches and virtual
  // stages it was made for (plan.json records them).
  if (std::string why = plan_time_differs(plan, spec.schedule); !why.empty()) return why;
  const int64_t planned_batch = plan.batch > 0 ? plan.batch : plan.profile.batch_size;
  if (planned_batch > 0 && spec.samples_per_step() != planned_batch)
    return cat("the plan predicts batch ", planned_batch, ", this run's is ", spec.samples_per_step());
  if (steady <= 0) return "too few steps for a steady state (8 or more give one)";
  if (const int n = report.evaluations_in_steady_window(); n > 0)
    return cat(n, " test-set evaluation", n > 1 ? "s" : "", " ran inside the steady window (--no-eval, or fewer "
               "--eval-every, measures training alone)");
  return "";
}

// The run's summary: printed, and its metrics line returned.
nlohmann::json print_summary(const RunSpec& spec, const RunReporter& report, const WorkerSummary& out,
                             int64_t steps, int world_size) {
  const Plan& plan = spec.plan;
  nlohmann::json summary = {{"event", "summary"},
                            {"steps", steps},
                            {"seconds", out.seconds},
                            {"samples_per_s", out.samples_per_s},
                            {"workers", world_size},
                            {"config", plan.config}};
  for (const auto& [key, value] : schedule_fields(spec.schedule)) summary[key] = value;
  std::printf("trained %lld steps on %d workers (plan %s, %s) in %.1f s: %.0f samples/s",
              static_cast<long long>(steps), world_size, plan.config.c_str(),
              schedule_summary(spec.schedule, spec.batch).c_str(), out.seconds, out.samples_per_s);
  if (!report.evals().empty()) {
    const EvalResult& e = report.evals().back().second;
    std::printf(", test loss %.4f, test accuracy %.2f%%", e.loss, 100.0 * e.accuracy);
    summary["test_loss"] = e.loss;
    summary["test_accuracy"] = e.accuracy;
  }
  std::printf("\n");
  const double measured = steps > 0 ? out.seconds / double(steps) : 0;
  summary["measured_time_per_minibatch_s"] = measured;
  const double steady = report.steady_seconds_per_step();
  if (steady > 0) {
    summary["steady_time_per_minibatch_s"] = steady;
    summary["steady_samples_per_s"] = double(spec.samples_per_step()) / steady;
  }
  if (plan.time_per_minibatch_s > 0) {
    // The prediction is a steady state: compared with the middle half of
    // the run only, and only when that measures what was predicted.
    const double predicted = plan.time_per_minibatch_s;
    const std::string why_not = time_not_comparable(spec, report, steady);
    std::printf("time per minibatch: measured %s over the run (start-up and drain included)",
                seconds_text(measured).c_str());
    if (steady > 0) std::printf(", %s in its middle half", seconds_text(steady).c_str());
    if (why_not.empty()) {
      std::printf("; predicted %s (%s, steady state): %+.1f%%\n", seconds_text(predicted).c_str(),
                  to_string(plan.predicted_by), 100 * (steady / predicted - 1));
      summary["predicted_time_per_minibatch_s"] = predicted;
    } else {
      std::printf("\n  (not compared with the plan's prediction: %s)\n", why_not.c_str());
    }
  }
  return summary;
}

void print_output_files(const RunSpec& spec, const Model& model) {
  if (!spec.save.empty() && sharded_save(spec, model))
    std::printf("saved weights to %s (index of %zu shards, one per stage: %s ...)\n", weight_index_path(spec.save).c_str(),
                spec.plan.stages.size(),
                weight_shard_path(weight_index_path(spec.save), 0, int(spec.plan.stages.size())).c_str());
  else if (!spec.save.empty())
    std::printf("saved weights to %s\n", spec.save.c_str());
  if (!spec.metrics.empty()) std::printf("metrics: %s\n", spec.metrics.c_str());
  if (!spec.trace.empty()) std::printf("trace: %s (open in https://ui.perfetto.dev or chrome://tracing)\n", spec.trace.c_str());
  if (!spec.svg.empty()) std::printf("timeline: %s\n", spec.svg.c_str());
}

}  // namespace

static WorkerSummary run_worker(const RunSpec& spec, const Model& model, const DataSplits& data, Transport& t);

WorkerSummary run_pipeline_worker(const RunSpec& spec, const Model& model, const DataSplits& data, Transport& inner) {
  // A V-shaped schedule sends between two stages of one worker.
  LoopbackTransport t(inner);
  return run_worker(spec, model, data, t);
}

static WorkerSummary run_worker(const RunSpec& spec, const Model& model, const DataSplits& data, Transport& t) {
  const WorkerRole role = role_of(spec, t.rank());
  const int reporter = reporter_rank(spec);
  // What the plan's memory counts excludes the data set, loaded already.
  const double resident_before = double(allocator_for(spec.device).current_bytes());
  // The command applied the process's settings (core/compute_settings.h).
  if (compute_threads() != spec.threads)
    throw RuntimeFailure(cat("a worker of ", spec.threads, " compute threads in a process that computes with ",
                             compute_threads(), ": apply_compute_settings with the run's settings first"));
  t.set_timeout(spec.timeout_s);

  auto optimizer = make_optimizer(spec.optimizer);
  std::vector<StageState> states;
  for (const PlanStage* st : stages_of(spec, role.rank)) {
    states.push_back(make_stage_state(model, st->index, st->first_layer, st->last_layer, spec.seed, *optimizer,
                                      spec.device));
    states.back().recompute = recompute_flags(*st);
  }
  load_initial_weights(spec, model, states);
  ResumeFrom from = resume_if_asked(spec, model, role, states);
  const int64_t start_step = from.step;

  MetricsWriter metrics(role.reporter ? spec.metrics : "", start_step);
  ProgressBar bar(spec.steps(), role.reporter && spec.progress_bar);
  RunReporter report(metrics, &bar, spec.steps(), spec.steps_per_epoch(data.train->size()),
                     spec.schedule.microbatches, spec.samples_per_step(), spec.log_every);
  report.set_learning_rates(spec.lr);
  StageTraining training = training_of(spec, model, data, *optimizer);
  const TrainingOutcome trained =
      train_segments(spec, model, data, role, states, training, from, report, bar, t);

  const nlohmann::json mine = rank_stats(spec, role, trained.total, trained.wall_s, trained.comm_cpu_s, trained.process_cpu_s,
                                         resident_before);
  WorkerSummary out;
  if (!role.reporter) {
    send_results(spec, model, role, mine, trained.events, states, t, reporter);
    return out;
  }
  out.reporter = true;
  out.seconds = report.seconds();
  // Every sample of every step, whichever replica trained it.
  const int64_t steps = spec.steps() - start_step;
  out.samples_per_s = out.seconds > 0 ? double(steps * spec.samples_per_step()) / out.seconds : 0;
  const GatheredResults gathered = gather_results(spec, role, mine, trained.events, t);
  for (const auto& line : gathered.per_rank) metrics.write(line);
  if (!spec.save.empty() && sharded_save(spec, model)) save_weight_index(spec, model, role, states);
  else if (!spec.save.empty()) save_merged_weights(spec, model, role, states, t);
  if (!spec.trace.empty()) write_trace(spec, gathered, t);
  if (!spec.svg.empty()) write_run_timeline_svg(spec.svg, spec.plan, spec.schedule, gathered.traces, spec.svg_minibatches);
  const nlohmann::json summary = print_summary(spec, report, out, steps, t.world_size());
  print_rank_lines(spec, gathered.per_rank, !report.evals().empty());
  metrics.write(summary);
  print_output_files(spec, model);
  std::fflush(stdout);
  return out;
}

}  // namespace pd

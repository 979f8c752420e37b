#pragma once
// StageExecutor: one worker of a pipeline (docs/design.md §6, §8).
//
// It follows the worker's action list from the schedule, one action at a
// time, over a Transport: receives are posted as soon as they enter a short
// look-ahead window so the data arrives while the worker computes; sends
// never block; a replicated stage all-reduces its gradients in buckets
// launched during the backward pass that completes a round (as PyTorch DDP
// does), and the AllReduce action only waits for them.
//
// The same class runs under MPI (run(): block when the next action cannot
// proceed) and inside the single-process reference (step(): report
// Blocked and let the caller run another worker), so both execute exactly
// the same arithmetic.
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/optimizer.h"
#include "models/dataset.h"
#include "models/layer_range.h"
#include "models/loader.h"
#include "runtime/comm/gradient_buckets.h"
#include "runtime/comm/transport.h"
#include "runtime/schedule/schedule.h"
#include "runtime/tied_gradients.h"
#include "runtime/trainer.h"
#include "runtime/weight_versions.h"

namespace pd {

// What a stage owns across the run (and what a checkpoint saves).
struct StageState {
  int stage = 0, first_layer = 0, last_layer = 0;
  ParameterStore weights;   // newest version
  OptimizerState optimizer;
  int64_t updates = 0;      // optimizer steps taken (indexes the LR schedule)
  // Per layer of the range: its activations are recomputed before its
  // backward (the plan stage's recompute_layers; RangeContext::recompute).
  std::vector<bool> recompute;
};
// Weights, gradients and optimizer state live on `device` (a GPU: the
// process's, initialised before).
StageState make_stage_state(const Model& m, int stage, int first_layer, int last_layer, uint64_t seed,
                            const Optimizer& optimizer, Device device = Device::cpu());

// --clip-grad-norm's squared norms of the stages one process runs
// (interleaved-1f1b's chunks), handed between their executors without
// messages (a transport does not send to its own rank).
class LocalNormBoard {
 public:
  // A stage's squares at optimizer step `step`; the stage's entry of two
  // steps before goes (every sibling has read it by then).
  void put(int64_t step, int stage, std::vector<double> squares) {
    entries_.erase({step - 2, stage});
    entries_[{step, stage}] = std::move(squares);
  }
  const std::vector<double>* find(int64_t step, int stage) const {
    auto it = entries_.find({step, stage});
    return it == entries_.end() ? nullptr : &it->second;
  }

 private:
  std::map<std::pair<int64_t, int>, std::vector<double>> entries_;
};

// Training settings shared by every stage.
struct StageTraining {
  const Model* model = nullptr;
  const Dataset* train = nullptr;
  int64_t batch = 64;           // minibatch size (microbatch size for flush schedules)
  uint64_t seed = 0;
  const Optimizer* optimizer = nullptr;
  LrSchedule lr;                // base_lr and total_steps filled in
  int64_t first_item = 0;       // global minibatch (flush: batch) of the schedule's item 0
  size_t bucket_bytes = GradientBuckets::kDefaultBucketBytes;  // all-reduce bucket size
  int lookahead = 16;           // actions whose receives are posted early
  // First stage: threads that fetch the inputs of the forwards in the
  // look-ahead window ahead of them (0: each forward fetches its own).
  int loader_threads = 0;
  Precision precision = Precision::FP32;  // --precision: StepInfo::precision and the wire format
  // --clip-grad-norm (0: off): at each optimizer step replica 0 of every
  // stage sends its gradients' squared norms to every other stage's
  // workers, and each scales by the whole model's norm (core/optimizer.h).
  float clip_grad_norm = 0;
  // Where a process runs several stages (interleaved-1f1b, and --reference),
  // clipping hands their norms over here.
  std::shared_ptr<LocalNormBoard> local_norms;
  // Tie groups across this run's stages (runtime/tied_gradients.h; null: none):
  // every optimizer step sums their gradients first. One per process.
  std::shared_ptr<TiedStages> ties;
  // MPI runs: the rank whose observer reports the losses (the last stage's
  // first replica). The last stage's other replicas send it theirs, so its
  // metrics and progress bar see every step. -1 (the reference, where every
  // executor shares the observer): each reports its own.
  int loss_reporter = -1;
};

// Test-set evaluation through the pipeline: when a stage's weights reach
// one of `at_versions` (minibatches absorbed, schedule-local), replica 0 of
// every stage forwards the test set in chunks, stage to stage.
struct StageEvaluation {
  const Dataset* test = nullptr;
  int64_t batch = 500;
  std::vector<int64_t> at_versions;  // ascending
};

class ExecutorObserver {
 public:
  virtual ~ExecutorObserver() = default;
  // Last stage: the loss of one minibatch (flush: one microbatch).
  // `step` is the global minibatch (flush: batch) index.
  virtual void on_loss(int64_t step, int microbatch, const StepLoss& loss) {}
  // Last stage, replica 0: an evaluation finished (version: schedule-local).
  virtual void on_eval(int64_t version, const EvalResult& result) {}
  // Last stage, replica 0, with clipping on: a step's gradient norm before
  // clipping and the factor applied (1: none); `step` as in on_loss.
  virtual void on_grad_norm(int64_t step, double norm, float factor) {}
};

// One timed interval of the run, for the Chrome trace and busy fractions.
struct ActionSpan {
  const char* name;   // "F", "B", "W", "step", "allreduce", "wait", "eval"
  int64_t item = -1;  // minibatch (flush: batch * M + microbatch), -1 if none
  double start_s = 0, end_s = 0;  // seconds on the run clock
  // CPU seconds the executing thread got during the span: below end - start
  // when the thread waited for a core (more workers than cores) or slept.
  double cpu_s = 0;
};

struct ExecutorStats {
  double busy_s = 0;       // forward, backward, optimizer, evaluation
  double busy_cpu_s = 0;   // CPU the thread got in them (busy_s less time without a core)
  double wait_s = 0;       // blocked on a peer
  double data_s = 0;       // of busy_s, fetching minibatches (first stage: inputs, last: labels)
  int peak_versions = 1;   // weight versions held at once
  size_t peak_context_bytes = 0;  // activations stashed for backward
  size_t sent_bytes = 0;  // activations and gradients handed to the transport (runtime/wire_format.h)
  size_t tied_bytes = 0;  // tied gradients sent to other stages' workers (runtime/tied_gradients.h)
  int64_t actions = 0;
};

class StageExecutor {
 public:
  enum class Progress { Executed, Blocked, Done };

  // `chunk`: interleaved-1f1b, which of the rank's stages this executor
  // runs (stage rank + chunk * workers); it follows the actions of that
  // chunk and every optimizer step. run_chunks() drives a rank's executors.
  StageExecutor(const Schedule& schedule, int rank, StageState& state, const StageTraining& training,
                Transport& transport, ExecutorObserver* observer = nullptr, int chunk = 0);

  void set_evaluation(const StageEvaluation& e) { eval_ = e; }
  // Runs the evaluations the last optimizer step made due (run_chunks calls
  // it on a rank's chunks in chunk order, so that every rank forwards its
  // stages in the order the test set flows through them).
  void run_due_evaluations() {
    if (eval_due_) maybe_evaluate();
  }
  // The same for checkpoints (set_checkpoints), before the evaluations as step() does.
  void run_due_checkpoints() {
    if (checkpoint_due_) maybe_checkpoint();
  }
  // With clipping, when the next action is the optimizer step: averages the
  // gradients and hands this stage's squared norms to the other stages, so
  // that run_chunks can do it for all of a rank's chunks before any waits.
  // `wait_for_ties`: first waits for the other processes' tied gradients
  // (every chunk of this rank has handed its own over by then).
  void prepare_pending_step(bool wait_for_ties = false);
  // Calls `write` once the stage's weights reach each of `at_versions`
  // (schedule-local, ascending), after the optimizer step that made it and
  // the sends that follow it, before the next compute or receive: a point
  // where the pipeline's other stages can reach theirs (a barrier there
  // cannot deadlock) and nothing of the schedule is changed.
  using CheckpointWriter = std::function<void(int64_t version, const WeightVersionStore& versions)>;
  void set_checkpoints(std::vector<int64_t> at_versions, CheckpointWriter write) {
    checkpoint_at_ = std::move(at_versions);
    write_checkpoint_ = std::move(write);
  }
  // Records TraceEvents (times relative to `clock_zero`, a steady_clock time in s).
  void enable_trace(double clock_zero) { trace_ = true; clock_zero_ = clock_zero; }

  // Continues a 1f1b-rr run from a checkpoint taken inside this schedule
  // when the stage reached `version` (set_checkpoints' point), before any
  // step(): the stage's weights, buffers and optimizer state are the
  // checkpoint's, `older` the versions it held. Skips the actions before
  // that point and rebuilds what the minibatches then in flight hold by
  // running their forwards again on their stashed versions (same dropout
  // keys, so the same bits; BatchNorm statistics are put back after), the
  // activations the next stage still needs sent to it again. Every stage of
  // the pipeline must resume at the same version.
  void resume_at(int64_t version, std::map<int64_t, ParameterStore> older);

  // Executes the next action if it can proceed without waiting.
  Progress step();
  // Blocks (with the transport's timeout) until the next action can proceed.
  void wait_until_ready();
  // step() until Done, waiting whenever blocked: the MPI worker loop.
  // `should_stop` is polled between actions (Ctrl-C); true ends the loop early.
  bool run(bool (*should_stop)() = nullptr);

  const ExecutorStats& stats() const { return stats_; }
  const std::vector<ActionSpan>& trace() const { return events_; }
  const WeightVersionStore& versions() const { return versions_; }
  // (minibatch, version) of every forward, for tests of the weight policies.
  const std::vector<std::pair<int64_t, int64_t>>& forward_versions() const { return forward_versions_; }
  void record_forward_versions(bool on) { record_versions_ = on; }

 private:
  struct Pending {  // what the stage holds for an item between actions
    Tensor input;        // received activation
    Tensor output;       // activation to send
    Tensor grad_in;      // received gradient (or the loss gradient on the last stage)
    Tensor grad_out;     // gradient to send
    RangeContext ctx;    // forward's saved tensors
    int64_t version = -1;
    bool pinned = false;
    int64_t meta = 0;    // version tag carried with the activation
    bool awaiting_w = false;  // zb-h1: B ran, ctx is kept for W
  };

  void fill_window();
  bool ready(const Action& a);
  void execute(const Action& a);
  void forward(const Action& a);
  void backward(const Action& a);
  void backward_weight(const Action& a);
  void all_reduce(const Action& a);
  void optimizer_step(const Action& a);
  // The optimizer step's first half, run once the step is next: the
  // gradients averaged and, with clipping, this stage's squared norms sent
  // to the other stages' workers and theirs awaited (norms_arrived).
  void prepare_step(const Action& a);
  bool exchanges_norms() const { return training_.clip_grad_norm > 0 && schedule_.stages() > 1; }
  // Stage t runs in this process: its norms come from training_.local_norms.
  bool local_stage(int t) const { return schedule_.ranks(t).front() == rank_ && training_.local_norms; }
  bool norms_arrived();
  void clip_gradients();
  // A loss for the observer: here, or sent to the loss reporter's rank.
  void report_loss(int64_t step, int microbatch, const StepLoss& loss);
  bool sends_losses() const {
    return last_stage_ && training_.loss_reporter >= 0 && rank_ != training_.loss_reporter;
  }
  bool gathers_losses() const {
    return last_stage_ && replicas_ > 1 && rank_ == training_.loss_reporter && observer_ != nullptr;
  }
  // The reporter: hands the other replicas' arrived losses to the observer;
  // `until_closed`: waits for all of them (each replica closes with a marker).
  void receive_losses(bool until_closed);
  void close_losses();
  bool round_completes_after(size_t window_index) const;
  Tensor input_of(const Action& a, Pending& p);
  // The item's samples; *epoch: the epoch they are drawn in (keys augmentation).
  std::vector<int64_t> sample_indices(int64_t batch_or_minibatch, int microbatch, int64_t* epoch) const;
  int64_t item_key(const Action& a) const { return a.minibatch * schedule_.items_per_batch() + a.microbatch; }
  int64_t global_step(const Action& a) const { return training_.first_item + a.minibatch; }
  StepInfo training_step(const Action& a) const;
  int wire_tag(int64_t tag) const { return static_cast<int>(tag % tag_modulus_); }
  int64_t oldest_needed() const;
  void maybe_evaluate();
  void maybe_checkpoint();
  void rebuild_in_flight(const std::map<int64_t, Action>& forwards, const std::map<int64_t, Action>& receives,
                         const std::map<int64_t, Action>& sends, int64_t version);
  void evaluate(int64_t version);
  void pack_stash(RangeContext& ctx) const;
  void unpack_stash(RangeContext& ctx) const;
  // Sends t in the run's wire format, counting its bytes.
  void send(const Tensor& t, int peer, int tag, int64_t meta);
  void reap_sends(bool all);
  struct SpanStart {
    double wall_s, cpu_s;
  };
  double now() const;
  SpanStart span_start() const;
  void record(const char* name, int64_t item, SpanStart start);

  bool mine(const Action& a) const;
  const Schedule& schedule_;
  const int rank_, chunk_, stage_, replica_, replicas_;
  const bool first_stage_, last_stage_;
  StageState& state_;
  StageTraining training_;
  Transport& transport_;
  ExecutorObserver* observer_;
  SampleOrder order_;
  ActionCursor cursor_;
  bool cursor_done_ = false;
  std::deque<Action> window_;
  std::map<std::pair<bool, int64_t>, Request> recvs_;  // (gradient?, item) -> posted receive
  std::map<int64_t, Pending> pending_;
  std::vector<Request> sends_;
  WeightVersionStore versions_;
  ParameterStore grads_;
  std::shared_ptr<CommGroup> group_;
  std::unique_ptr<GradientBuckets> buckets_;  // a replicated stage's gradient all-reduce
  bool round_open_ = false;                  // its AllReduce ran, its step has not yet
  bool step_prepared_ = false;               // prepare_step ran, the step has not yet
  bool averaged_ = false;                    // prepare_step's first half ran (ties sent)
  std::unique_ptr<TiedGradientExchange> ties_;
  std::vector<double> norm_squares_;         // clipping: this stage's, then every stage's
  std::vector<Request> norm_recvs_;          // the other stages' squared norms
  struct LossSource {
    int rank;
    Request next;  // its next loss message
    bool closed = false;
  };
  std::vector<LossSource> loss_sources_;  // gathers_losses(): the stage's other replicas
  bool losses_closed_ = false;
  void finish_open_round();                  // waits for the round's all-reduce
  int64_t forwards_done_ = 0;
  int tag_modulus_ = 1;
  StageEvaluation eval_;
  size_t next_eval_ = 0;
  bool eval_due_ = false;
  std::vector<int64_t> checkpoint_at_;
  size_t next_checkpoint_ = 0;
  bool checkpoint_due_ = false;
  CheckpointWriter write_checkpoint_;
  bool trace_ = false, record_versions_ = false;
  double clock_zero_ = 0;
  std::vector<ActionSpan> events_;
  std::vector<std::pair<int64_t, int64_t>> forward_versions_;
  ExecutorStats stats_;
  // Last: its threads read the members above, so it goes first.
  std::unique_ptr<PrefetchPool> prefetch_;
};

// interleaved-1f1b: runs one rank's executors (one per chunk, in chunk
// order) through the rank's whole action list, each action by the executor
// of its chunk and every optimizer step by all; `should_stop` as in run().
bool run_chunks(const Schedule& schedule, int rank, const std::vector<StageExecutor*>& chunks,
                bool (*should_stop)() = nullptr);

// Tags above the schedule's: evaluation chunks, end-of-run gathers, the
// clipping norms and the losses for the reporter.
inline int eval_tag(const Transport& t) { return t.max_tag(); }
inline int gather_tag(const Transport& t) { return t.max_tag() - 1; }
inline int loss_tag(const Transport& t) { return t.max_tag() - 2; }  // losses sent to the reporter
// --clip-grad-norm's exchange, one tag per receiving chunk (a rank's chunks
// receive from the same ranks).
inline int norm_tag(const Transport& t, int chunk) { return t.max_tag() - 3 - chunk; }

}  // namespace pd

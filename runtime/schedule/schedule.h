#pragma once
// Per-worker action lists for pipeline-parallel training (docs/design.md §6).
//
// A Schedule is built once from a plan and options; it holds O(workers)
// state. Each worker's actions come from an ActionCursor that yields them
// one at a time in execution order, so neither the runtime nor the
// simulator ever stores minibatches x workers actions (actions() gives the
// whole list when that is convenient, e.g. in tests or for printing).
//
// Routing. Stage s has r_s replicas (plan.stages[s].ranks). In 1f1b-rr,
// minibatch m runs on replica m mod r_s of every stage, so replica
// (m mod r_s) of stage s sends m's activation to replica (m mod r_{s+1}) of
// stage s+1 and the gradient comes back the same way. In the flush
// schedules, microbatch i of every batch runs on replica i mod r_s.
//
// Order. A worker runs a forward whenever it has one left and fewer than
// its in-flight limit minibatches are between F and B, otherwise a
// backward. The limit is warmup(s) + 1 for 1f1b-rr and 1f1b-flush with
// warmup(s) = (R - 1 - sum_{t<s} r_t) div r_s, and unlimited for gpipe
// (all forwards of a batch, then all backwards). Backwards run in the
// order of their forwards.
//
// Versions. A weight version is the number of minibatches the stage's
// weights have absorbed (version 0: the initial weights).
//  - 1f1b-rr, unreplicated stage: every B is followed by an OptimizerStep
//    that creates version (previous + 1).
//  - 1f1b-rr, replicated stage (r > 1): update round j gathers the j-th
//    backward of every replica: each replica starts AllReduce(round j)
//    right after its backward j (non-blocking: MPI_Iallreduce / NCCL on a
//    side stream) and runs OptimizerStep(round j) - wait for the sum, then
//    apply it - just before its backward j+1 (after its last backward for
//    the last round). Deferring the step by one backward lets a replica
//    keep computing forwards while the others - each a minibatch behind -
//    finish their backward j; stepping right after backward j makes every
//    replica wait for the slowest each round (the simulator shows 0.045 s
//    instead of 0.0325 s per minibatch on a balanced 2-1-1 with 0.03 s
//    stages). The forwards in between run
//    on the version before round j (update_lag(stage) = 1). The round
//    absorbs gradient_count = min(r, M - j*r) minibatches (a replica that
//    has no j-th minibatch - only possible in the last round - still takes
//    part with a zero gradient, after its last backward). So after round j
//    every replica holds version min(M, (j+1)*r): versions of a replicated
//    stage are multiples of r, identical on all replicas.
//  - gpipe / 1f1b-flush / zb-h1 / interleaved-1f1b: `minibatch` in an action is the batch index b and
//    `microbatch` the microbatch index i within it; each batch ends with one
//    (AllReduce +) OptimizerStep absorbing the whole batch, so version counts
//    batches: every F and B of batch b uses version b and the step of batch
//    b creates version b + 1 (gradient_count = M microbatches).
// Zero bubble (zb-h1, Qi et al. ICLR 2024): the backward is split into B
// (input gradient, sent upstream at once) and W (weight gradient, local).
// Stage s runs min(S - s, M) warm-up forwards, then for j = 0..M-1:
// B(j), W(j - s) when j >= s, F(j + S - s) when there is one; then the W's
// left. Between F and B stage s holds at most S - s microbatches (1F1B's
// bound), between F and W at most S (stage 0's 1F1B bound: the pipeline's
// peak). Delaying stage s's W's by s microbatches lets the B's run down the
// pipeline back to back and fills the drain with W's: on uniform stages
// with F = B = W the bubble is (S-1)/(3M+S-1), a third of 1F1B's time.
// Unreplicated plans only.
//
// Interleaved 1F1B (Narayanan et al. SC21, Megatron-LM): the plan has S*v
// unreplicated stages, run by S workers; stage k runs on worker k mod S as
// its chunk k div S (Action.chunk), so a microbatch crosses every worker v
// times. Worker w's order is Megatron's: forward number k (0..vM-1) is
// microbatch (k div Sv)*S + k mod S of chunk (k div S) mod v, backward
// number k the same microbatch of chunk v-1-(k div S) mod v; min(vM,
// 2(S-1-w) + (v-1)S) warm-up forwards (all of them when M = S), then one
// forward and one backward alternately, then the backwards left. M must be
// a multiple of S. One optimizer step per batch updates all of a worker's
// chunks. Bubble (S-1)/(vM+S-1) on uniform stages.
//
// PipeDream-2BW (Narayanan et al. ICML 2021): asynchronous, named like the
// flush schedules (batch b, microbatch i on replica i mod r, one step per
// batch absorbing its M microbatches, gradient_count M) but never drained:
// a worker runs 1F1B over its items of all batches in order (1f1b-rr's
// in-flight limit). Every F and B of batch b uses version max(0, b - 1), so
// w_{b+1} = w_b - lr g(w_{b-1}; batch b): delayed SGD with delay 1, and a
// stage holds two versions (the newest and the one batch b still uses).
// Needs M >= S microbatches (then version b - 1 exists when batch b starts).
//
// Weight policies (1f1b-rr only; the flush schedules are always `stash`):
//  - stash:    F(m) uses the newest version; B(m) uses the same one.
//  - vertical: v(m) = the version stage 0 had when F(m) started; every stage
//              runs F(m) and B(m) on its newest version that absorbed <= v(m)
//              minibatches, i.e. floor(v(m) / r_s) * r_s. Unreplicated:
//              v(m) = max(0, m - NOAM + 1).
//  - none:     F(m) uses the newest version, B(m) the newest at B time.
// Unreplicated stash: stage s runs F(m) and B(m) on max(0, m - (S-1-s)).
//
// Gradient averaging: OptimizerStep.gradient_count is the number of
// minibatch (or microbatch) gradients summed into the update, across the
// replica group (AllReduce sums). The runtime divides the summed gradient by
// it, so a replicated round and a flush batch are plain averages.
//
// Tags: tag = 2 * ((minibatch * microbatches + microbatch) * v + c) + (gradient ? 1 : 0)
// (microbatches = 1 and microbatch = 0 for 1f1b-rr; v = 1 and c = 0 except
// for interleaved-1f1b, where c is the chunk of the boundary's downstream
// stage: two workers exchange the messages of up to v boundaries). A tag is unique per
// (sender, receiver, direction); between any two ranks messages are sent in
// the order they are received, so a transport whose tags are bounded (MPI
// guarantees only 32767) may reduce them modulo its bound.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "planner/plan.h"
#include "runtime/schedule/schedule_kind.h"

namespace pd {

// ScheduleKind: runtime/schedule/schedule_kind.h (one registry entry per schedule).
enum class WeightPolicy { Stash, Vertical, None };

// "stash" | "vertical" | "none"; throws UserError otherwise.
WeightPolicy parse_weight_policy(const std::string& s);
std::string to_string(WeightPolicy p);
// 2bw: F and B of batch b use version max(0, b - 1).
inline int64_t two_bw_version(int64_t batch) { return batch > 0 ? batch - 1 : 0; }

struct ScheduleOptions {
  const ScheduleKind* kind = default_schedule_kind();
  WeightPolicy policy = WeightPolicy::Stash;
  int microbatches = 1;      // per batch, flush schedules only (1f1b-rr: 1)
  int64_t minibatches = 0;   // 1f1b-rr: minibatches; flush: batches (updates)
  int virtual_stages = 1;    // interleaved-1f1b: chunks per worker (the plan has workers x this stages)
};

enum class ActionKind : uint8_t {  // (declared in schedule_kind.h)
  Forward,         // F: minibatch, microbatch, weight_version
  Backward,        // B: minibatch, microbatch, weight_version (zb-h1: input gradient only)
  SendActivation,  // to peer (next stage), tag
  RecvActivation,  // from peer (previous stage), tag; precedes its Forward
  SendGradient,    // to peer (previous stage), tag
  RecvGradient,    // from peer (next stage), tag; precedes its Backward
  AllReduce,       // start summing gradients over the stage's replicas (plan ranks), round
  OptimizerStep,   // wait for the round's AllReduce (if any), apply summed / gradient_count
  BackwardWeight,  // W (zb-h1): the weight gradient of a B run before; minibatch, microbatch, weight_version
};
const char* to_string(ActionKind k);

struct Action {
  ActionKind kind = ActionKind::Forward;
  int microbatch = 0;           // flush: index within the batch; 1f1b-rr: 0
  int64_t minibatch = -1;       // F/B/Send/Recv: minibatch (1f1b-rr) or batch (flush)
  int peer = -1;                // Send/Recv: the other rank
  int64_t tag = -1;             // Send/Recv
  int64_t weight_version = -1;  // F/B: the version whose weights it must use
  int64_t round = -1;           // AllReduce/OptimizerStep: the stage's update index
  int64_t version_created = -1; // OptimizerStep: the version it creates
  int gradient_count = 0;       // AllReduce/OptimizerStep: gradients summed in the round
  int local_gradients = 0;      // AllReduce/OptimizerStep: of them, this worker's (0 or more)
  int chunk = 0;                // interleaved-1f1b: the worker's chunk (stage rank + chunk * workers); else 0

  bool is_compute() const {
    return kind == ActionKind::Forward || kind == ActionKind::Backward || kind == ActionKind::BackwardWeight;
  }
  bool is_send() const { return kind == ActionKind::SendActivation || kind == ActionKind::SendGradient; }
  bool is_recv() const { return kind == ActionKind::RecvActivation || kind == ActionKind::RecvGradient; }
};

// An Action in 32 bytes instead of 64: only the fields its kind uses.
//   kind                     key             item             sub             peer
//   F, B, W                  weight_version  minibatch        microbatch      -
//   Send*, Recv*             tag             minibatch        microbatch      peer
//   AllReduce                round           -                gradient_count  local_gradients
//   OptimizerStep            round           version_created  gradient_count  local_gradients
// The simulator keeps a group of these per worker: a thousand workers'
// pending actions then stay in cache, which full Actions would not.
struct PackedAction {
  int64_t key = -1;
  int64_t item = -1;
  int32_t sub = 0;
  int32_t peer = -1;
  ActionKind kind = ActionKind::Forward;
  uint8_t chunk = 0;  // Action::chunk (at most 255 virtual stages per worker)

  bool is_compute() const {
    return kind == ActionKind::Forward || kind == ActionKind::Backward || kind == ActionKind::BackwardWeight;
  }
  bool is_send() const { return kind == ActionKind::SendActivation || kind == ActionKind::SendGradient; }
  bool is_recv() const { return kind == ActionKind::RecvActivation || kind == ActionKind::RecvGradient; }
  Action unpack() const;
};

// Inverse of PackedAction::unpack.
PackedAction pack_action(const Action& a);

class Schedule;

// Yields one worker's actions a group at a time - those around one F, one B
// or one update, at most kMaxGroup - and stores none; O(1) memory.
// ActionCursor buffers one group to yield actions singly; the simulator
// buffers the groups of a thousand workers itself.
class ActionSource {
 public:
  // Deferred step + recv-grad + B + send-grad + AllReduce + step.
  static constexpr int kMaxGroup = 6;

  ActionSource() = default;
  ActionSource(const Schedule* schedule, int rank);
  // Writes the next group to out[0, n) and returns n; 0 when the worker is done.
  int next_group(PackedAction* out);
  // 1f1b-rr with stash or vertical, 2bw: the version the worker's forward of its
  // `local`-th item (0, 1, ...: its minibatches in order) uses - without
  // expanding the actions (the simulator counts versions held with it).
  int64_t forward_version(int64_t local) const;

 private:
  PackedAction* expand_forward(PackedAction* out);
  int next_ordered_group(PackedAction* out);  // zb-h1, interleaved-1f1b
  int next_two_bw_group(PackedAction* out);
  PackedAction* expand_two_bw(PackedAction* out, bool forward, int64_t local);
  PackedAction* expand_ordered(PackedAction* out, ActionKind kind, int microbatch, int chunk);
  PackedAction* expand_backward(PackedAction* out);
  PackedAction item_action(ActionKind kind, int64_t index) const;
  PackedAction message_action(ActionKind kind, int64_t index, bool upstream, bool gradient) const;
  int64_t backward_version() const;  // of the next backward
  // AllReduce and/or OptimizerStep of the current round.
  PackedAction* expand_update(PackedAction* out, int local_gradients, bool allreduce = true, bool step = true);
  int64_t global_index(int64_t local) const;  // local item -> minibatch / microbatch

  const Schedule* s_ = nullptr;
  int stage_ = 0, replica_ = 0, replicas_ = 1;
  int prev_rank_ = -1, next_rank_ = -1;  // the neighbour stage's rank when it has one replica
  bool flush_ = false, first_ = false, last_ = false, lagged_ = false, vertical_ = false;
  bool done_ = false;
  WeightPolicy policy_ = WeightPolicy::Stash;
  int64_t limit_ = 1;        // in-flight limit
  int64_t local_count_ = 0;  // items (minibatches / microbatches of a batch) on this worker
  int64_t forwards_ = 0, backwards_ = 0;  // done in the current batch (flush) or overall
  int64_t batch_ = 0;        // flush: current batch
  int64_t round_ = 0;        // next update round
  int64_t version_ = 0;      // newest version on this worker
  int64_t rounds_ = 0;       // update rounds of this stage
  int64_t minibatches_ = 0;  // options().minibatches (batches for flush)
  int rank_ = 0;
  size_t position_ = 0;      // zb-h1, interleaved-1f1b: next entry of the worker's batch order
};

// Yields one worker's actions in order; O(1) memory.
class ActionCursor {
 public:
  ActionCursor() = default;
  ActionCursor(const Schedule* schedule, int rank) : source_(schedule, rank) {}
  // Writes the next action to `out`; false when the worker is done.
  bool next(Action& out);
  int64_t forward_version(int64_t local) const { return source_.forward_version(local); }

 private:
  ActionSource source_;
  PackedAction buffer_[ActionSource::kMaxGroup];
  int buffered_ = 0, head_ = 0;
};

class Schedule {
 public:
  // Throws UserError for an inconsistent plan (ranks not 0..R-1 each once,
  // replicas != ranks.size()) or options (minibatches < 1, microbatches < 1,
  // microbatches != 1 for 1f1b-rr, a weight policy other than stash for a
  // flush schedule).
  Schedule(const Plan& plan, const ScheduleOptions& options);

  const ScheduleOptions& options() const { return options_; }
  int workers() const { return static_cast<int>(stage_of_rank_.size()); }
  int stages() const { return static_cast<int>(ranks_.size()); }
  int replicas(int stage) const { return static_cast<int>(ranks_[stage].size()); }
  const std::vector<int>& ranks(int stage) const { return ranks_[stage]; }
  int stage_of(int rank) const { return stage_of_rank_.at(rank); }
  int replica_of(int rank) const { return replica_of_rank_.at(rank); }
  int warmup(int stage) const { return warmup_[stage]; }
  int noam() const;  // ceil(R / r_0)
  // 1 where a stage's update round j is applied just before its backward
  // j+1 (1f1b-rr, replicated stages), 0 where it follows backward j.
  int update_lag(int stage) const;
  // Most minibatches (microbatches for flush) between F and B on this rank.
  int64_t in_flight_limit(int rank) const;
  // Items per batch: microbatches for flush schedules, 1 for 1f1b-rr.
  int items_per_batch() const { return options_.microbatches; }
  // Number of update rounds of `stage` (the same on all its replicas).
  int64_t rounds(int stage) const;
  // Version of the stage-0 weights when F(m) starts (vertical's v(m)).
  int64_t input_version(int64_t minibatch) const;
  // Version stage s runs minibatch m on under `vertical`.
  int64_t vertical_version(int stage, int64_t minibatch) const;
  // Rank of the replica of `stage` that runs item `index` (minibatch or microbatch).
  int rank_for(int stage, int64_t index) const {
    const auto& r = ranks_[stage];
    return r.size() == 1 ? r[0] : r[static_cast<size_t>(index % static_cast<int64_t>(r.size()))];
  }
  // `chunk`: interleaved-1f1b, the chunk of the boundary's downstream stage.
  int64_t tag(int64_t minibatch, int microbatch, bool gradient, int chunk = 0) const {
    return 2 * ((minibatch * options_.microbatches + microbatch) * chunks_ + chunk) +
           (gradient ? 1 : 0);
  }
  // Plan stages per worker (interleaved-1f1b: the virtual stages; V
  // shapes: 2); 1 otherwise.
  int chunks() const { return chunks_; }
  // The stage a worker's chunk runs (chunk 0: stage_of(rank)).
  int stage_of(int rank, int chunk) const {
    return chunks_ > 1 ? chunk_stages_.at(static_cast<size_t>(rank)).at(static_cast<size_t>(chunk)) : stage_of(rank);
  }
  // Where a stage runs (the kind's placement; chunk 0 of its first rank
  // without chunks).
  StagePlace place(int stage) const {
    return chunks_ > 1 ? places_.at(static_cast<size_t>(stage)) : StagePlace{ranks_.at(static_cast<size_t>(stage))[0], 0};
  }
  // Each worker's stages in chunk order, where workers run several
  // (interleaved-1f1b, the V shapes); empty otherwise (the plan's ranks say).
  const std::vector<std::vector<int>>& stages_by_worker() const { return chunk_stages_; }
  // Whether `rank` runs `stage` (as one of its chunks).
  bool runs(int rank, int stage) const { return chunks_ > 1 ? place(stage).worker == rank : stage_of(rank) == stage; }
  // Most microbatches a rank holds between F and the end of their backward
  // (W included): the kind's held_limit.
  int64_t held_limit(int rank) const;
  // Ordered schedules (zb-h1, interleaved-1f1b, the V shapes): one entry
  // per F, B or W of a batch, in the worker's order (the same every batch).
  using OrderEntry = pd::OrderEntry;
  const std::vector<OrderEntry>& batch_order(int rank) const { return order_.at(static_cast<size_t>(rank)); }
  // Most items between F and B (`to_w`: F and W) in `rank`'s order.
  int64_t order_peak(int rank, bool to_w) const;
  bool ordered() const { return !order_.empty(); }
  // Whether the workers' lists hold W actions (read off the built orders):
  // then every B computes the input gradient alone and its item's W the
  // weight gradient later, so B keeps what W needs.
  bool has_weight_passes() const { return weight_passes_; }
  // The oldest weight version a worker of `stage` (replica `replica`) can
  // still need for a forward after `forwards_done` of its forwards (2bw:
  // the next forward's batch's; vertical: the next forward's version);
  // INT64_MAX where versions are kept for the items in flight alone.
  int64_t oldest_version_needed(int stage, int replica, int64_t forwards_done) const;
  // Whether a worker's forwards use more than one weight version at once
  // (1f1b-rr with stash or vertical, 2bw), so it keeps several.
  bool holds_several_versions() const;
  // Weight versions a stage keeps at once for its steps (2bw: two;
  // otherwise one), for memory estimates.
  int versions_kept() const;
  // Lists to yield instead of generating them (`run --schedule-file`): one
  // per rank, checked by the caller (checked_schedule) against this
  // schedule's shape; they must outlive it.
  void use_lists(const std::vector<std::vector<Action>>* lists) { given_ = lists; }
  const std::vector<std::vector<Action>>* given_lists() const { return given_; }

  ActionCursor cursor(int rank) const { return ActionCursor(this, rank); }
  std::vector<Action> actions(int rank) const;

 private:
  ScheduleOptions options_;
  std::vector<std::vector<int>> ranks_;  // per stage
  std::vector<int> stage_of_rank_, replica_of_rank_, warmup_;
  int chunks_ = 1;
  std::vector<StagePlace> places_;               // per stage, when chunks_ > 1
  std::vector<std::vector<int>> chunk_stages_;   // per rank, per chunk, when chunks_ > 1
  std::vector<std::vector<OrderEntry>> order_;  // per rank: ordered schedules
  bool weight_passes_ = false;                  // some order holds a W
  const std::vector<std::vector<Action>>* given_ = nullptr;
  void check_options(const Plan& plan) const;
  void map_ranks(const Plan& plan);
  void map_chunks(const Plan& plan);
};

// Every worker's whole list (tests, small plans): memory minibatches x workers.
std::vector<std::vector<Action>> build_schedule(const Plan& plan, const ScheduleOptions& options);

// "F(m=12, v=9)", "send-act(m=12) -> rank 3 [tag 24]", "allreduce(round 4, 7 grads, 1 local)";
// flush actions name batch and microbatch: "F(b=3 mb=2, v=3)".
std::string format_action(const Action& a, bool flush = false);
// A header (schedule, stage, replica, warm-up, in-flight limit) and one
// numbered line per action; at most `limit` actions (0: all).
std::string format_worker_schedule(const Schedule& schedule, int rank, int64_t limit = 0);

}  // namespace pd

namespace pd {

// ---- What callers outside runtime/schedule ask (describe.cpp) ---------------
// They ask these instead of comparing kinds, so a new schedule needs no
// change there.

// "1f1b-rr (stash)", "interleaved-1f1b (2 virtual stages per worker)", "zb-h1".
std::string schedule_title(const ScheduleOptions& o);
// `run`'s summary: "zb-h1, batches of 64: 4 microbatches of 16" or
// "1f1b-rr, weights stash, batch 16".
std::string schedule_summary(const ScheduleOptions& o, int64_t microbatch_size);
// "2 batches of 4 microbatches" / "10 minibatches".
std::string steps_phrase(const ScheduleOptions& o, int64_t steps);
// The flags that select `o`: "--schedule zb-h1 --microbatches 8".
std::string schedule_flags(const ScheduleOptions& o);
// "minibatch" or "batch": what one optimizer step absorbs.
const char* step_noun(const ScheduleOptions& o);
// Steps in one period of the order (a batch; 1f1b-rr: workers + 1
// minibatches, warm-up included): pictures show two, checks four.
int64_t steps_per_period(const ScheduleKind* kind, int workers);
// --microbatches for `kind`: `given` (0: `fallback(multiple)`, where
// multiple is what the kind needs M to be a multiple of) where it splits a
// batch; 1 for 1f1b-rr, refusing given > 1 with the names of the schedules
// that take it.
int microbatches_for(const ScheduleKind* kind, int given, int workers, const std::function<int(int multiple)>& fallback);
// Plan stages per worker the kind runs with `virtual_stages`.
inline int stages_per_worker(const ScheduleKind* kind, int virtual_stages) { return kind->chunks(virtual_stages); }
// Refusals of run-time features a schedule may not support, naming the
// schedules that do: `flag` is the option asked for.
void require_whole_model_gradient(const ScheduleOptions& o, int stages, const std::string& flag);
void require_checkpoints(const ScheduleOptions& o, const std::string& flag);
void require_split_backward(const ScheduleOptions& o, const std::string& flag);
// Optimizer steps a stage has taken after `steps` (minibatches, or batches):
// one per batch, or one per round of `replicas` minibatches (1f1b-rr).
int64_t rounds_after(const ScheduleOptions& o, int replicas, int64_t steps);
// The version spacing of a stage: 1 per batch, `replicas` per round (1f1b-rr).
int64_t version_stride(const ScheduleOptions& o, int replicas);
// A checkpoint inside the schedule finds the pipeline drained (between
// batches), or minibatches in flight (1f1b-rr).
bool drained_between_steps(const ScheduleOptions& o);
// The command-line help of --schedule (every schedule, one line each),
// --weights, --virtual-stages and --microbatches (`what` it sets), naming
// the schedules each applies to.
std::string schedule_flag_help();
std::string weights_flag_help();
std::string virtual_stages_flag_help();
std::string microbatches_flag_help(const std::string& what);
std::string split_backward_flag_help(const std::string& what);
// Schedule fields of a metrics line: {"schedule": name[, "weights": policy]}.
std::vector<std::pair<std::string, std::string>> schedule_fields(const ScheduleOptions& o);
// Refuses (UserError) a parameter tied across stages (`tie`: "gpt ties
// one parameter across stages (...)") under a schedule whose stages step
// at their own times, naming the synchronous schedules; `or_else` is the
// other way out ("a plan that keeps layers 0-9 in one stage").
void require_tied_stages_step_together(const ScheduleKind* kind, const std::string& tie, const std::string& or_else);
// Why the plan's per-stage memory is not this run's, or "": the plan's
// figure is for its schedule with stashed weights (1f1b-rr) or at the
// microbatches it records.
std::string plan_memory_differs(const Plan& plan, const ScheduleOptions& o);
// Why the plan's predicted time is not this run's schedule's, or "": a
// flush schedule's prediction holds for its microbatches and virtual stages.
std::string plan_time_differs(const Plan& plan, const ScheduleOptions& o);
// What `plan --schedule auto` searches besides 1f1b-rr (whose replicated
// plans the planner's own search makes): each schedule with the virtual
// stages it is searched at and the plan stages it runs per worker.
struct SearchedSchedule {
  const ScheduleKind* kind = nullptr;
  int virtual_stages = 1;
  int stages_per_worker = 1;
};
std::vector<SearchedSchedule> searched_schedules();
// Every schedule `plan --schedule auto` chooses among, 1f1b-rr included:
// "1f1b-rr, gpipe, ... and zb-v".
std::string searched_schedule_names(const char* last);

}  // namespace pd

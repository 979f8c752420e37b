#pragma once
// Discrete-event replay of the per-worker action lists (docs/design.md §7).
//
// Cost model, chosen to be the planner's paper model (docs/design.md §5) so that
// the two agree in steady state:
//  - F and B take the stage's forward_s / backward_s per minibatch (flush
//    schedules: divided by the microbatches per batch, or the times
//    measured at the microbatch's size, microbatch_times). zb-h1 splits the
//    backward: B (input gradient) takes (1 - weight_gradient_share) of
//    backward_s and W the rest; the default share 1/2 is what a layer of
//    matrix products costs (dX = dY W^T and dW = X^T dY are the same size
//    of product), so a profile with backward = 2 x forward gives
//    F:B:W = 1:1:1. interleaved-1f1b: each chunk is a plan stage with its
//    own costs.
//  - Sends do not block the sender (communication has its own thread). A
//    message occupies the link of the boundary's downstream rank for
//    latency_between + bytes / bandwidth_between(sender, receiver) (the
//    latency: the topology level's measured per-message cost, 0 when the
//    topology gives none); activations and gradients
//    (same size: the stage's output_bytes) share that link one at a time,
//    which is the planner's 2 * C_i per minibatch on each of the m'
//    downstream replicas. When the receiver may use it: see
//    realistic_latency.
//  - AllReduce of a stage with r replicas takes
//    4 (r-1)/r * parameter_bytes / group_bandwidth (plus 2 (r-1) messages'
//    group_latency), the planner's W: a ring
//    all-reduce sends 2(r-1)/r * bytes and receives as many per worker, on a
//    link whose bandwidth both directions share. It overlaps the compute of
//    the round, as the planner's max(compute, W) assumes: it may start once
//    every replica has started the forward preceding its AllReduce (1f1b-rr;
//    the backward for flush schedules), one round after another; the
//    planner's W is per round of r minibatches (T = max(compute, W) / r), and
//    so is this all-reduce. The OptimizerStep waits for the round's
//    all-reduce to start (default) or end (realistic_latency). The step's
//    own compute (the stage's optimizer_s, from the profile's optimizer_ms;
//    0 for profiles that do not measure it) is folded into the backward:
//    B takes (backward_s + optimizer_s) / microbatches; where the step waits
//    for the runtime's all-reduce to end (a measured all-reduce, or
//    realistic_latency) it is a compute of its own after it, on the path to
//    the next backward.
// Steady state: time per minibatch is measured between the completions
// (end of stage 0's backward; flush: end of stage 0 replica 0's step) of
// minibatch K/4 and the last one at or before 3K/4 a whole number of the
// schedule's periods later (1f1b-rr: lcm of the stages' replica counts, or
// stage 0's replica count where that period exceeds the window; flush: 1),
// busy fractions over the same window.
#include <cstdint>
#include <iosfwd>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "planner/plan.h"
#include "runtime/schedule/gradient_bucket_plan.h"
#include "runtime/schedule/schedule.h"

namespace pd {

struct Profile;
struct ProfileNode;

struct StageMicrobatchTimes {
  double forward_s = 0, backward_s = 0;
};

// One all-reduce of a replicated stage's round: the runtime starts it as
// soon as the backward has done its layers (runtime/schedule/
// gradient_bucket_plan.h), this far into the backward.
struct GradientBucketTiming {
  double ready_fraction = 1;  // of the backward's time, in (0, 1]
  double bytes = 0;
};

struct SimulationOptions {
  ScheduleOptions schedule;
  bool record_trace = false;
  // false (default): the planner's steady-state idealisation. Links and
  // all-reduce channels limit throughput (each transfer still occupies its
  // link for bytes / bandwidth, each all-reduce its replica group's channel
  // for W, one after another) but add no latency to the critical path: a
  // message is usable once at most one transfer is ahead of it on its link,
  // and an OptimizerStep may apply its round once that round's all-reduce
  // has started. This is what max(compute, W)/r and the separate 2 C term
  // of docs/design.md §5 assume.
  // true: what a run does - a message is usable when all its bytes have
  // crossed the link, a step waits for its all-reduce to end. 1f1b-rr keeps
  // only NOAM minibatches in flight, which cannot hide transfers comparable
  // to stage compute, nor an all-reduce longer than a replica's round.
  bool realistic_latency = false;
  // Bytes each worker keeps per in-flight minibatch, per stage; empty:
  // estimated (see stashed_bytes_per_minibatch).
  std::vector<uint64_t> stashed_bytes;
  // Where B and W are split: bytes a worker keeps per minibatch from an
  // item's B to its W instead of its stash (what W needs, its output
  // gradient included), per stage; empty: the stash itself
  // (weight_pass_bytes_from_profile).
  std::vector<uint64_t> weight_pass_bytes;
  // What a compute of each stage holds while it runs beyond the held items
  // and the messages, per minibatch (working_bytes_from_profile): its
  // layers' most working memory, in every pass (forward, B, W), and on
  // top, in B, the most one recomputed layer makes again (recompute_bytes;
  // 0 where the weight-pass bytes already hold it). Empty: not priced, and
  // WorkerReport::peak_working_bytes stays 0.
  std::vector<uint64_t> working_bytes, recompute_bytes;
  // Where the profile measured them (StageFootprint's): what an item's
  // forward and fused backward hold beyond its stash, per minibatch, in
  // place of working_bytes (and, for B, recompute_bytes); a B split from
  // its W: input_backward_working_bytes, given with weight_pass_bytes.
  // Empty: those.
  std::vector<uint64_t> forward_working_bytes, backward_working_bytes, input_backward_working_bytes;
  // What a W allocates beyond the context B left it, per minibatch
  // (weight_working_bytes_from_profile). Empty: working_bytes.
  std::vector<uint64_t> weight_working_bytes;
  // Schedules with microbatches: each stage's forward and backward seconds
  // for one microbatch, measured at its size (microbatch_times_from_profile).
  // Empty: the stage's minibatch times / microbatches, which undercounts
  // small microbatches (resnet18's 4 images cost 2.3x a linear share).
  std::vector<StageMicrobatchTimes> microbatch_times;
  // Per stage, the all-reduces of a round as the runtime buckets them
  // (gradient_buckets_from_profile). Used where the all-reduce is the
  // runtime's (a measured all-reduce, or realistic_latency): each bucket
  // starts once every replica's backward has done its layers, one after
  // another on the group's channel. Empty (for a stage, or all): one
  // all-reduce of the stage's parameters after the backward.
  std::vector<std::vector<GradientBucketTiming>> gradient_buckets;
  // Replay these lists (one per rank, e.g. from a schedule file) instead of
  // generating them from `schedule`, which must still describe them (kind,
  // policy, microbatches, minibatches). The caller checks them first
  // (checked_schedule): the replay assumes they cannot deadlock.
  const std::vector<std::vector<Action>>* actions = nullptr;
  // zb-h1: the fraction of a stage's backward time its W (weight gradient)
  // pass takes; B takes the rest.
  double weight_gradient_share = 0.5;
  // Shared cores. 0 (default): every worker has a device of its own, as the
  // planner assumes. C > 0: the plan's workers run on one machine with C
  // cores (fractional: a CPU quota), each computing with threads_per_worker
  // threads (what the profile's times were measured with), and the OS
  // shares the cores fairly (processor sharing): while n workers compute and
  // n x threads > C, every computation advances at C / (n x threads) of its
  // profiled speed, so a computation's remaining time is re-timed whenever a
  // worker starts or ends one. Waiting workers take no core. Transfers
  // take none unless the topology gives the communication threads' CPU
  // (TopologyLevel::comm_cpu_GBps, comm_cpu_us_per_message): then each end
  // of a message, and each member of an all-reduce, runs that CPU as one
  // more thread on the cores (runtime/simulator/README.md, "Shared cores").
  // With C >= workers x threads no computation is ever slowed, and the
  // replay is the default one, bit for bit.
  double cores = 0;
  int threads_per_worker = 1;
  // With cores: what the cores share besides themselves (memory bandwidth,
  // the last-level cache). A computation runs 1 + core_contention times
  // slower while every core computes, and in proportion to the cores busy
  // beyond one otherwise. Measured by running the profiled step in as many
  // processes at once as the run has workers, scaled by their core share
  // (bench/shared_cores.sh; 4 on 2 cores: resnet18 0.12, GPT 0.05). 0: not
  // modelled.
  double core_contention = 0;
};

// The profile nodes of each plan stage: its node ids (DAG plans) or its
// layer range (chains). Throws UserError if the plan's layers are not in
// the profile.
std::vector<std::vector<const ProfileNode*>> stage_nodes(const Plan& plan, const Profile& profile);

// Stashed activation bytes per minibatch (the plan's batch; the replay
// gives a microbatch its share) of each stage: the profile's
// activation_bytes summed over the stage's layers (nodes for DAG plans),
// its recomputed layers' inputs in place of their activations
// (worker_memory.h's stage_footprints). Throws UserError if the plan's
// layers are not in the profile.
std::vector<uint64_t> stashed_bytes_from_profile(const Plan& plan, const Profile& profile);
// Each stage's ProfileNode::weight_pass_bytes summed, per minibatch; empty
// when the profile records none (older profiles, graph.txt, imported graphs).
std::vector<uint64_t> weight_pass_bytes_from_profile(const Plan& plan, const Profile& profile);
// Per stage, the most one of its layers' W allocates (ProfileNode::
// weight_workspace_bytes), per minibatch; empty where the profile did not measure it.
std::vector<uint64_t> weight_working_bytes_from_profile(const Plan& plan, const Profile& profile);
// The memory a replay prices from the profile, set in `o`: the stashes
// (stashed_bytes_from_profile), what B keeps for W (where o.schedule
// splits them and the profile measured it) and each compute's working
// memory (SimulationOptions::working_bytes), per minibatch.
void set_memory_from_profile(SimulationOptions& o, const Plan& plan, const Profile& profile);

// Each stage's forward and backward seconds for one microbatch of
// `microbatch` samples: its layers' (nodes') times at that batch
// (ProfileNode::at_batch, `pipedream profile --microbatches`). Empty when
// the profile has no times at that batch. Throws UserError as above.
std::vector<StageMicrobatchTimes> microbatch_times_from_profile(const Plan& plan, const Profile& profile,
                                                               int microbatch);

// Whether the stage's replicas wait for the runtime's all-reduce (a
// measured all-reduce bus bandwidth, or realistic_latency): then its
// buckets start during the backward and its optimizer step waits for the
// all-reduce's end. False for unreplicated stages and for the planner's
// idealised all-reduce.
bool waits_for_runtime_allreduce(const Plan& plan, const PlanStage& stage, const SimulationOptions& options);

// Each replicated stage's gradient buckets (runtime/schedule/
// gradient_bucket_plan.h, at bucket_bytes): its layers' parameter bytes in
// backward order, each bucket ready at the share of the stage's backward
// time its layers take, the profile's; its bytes scaled so that a stage's
// buckets sum to the plan's parameter_bytes. Unreplicated stages: empty.
// Throws UserError as above.
std::vector<std::vector<GradientBucketTiming>> gradient_buckets_from_profile(
    const Plan& plan, const Profile& profile, size_t bucket_bytes = kDefaultGradientBucketBytes);

// A plan whose stages were edited after planning (Plan::predictions_stale):
// the planner's predictions (time per minibatch, throughput, speed-ups,
// per-stage memory and time) are dropped, and with the profile each stage's
// compute, parameter and output sizes are recomputed from its layers. Returns
// what was done, for the user; "" when the plan is not stale.
std::string refresh_stale_plan(Plan& plan, const Profile* profile);

// Every stage's compute times and parameter and output sizes from the
// profile's layers instead of the ones stored at planning, and the
// planner's predictions dropped: the same plan priced on another profile of
// the same model (`simulate --recost`).
void recost_plan(Plan& plan, const Profile& profile);

struct WorkerReport {
  int rank = 0, stage = 0;
  double busy_fraction = 0, bubble_fraction = 0;  // steady-state window
  uint64_t peak_activation_bytes = 0;             // peak of the held items' stashed bytes
  // Peak of those and the working memory of the compute running at the
  // time (SimulationOptions::working_bytes; 0 when not priced): a received
  // gradient counts from its receive, as B's working memory, and a worker
  // of several stages pays the working memory of the one computing. A
  // message not yet received is the transport's, not the worker's.
  uint64_t peak_working_bytes = 0;
  int64_t peak_in_flight = 0;                     // items between F and B (interleaved: chunk items)
  // Items whose forward's tensors are held: from F to their last backward
  // pass (W for zb-h1, which needs them; B otherwise = peak_in_flight).
  int64_t peak_held = 0;
  int64_t peak_weight_versions = 0;               // versions held at once
  // Everything the worker holds at its peak (worker_memory.h); 0 when not
  // predicted (simulate without the plan's profile).
  double predicted_memory_bytes = 0;
};

struct SimulationReport {
  ScheduleOptions schedule;  // the replayed schedule's
  int64_t minibatches = 0;          // 1f1b-rr: minibatches; flush: batches
  double makespan_s = 0;            // first action to last
  double time_per_minibatch_s = 0;  // steady state (flush: per batch)
  double throughput_samples_per_s = 0;  // 0 when the plan's batch size is unknown
  // Shared cores with the communication threads' CPU priced: the CPU all
  // ranks' communication threads spend per minibatch (flush: per batch) in
  // the steady state, to set beside a run's measured comm_cpu_s. 0 otherwise.
  double comm_cpu_per_minibatch_s = 0;
  std::vector<WorkerReport> workers;
};

// One compute interval or all-reduce, for the timeline.
struct TraceEvent {
  ActionKind kind;
  int rank;
  int microbatch;
  int64_t minibatch;
  double start_s, end_s;
  int chunk = 0;  // interleaved-1f1b: the worker's chunk
};

// 1F1B-RR's period in minibatches: lcm of the stages' replica counts (minibatch
// i runs on replica i mod r of each stage); above kMaxReplicaPeriod, that + 1.
constexpr int64_t kMaxReplicaPeriod = 1 << 20;
int64_t replica_period(const std::vector<int>& replicas);

// Throws UserError when the topology does not cover the plan's ranks.
// See timeline_svg.h for the paper-style picture of the trace.
SimulationReport simulate(const Plan& plan, const SimulationOptions& options,
                          std::vector<TraceEvent>* trace = nullptr);

nlohmann::json report_to_json(const SimulationReport& report);
std::string format_report(const SimulationReport& report);
// Chrome trace-event JSON (Perfetto, chrome://tracing): one track per rank
// named "rank r (stage s)", F, B and W coloured differently, all-reduces on a
// track per stage. `virtual_stages` > 1: interleaved-1f1b's worker rows.
void write_chrome_trace(std::ostream& os, const Plan& plan, const std::vector<TraceEvent>& events,
                        const ScheduleOptions& schedule);

}  // namespace pd

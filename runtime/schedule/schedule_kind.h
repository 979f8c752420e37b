#pragma once
// What a schedule is: one ScheduleKind value per schedule, listed in the
// registry (registry.cpp). Everything that differs between schedules lives
// here - name, help, option and plan checks, placement, memory held, the
// per-worker order - so the executor, simulator, planner search and CLI
// ask the schedule instead of comparing kinds. Adding a schedule is one
// file defining its ScheduleKind plus one registry row.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "planner/plan.h"

namespace pd {

struct ScheduleOptions;
class Schedule;
enum class ActionKind : uint8_t;

// Where a plan stage runs: worker `worker`, as its chunk `chunk`.
struct StagePlace {
  int worker = 0;
  int chunk = 0;
};

// One entry of a worker's order for one batch (ordered schedules).
struct OrderEntry {
  ActionKind kind;
  int microbatch;
  int chunk;
};

class ScheduleKind {
 public:
  virtual ~ScheduleKind() = default;
  // The --schedule spelling and one line of help.
  virtual const char* name() const = 0;
  virtual const char* help() const = 0;

  // Items are (batch, microbatch) and each batch ends with one optimizer
  // step absorbing its M microbatches. false: 1f1b-rr, whose items are
  // minibatches with a step per minibatch (round).
  virtual bool flushes() const { return true; }
  // B computes the input gradient only and a W action the weight gradient.
  virtual bool splits_backward() const { return false; }
  // Weight versions F and B choose (--weights): 1f1b-rr only.
  virtual bool takes_weight_policy() const { return false; }
  // Whether --virtual-stages applies (interleaved-1f1b).
  virtual bool takes_virtual_stages() const { return false; }
  // Plan stages per worker for `virtual_stages` (--virtual-stages).
  virtual int chunks(int virtual_stages) const { return virtual_stages; }
  // Whether every stage must have one replica.
  virtual bool unreplicated_only() const { return false; }
  // The placement: the plan stage that `worker`'s chunk `chunk` runs, with
  // `workers` workers (only asked when chunks > 1; otherwise the plan's
  // ranks say). Default: round robin, stage worker + chunk x workers.
  virtual int stage_at(int worker, int chunk, int workers) const { return worker + chunk * workers; }
  // Its inverse's chunk: the chunk that runs `stage` (Schedule checks they agree).
  virtual int chunk_of(int stage, int workers) const { return stage / workers; }
  // Microbatches must be a multiple of this (interleaved: the workers).
  virtual int microbatch_multiple(int workers) const { return 1; }
  // Weight versions a stage keeps at once (2bw: two).
  virtual int weight_versions() const { return 1; }
  // The version every F and B of batch `batch` uses: flush schedules the
  // newest (batch); 2bw the one before. (Unused for 1f1b-rr.)
  virtual int64_t batch_version(int64_t batch) const { return batch; }
  // Whether a run of it can checkpoint and resume.
  virtual bool checkpoints() const { return true; }
  // Searched by `plan --schedule auto` (runtime/simulator/schedule_search.h).
  virtual bool searched() const { return true; }

  // Refuses (UserError) a plan or options it cannot run; the Schedule
  // constructor calls it after the common checks.
  virtual void check(const Plan& plan, const ScheduleOptions& options) const;

  // Most items between F and B on `rank` (the checker's bound; ordered
  // schedules: their order's peak).
  virtual int64_t in_flight_limit(const Schedule& schedule, int rank) const;
  // Most microbatches whose activations a worker holds at once (between F
  // and the end of their backward, W included): the memory in flight the
  // planner's search and the checker use.
  virtual int64_t held_limit(const Schedule& schedule, int rank) const;
  // Each worker's order for one batch; empty: the generic 1F1B order
  // (replicated stages allowed). Called once per Schedule.
  virtual std::vector<std::vector<OrderEntry>> worker_orders(const Schedule& schedule) const { return {}; }
  // 2bw: never drained, 1F1B over the items of all batches.
  virtual bool never_drains() const { return false; }
};

// The registry, in the order help and messages list them.
const std::vector<const ScheduleKind*>& schedule_kinds();
// The entry named `name`; UserError naming every schedule otherwise.
const ScheduleKind* parse_schedule_kind(std::string_view name);
// PipeDream's own schedule, the default of a plan: 1f1b-rr.
const ScheduleKind* default_schedule_kind();
// "1f1b-rr, gpipe, ... or zb-v" (filtered by `keep` when given).
std::string schedule_names(bool (*keep)(const ScheduleKind&) = nullptr, const char* last = " or ");
// One line per schedule, "  name  help", for --help texts.
std::string schedule_help();
inline std::string to_string(const ScheduleKind* k) { return k->name(); }
inline bool is_flush(const ScheduleKind* k) { return k->flushes(); }
inline bool splits_backward(const ScheduleKind* k) { return k->splits_backward(); }

}  // namespace pd

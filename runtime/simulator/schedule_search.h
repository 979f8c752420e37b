#pragma once
// `plan --schedule auto`: the best plan of each schedule family -
// 1f1b-rr (the planner's, replication included), 2bw, 1f1b-flush,
// interleaved-1f1b (v = 2) and zb-h1 - with the microbatch count, under the
// memory limit, each predicted by replaying it; the fastest that fits (the
// least time per minibatch) wins.
//
// The synchronous families and 2bw run straight pipelines here (zb-h1 and
// interleaved run unreplicated plans only), layer chains and DAG profiles
// alike: the planner's straight optimum on the workers (interleaved: on
// twice as many stages, stage k on worker k mod W, flat topologies only),
// with M microbatches of the profile's minibatch, M between W and 4W
// (interleaved: a multiple of W) and dividing the profile's batch, so that
// `run --batch B --microbatches M` takes it (the microbatch is minibatch / M samples; its compute
// as measured at that size where the profile has it, `profile
// --microbatches`, a linear share of the minibatch's otherwise). A worker's
// memory under them: the weights (2bw: two versions), the gradient and the
// optimizer state of its stages, plus the simulator's peak of microbatches
// held (F to the last backward pass) times a stage's stashed activations and
// message buffers per microbatch, plus its layers' working memory per
// microbatch - planner/stage_memory.h's terms, with 1F1B-RR's weight
// stashing gone. Where that straight optimum (cut for time alone) does not
// fit at a count, the planner's fastest straight cut and, under
// --recompute, each stage's recomputed layers, priced by the family's own
// memory at that count, are replayed instead (flush_fit.h).
#include <cstdint>
#include <exception>
#include <optional>
#include <string>
#include <vector>

#include "planner/planner.h"
#include "profiler/profile.h"
#include "runtime/schedule/schedule.h"

namespace pd {

struct ScheduleCandidate {
  const ScheduleKind* family = default_schedule_kind();
  Plan plan;                    // interleaved and the V shapes: workers x 2 stages
  ScheduleOptions schedule;     // microbatches, virtual stages; minibatches: replayed
  double samples_per_s = 0;     // simulated steady state (0 where the profile records no batch)
  // Seconds per minibatch of the profile (the flush families: a batch of M
  // microbatches), simulated steady state (1f1b-rr: the planner's): what
  // the search ranks by, so that profiles without a batch size (PipeDream's
  // graph.txt) rank too.
  double time_per_batch_s = 0;
  double peak_memory_bytes = 0; // the fullest worker
  std::vector<double> worker_memory_bytes;  // by rank (the synchronous families and 2bw)
  double least_memory_bytes = 0;  // the fullest worker at the count that needs least (0: not computed)
  bool fits = false;
  bool replayed = false;        // the time is a replay's (1f1b-rr's: the planner's closed form)
  std::string note;             // why it does not fit, or is not considered
  std::exception_ptr failure;   // 1f1b-rr: the planner's error (PlanDoesNotFit: what would fit)
};

struct ScheduleSearch {
  std::vector<ScheduleCandidate> families;  // the best of each, in the order above
  int chosen = -1;                          // index into families; -1: nothing fits
};

// The replay length of the flush families' candidates (batches).
constexpr int64_t kScheduleSearchBatches = 16;

ScheduleSearch search_schedules(const Profile& profile, const Topology& topology, const PlannerOptions& options);

// The least memory per worker under which search_schedules chooses some
// family, recomputing as options.recompute says: bisected between `above`
// (which does not fit) and a size that does (from `start`, doubled until
// one does), each probe a whole search, for about `seconds`. Both ends are
// probed or given, so both are true: `fits` fits, `more_than` does not.
// nullopt: nothing fits even at 64 times `start`.
std::optional<MemoryNeed> least_memory_any_schedule(const Profile& profile, const Topology& topology,
                                                    PlannerOptions options, uint64_t above, uint64_t start,
                                                    double seconds = 4);

}  // namespace pd

#pragma once
// `pipedream run --plan auto --workers N`: profile the model here (per-layer
// forward/backward medians with the run's batch and threads per worker),
// then plan it for N workers on this machine - the quick start in one
// command. The dedicated profiler (`pipedream profile`) measures more
// carefully; this is its minimal form for planning a run on the spot.
#include <cstdint>

#include "models/model.h"
#include "planner/plan.h"
#include "profiler/profile.h"

namespace pd {

// Times every top-level layer (`repeats` runs after one warm-up, median).
Profile measure_layer_profile(const Model& m, int64_t batch, int threads, int repeats = 5);
// Plans `workers` workers on one machine (flat topology, bandwidth_GBps
// between workers: shared-memory MPI); `straight`: one worker per stage.
Plan plan_for_workers(const Profile& p, int workers, bool straight = false, double bandwidth_GBps = 4.0);

}  // namespace pd

#pragma once
// One MPI worker of `pipedream run`: builds its stage, trains segment by
// segment (checkpointing between them), and at the end sends its stats,
// trace and weights to the reporting rank (the last stage's first replica),
// which writes the metrics, the merged --save file and the trace.
#include "models/dataset.h"
#include "models/model.h"
#include "runtime/comm/transport.h"
#include "runtime/checkpoint.h"
#include "runtime/run_spec.h"

namespace pd {

struct WorkerSummary {
  bool reporter = false;  // this rank printed the results
  double seconds = 0, samples_per_s = 0;
};

WorkerSummary run_pipeline_worker(const RunSpec& spec, const Model& model, const DataSplits& data, Transport& t);

// What a checkpoint records of its run (state.json, besides format and step).
nlohmann::json checkpoint_identity(const RunSpec& spec, const Model& model);

// UserError naming the one setting that keeps this run from resuming the
// checkpoint: model, schedule, weights, batch, microbatches, seed and
// optimizer must agree; the plan (stages, layers, workers) may differ for
// the flush schedules and for a drained 1f1b-rr checkpoint, and must not
// for a 1f1b-rr checkpoint with minibatches in flight. Also refuses a
// checkpoint past the run's last step (--minibatches / --epochs count the
// whole run). Every process may call it: the launcher does, so a refusal
// is printed once, before any worker starts.
void require_resumable(const ResumePoint& p, const RunSpec& spec, const Model& model);

}  // namespace pd

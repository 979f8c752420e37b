#pragma once
// One MPI worker of `pipedream run`: builds its stage, trains segment by
// segment (checkpointing between them), and at the end sends its stats,
// trace and weights to the reporting rank (the last stage's first replica),
// which writes the metrics, the merged --save file and the trace.
#include "models/dataset.h"
#include "models/model.h"
#include "runtime/comm/transport.h"
#include "runtime/run_spec.h"

namespace pd {

struct WorkerSummary {
  bool reporter = false;  // this rank printed the results
  double seconds = 0, samples_per_s = 0;
};

WorkerSummary run_pipeline_worker(const RunSpec& spec, const Model& model, const DataSplits& data, Transport& t);

// The run fields a checkpoint must agree with to be resumed.
nlohmann::json checkpoint_identity(const RunSpec& spec, const Model& model);

}  // namespace pd

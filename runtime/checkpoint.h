#pragma once
// Checkpoints of a pipelined or single-worker run (docs/design.md §8): one
// safetensors file per stage and a JSON state.
//
// Layout: DIR/step-N/{stage-S.safetensors, state.json} and DIR/latest
// naming the newest complete one. A checkpoint is written into
// DIR/step-N.partial and renamed once every stage's file is there, so a
// crash mid-write never leaves a checkpoint that looks complete.
//
// Every tensor is stored under a name that does not depend on the plan:
// weights and buffers as "{layer}.{name}" (as --save writes them),
// optimizer slots as "optimizer.{slot}.{layer}.{name}", and 1f1b-rr's older
// weight versions as "version.{v}.{layer}.{name}". Any stage of any plan
// finds its tensors by name in the union of the files.
#include <cstdint>
#include <climits>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/optimizer.h"
#include "core/safetensors.h"
#include "models/parameters.h"

namespace pd {

// What one stage file holds. `older` are weight versions still needed by
// minibatches in flight (1f1b-rr checkpoints taken without draining).
struct StageCheckpoint {
  int stage = 0;
  const ParameterStore* weights = nullptr;  // newest version, buffers included
  const OptimizerState* optimizer = nullptr;
  int64_t updates = 0;
  int64_t newest_version = 0;  // schedule version of `weights`
  std::map<int64_t, const ParameterStore*> older;
};

// --keep-checkpoints when not given: the newest 3, so that a long run does
// not fill the disk (0 keeps every one).
constexpr int64_t kDefaultKeepCheckpoints = 3;

std::string checkpoint_partial_dir(const std::string& dir, int64_t step);
// Removes DIR's step-N.partial folders with N < before: checkpoints an
// interrupted run began and never committed (commit_checkpoint removes
// those below the step it commits; a run's launcher all of them at its
// start, before any worker writes).
void remove_partial_checkpoints(const std::string& dir, int64_t before = INT64_MAX);
// Creates DIR/step-N.partial (every writer may call it).
void prepare_checkpoint(const std::string& dir, int64_t step);
void write_stage_checkpoint(const std::string& dir, int64_t step, const StageCheckpoint& s);
// A replica other than the first of a replicated 1f1b-rr stage: the older
// versions its own minibatches in flight need (stage-S.replica-R.safetensors).
void write_replica_versions(const std::string& dir, int64_t step, int stage, int replica,
                            const std::map<int64_t, const ParameterStore*>& older);
// After every stage wrote its file: state.json (`run` plus format and
// step), rename, DIR/latest; then, with keep > 0, the whole checkpoints
// older than the keep newest are removed (--keep-checkpoints).
void commit_checkpoint(const std::string& dir, int64_t step, const nlohmann::json& run, int64_t keep = 0);

struct ResumePoint {
  std::string dir;  // DIR/step-N
  int64_t step = 0;
  nlohmann::json run;  // what commit_checkpoint was given
  // DIR given: a line naming whole checkpoints of higher steps than the one
  // taken (an earlier run's), for the caller to print once; else empty.
  std::string note;
  int stages() const { return static_cast<int>(run["layers"].size()); }
};
// `path` is a checkpoint directory (DIR: the whole step-N committed last,
// by its state.json's time, which `latest` names unless a kill fell between
// the two) or one checkpoint (DIR/step-N). UserError when there is none or it is
// inconsistent (a stage file missing or of another step).
ResumePoint find_checkpoint(const std::string& path);

// Resuming needs the run to agree with the checkpoint on `fields` (of
// `want`, what this run would record): a UserError naming the first one
// that differs, with both values.
void require_same_run(const ResumePoint& p, const nlohmann::json& want, const std::vector<std::string>& fields);
// The model's resolved spec (zoo options expanded) as 16 hex digits, which
// checkpoints record as "model_spec": two models of one name whose options
// keep every tensor's shape (heads, dropout) differ there.
std::string model_fingerprint(const Model& m);
// UserError when the checkpoint records another model_spec (checkpoints
// written before it was recorded are not checked).
void require_same_model(const ResumePoint& p, const Model& m);
// A line for the user when the checkpoint was trained in another precision
// (allowed: master weights are FP32 either way), else empty.
std::string precision_note(const ResumePoint& p, const std::string& precision);
// A line for the user when a cosine schedule decays over another number of
// steps than the checkpoint's run planned (a larger --minibatches): the
// rate at the checkpoint's step before and after; else empty. Checkpoints
// that do not record it ("lr_total_steps") get none.
std::string lr_schedule_note(const ResumePoint& p, const LrSchedule& lr);

// Every tensor of every stage file, by name (replicas are stored once).
NamedTensors checkpoint_tensors(const ResumePoint& p);
// Only the tensors of `stores` - their weights and buffers, optimizer
// slots and older weight versions - from whichever stage files hold them
// (any plan's), matched on the files' headers and read by byte range: a
// run rank reads its own stages' share, not the model's.
NamedTensors checkpoint_tensors_of(const ResumePoint& p, const std::vector<const ParameterStore*>& stores);
// The weights and buffers alone ("{layer}.{name}"): what --save would have
// written at the checkpoint's step. For starting another run from them.
NamedTensors checkpoint_weights(const std::string& path);

// Fills weights, buffers and optimizer slots of one stage (any layer
// range) from a checkpoint's tensors; UserError naming what is missing.
void load_checkpoint_state(const NamedTensors& all, const std::string& source, ParameterStore& weights,
                           OptimizerState& optimizer);
// The older weight version `v` of this stage's parameters, if stored.
bool load_checkpoint_version(const NamedTensors& all, int64_t v, ParameterStore& into);
// The older weight versions replica `replica` of stage `stage` held,
// shaped like `like` (whose buffers they share).
std::map<int64_t, ParameterStore> load_older_versions(const ResumePoint& p, int stage, int replica,
                                                      const NamedTensors& all, const ParameterStore& like);
// Stage file metadata of checkpoint stage `stage` (updates, newest_version...).
std::map<std::string, std::string> stage_checkpoint_metadata(const ResumePoint& p, int stage);

}  // namespace pd

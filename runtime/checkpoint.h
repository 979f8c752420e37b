#pragma once
// Checkpoints of a pipelined run (docs/design.md §8): one safetensors file per
// stage (weights, BatchNorm buffers, optimizer slots) and a JSON state.
//
// Layout: DIR/step-N/{stage-S.safetensors, state.json} and DIR/latest
// naming the newest complete one. A checkpoint is written into
// DIR/step-N.partial and renamed once every stage's file is there, so a
// crash mid-write never leaves a checkpoint that looks complete.
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "runtime/executor.h"

namespace pd {

std::string checkpoint_partial_dir(const std::string& dir, int64_t step);
// Creates DIR/step-N.partial (every writer may call it).
void prepare_checkpoint(const std::string& dir, int64_t step);
void write_stage_checkpoint(const std::string& dir, int64_t step, const StageState& s);
// After every stage wrote its file: state.json, rename, DIR/latest.
void commit_checkpoint(const std::string& dir, int64_t step, const nlohmann::json& run);

struct ResumePoint {
  std::string dir;  // DIR/step-N
  int64_t step = 0;
  nlohmann::json run;  // what commit_checkpoint was given
};
// `path` is a checkpoint directory (DIR, whose `latest` is used) or one
// checkpoint (DIR/step-N). UserError when there is none.
ResumePoint find_checkpoint(const std::string& path);
// Loads stage s's file into s (same layout; UserError on mismatch).
void load_stage_checkpoint(const ResumePoint& p, StageState& s);

}  // namespace pd

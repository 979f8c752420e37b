#include "runtime/checkpoint.h"

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "core/atomic_file.h"
#include "core/checked.h"
#include "core/error.h"
#include "core/input_file.h"
#include "core/safetensors.h"

namespace fs = std::filesystem;

namespace pd {

namespace {
std::string step_name(int64_t step) { return cat("step-", step); }
std::string stage_file(const std::string& d, int stage) { return cat(d, "/stage-", stage, ".safetensors"); }

constexpr const char* kFormat = "pipedream-checkpoint/1";
}  // namespace

std::string checkpoint_partial_dir(const std::string& dir, int64_t step) {
  return cat(dir, "/", step_name(step), ".partial");
}

void prepare_checkpoint(const std::string& dir, int64_t step) {
  std::error_code ec;
  fs::create_directories(checkpoint_partial_dir(dir, step), ec);
  if (ec) throw UserError(cat("cannot create the checkpoint directory ", dir, ": ", ec.message()));
}

void write_stage_checkpoint(const std::string& dir, int64_t step, const StageState& s) {
  prepare_checkpoint(dir, step);
  NamedTensors t = s.weights.named_tensors();
  for (size_t k = 0; k < s.optimizer.slots.size(); ++k) t.emplace_back(cat("optimizer.slot.", k), s.optimizer.slots[k]);
  save_safetensors(stage_file(checkpoint_partial_dir(dir, step), s.stage), t,
                   {{"stage", std::to_string(s.stage)},
                    {"step", std::to_string(step)},
                    {"optimizer_step", std::to_string(s.optimizer.step)},
                    {"updates", std::to_string(s.updates)}});
}

void commit_checkpoint(const std::string& dir, int64_t step, const nlohmann::json& run) {
  const std::string partial = checkpoint_partial_dir(dir, step);
  nlohmann::json state = run;
  state["format"] = kFormat;
  state["step"] = step;
  write_file_atomically(partial + "/state.json", state.dump(2) + "\n");
  const std::string final_dir = cat(dir, "/", step_name(step));
  std::error_code ec;
  fs::remove_all(final_dir, ec);
  fs::rename(partial, final_dir);
  write_file_atomically(dir + "/latest", step_name(step) + "\n");
}

namespace {

// DIR/step-N itself, or the checkpoint DIR/latest names.
std::string checkpoint_step_dir(const std::string& path) {
  if (fs::exists(path + "/state.json")) return path;
  std::ifstream latest(path + "/latest");
  std::string name;
  if (!(latest >> name))
    throw UserError(cat("--resume ", path, ": no checkpoint there (neither state.json nor a 'latest' file)"));
  if (name.rfind("step-", 0) != 0 || name.find('/') != std::string::npos)
    throw UserError(cat("--resume ", path, ": 'latest' must name a step-N folder, got '", name, "'"));
  return cat(path, "/", name);
}

nlohmann::json read_state(const std::string& file) {
  std::error_code ec;
  if (!fs::exists(file, ec)) throw UserError(cat("--resume: ", file, " is missing (incomplete checkpoint?)"));
  const std::string text = read_input_file(file, "the checkpoint state");
  check_json_depth(text, "--resume: " + file);
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw UserError(cat("--resume: ", file, " is not valid JSON: ", e.what()));
  }
}

// The fields of state.json that this file reads itself or that a resumed
// run compares (a wrong type there must not surface as a JSON exception).
void check_state_fields(const nlohmann::json& run, const std::string& file) {
  if (!run.is_object()) throw UserError(cat("--resume: ", file, " must hold a JSON object"));
  if (!run.contains("format"))
    throw UserError(cat("--resume: ", file, ": field 'format' is missing (expected \"", kFormat, "\")"));
  const std::string format = checked::string(run["format"], {file, "field 'format'"});
  if (format != kFormat)
    throw UserError(cat("--resume: ", file, ": field 'format' is '", format, "'; this pipedream reads \"", kFormat,
                        "\" (a checkpoint from another version?)"));
  if (!run.contains("step")) throw UserError(cat("--resume: ", file, ": field 'step' is missing"));
  if (run.contains("checkpoint_every"))
    checked::integer(run["checkpoint_every"], {file, "field 'checkpoint_every'"}, 0, checked::kMaxCount);
  if (!run.contains("layers") || !run["layers"].is_array() || run["layers"].empty())
    throw UserError(cat("--resume: ", file, ": field 'layers' must list each stage's [first, last] layer"));
}

// Every stage file is there and was written at the same step as state.json.
void check_stage_files(const ResumePoint& p, size_t stages) {
  for (size_t s = 0; s < stages; ++s) {
    const std::string file = stage_file(p.dir, static_cast<int>(s));
    if (!fs::exists(file)) throw UserError(cat("--resume: ", file, " is missing (incomplete checkpoint?)"));
    const auto meta = read_safetensors_metadata(file);
    auto it = meta.find("step");
    if (it == meta.end()) throw UserError(cat("--resume: ", file, ": metadata 'step' is missing (written by an older pipedream?)"));
    const int64_t step = checked::parse_integer(it->second, {file, "metadata 'step'"}, 1, checked::kMaxCount);
    if (step != p.step)
      throw UserError(cat("--resume: ", p.dir, "/state.json: field 'step' is ", p.step, " but ", file,
                          " was written at step ", step, "; the checkpoint is inconsistent"));
  }
}

}  // namespace

ResumePoint find_checkpoint(const std::string& path) {
  ResumePoint p;
  p.dir = checkpoint_step_dir(path);
  const std::string file = p.dir + "/state.json";
  p.run = read_state(file);
  check_state_fields(p.run, file);
  p.step = checked::integer(p.run["step"], {file, "field 'step'"}, 1, checked::kMaxCount);
  check_stage_files(p, p.run["layers"].size());
  return p;
}

void load_stage_checkpoint(const ResumePoint& p, StageState& s) {
  std::map<std::string, std::string> meta;
  const std::string file = stage_file(p.dir, s.stage);
  NamedTensors t = load_safetensors(file, &meta);
  s.weights.load(t, file);
  for (size_t k = 0; k < s.optimizer.slots.size(); ++k) {
    const std::string name = cat("optimizer.slot.", k);
    auto it = std::find_if(t.begin(), t.end(), [&](const auto& e) { return e.first == name; });
    if (it == t.end() || it->second.shape() != s.optimizer.slots[k].shape())
      throw UserError(cat(file, ": optimizer state '", name, "' is missing or has another shape (other optimizer?)"));
    s.optimizer.slots[k].copy_from(it->second);
  }
  for (const char* key : {"optimizer_step", "updates"})
    if (!meta.count(key)) throw UserError(cat(file, ": metadata '", key, "' is missing"));
  s.optimizer.step = checked::parse_integer(meta["optimizer_step"], {file, "metadata 'optimizer_step'"}, 0, checked::kMaxCount);
  s.updates = checked::parse_integer(meta["updates"], {file, "metadata 'updates'"}, 0, checked::kMaxCount);
}

}  // namespace pd

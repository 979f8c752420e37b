#include "runtime/checkpoint.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>

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
std::string replica_file(const std::string& d, int stage, int replica) {
  return cat(d, "/stage-", stage, ".replica-", replica, ".safetensors");
}

constexpr const char* kFormat = "pipedream-checkpoint/2";
}  // namespace

std::string checkpoint_partial_dir(const std::string& dir, int64_t step) {
  return cat(dir, "/", step_name(step), ".partial");
}

void prepare_checkpoint(const std::string& dir, int64_t step) {
  std::error_code ec;
  fs::create_directories(checkpoint_partial_dir(dir, step), ec);
  if (ec) throw UserError(cat("cannot create the checkpoint directory ", dir, ": ", ec.message()));
}

namespace {
std::string slot_name(size_t slot, const std::string& param) { return cat("optimizer.", slot, ".", param); }
std::string version_name(int64_t v, const std::string& param) { return cat("version.", v, ".", param); }
}  // namespace

void write_stage_checkpoint(const std::string& dir, int64_t step, const StageCheckpoint& s) {
  prepare_checkpoint(dir, step);
  NamedTensors t = s.weights->named_tensors();
  const std::vector<std::string>& names = s.weights->param_names();
  const std::vector<Tensor>& slots = s.optimizer->slots;
  const size_t per_param = names.empty() ? 0 : slots.size() / names.size();
  // A tie copy's slots and versions are its owner's (models/ties.h): stored once, by the owner's stage.
  for (size_t k = 0; k < slots.size(); ++k)
    if (!s.weights->is_tie_copy(k / per_param)) t.emplace_back(slot_name(k % per_param, names[k / per_param]), slots[k]);
  for (const auto& [v, w] : s.older)
    for (size_t i = 0; i < names.size(); ++i)
      if (!w->is_tie_copy(i)) t.emplace_back(version_name(v, names[i]), w->all_params()[i]);
  save_safetensors(stage_file(checkpoint_partial_dir(dir, step), s.stage), t,
                   {{"stage", std::to_string(s.stage)},
                    {"step", std::to_string(step)},
                    {"optimizer_step", std::to_string(s.optimizer->step)},
                    {"updates", std::to_string(s.updates)},
                    {"newest_version", std::to_string(s.newest_version)},
                    {"older_versions", [&] {
                       std::string list;
                       for (const auto& [v, w] : s.older) list += (list.empty() ? "" : ",") + std::to_string(v);
                       return list;
                     }()}});
}

void write_replica_versions(const std::string& dir, int64_t step, int stage, int replica,
                            const std::map<int64_t, const ParameterStore*>& older) {
  prepare_checkpoint(dir, step);
  NamedTensors t;
  std::string list;
  for (const auto& [v, w] : older) {
    for (size_t i = 0; i < w->param_names().size(); ++i) t.emplace_back(version_name(v, w->param_names()[i]), w->all_params()[i]);
    list += (list.empty() ? "" : ",") + std::to_string(v);
  }
  save_safetensors(replica_file(checkpoint_partial_dir(dir, step), stage, replica), t,
                   {{"stage", std::to_string(stage)}, {"step", std::to_string(step)}, {"older_versions", list}});
}

namespace {

// DIR's step-N folders (whole or not: never the .partial of one being
// written), by N.
std::vector<std::pair<int64_t, fs::path>> step_folders(const std::string& dir) {
  std::vector<std::pair<int64_t, fs::path>> found;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (name.size() <= 5 || name.size() > 23 || name.rfind("step-", 0) != 0) continue;
    if (!std::all_of(name.begin() + 5, name.end(), [](char c) { return c >= '0' && c <= '9'; })) continue;
    found.emplace_back(std::stoll(name.substr(5)), e.path());
  }
  std::sort(found.begin(), found.end());
  return found;
}

}  // namespace

void remove_partial_checkpoints(const std::string& dir, int64_t before) {
  std::error_code ec;
  std::vector<fs::path> stale;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    const size_t digits = name.size() - std::min(name.size(), std::string(".partial").size());
    if (name.size() <= 13 || name.size() > 31 || name.rfind("step-", 0) != 0 || name.substr(digits) != ".partial") continue;
    if (!std::all_of(name.begin() + 5, name.begin() + static_cast<std::ptrdiff_t>(digits),
                     [](char c) { return c >= '0' && c <= '9'; }))
      continue;
    if (std::stoll(name.substr(5, digits - 5)) < before) stale.push_back(e.path());
  }
  for (const fs::path& p : stale) fs::remove_all(p, ec);
}

namespace {

// The step-N folders before the keep newest up to `step` (the one just
// committed, which `latest` names). Folders past it (a run resumed from an
// earlier checkpoint into the same folder) are left alone.
void remove_old_checkpoints(const std::string& dir, int64_t step, int64_t keep) {
  auto found = step_folders(dir);
  std::erase_if(found, [&](const auto& f) { return f.first > step; });
  if (int64_t(found.size()) <= keep) return;
  found.resize(found.size() - size_t(keep));
  std::error_code ec;
  // Renamed first: a process killed while it removes the files leaves a
  // step-N.partial (ignored, and removed by the next commit), never a step-N
  // with state.json and only some of its stage files.
  for (const auto& [older, path] : found) {
    const fs::path doomed = checkpoint_partial_dir(dir, older);
    fs::remove_all(doomed, ec);
    fs::rename(path, doomed, ec);
    fs::remove_all(ec ? path : doomed, ec);
  }
}

}  // namespace

void commit_checkpoint(const std::string& dir, int64_t step, const nlohmann::json& run, int64_t keep) {
  const std::string partial = checkpoint_partial_dir(dir, step);
  nlohmann::json state = run;
  state["format"] = kFormat;
  state["step"] = step;
  write_file_atomically(partial + "/state.json", state.dump(2) + "\n");
  const std::string final_dir = cat(dir, "/", step_name(step));
  std::error_code ec;
  fs::remove_all(final_dir, ec);
  fs::rename(partial, final_dir);
  // A commit killed while it wrote `latest` left its temporary file: the
  // reporter alone writes `latest`, so any such file is stale.
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (e.path().filename().string().rfind("latest.tmp.", 0) == 0) fs::remove(e.path(), ec);
  write_file_atomically(dir + "/latest", step_name(step) + "\n");
  // Every worker is past the steps before this one: their unfinished folders are an interrupted run's.
  remove_partial_checkpoints(dir, step);
  if (keep > 0) remove_old_checkpoints(dir, step, keep);
}

namespace {

// The largest N of DIR's whole checkpoints (a step-N folder holding
// state.json, which the commit writes before the rename that names it);
// -1: none.
// The whole checkpoint committed last: the newest state.json, not the
// highest step. A run resumed from step-20 into a folder that still holds
// an abandoned run's step-60 commits step-25 after it; and `latest` lags
// when a run was killed between a commit's rename and that file's update.
int64_t newest_whole_step(const std::string& dir) {
  int64_t newest = -1;
  fs::file_time_type newest_time{};
  std::error_code ec;
  for (const auto& [step, path] : step_folders(dir)) {
    const auto t = fs::last_write_time(path / "state.json", ec);
    if (ec) continue;
    if (newest < 0 || t >= newest_time) newest = step, newest_time = t;
  }
  return newest;
}

// DIR/step-N itself, or DIR's last committed whole checkpoint (*note then
// names whole checkpoints of higher steps left there by an earlier run).
std::string checkpoint_step_dir(const std::string& path, std::string* note) {
  if (fs::exists(path + "/state.json")) return path;
  const int64_t newest = newest_whole_step(path);
  if (newest >= 0) {
    std::string later;
    std::error_code ec;
    for (const auto& [step, folder] : step_folders(path))
      if (step > newest && fs::exists(folder / "state.json", ec)) later += (later.empty() ? "" : ", ") + step_name(step);
    if (!later.empty() && note)
      *note = cat("note: --resume ", path, " takes ", step_name(newest), ", the checkpoint committed last; ", later,
                  " there ", later.find(',') == std::string::npos ? "is" : "are",
                  " from an earlier run (give its folder to resume from it)");
    return cat(path, "/", step_name(newest));
  }
  std::ifstream latest(path + "/latest");
  std::string name;
  if (!(latest >> name))
    throw UserError(cat("--resume ", path, ": no checkpoint there (no step-N folder with a state.json)"));
  throw UserError(cat("--resume ", path, ": 'latest' names ", name, ", which is not a whole checkpoint (no state.json)"));
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
  p.dir = checkpoint_step_dir(path, &p.note);
  const std::string file = p.dir + "/state.json";
  p.run = read_state(file);
  check_state_fields(p.run, file);
  p.step = checked::integer(p.run["step"], {file, "field 'step'"}, 1, checked::kMaxCount);
  check_stage_files(p, p.run["layers"].size());
  return p;
}

void require_same_run(const ResumePoint& p, const nlohmann::json& want, const std::vector<std::string>& fields) {
  for (const std::string& key : fields) {
    const nlohmann::json& mine = want.at(key);
    if (p.run.contains(key) && p.run[key] == mine) continue;
    throw UserError(cat("--resume ", p.dir, ": the checkpoint has ", key, " = ",
                        p.run.contains(key) ? p.run[key].dump() : "(missing)", " but this run has ", mine.dump(),
                        "; resume with the same ", key));
  }
}

std::string model_fingerprint(const Model& m) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a, 64 bits: the same on every build
  for (unsigned char c : m.spec.dump()) h = (h ^ c) * 1099511628211ull;
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(h));
  return hex;
}

void require_same_model(const ResumePoint& p, const Model& m) {
  if (!p.run.contains("model_spec") || p.run["model_spec"] == model_fingerprint(m)) return;
  throw UserError(cat("--resume ", p.dir, ": the checkpoint was written by ", m.name,
                      " with another spec (other --model-options, or another spec file): resume with the model it "
                      "trained (`pipedream models --model ... --spec` prints a model's spec)"));
}

std::string precision_note(const ResumePoint& p, const std::string& precision) {
  if (!p.run.contains("precision") || !p.run["precision"].is_string() || p.run["precision"] == precision) return "";
  return cat("note: the checkpoint was trained with --precision ", p.run["precision"].get<std::string>(),
             ", this run uses ", precision, ": it continues from the FP32 master weights, so its result differs from "
             "an uninterrupted ", p.run["precision"].get<std::string>(), " run");
}

std::string lr_schedule_note(const ResumePoint& p, const LrSchedule& lr) {
  if (lr.kind != LrShape::cosine || !p.run.contains("lr_total_steps") || !p.run["lr_total_steps"].is_number_integer())
    return "";
  LrSchedule before = lr;
  before.total_steps = p.run["lr_total_steps"].get<int64_t>();
  if (before.total_steps == lr.total_steps || before.total_steps <= before.warmup_steps) return "";
  char rates[96];
  std::snprintf(rates, sizeof rates, "%g to %g", double(before.lr_at(p.step)), double(lr.lr_at(p.step)));
  return cat("note: --lr-schedule cosine is stretched from the checkpoint run's ", before.total_steps, " steps to ",
             lr.total_steps, ": the learning rate at step ", p.step, " goes from ", rates, " (--minibatches ",
             before.total_steps, " keeps the original schedule)");
}

NamedTensors checkpoint_tensors(const ResumePoint& p) {
  NamedTensors all;
  for (int s = 0; s < p.stages(); ++s) {
    NamedTensors t = load_safetensors(stage_file(p.dir, s));
    all.insert(all.end(), std::make_move_iterator(t.begin()), std::make_move_iterator(t.end()));
    // Replicas hold the same version under the same name: any copy will do.
    for (int r = 1; fs::exists(replica_file(p.dir, s, r)); ++r) {
      NamedTensors v = load_safetensors(replica_file(p.dir, s, r));
      all.insert(all.end(), std::make_move_iterator(v.begin()), std::make_move_iterator(v.end()));
    }
  }
  return all;
}

namespace {

// "optimizer.{k}.{x}" and "version.{v}.{x}" -> "{x}"; other names as they are.
std::string stored_for(const std::string& name) {
  for (const char* prefix : {"optimizer.", "version."}) {
    const size_t n = std::strlen(prefix);
    if (name.compare(0, n, prefix) != 0) continue;
    size_t k = n;
    while (k < name.size() && std::isdigit(static_cast<unsigned char>(name[k]))) ++k;
    if (k > n && k < name.size() && name[k] == '.') return name.substr(k + 1);
  }
  return name;
}

}  // namespace

NamedTensors checkpoint_tensors_of(const ResumePoint& p, const std::vector<const ParameterStore*>& stores) {
  std::set<std::string> own;
  for (const ParameterStore* w : stores) {
    for (size_t i = 0; i < w->param_names().size(); ++i) own.insert(w->saved_name(i));
    own.insert(w->buffer_names().begin(), w->buffer_names().end());
  }
  std::vector<std::string> files;
  for (int s = 0; s < p.stages(); ++s) {
    files.push_back(stage_file(p.dir, s));
    for (int r = 1; fs::exists(replica_file(p.dir, s, r)); ++r) files.push_back(replica_file(p.dir, s, r));
  }
  std::set<std::string> taken;  // replicas hold the same version under the same name: one copy
  NamedTensors out;
  for (const std::string& file : files) {
    std::vector<std::string> names;
    for (const SafetensorsEntry& e : read_safetensors_entries(file))
      if (own.count(stored_for(e.name)) && taken.insert(e.name).second) names.push_back(e.name);
    if (names.empty()) continue;
    NamedTensors t = load_safetensors_named(file, names);
    out.insert(out.end(), std::make_move_iterator(t.begin()), std::make_move_iterator(t.end()));
  }
  return out;
}

NamedTensors checkpoint_weights(const std::string& path) {
  NamedTensors all = checkpoint_tensors(find_checkpoint(path)), out;
  for (auto& [name, t] : all)
    if (name.rfind("optimizer.", 0) != 0 && name.rfind("version.", 0) != 0) out.emplace_back(name, std::move(t));
  return out;
}

void load_checkpoint_state(const NamedTensors& all, const std::string& source, ParameterStore& weights,
                           OptimizerState& optimizer) {
  weights.load(all, source);
  std::map<std::string, const Tensor*> by_name;
  for (const auto& [n, t] : all) by_name[n] = &t;
  const std::vector<std::string>& names = weights.param_names();
  const size_t per_param = names.empty() ? 0 : optimizer.slots.size() / names.size();
  for (size_t k = 0; k < optimizer.slots.size(); ++k) {
    const std::string name = slot_name(k % per_param, weights.saved_name(k / per_param));
    auto it = by_name.find(name);
    if (it == by_name.end() || it->second->shape() != optimizer.slots[k].shape())
      throw UserError(cat(source, ": optimizer state '", name,
                          "' is missing or has another shape (a checkpoint of another optimizer?)"));
    optimizer.slots[k].copy_from(*it->second);
  }
}

bool load_checkpoint_version(const NamedTensors& all, int64_t v, ParameterStore& into) {
  std::map<std::string, const Tensor*> by_name;
  for (const auto& [n, t] : all) by_name[n] = &t;
  const std::vector<std::string>& names = into.param_names();
  for (size_t i = 0; i < names.size(); ++i) {
    auto it = by_name.find(version_name(v, into.saved_name(i)));
    if (it == by_name.end()) return false;
    into.all_params()[i].copy_from(*it->second);
  }
  return true;
}

std::map<int64_t, ParameterStore> load_older_versions(const ResumePoint& p, int stage, int replica,
                                                      const NamedTensors& all, const ParameterStore& like) {
  const std::string file = replica == 0 ? stage_file(p.dir, stage) : replica_file(p.dir, stage, replica);
  if (!fs::exists(file)) throw UserError(cat("--resume: ", file, " is missing (incomplete checkpoint?)"));
  const auto meta = read_safetensors_metadata(file);
  std::map<int64_t, ParameterStore> out;
  auto it = meta.find("older_versions");
  if (it == meta.end() || it->second.empty()) return out;
  std::string list = it->second;
  for (size_t start = 0; start <= list.size();) {
    const size_t end = std::min(list.find(',', start), list.size());
    const int64_t v = checked::parse_integer(list.substr(start, end - start), {file, "metadata 'older_versions'"}, 0,
                                             checked::kMaxCount);
    ParameterStore w = like.clone_params();
    if (!load_checkpoint_version(all, v, w))
      throw UserError(cat(file, ": weight version ", v, " is listed in 'older_versions' but not stored"));
    out.emplace(v, std::move(w));
    start = end + 1;
  }
  return out;
}

std::map<std::string, std::string> stage_checkpoint_metadata(const ResumePoint& p, int stage) {
  return read_safetensors_metadata(stage_file(p.dir, stage));
}

}  // namespace pd

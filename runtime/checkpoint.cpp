#include "runtime/checkpoint.h"

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "core/safetensors.h"

namespace fs = std::filesystem;

namespace pd {

namespace {
std::string step_name(int64_t step) { return cat("step-", step); }
std::string stage_file(const std::string& d, int stage) { return cat(d, "/stage-", stage, ".safetensors"); }

void write_atomically(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp);
    f << text;
    if (!f) throw RuntimeFailure(cat("cannot write ", tmp));
  }
  fs::rename(tmp, path);
}
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
                    {"optimizer_step", std::to_string(s.optimizer.step)},
                    {"updates", std::to_string(s.updates)}});
}

void commit_checkpoint(const std::string& dir, int64_t step, const nlohmann::json& run) {
  const std::string partial = checkpoint_partial_dir(dir, step);
  nlohmann::json state = run;
  state["format"] = "pipedream-checkpoint/1";
  state["step"] = step;
  write_atomically(partial + "/state.json", state.dump(2) + "\n");
  const std::string final_dir = cat(dir, "/", step_name(step));
  std::error_code ec;
  fs::remove_all(final_dir, ec);
  fs::rename(partial, final_dir);
  write_atomically(dir + "/latest", step_name(step) + "\n");
}

ResumePoint find_checkpoint(const std::string& path) {
  std::string d = path;
  if (!fs::exists(d + "/state.json")) {
    std::ifstream latest(d + "/latest");
    std::string name;
    if (!(latest >> name))
      throw UserError(cat("--resume ", path, ": no checkpoint there (neither state.json nor a 'latest' file)"));
    d = cat(path, "/", name);
  }
  std::ifstream f(d + "/state.json");
  if (!f) throw UserError(cat("--resume: ", d, "/state.json is missing (incomplete checkpoint?)"));
  ResumePoint p;
  p.dir = d;
  try {
    f >> p.run;
    p.step = p.run.at("step").get<int64_t>();
  } catch (const std::exception& e) {
    throw UserError(cat("--resume: ", d, "/state.json is malformed: ", e.what()));
  }
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
  try {
    s.optimizer.step = std::stoll(meta.at("optimizer_step"));
    s.updates = std::stoll(meta.at("updates"));
  } catch (const std::exception&) {
    throw UserError(cat(file, ": metadata lacks optimizer_step/updates"));
  }
}

}  // namespace pd

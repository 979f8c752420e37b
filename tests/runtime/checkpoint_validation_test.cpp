// find_checkpoint validates a checkpoint before any work: state.json's
// format and step, and that every stage file was written at that step.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>

#include "core/error.h"
#include "core/safetensors.h"
#include "runtime/checkpoint.h"

namespace pd {
namespace {

namespace fs = std::filesystem;

const char* kState = R"({"format": "pipedream-checkpoint/2", "step": 4, "checkpoint_every": 4,
  "layers": [[0, 3], [4, 7]], "model": "mlp"})";

struct CheckpointDir {
  fs::path root;
  explicit CheckpointDir(const std::string& name) : root(fs::temp_directory_path() / ("pd_ckpt_validation_" + name)) {
    fs::remove_all(root);
    fs::create_directories(root / "step-4");
    std::ofstream(root / "latest") << "step-4\n";
  }
  ~CheckpointDir() { fs::remove_all(root); }
  void state(const std::string& text) const { std::ofstream(root / "step-4" / "state.json") << text; }
  void stage(int s, const std::string& step) const {
    save_safetensors((root / "step-4" / ("stage-" + std::to_string(s) + ".safetensors")).string(),
                     {{"w", Tensor::zeros({2})}}, {{"stage", std::to_string(s)}, {"step", step},
                                                   {"optimizer_step", step}, {"updates", step}});
  }
  // A complete, consistent checkpoint whose state.json is `state_text`.
  void fill(const std::string& state_text) const {
    state(state_text);
    stage(0, "4");
    stage(1, "4");
  }
};

std::string resume_error(const fs::path& dir) {
  try {
    find_checkpoint(dir.string());
  } catch (const UserError& e) {
    return e.what();
  }
  return "(no UserError)";
}

std::string with_step(const std::string& step) {
  std::string s = kState;
  s.replace(s.find("\"step\": 4"), 9, "\"step\": " + step);
  return s;
}

TEST(CheckpointValidation, AConsistentCheckpointIsFound) {
  CheckpointDir d("ok");
  d.fill(kState);
  const ResumePoint p = find_checkpoint(d.root.string());
  EXPECT_EQ(p.step, 4);
  EXPECT_EQ(p.dir, (d.root / "step-4").string());
}

// 1e308 and 2^64 + 4 printed "step -9223372036854775808" and then grew
// until killed; -1 failed an internal check (exit 1).
TEST(CheckpointValidation, StepsThatDoNotFitAreRefusedNamingTheField) {
  for (const char* step : {"1e308", "18446744073709551620", "-1", "0", "4.5", "\"4\""}) {
    CheckpointDir d("step");
    d.fill(with_step(step));
    const std::string msg = resume_error(d.root);
    EXPECT_NE(msg.find("state.json: field 'step' must be an integer"), std::string::npos) << step << ": " << msg;
  }
}

TEST(CheckpointValidation, StepDisagreeingWithTheStageFilesIsRefused) {
  CheckpointDir d("disagree");
  d.fill(with_step("8"));
  const std::string msg = resume_error(d.root);
  EXPECT_NE(msg.find("field 'step' is 8 but"), std::string::npos) << msg;
  EXPECT_NE(msg.find("stage-0.safetensors was written at step 4"), std::string::npos) << msg;
}

TEST(CheckpointValidation, MissingStageFileIsRefused) {
  CheckpointDir d("missing_stage");
  d.state(kState);
  d.stage(0, "4");
  EXPECT_NE(resume_error(d.root).find("stage-1.safetensors is missing"), std::string::npos) << resume_error(d.root);
}

TEST(CheckpointValidation, MissingOrFutureFormatIsRefused) {
  CheckpointDir d("format");
  std::string no_format = kState;
  const std::string format_field = "\"format\": \"pipedream-checkpoint/2\", ";
  no_format.replace(no_format.find(format_field), format_field.size(), "");
  d.fill(no_format);
  EXPECT_NE(resume_error(d.root).find("field 'format' is missing"), std::string::npos) << resume_error(d.root);
  std::string future = kState;
  future.replace(future.find("checkpoint/2"), 12, "checkpoint/9");
  d.fill(future);
  EXPECT_NE(resume_error(d.root).find("field 'format' is 'pipedream-checkpoint/9'"), std::string::npos)
      << resume_error(d.root);
}

TEST(CheckpointValidation, WrongTypesAreUserErrorsNotJsonExceptions) {
  CheckpointDir d("types");
  std::string every = kState;
  every.replace(every.find("\"checkpoint_every\": 4"), 21, "\"checkpoint_every\": \"4\"");
  d.fill(every);
  EXPECT_NE(resume_error(d.root).find("field 'checkpoint_every'"), std::string::npos) << resume_error(d.root);
  d.fill("[1, 2]");
  EXPECT_NE(resume_error(d.root).find("must hold a JSON object"), std::string::npos) << resume_error(d.root);
  d.fill("{\"format\": ");
  EXPECT_NE(resume_error(d.root).find("not valid JSON"), std::string::npos) << resume_error(d.root);
}

TEST(CheckpointValidation, OverlappingDataOffsetsInAStageFileAreRefused) {
  CheckpointDir d("overlap");
  d.fill(kState);
  const std::string header = R"({"__metadata__": {"step": "4", "optimizer_step": "4", "updates": "4"},
    "a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
    "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}})";
  std::ofstream f(d.root / "step-4" / "stage-1.safetensors", std::ios::binary | std::ios::trunc);
  const uint64_t n = header.size();
  f.write(reinterpret_cast<const char*>(&n), 8);
  f << header << std::string(12, '\0');
  f.close();
  EXPECT_NE(resume_error(d.root).find("overlap"), std::string::npos) << resume_error(d.root);
}

// A run killed between a commit's rename and its update of `latest` left
// `latest` one behind (and its temporary file): --resume DIR takes the
// newest whole step-N all the same, and `latest` is never used as a path.
TEST(CheckpointValidation, ResumeTakesTheNewestWholeCheckpointNotWhatLatestSays) {
  CheckpointDir d("newest");
  d.fill(kState);
  std::ofstream(d.root / "latest") << "../../etc\n";
  EXPECT_EQ(find_checkpoint(d.root.string()).dir, (d.root / "step-4").string());
  // step-8 whole, step-12 still partial (no state.json), latest at step-4.
  fs::create_directories(d.root / "step-8");
  std::ofstream(d.root / "step-8" / "state.json") << with_step("8");
  for (int s = 0; s < 2; ++s)
    save_safetensors((d.root / "step-8" / ("stage-" + std::to_string(s) + ".safetensors")).string(),
                     {{"w", Tensor::zeros({2})}},
                     {{"stage", std::to_string(s)}, {"step", "8"}, {"optimizer_step", "8"}, {"updates", "8"}});
  fs::create_directories(d.root / "step-12.partial");
  fs::create_directories(d.root / "step-12");  // renamed before its state.json? never: ignored all the same
  std::ofstream(d.root / "latest") << "step-4\n";
  std::ofstream(d.root / "latest.tmp.abc123") << "step-";
  const ResumePoint p = find_checkpoint(d.root.string());
  EXPECT_EQ(p.step, 8);
  EXPECT_EQ(p.dir, (d.root / "step-8").string());
}

TEST(CheckpointValidation, AFolderWithoutAWholeCheckpointIsRefused) {
  CheckpointDir d("none");  // step-4 without state.json, latest naming it
  EXPECT_NE(resume_error(d.root).find("'latest' names step-4, which is not a whole checkpoint"), std::string::npos)
      << resume_error(d.root);
  fs::remove(d.root / "latest");
  EXPECT_NE(resume_error(d.root).find("no checkpoint there"), std::string::npos) << resume_error(d.root);
}

}  // namespace
}  // namespace pd

// --resume on a run rank reads its own stages' tensors of a checkpoint, by
// byte range from the stage files' headers (checkpoint_tensors_of), and
// loads exactly what reading every file whole loaded.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>

#include "runtime/checkpoint.h"
#include "pipeline_fixture.h"

namespace pd {
namespace {

namespace fs = std::filesystem;

size_t bytes_of(const NamedTensors& t) {
  size_t out = 0;
  for (const auto& [n, x] : t) out += x.nbytes();
  return out;
}

bool same_bytes(const std::vector<Tensor>& a, const std::vector<Tensor>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i].nbytes() != b[i].nbytes() || std::memcmp(a[i].raw(), b[i].raw(), a[i].nbytes()) != 0) return false;
  return true;
}

// Adam's two slots per parameter, filled so that no two tensors are equal.
OptimizerState adam_state(const ParameterStore& w, float seed) {
  OptimizerState o;
  o.step = 6;
  for (const Tensor& p : w.all_params())
    for (int slot = 0; slot < 2; ++slot) {
      Tensor t = Tensor::zeros(p.shape());
      for (int64_t i = 0; i < t.numel(); ++i) t.f32()[i] = seed + float(slot) + 1e-3f * float(i % 97);
      o.slots.push_back(t);
    }
  return o;
}

// An 8-stage mlp (2 layers a stage) checkpointed at step 6 with Adam, stage
// 3 keeping an older weight version; stage 3's rank resumes from it.
TEST(CheckpointStageRead, ARankReadsItsStageAloneAndLoadsWhatTheWholeFilesGive) {
  const Model m = resolve_model("mlp", "", "hidden=256,depth=7");
  ASSERT_EQ(m.size(), 16);
  const fs::path dir = fs::temp_directory_path() / "pd_ckpt_stage_read";
  fs::remove_all(dir);
  nlohmann::json run = {{"layers", nlohmann::json::array()}, {"drained", false}};
  std::vector<ParameterStore> stores;
  std::vector<OptimizerState> optimizers;
  for (int s = 0; s < 8; ++s) {
    stores.push_back(ParameterStore::create(m, 2 * s, 2 * s + 1, 11));
    optimizers.push_back(adam_state(stores.back(), float(s)));
    run["layers"].push_back({2 * s, 2 * s + 1});
  }
  const ParameterStore older = stores[3].clone_params();
  for (Tensor& t : stores[3].all_params()) t.f32()[0] += 1.0f;  // the newest version differs from version 5
  for (int s = 0; s < 8; ++s) {
    StageCheckpoint c;
    c.stage = s, c.weights = &stores[s], c.optimizer = &optimizers[s], c.updates = 6, c.newest_version = 6;
    if (s == 3) c.older[5] = &older;
    write_stage_checkpoint(dir.string(), 6, c);
  }
  commit_checkpoint(dir.string(), 6, run, 0);
  const ResumePoint p = find_checkpoint(dir.string());

  ParameterStore mine = ParameterStore::create(m, 6, 7, 99), whole = ParameterStore::create(m, 6, 7, 98);
  OptimizerState mine_opt = adam_state(mine, 0), whole_opt = adam_state(whole, 0);
  const NamedTensors own = checkpoint_tensors_of(p, {&mine});
  const NamedTensors all = checkpoint_tensors(p);
  // Its weights, two Adam slots and one older version: 4 x its parameters
  // (stage 3 holds fc4, 256 x 256), a sixth of the checkpoint here.
  EXPECT_EQ(bytes_of(own), 4 * mine.param_bytes());
  EXPECT_LT(bytes_of(own), bytes_of(all) / 6);
  std::printf("stage 3 of 8 read %zu bytes of the checkpoint's %zu\n", bytes_of(own), bytes_of(all));

  load_checkpoint_state(own, p.dir, mine, mine_opt);
  load_checkpoint_state(all, p.dir, whole, whole_opt);
  EXPECT_TRUE(same_bytes(mine.all_params(), stores[3].all_params()));
  EXPECT_TRUE(same_bytes(whole.all_params(), mine.all_params()));
  EXPECT_TRUE(same_bytes(mine_opt.slots, optimizers[3].slots));
  const auto mine_older = load_older_versions(p, 3, 0, own, mine);
  ASSERT_EQ(mine_older.size(), 1u);
  EXPECT_TRUE(same_bytes(mine_older.at(5).all_params(), older.all_params()));
  fs::remove_all(dir);
}

}  // namespace
}  // namespace pd

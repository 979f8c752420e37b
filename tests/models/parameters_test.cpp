// ParameterStore: names, init keyed by (seed, layer index) whatever the
// range, versions, save/load; forward/backward over ranges compose.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>

#include "core/cpu/gemm.h"
#include "core/error.h"
#include "core/loss.h"
#include "models/layer_range.h"
#include "models/parameters.h"
#include "tests/user_error_of.h"

namespace pd {
namespace {

bool bitwise_equal(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && a.dtype() == b.dtype() && std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
}

TEST(ParameterStore, NamesAreLayerIndexDotParam) {
  Model m = build_model(zoo_spec("cnn"));
  ParameterStore s = ParameterStore::create(m, 7);
  const auto& n = s.param_names();
  ASSERT_EQ(n.size(), 8u);
  EXPECT_EQ(n[0], "0.weight");
  EXPECT_EQ(n[1], "0.bias");
  EXPECT_EQ(n[2], "3.weight");
  EXPECT_EQ(n[7], "9.bias");
  EXPECT_EQ(s.param_count(), m.parameter_count());
  EXPECT_EQ(s.params(1).size(), 0u);
  EXPECT_EQ(s.params(7)[0].shape(), (Shape{512, 3136}));

  Model r = build_model(zoo_spec("resnet18", {{"width", 0.125}, {"image_size", 32}, {"classes", 10}}));
  ParameterStore rs = ParameterStore::create(r, 3, 4, 1);
  EXPECT_EQ(rs.param_names()[0].rfind("3.", 0), 0u);
  EXPECT_FALSE(rs.buffer_names().empty());  // BatchNorm running statistics
}

TEST(ParameterStore, RangeBuildsHoldTheSameTensorsAsAWholeBuild) {
  Model m = build_model(zoo_spec("cnn"));
  ParameterStore whole = ParameterStore::create(m, 42);
  ParameterStore a = ParameterStore::create(m, 0, 4, 42), b = ParameterStore::create(m, 5, 9, 42);
  NamedTensors wn = whole.named_tensors(), an = a.named_tensors(), bn = b.named_tensors();
  an.insert(an.end(), bn.begin(), bn.end());
  ASSERT_EQ(an.size(), wn.size());
  for (size_t i = 0; i < wn.size(); ++i) {
    EXPECT_EQ(an[i].first, wn[i].first);
    EXPECT_TRUE(bitwise_equal(an[i].second, wn[i].second)) << wn[i].first;
  }
  // A different seed gives different weights; initial weights are not all zero.
  ParameterStore other = ParameterStore::create(m, 43);
  EXPECT_FALSE(bitwise_equal(other.all_params()[0], whole.all_params()[0]));
  auto w = whole.all_params()[0].to_floats();
  EXPECT_GT(*std::max_element(w.begin(), w.end()), 0.0f);
}

TEST(ParameterStore, CloneCopiesParamsButSharesBuffers) {
  Model m = build_model(zoo_spec("resnet18", {{"width", 0.125}, {"image_size", 32}, {"classes", 10}}));
  ParameterStore s = ParameterStore::create(m, 0, 2, 3);
  ParameterStore c = s.clone_params();
  EXPECT_FALSE(c.all_params()[0].same_storage(s.all_params()[0]));
  EXPECT_TRUE(bitwise_equal(c.all_params()[0], s.all_params()[0]));
  EXPECT_TRUE(c.all_buffers()[0].same_storage(s.all_buffers()[0]));
  ParameterStore g = s.zeros_like_params();
  EXPECT_EQ(g.all_params().size(), s.all_params().size());
  EXPECT_TRUE(g.all_buffers().empty());
  EXPECT_EQ(g.all_params()[0].to_floats()[0], 0.0f);
}

TEST(ParameterStore, SaveLoadRoundTripAndStageLoadFromWholeFile) {
  Model m = build_model(zoo_spec("cnn"));
  ParameterStore whole = ParameterStore::create(m, 5);
  const std::string path = (std::filesystem::temp_directory_path() / "pd_params_test.safetensors").string();
  save_safetensors(path, whole.named_tensors());
  ParameterStore stage = ParameterStore::create(m, 5, 9, 99);  // other seed, then load
  stage.load(load_safetensors(path), path);
  EXPECT_TRUE(bitwise_equal(stage.params(7)[0], whole.params(7)[0]));
  NamedTensors partial = whole.named_tensors();
  partial.pop_back();
  EXPECT_THROW(stage.load(partial, "partial"), UserError);
  Model mlp = build_model(zoo_spec("mlp"));
  ParameterStore wrong = ParameterStore::create(mlp, 1);
  EXPECT_THROW(wrong.load(whole.named_tensors(), "cnn file"), UserError);
  std::filesystem::remove(path);
}

// --init / --weights: a whole-model file matched by name fills every stage;
// what does not fit is refused naming the tensor.
TEST(MatchNamedWeights, WholeFileFillsEachStageAndIgnoresCountersAndOptimizerSlots) {
  Model m = build_model(zoo_spec("resnet18", {{"width", 0.125}, {"image_size", 32}, {"classes", 10}}));
  ParameterStore whole = ParameterStore::create(m, 5);
  NamedTensors file = whole.named_tensors();
  file.emplace_back("3.bn1.num_batches_tracked", Tensor::zeros({}, DType::I64));
  file.emplace_back("optimizer.slot.0.3.conv1.weight", Tensor::zeros({1}));
  const NamedTensors matched = match_named_weights(m, file, "f");
  EXPECT_EQ(matched.size(), whole.named_tensors().size());
  ParameterStore stage = ParameterStore::create(m, 3, 5, 99);  // another seed: every tensor must come from the file
  stage.load(matched, "f");
  for (int l = 3; l <= 5; ++l) {
    for (size_t k = 0; k < stage.params(l).size(); ++k)
      EXPECT_TRUE(bitwise_equal(stage.params(l)[k], whole.params(l)[k])) << "layer " << l;
    for (size_t k = 0; k < stage.buffers(l).size(); ++k)
      EXPECT_TRUE(bitwise_equal(stage.buffers(l)[k], whole.buffers(l)[k])) << "layer " << l;
  }
}

TEST(MatchNamedWeights, MissingExtraDuplicateAndMisShapedTensorsAreNamed) {
  using testing_support::error_of;
  Model m = build_model(zoo_spec("cnn"));
  const NamedTensors good = ParameterStore::create(m, 5).named_tensors();
  NamedTensors missing = good;
  missing.erase(missing.begin() + 2);  // "3.weight"
  EXPECT_NE(error_of([&] { match_named_weights(m, missing, "f"); }).find("lacks 1 of cnn's 8 tensors: '3.weight'"),
            std::string::npos);
  NamedTensors extra = good;
  extra.emplace_back("fc9.weight", Tensor::zeros({2}));
  EXPECT_NE(error_of([&] { match_named_weights(m, extra, "f"); }).find("1 tensor is not in cnn: 'fc9.weight'"),
            std::string::npos);
  NamedTensors twice = good;
  twice.push_back(good[0]);
  EXPECT_NE(error_of([&] { match_named_weights(m, twice, "f"); }).find("'0.weight' is given twice"),
            std::string::npos);
  NamedTensors shaped = good;
  shaped[7].second = Tensor::zeros({3});  // "9.bias"
  const std::string e = error_of([&] { match_named_weights(m, shaped, "f"); });
  EXPECT_NE(e.find("'9.bias' is [3] f32, cnn's '9.bias' is [10] f32"), std::string::npos) << e;
  // Zoo layers share parameter names ("weight"): only "{layer}.{name}" matches.
  NamedTensors unprefixed = good;
  unprefixed[0].first = "weight";
  EXPECT_NE(error_of([&] { match_named_weights(m, unprefixed, "f"); }).find("'weight'"), std::string::npos);
}

TEST(LayerRange, SplitForwardBackwardEqualsWholeModel) {
  cpu::set_compute_threads(1);
  Model m = build_model(zoo_spec("cnn"));
  ParameterStore w = ParameterStore::create(m, 11);
  Tensor x = Tensor::empty({4, 1, 28, 28});
  CounterRng rng(1, 2, 3);
  for (int64_t i = 0; i < x.numel(); ++i) x.f32()[i] = rng.normal(static_cast<uint64_t>(i));
  Tensor labels = Tensor::from_ints({0, 3, 9, 1}, {4});
  StepInfo step{.training = true, .seed = 11, .minibatch_id = 0};

  RangeContext ctx;
  ParameterStore g_whole = w.zeros_like_params();
  Tensor logits = forward_layers(m, w, 0, 9, x, step, ctx);
  LossResult loss = softmax_cross_entropy(logits, labels);
  backward_layers(m, w, g_whole, 0, 9, loss.grad, step, ctx, false);

  // Two "stages": [0, 4] and [5, 9].
  RangeContext c0, c1;
  ParameterStore g_split = w.zeros_like_params();
  Tensor h = forward_layers(m, w, 0, 4, x, step, c0);
  Tensor logits2 = forward_layers(m, w, 5, 9, h, step, c1);
  EXPECT_TRUE(bitwise_equal(logits, logits2));
  EXPECT_GT(c1.saved_bytes(), 0u);
  LossResult loss2 = softmax_cross_entropy(logits2, labels);
  Tensor dh = backward_layers(m, w, g_split, 5, 9, loss2.grad, step, c1, true);
  EXPECT_EQ(dh.shape(), h.shape());
  EXPECT_FALSE(backward_layers(m, w, g_split, 0, 4, dh, step, c0, false).defined());
  EXPECT_EQ(c0.layers.size(), 0u);  // freed by backward
  for (size_t i = 0; i < g_whole.all_params().size(); ++i)
    EXPECT_TRUE(bitwise_equal(g_whole.all_params()[i], g_split.all_params()[i])) << g_whole.param_names()[i];
}

}  // namespace
}  // namespace pd

// --init / --weights on imported models: tensors match by initializer name
// whatever layer number they are stored under - a PyTorch state_dict (no
// layer number), and `train --save` output loaded into the model restaged
// one layer per stage as a graph plan's run builds it (other numbers).
#include <gtest/gtest.h>

#include <cstring>
#include <map>

#include "core/error.h"
#include "models/parameters.h"
#include "onnx/import.h"
#include "tests/onnx/onnx_writer.h"

namespace pd::onnx {
namespace {

Model small() { return import_model(parse_model(testing::encode(testing::small_model()), "small.onnx"), "small"); }

std::string initializer_of(const std::string& stored) { return stored.substr(stored.find('.') + 1); }

// initializer name -> the tensor's floats.
std::map<std::string, std::vector<float>> by_initializer(const NamedTensors& t) {
  std::map<std::string, std::vector<float>> out;
  for (const auto& [n, v] : t) out[initializer_of(n)] = v.to_floats();
  return out;
}

// Trained weights as `train --save` writes them: the file's initializers moved.
NamedTensors trained(const Model& m) {
  NamedTensors out = ParameterStore::create(m, 0).named_tensors();
  for (auto& [n, t] : out) {
    t = t.clone();
    for (int64_t i = 0; i < t.numel(); ++i) t.f32()[i] += 1.0f + 0.01f * float(i);
  }
  return out;
}

TEST(OnnxNamedWeights, SavedWeightsFillTheModelRestagedForAGraphPlan) {
  const Model plain = small();
  const NamedTensors saved = trained(plain);
  const Model staged = plain.graph->restage({0, 1, 2, 2, 2});
  ParameterStore w = ParameterStore::create(staged, 0);
  ASSERT_NE(by_initializer(w.named_tensors()), by_initializer(saved));
  w.load(match_named_weights(staged, saved, "saved"), "saved");
  EXPECT_EQ(by_initializer(w.named_tensors()), by_initializer(saved));
}

TEST(OnnxNamedWeights, StateDictNamesAreTheInitializers) {
  const Model m = small();
  const NamedTensors saved = trained(m);
  NamedTensors state_dict;
  for (const auto& [n, t] : saved) state_dict.emplace_back(initializer_of(n), t);
  ParameterStore w = ParameterStore::create(m, 0);
  w.load(match_named_weights(m, state_dict, "state_dict"), "state_dict");
  EXPECT_EQ(by_initializer(w.named_tensors()), by_initializer(saved));

  state_dict.emplace_back("fc.weight_unused", saved.front().second);
  EXPECT_THROW(match_named_weights(m, state_dict, "state_dict"), UserError);
  state_dict.pop_back();
  state_dict.erase(state_dict.begin());
  EXPECT_THROW(match_named_weights(m, state_dict, "state_dict"), UserError);
}

}  // namespace
}  // namespace pd::onnx

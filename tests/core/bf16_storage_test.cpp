// bf16 storage (DType::BF16 and the DeviceOps *_bf16 entries): the
// transformer block's MLP on bf16 tensors gives the bits of the FP32-storage
// path under --precision bf16, and keeps fewer bytes for its backward.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "core/bf16_rounding.h"
#include "core/device_ops.h"
#include "core/layers.h"
#include "tests/core/sequence_reference.h"

namespace pd {
namespace {

TEST(Bf16Tensor, HoldsTwoBytesAnElementAndReadsBackAsFloats) {
  EXPECT_EQ(dtype_size(DType::BF16), 2u);
  EXPECT_STREQ(dtype_name(DType::BF16), "bf16");
  Tensor t = Tensor::empty({3}, DType::BF16);
  EXPECT_EQ(t.nbytes(), 6u);
  t.fill(1.00390625f);  // 1 + 2^-8: halfway between two bf16 values, to even: 1
  EXPECT_EQ(t.to_floats(), (std::vector<float>{1.0f, 1.0f, 1.0f}));
  t.bf16()[1] = bf16_bits(-3.5f);
  EXPECT_EQ(t.to_floats()[1], -3.5f);
  EXPECT_ANY_THROW(t.f32());
}

TEST(Bf16Storage, CpuPackRoundsToNearestEvenAndUnpackIsExact) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> x{1.00390625f, 1.01171875f, -2.0f, 3.14159f, 1e-40f, 65504.0f, nan};
  std::vector<uint16_t> packed(x.size());
  std::vector<float> back(x.size());
  const DeviceOps& o = device_ops(Device::cpu());
  o.pack_bf16(static_cast<int64_t>(x.size()), x.data(), packed.data());
  o.unpack_bf16(static_cast<int64_t>(x.size()), packed.data(), back.data());
  for (size_t i = 0; i + 1 < x.size(); ++i) {
    EXPECT_EQ(back[i], round_to_bf16(x[i])) << i;
    EXPECT_EQ(packed[i], bf16_bits(x[i])) << i;
  }
  EXPECT_EQ(back[0], 1.0f);      // tie, to even
  EXPECT_EQ(back[1], 1.015625f);  // tie, to even (upwards)
  EXPECT_TRUE(std::isnan(back.back()));
}

struct BlockRun {
  Tensor y, dx;
  std::vector<Tensor> grads;
  size_t saved_bytes = 0;
  bool mlp_saved_bf16 = false;
};

BlockRun run_block(const Layer& b, const std::vector<Tensor>& params, const Tensor& x, const Tensor& dy,
                   bool storage, bool need_input_grad = true) {
  set_bf16_storage(storage ? Bf16Storage::Always : Bf16Storage::Never);
  StepInfo step{.training = true, .seed = 7, .layer_index = 3, .minibatch_id = 11, .precision = Precision::BF16};
  BlockRun r;
  LayerContext ctx;
  r.y = b.forward({params, {}, step}, x, ctx);
  r.saved_bytes = ctx.saved_bytes();
  for (const LayerContext& c : ctx.children)
    for (const Tensor& t : c.saved) r.mlp_saved_bf16 |= t.dtype() == DType::BF16;
  for (const Tensor& p : params) r.grads.push_back(Tensor::zeros(p.shape()));
  r.dx = b.backward({params, r.grads, step, need_input_grad}, dy, ctx);
  set_bf16_storage(Bf16Storage::WhereItPays);
  return r;
}

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && a.dtype() == b.dtype() && std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
}

class Bf16StorageBlock : public ::testing::TestWithParam<float> {};

TEST_P(Bf16StorageBlock, GivesTheBitsOfTheFp32StoragePathWithFewerBytesSaved) {
  const int64_t dim = 16;
  LayerPtr b = make_transformer_block(dim, 2, GetParam());
  std::vector<Tensor> params;
  uint32_t key = 90;
  for (const ParamSpec& s : b->param_specs()) {  // rounded, as the layer range hands them under BF16
    Tensor t = testing::random_tensor(s.shape, key++, 0.4f);
    round_in_place_if_bf16(Precision::BF16, t);
    params.push_back(t);
  }
  Tensor x = testing::random_tensor({2, 5, dim}, 3), dy = testing::random_tensor({2, 5, dim}, 4);
  round_in_place_if_bf16(Precision::BF16, x);
  round_in_place_if_bf16(Precision::BF16, dy);

  const BlockRun fp32_storage = run_block(*b, params, x, dy, false);
  const BlockRun bf16_storage = run_block(*b, params, x, dy, true);
  EXPECT_FALSE(fp32_storage.mlp_saved_bf16);
  EXPECT_TRUE(bf16_storage.mlp_saved_bf16);
  EXPECT_TRUE(same_bits(fp32_storage.y, bf16_storage.y));
  EXPECT_TRUE(same_bits(fp32_storage.dx, bf16_storage.dx));
  ASSERT_EQ(fp32_storage.grads.size(), bf16_storage.grads.size());
  for (size_t i = 0; i < fp32_storage.grads.size(); ++i)
    EXPECT_TRUE(same_bits(fp32_storage.grads[i], bf16_storage.grads[i])) << b->param_specs()[i].name;
  // Attention's input (ln1's output), qkv and output, ln2's output, the
  // MLP's pre-activation and GELU output: 1 + 3 + 1 + 1 + 4 + 4 of the
  // block's dim per token at 2 bytes instead of 4.
  EXPECT_EQ(fp32_storage.saved_bytes - bf16_storage.saved_bytes, static_cast<size_t>(2 * 5 * 14 * dim * 2));

  // A first stage's block (no input gradient): the same parameter gradients.
  const BlockRun first = run_block(*b, params, x, dy, true, false);
  EXPECT_FALSE(first.dx.defined());
  for (size_t i = 0; i < first.grads.size(); ++i)
    EXPECT_TRUE(same_bits(first.grads[i], fp32_storage.grads[i])) << b->param_specs()[i].name;
}

INSTANTIATE_TEST_SUITE_P(Dropout, Bf16StorageBlock, ::testing::Values(0.0f, 0.25f),
                         [](const auto& info) { return info.param > 0 ? std::string("on") : std::string("off"); });

TEST(Bf16Storage, TheCpuKeepsFp32StorageUnlessAskedAndFp32RunsAlways) {
  EXPECT_FALSE(device_ops(Device::cpu()).bf16_storage_pays);
  EXPECT_FALSE(uses_bf16_storage(device_ops(Device::cpu())));
  set_bf16_storage(Bf16Storage::Always);
  EXPECT_TRUE(uses_bf16_storage(device_ops(Device::cpu())));
  LayerPtr b = make_transformer_block(8, 2);
  auto p = testing::init_params(*b);
  Tensor x = testing::random_tensor({1, 3, 8}, 64);
  LayerContext ctx;
  b->forward({p, {}, {}}, x, ctx);  // FP32, with bf16 storage forced on
  set_bf16_storage(Bf16Storage::WhereItPays);
  for (const LayerContext& c : ctx.children)
    for (const Tensor& t : c.saved) EXPECT_NE(t.dtype(), DType::BF16);
}

}  // namespace
}  // namespace pd

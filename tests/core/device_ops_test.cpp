// The CPU is a DeviceOps backend like CUDA: device_ops(cpu) returns its
// table, which fills every entry the layers call (a null entry would crash
// the first layer to use it), and its adapters give the cpu:: kernels' bits.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "core/cpu/attention_kernels.h"
#include "core/cpu/linear_kernels.h"
#include "core/device_ops.h"
#include "tests/core/gradcheck.h"

namespace pd {
namespace {

TEST(DeviceOps, CpuTableFillsEveryEntryTheLayersCall) {
  ASSERT_TRUE(has_device_ops(Device::cpu()));
  const DeviceOps& o = device_ops(Device::cpu());
  EXPECT_STREQ(o.name, "cpu");
  EXPECT_FALSE(o.pool_backward_reads_tensors);  // argmax-routed max pooling
  const void* entries[] = {
      reinterpret_cast<const void*>(o.linear_forward), reinterpret_cast<const void*>(o.linear_backward_input),
      reinterpret_cast<const void*>(o.linear_backward_params_accum), reinterpret_cast<const void*>(o.conv2d_forward),
      reinterpret_cast<const void*>(o.conv2d_backward_data),
      reinterpret_cast<const void*>(o.conv2d_backward_params_accum),
      reinterpret_cast<const void*>(o.pool2d_forward_indexed), reinterpret_cast<const void*>(o.pool2d_backward_indexed),
      reinterpret_cast<const void*>(o.adaptive_avgpool2d_forward),
      reinterpret_cast<const void*>(o.adaptive_avgpool2d_backward),
      reinterpret_cast<const void*>(o.batchnorm_forward_train), reinterpret_cast<const void*>(o.batchnorm_forward_eval),
      reinterpret_cast<const void*>(o.batchnorm_backward_input), reinterpret_cast<const void*>(o.relu_forward),
      reinterpret_cast<const void*>(o.relu_backward), reinterpret_cast<const void*>(o.add),
      reinterpret_cast<const void*>(o.add_relu_forward), reinterpret_cast<const void*>(o.gelu_forward),
      reinterpret_cast<const void*>(o.gelu_backward), reinterpret_cast<const void*>(o.dropout_forward),
      reinterpret_cast<const void*>(o.dropout_backward), reinterpret_cast<const void*>(o.layernorm_forward),
      reinterpret_cast<const void*>(o.layernorm_backward_input),
      reinterpret_cast<const void*>(o.layernorm_backward_params_accum),
      reinterpret_cast<const void*>(o.attention_forward), reinterpret_cast<const void*>(o.attention_backward),
      reinterpret_cast<const void*>(o.embedding_forward), reinterpret_cast<const void*>(o.embedding_backward_accum),
      reinterpret_cast<const void*>(o.linear_gelu_forward), reinterpret_cast<const void*>(o.gelu_backward_rounded),
      reinterpret_cast<const void*>(o.add_layernorm_forward),
      reinterpret_cast<const void*>(o.layernorm_backward_input_add)};
  for (size_t i = 0; i < sizeof entries / sizeof entries[0]; ++i) EXPECT_NE(entries[i], nullptr) << "entry " << i;
}

TEST(DeviceOps, CpuLinearEntriesGiveTheKernelsBits) {
  const int64_t R = 5, I = 7, O = 3;
  Tensor x = testing::random_tensor({R, I}, 1), w = testing::random_tensor({O, I}, 2);
  Tensor b = testing::random_tensor({O}, 3), dy = testing::random_tensor({R, O}, 4);
  const DeviceOps& o = device_ops(Device::cpu());
  std::vector<float> y1(R * O), y2(R * O), dx1(R * I), dx2(R * I), dw1(O * I, 0.0f), dw2(O * I, 0.0f), db1(O, 0.0f),
      db2(O, 0.0f);
  cpu::linear_forward(x.f32(), w.f32(), b.f32(), y1.data(), R, I, O);
  o.linear_forward(Precision::FP32, R, I, O, x.f32(), w.f32(), b.f32(), y2.data());
  cpu::linear_backward(x.f32(), w.f32(), dy.f32(), dx1.data(), dw1.data(), db1.data(), R, I, O);
  o.linear_backward_input(Precision::FP32, R, I, O, dy.f32(), w.f32(), dx2.data());
  o.linear_backward_params_accum(Precision::FP32, R, I, O, x.f32(), dy.f32(), dw2.data(), db2.data());
  EXPECT_EQ(0, std::memcmp(y1.data(), y2.data(), y1.size() * sizeof(float)));
  EXPECT_EQ(0, std::memcmp(dx1.data(), dx2.data(), dx1.size() * sizeof(float)));
  EXPECT_EQ(0, std::memcmp(dw1.data(), dw2.data(), dw1.size() * sizeof(float)));
  EXPECT_EQ(0, std::memcmp(db1.data(), db2.data(), db1.size() * sizeof(float)));
}

// Precision travels with the call (no process-wide setting): the table's
// attention rounds its internal operands exactly when the call says BF16.
TEST(DeviceOps, CpuAttentionTakesItsPrecisionFromTheCall) {
  const int64_t B = 2, T = 6, H = 2, hd = 4;
  const Tensor qkv = testing::random_tensor({B, T, 3 * H * hd}, 5), datt = testing::random_tensor({B, T, H * hd}, 6);
  const DeviceOps& o = device_ops(Device::cpu());
  std::vector<float> att_of[2];
  for (Precision p : {Precision::FP32, Precision::BF16, Precision::FP32}) {
    SCOPED_TRACE(p == Precision::BF16 ? "bf16" : "fp32");
    const cpu::AttentionShape shape{B, T, H, hd, p == Precision::BF16};
    std::vector<float> probs1(B * H * T * T), probs2(probs1.size()), att1(B * T * H * hd), att2(att1.size()),
        dqkv1(qkv.numel()), dqkv2(qkv.numel());
    cpu::attention_forward(shape, qkv.f32(), probs1.data(), att1.data());
    o.attention_forward(p, B, T, H, hd, qkv.f32(), probs2.data(), att2.data());
    cpu::attention_backward(shape, qkv.f32(), probs1.data(), datt.f32(), dqkv1.data());
    o.attention_backward(p, B, T, H, hd, qkv.f32(), probs2.data(), datt.f32(), dqkv2.data());
    EXPECT_EQ(0, std::memcmp(att1.data(), att2.data(), att1.size() * sizeof(float)));
    EXPECT_EQ(0, std::memcmp(dqkv1.data(), dqkv2.data(), dqkv1.size() * sizeof(float)));
    att_of[p == Precision::BF16] = att2;
  }
  EXPECT_NE(att_of[0], att_of[1]) << "these inputs must tell the precisions apart";
}

}  // namespace
}  // namespace pd

// The CPU is a DeviceOps backend like CUDA: device_ops(cpu) returns its
// table, which fills every entry the layers call (a null entry would crash
// the first layer to use it), and its adapters give the cpu:: kernels' bits.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

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

}  // namespace
}  // namespace pd

// Op timing (core/op_times.h): while on, device_ops() counts every kernel
// entry once, with its own results, and the outermost entry only when
// entries nest (the layers' composite entries); off, the backend's own table.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "core/device_ops.h"
#include "core/layers.h"
#include "core/op_times.h"
#include "core/rng.h"

namespace pd {
namespace {

const OpTime* find(const std::vector<OpTime>& t, const std::string& op) {
  auto it = std::find_if(t.begin(), t.end(), [&](const OpTime& o) { return o.op == op; });
  return it == t.end() ? nullptr : &*it;
}

std::vector<float> ramp(size_t n, float scale) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = scale * static_cast<float>(static_cast<int>(i % 17) - 8);
  return v;
}

TEST(OpTimes, CountsEachEntryCalledWithTheBackendsResults) {
  const int64_t rows = 64, in = 256, out = 128;
  const std::vector<float> x = ramp(rows * in, 0.01f), w = ramp(out * in, 0.02f), b = ramp(out, 0.1f);
  std::vector<float> plain(rows * out), timed(rows * out), rounded(rows * out);
  device_ops(Device::cpu()).linear_forward(Precision::FP32, rows, in, out, x.data(), w.data(), b.data(), plain.data());

  start_op_timing();
  EXPECT_TRUE(op_timing_active());
  EXPECT_NE(&device_ops(Device::cpu()), &cpu_device_ops()) << "timing hands out the timed table";
  for (int k = 0; k < 2; ++k)
    device_ops(Device::cpu())
        .linear_forward(Precision::FP32, rows, in, out, x.data(), w.data(), b.data(), timed.data());
  device_ops(Device::cpu()).round_bf16(rows * out, timed.data(), rounded.data());
  device_ops(Device::cpu()).synchronize();  // a runtime entry: passed through, not counted
  const std::vector<OpTime> t = stop_op_timing();

  EXPECT_FALSE(op_timing_active());
  EXPECT_EQ(&device_ops(Device::cpu()), &cpu_device_ops());
  EXPECT_EQ(std::memcmp(plain.data(), timed.data(), plain.size() * sizeof(float)), 0);
  ASSERT_EQ(t.size(), 2u) << "only the entries called";
  const OpTime* lin = find(t, "linear_forward");
  const OpTime* rnd = find(t, "round_bf16");
  ASSERT_TRUE(lin && rnd);
  EXPECT_EQ(lin->calls, 2);
  EXPECT_EQ(rnd->calls, 1);
  EXPECT_GT(lin->ms, 0.0);
  EXPECT_GE(rnd->ms, 0.0);
  EXPECT_GE(t[0].ms, t[1].ms) << "largest first";
  EXPECT_TRUE(stop_op_timing().empty()) << "a stop takes what the timing recorded";
}

// A layer's forward and backward through device_ops: every call counted
// once, and the same outputs as untimed.
TEST(OpTimes, ALayerTimedGivesTheSameBitsAndCountsItsEntries) {
  LayerPtr ln = make_layernorm(32);
  std::vector<Tensor> params;
  for (const ParamSpec& s : ln->param_specs()) params.push_back(Tensor::empty(s.shape));
  ln->init(params, {}, CounterRng(3, 0, 0));
  Tensor x = Tensor::empty({16, 32});
  const std::vector<float> xs = ramp(16 * 32, 0.05f);
  std::copy(xs.begin(), xs.end(), x.f32());
  auto run = [&] {
    LayerContext ctx;
    return ln->forward({params, {}, {}}, x, ctx);
  };
  const Tensor plain = run();
  start_op_timing();
  const Tensor timed = run();
  const std::vector<OpTime> t = stop_op_timing();
  EXPECT_EQ(std::memcmp(plain.f32(), timed.f32(), plain.numel() * sizeof(float)), 0);
  ASSERT_EQ(t.size(), 1u);
  EXPECT_EQ(t[0].op, "layernorm_forward");
  EXPECT_EQ(t[0].calls, 1);
}

TEST(OpTimes, StartingTwiceIsRefused) {
  start_op_timing();
  EXPECT_ANY_THROW(start_op_timing());
  stop_op_timing();
}

}  // namespace
}  // namespace pd

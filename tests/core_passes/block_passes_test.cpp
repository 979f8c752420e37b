// The DeviceOps calls of one transformer block, forward and backward, in
// FP32 and BF16: the block runs on a stand-in device (host memory
// registered as cuda:0, its table the CPU's entries wrapped to log each
// call), so the log is exactly the sequence of entries a backend runs. The
// stand-in is registered for the whole process, hence a binary of its own.
// Prints the sequences (the lead's pass counts come from these) and checks
// that no separate rounding or residual add passes remain where the fused
// entries took them over.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include "core/device_ops.h"
#include "core/layers.h"
#include "core/tensor.h"

namespace pd {
namespace {

std::vector<std::string>* g_log = nullptr;

template <auto M> struct Logged;
template <class R, class... A, R (*DeviceOps::*M)(A...)>
struct Logged<M> {
  static inline const char* name = "";
  static R call(A... a) {
    if (g_log) g_log->push_back(name);
    return (cpu_device_ops().*M)(a...);
  }
};

#define PD_LOG_ENTRY(entry)                           \
  do {                                                \
    Logged<&DeviceOps::entry>::name = #entry;         \
    if (o.entry) o.entry = &Logged<&DeviceOps::entry>::call; \
  } while (0)

DeviceOps logging_table() {
  DeviceOps o = cpu_device_ops();
  o.name = "logged cpu";
  PD_LOG_ENTRY(gemm);
  PD_LOG_ENTRY(gemm_strided_batched);
  PD_LOG_ENTRY(linear_forward);
  PD_LOG_ENTRY(linear_backward_input);
  PD_LOG_ENTRY(linear_backward_params_accum);
  PD_LOG_ENTRY(relu_forward);
  PD_LOG_ENTRY(add);
  PD_LOG_ENTRY(scale);
  PD_LOG_ENTRY(axpy);
  PD_LOG_ENTRY(divide);
  PD_LOG_ENTRY(round_bf16);
  PD_LOG_ENTRY(gelu_forward);
  PD_LOG_ENTRY(gelu_backward);
  PD_LOG_ENTRY(dropout_forward);
  PD_LOG_ENTRY(dropout_backward);
  PD_LOG_ENTRY(add_bias_rows);
  PD_LOG_ENTRY(sum_rows_accum);
  PD_LOG_ENTRY(permute);
  PD_LOG_ENTRY(layernorm_forward);
  PD_LOG_ENTRY(layernorm_backward);
  PD_LOG_ENTRY(layernorm_backward_input);
  PD_LOG_ENTRY(layernorm_backward_params_accum);
  PD_LOG_ENTRY(attention_forward);
  PD_LOG_ENTRY(attention_backward);
  PD_LOG_ENTRY(strided_copy);
  PD_LOG_ENTRY(linear_gelu_forward);
  PD_LOG_ENTRY(gelu_backward_rounded);
  PD_LOG_ENTRY(add_layernorm_forward);
  PD_LOG_ENTRY(layernorm_backward_input_add);
  return o;
}

struct HostStorage : Storage {
  ~HostStorage() override { std::free(data); }
};

class HostAllocator final : public Allocator {
 public:
  std::shared_ptr<Storage> allocate(size_t bytes) override {
    auto s = std::make_shared<HostStorage>();
    s->data = std::malloc(bytes ? bytes : 1);
    s->bytes = bytes;
    s->device = Device::cuda(0);
    return s;
  }
  size_t current_bytes() const override { return 0; }
  size_t peak_bytes() const override { return 0; }
  void reset_peak() override {}
};

void host_copy(void* dst, Device, const void* src, Device, size_t bytes) { std::memcpy(dst, src, bytes); }
void host_fill(Tensor& t, float v) {
  PD_CHECK(t.dtype() == DType::F32, "the stand-in device fills F32 only");
  std::fill_n(t.f32(), t.numel(), v);
}

struct Calls {
  std::vector<std::string> forward, backward_input, backward_weights;
};

Calls block_calls(Precision p) {
  static HostAllocator allocator;
  static const DeviceOps table = logging_table();
  register_allocator(DeviceKind::CUDA, &allocator);
  register_device_copy(&host_copy);
  register_device_fill(&host_fill);
  register_device_ops(DeviceKind::CUDA, &table);
  const Device dev = Device::cuda(0);
  const int64_t B = 2, T = 16, C = 32;
  LayerPtr block = make_transformer_block(C, 4, 0.1f);
  std::vector<Tensor> params = allocate_params(*block, dev), grads;
  block->init(params, {}, CounterRng(1, 0, 0));
  for (const Tensor& t : params) grads.push_back(Tensor::zeros(t.shape(), DType::F32, dev));
  StepInfo step;
  step.precision = p;
  Tensor x = Tensor::zeros({B, T, C}, DType::F32, dev), dy = Tensor::zeros({B, T, C}, DType::F32, dev);
  Calls c;
  LayerContext ctx;
  g_log = &c.forward;
  block->forward({params, {}, step}, x, ctx);
  g_log = &c.backward_input;
  block->backward_input({params, grads, step, true}, dy, ctx);
  g_log = &c.backward_weights;
  block->backward_weights({params, grads, step, true}, ctx);
  g_log = nullptr;
  return c;
}

int count(const std::vector<std::string>& calls, const std::string& entry) {
  int n = 0;
  for (const std::string& s : calls) n += s == entry;
  return n;
}

void print(const char* precision, const Calls& c) {
  auto line = [&](const char* phase, const std::vector<std::string>& calls) {
    std::cout << "{\"precision\": \"" << precision << "\", \"phase\": \"" << phase << "\", \"calls\": [";
    for (size_t i = 0; i < calls.size(); ++i) std::cout << (i ? ", " : "") << '"' << calls[i] << '"';
    std::cout << "]}\n";
  };
  line("forward", c.forward);
  line("backward_input", c.backward_input);
  line("backward_weights", c.backward_weights);
}

TEST(BlockPasses, TheFusedEntriesLeaveNoSeparateRoundingOrResidualPassBehind) {
  const Calls fp = block_calls(Precision::FP32), bf = block_calls(Precision::BF16);
  print("fp32", fp);
  print("bf16", bf);
  for (const Calls* c : {&fp, &bf}) {
    EXPECT_EQ(count(c->forward, "add_layernorm_forward"), 2);
    EXPECT_EQ(count(c->forward, "linear_gelu_forward"), 1);
    EXPECT_EQ(count(c->forward, "layernorm_forward"), 0);
    EXPECT_EQ(count(c->forward, "gelu_forward"), 0);
    EXPECT_EQ(count(c->forward, "add"), 1);  // the block's output x1 + mlp
    EXPECT_EQ(count(c->backward_input, "gelu_backward_rounded"), 1);
    EXPECT_EQ(count(c->backward_input, "layernorm_backward_input_add"), 2);
    EXPECT_EQ(count(c->backward_input, "add"), 0);
    EXPECT_EQ(count(c->backward_input, "layernorm_backward_input"), 0);
    EXPECT_EQ(count(c->backward_weights, "layernorm_backward_params_accum"), 2);
    EXPECT_EQ(count(c->backward_weights, "linear_backward_params_accum"), 4);
  }
  EXPECT_EQ(count(fp.forward, "round_bf16") + count(fp.backward_input, "round_bf16"), 0);
  // BF16: the separate roundings left are those of attention (qkv, its
  // output, datt, dqkv), the block's parts run by sub-layers (attention,
  // drop1, fc2, drop2 outputs; their input gradients) and fc1's input
  // gradient - 10 and 10 with ln1, ln2, fc1 and GELU unfused.
  EXPECT_EQ(count(bf.forward, "round_bf16"), 6);
  EXPECT_EQ(count(bf.backward_input, "round_bf16"), 7);
}

}  // namespace
}  // namespace pd

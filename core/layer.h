#pragma once
// Layers are stateless functions of (parameters, input, per-minibatch
// context). Forward is given the parameter tensors to use and a context in
// which it saves what backward needs; backward is given the same parameters
// and context. A layer object holds only hyper-parameters (sizes, strides),
// never weights - so a pipeline stage can run minibatch m on whichever
// stashed weight version m must see, without copying into the layer.
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/precision.h"

#include "core/rng.h"
#include "core/tensor.h"

namespace pd {

// A named parameter or buffer, e.g. {"weight", {64, 32, 5, 5}}.
struct ParamSpec {
  std::string name;
  Shape shape;
};

// What one layer saved in forward for its backward; composites keep one
// child context per sub-layer. Freed as soon as backward has run.
struct LayerContext {
  std::vector<Tensor> saved;
  std::vector<LayerContext> children;
  size_t saved_bytes() const;  // this context and all children
  bool keeps(const Tensor& t) const;  // t's storage saved here or in a child
  void clear() { saved.clear(); children.clear(); }
};

// Per-call facts a layer may need: training vs eval, and the key of the RNG
// stream (dropout masks are keyed by seed, layer index and minibatch id).
struct StepInfo {
  bool training = true;
  uint64_t seed = 0;
  uint32_t layer_index = 0;    // top-level index in the model
  uint64_t minibatch_id = 0;
  Precision precision = Precision::FP32;  // --precision (core/precision.h)
  // The caller hands this layer's output straight to softmax_cross_entropy
  // (the model's last layer, when a range runner computes the loss), which
  // reads bf16 logits: under bf16 storage (core/bf16_rounding.h) a layer
  // may then return its output as a bf16 tensor. forward_layers passes it
  // to the range's last layer only.
  bool output_to_loss = false;
};

struct ForwardArgs {
  std::span<const Tensor> params;
  std::span<Tensor> buffers;  // running statistics (BatchNorm); updated when training
  StepInfo step;
};

struct BackwardArgs {
  std::span<const Tensor> params;
  std::span<Tensor> grads;  // same shapes as params; backward ADDS into them
  StepInfo step;
  bool need_input_grad = true;  // false on the first stage: skip dx
};

class Layer {
 public:
  virtual ~Layer() = default;
  virtual std::string type() const = 0;               // "conv2d"
  virtual std::string describe() const { return type(); }  // "conv2d(1->32, k5, s1, p2)"
  virtual std::vector<ParamSpec> param_specs() const { return {}; }
  virtual std::vector<ParamSpec> buffer_specs() const { return {}; }
  // Fills params and buffers; must depend only on rng (seeded by the
  // model seed and the layer's top-level index).
  virtual void init(std::span<Tensor> params, std::span<Tensor> buffers, const CounterRng& rng) const;
  // Output shape for one sample (no batch dimension).
  virtual Shape output_shape(const Shape& sample_in) const = 0;
  // Input dtype this layer expects (I32 for token ids).
  virtual DType input_dtype() const { return DType::F32; }

  virtual Tensor forward(const ForwardArgs& a, const Tensor& x, LayerContext& ctx) const = 0;
  // Returns dx (undefined Tensor when !need_input_grad). May consume ctx.
  virtual Tensor backward(const BackwardArgs& a, const Tensor& dy, LayerContext& ctx) const = 0;

  // The backward split in two, for zero-bubble schedules (ZB-H1), which run
  // the input gradient (B) as soon as it is needed downstream and the weight
  // gradient (W) later, in what would be a bubble. backward_input returns dx
  // like backward and leaves in ctx what backward_weights needs (dy
  // included); backward_weights adds the parameter gradients into a.grads
  // and consumes ctx. backward_input then backward_weights gives the same
  // bits as backward. The defaults are correct for every layer - the whole
  // fused backward runs in backward_input - and a layer that overrides both
  // says so with defers_weight_gradient(), so W really is deferred.
  virtual Tensor backward_input(const BackwardArgs& a, const Tensor& dy, LayerContext& ctx) const {
    return backward(a, dy, ctx);
  }
  virtual void backward_weights(const BackwardArgs& a, LayerContext& ctx) const {
    (void)a;
    (void)ctx;
  }
  virtual bool defers_weight_gradient() const { return false; }

  // Under --precision bf16 the callers round every layer's output and input
  // gradient to bf16 (core/bf16_rounding.h). A layer that only selects or
  // moves values (ReLU, max pooling, flatten) returns bf16 values when
  // given them, and says so here: the rounding pass after it would change
  // nothing, so the callers skip it.
  virtual bool forward_keeps_bf16() const { return false; }
  virtual bool backward_keeps_bf16() const { return false; }
  // A layer that rounds its output as it writes it under bf16 (ReLU, the
  // residual blocks' final add + ReLU) says so; if moreover its forward
  // gives the same bits for x and for round_bf16(x) (ReLU:
  // round(relu(x)) = relu(round(x))), the layer before it may leave its
  // output unrounded: one pass does both roundings.
  virtual bool forward_rounds_bf16() const { return false; }
  virtual bool forward_absorbs_input_rounding() const { return false; }
};

// Base of the layers that split their backward for real (every layer with
// parameters): backward is backward_input then backward_weights, so the
// fused and the split passes run the same kernels in the same order and
// give the same bits by construction. backward_input must leave in ctx what
// backward_weights needs also when !a.need_input_grad (it then computes no
// dx); backward_weights consumes ctx.
class SplitBackwardLayer : public Layer {
 public:
  Tensor backward(const BackwardArgs& a, const Tensor& dy, LayerContext& ctx) const final {
    Tensor dx = backward_input(a, dy, ctx);
    backward_weights(a, ctx);
    return dx;
  }
  Tensor backward_input(const BackwardArgs& a, const Tensor& dy, LayerContext& ctx) const override = 0;
  void backward_weights(const BackwardArgs& a, LayerContext& ctx) const override = 0;
  bool defers_weight_gradient() const final { return true; }
};

using LayerPtr = std::unique_ptr<Layer>;

// Allocates params/buffers for a layer (zeros) on a device.
std::vector<Tensor> allocate_params(const Layer& l, Device d = Device::cpu());
std::vector<Tensor> allocate_buffers(const Layer& l, Device d = Device::cpu());

}  // namespace pd

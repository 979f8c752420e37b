#include <cstdint>

#include "core/device_ops.h"
#include "core/layers.h"
#include "core/layers/sequence_parts.h"

namespace pd {

DropoutKey dropout_key(const StepInfo& step, uint32_t substream) {
  // The Philox key has 32 bits for the minibatch; 4 billion minibatches
  // outlast any run, so a larger id is a bug upstream.
  PD_CHECK(step.minibatch_id <= UINT32_MAX, "minibatch id ", step.minibatch_id, " exceeds 32 bits");
  return {step.seed, step.layer_index, static_cast<uint32_t>(step.minibatch_id), substream};
}

namespace {

// Saves nothing: backward regenerates the mask from the key, which forward
// records (as I64 [seed, layer, minibatch]) so a backward called with a
// different StepInfo cannot silently use another mask.
class Dropout : public Layer {
 public:
  Dropout(float p, uint32_t substream) : p_(p), substream_(substream) {
    if (!(p >= 0.0f && p < 1.0f)) throw UserError(cat("dropout: p must be in [0, 1), got ", p));
  }
  std::string type() const override { return "dropout"; }
  std::string describe() const override { return cat("dropout(p=", p_, ")"); }
  Shape output_shape(const Shape& in) const override { return in; }
  Tensor forward(const ForwardArgs& a, const Tensor& x, LayerContext& ctx) const override {
    if (!a.step.training || p_ == 0.0f) {
      ctx.saved.clear();
      return x;
    }
    const DropoutKey k = dropout_key(a.step, substream_);
    Tensor y = Tensor::empty(x.shape(), DType::F32, x.device());
    device_ops(x.device()).dropout_forward(x.numel(), p_, k, x.f32(), y.f32());
    Tensor key = Tensor::empty({3}, DType::I64);
    key.data<int64_t>()[0] = static_cast<int64_t>(k.seed);
    key.data<int64_t>()[1] = k.layer_index;
    key.data<int64_t>()[2] = k.minibatch_id;
    ctx.saved = {key};
    return y;
  }
  Tensor backward(const BackwardArgs& a, const Tensor& dy, LayerContext& ctx) const override {
    Tensor dx;
    if (a.need_input_grad) {
      if (ctx.saved.empty()) {
        dx = dy;  // eval or p = 0: identity
      } else {
        const int64_t* key = ctx.saved[0].data<int64_t>();
        const DropoutKey k{static_cast<uint64_t>(key[0]), static_cast<uint32_t>(key[1]),
                          static_cast<uint32_t>(key[2]), substream_};
        dx = Tensor::empty(dy.shape(), DType::F32, dy.device());
        device_ops(dy.device()).dropout_backward(dy.numel(), p_, k, dy.f32(), dx.f32());
      }
    }
    ctx.clear();
    return dx;
  }

 private:
  float p_;
  uint32_t substream_;
};

}  // namespace

LayerPtr make_dropout(float p, uint32_t substream) { return std::make_unique<Dropout>(p, substream); }
LayerPtr make_dropout(float p) { return make_dropout(p, 0); }

}  // namespace pd

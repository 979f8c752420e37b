// ResNet basic and bottleneck blocks (torchvision layout and names):
//   y = relu(main(x) + shortcut(x))
// main is conv-bn-relu-...-conv-bn; shortcut is the identity, or a 1x1
// strided conv (no bias) + bn when the shape changes. A block is one
// top-level layer that owns its sub-layers and keeps one child context per
// sub-layer, so a pipeline stage treats it like any other layer. Its
// backward splits like its sub-layers: B runs their backward_input, W
// their backward_weights.
#include <cstdint>

#include "core/bf16_rounding.h"
#include "core/device_ops.h"
#include "core/error.h"
#include "core/layers.h"

namespace pd {

namespace {

struct SubLayer {
  std::string prefix;  // "conv1", "downsample.0"; empty for unnamed (relu)
  LayerPtr layer;
  size_t param_offset = 0, param_count = 0;
  size_t buffer_offset = 0, buffer_count = 0;
};

class ResidualBlock : public SplitBackwardLayer {
 public:
  ResidualBlock(std::string type, std::string description) : type_(std::move(type)), describe_(std::move(description)) {}

  void add_main(std::string prefix, LayerPtr l) { add(main_, std::move(prefix), std::move(l)); }
  void add_shortcut(std::string prefix, LayerPtr l) { add(shortcut_, std::move(prefix), std::move(l)); }

  std::string type() const override { return type_; }
  std::string describe() const override { return describe_; }
  std::vector<ParamSpec> param_specs() const override { return specs(false); }
  std::vector<ParamSpec> buffer_specs() const override { return specs(true); }
  bool forward_rounds_bf16() const override { return true; }  // add + ReLU + rounding in one pass

  // Each sub-layer draws from its own stream derived from the block's, so
  // init depends only on the block's rng.
  void init(std::span<Tensor> params, std::span<Tensor> buffers, const CounterRng& rng) const override {
    uint64_t k = 0;
    for (const auto* seq : {&main_, &shortcut_})
      for (const SubLayer& s : *seq) {
        CounterRng child(rng.seed + 0x9E3779B97F4A7C15ull * ++k, rng.a, rng.b);
        s.layer->init(params.subspan(s.param_offset, s.param_count),
                      buffers.subspan(s.buffer_offset, s.buffer_count), child);
      }
  }

  Shape output_shape(const Shape& in) const override {
    Shape m = in;
    for (const SubLayer& s : main_) m = s.layer->output_shape(m);
    Shape sc = in;
    for (const SubLayer& s : shortcut_) sc = s.layer->output_shape(sc);
    if (m != sc)
      throw UserError(cat(describe_, ": main path gives ", shape_str(m), " but the shortcut gives ",
                          shape_str(sc), " for input ", shape_str(in)));
    return m;
  }

  Tensor forward(const ForwardArgs& a, const Tensor& x, LayerContext& ctx) const override {
    ctx.children.assign(main_.size() + shortcut_.size(), LayerContext{});
    Tensor h = run_forward(main_, a, x, ctx, 0);
    Tensor sc = run_forward(shortcut_, a, x, ctx, main_.size());
    PD_CHECK(h.shape() == sc.shape(), describe_, ": branch shapes differ");
    Tensor y = Tensor::empty(h.shape(), DType::F32, h.device());
    const DeviceOps& ops = device_ops(h.device());
    (a.step.precision == Precision::BF16 ? ops.add_relu_forward_rounded : ops.add_relu_forward)(
        y.numel(), h.f32(), sc.f32(), y.f32());
    ctx.saved = {y};
    return y;
  }

  Tensor backward_input(const BackwardArgs& a, const Tensor& dy, LayerContext& ctx) const override {
    PD_CHECK(ctx.saved.size() == 1 && ctx.children.size() == main_.size() + shortcut_.size(),
             describe_, ": backward without forward");
    const Tensor y = ctx.saved[0];
    const DeviceOps& ops = device_ops(y.device());
    Tensor dsum = Tensor::empty(y.shape(), DType::F32, y.device());
    ops.relu_backward(y.numel(), y.f32(), dy.f32(), dsum.f32());
    ctx.saved.clear();
    Tensor dx = run_backward_input(main_, a, dsum, ctx, 0);
    const Tensor branch = shortcut_.empty() ? dsum : run_backward_input(shortcut_, a, dsum, ctx, main_.size());
    if (dx.defined()) ops.add(dx.numel(), dx.f32(), branch.f32(), dx.f32());
    return dx;
  }

  void backward_weights(const BackwardArgs& a, LayerContext& ctx) const override {
    PD_CHECK(ctx.children.size() == main_.size() + shortcut_.size(), describe_,
             ": weight backward without its input backward");
    run_backward_weights(main_, a, ctx, 0);
    run_backward_weights(shortcut_, a, ctx, main_.size());
    ctx.clear();
  }

 private:
  void add(std::vector<SubLayer>& seq, std::string prefix, LayerPtr l) {
    SubLayer s;
    s.prefix = std::move(prefix);
    s.param_offset = params_;
    s.param_count = l->param_specs().size();
    s.buffer_offset = buffers_;
    s.buffer_count = l->buffer_specs().size();
    params_ += s.param_count;
    buffers_ += s.buffer_count;
    s.layer = std::move(l);
    seq.push_back(std::move(s));
  }

  std::vector<ParamSpec> specs(bool buffers) const {
    std::vector<ParamSpec> out;
    for (const auto* seq : {&main_, &shortcut_})
      for (const SubLayer& s : *seq)
        for (ParamSpec p : buffers ? s.layer->buffer_specs() : s.layer->param_specs()) {
          p.name = s.prefix + "." + p.name;
          out.push_back(std::move(p));
        }
    return out;
  }

  Tensor run_forward(const std::vector<SubLayer>& seq, const ForwardArgs& a, const Tensor& x,
                     LayerContext& ctx, size_t first_child) const {
    Tensor h = x;
    bool exact = true;  // the block's input holds bf16 values under bf16
    for (size_t k = 0; k < seq.size(); ++k) {
      const SubLayer& s = seq[k];
      ForwardArgs sub{a.params.subspan(s.param_offset, s.param_count),
                      a.buffers.subspan(s.buffer_offset, s.buffer_count), a.step};
      LayerContext& c = ctx.children[first_child + k];
      h = s.layer->forward(sub, h, c);
      // Every sub-layer's output is rounded (the next conv's operand), a
      // batch norm's by the ReLU after it.
      const Layer* next = k + 1 < seq.size() ? seq[k + 1].layer.get() : nullptr;
      exact = round_layer_output_if_bf16(a.step.precision, *s.layer, next, c, h, exact);
    }
    PD_CHECK(exact, describe_, ": a branch ends unrounded");
    return h;
  }

  BackwardArgs sub_args(const SubLayer& s, const BackwardArgs& a, bool need_input_grad) const {
    return {a.params.subspan(s.param_offset, s.param_count), a.grads.subspan(s.param_offset, s.param_count), a.step,
            need_input_grad};
  }

  // The first sub-layer sees the block's input: it computes dx only when
  // the block's caller wants it.
  Tensor run_backward_input(const std::vector<SubLayer>& seq, const BackwardArgs& a, const Tensor& dy,
                            LayerContext& ctx, size_t first_child) const {
    Tensor g = dy;
    for (size_t k = seq.size(); k-- > 0;) {
      g = seq[k].layer->backward_input(sub_args(seq[k], a, k > 0 || a.need_input_grad), g,
                                       ctx.children[first_child + k]);
      round_layer_input_grad_if_bf16(a.step.precision, *seq[k].layer, g);  // the previous conv's operand
    }
    return g;
  }
  void run_backward_weights(const std::vector<SubLayer>& seq, const BackwardArgs& a, LayerContext& ctx,
                            size_t first_child) const {
    for (size_t k = seq.size(); k-- > 0;)
      seq[k].layer->backward_weights(sub_args(seq[k], a, false), ctx.children[first_child + k]);
  }

  std::string type_, describe_;
  std::vector<SubLayer> main_, shortcut_;
  size_t params_ = 0, buffers_ = 0;
};

void check_block(const char* what, int64_t in, int64_t out, int stride) {
  if (in < 1 || out < 1) throw UserError(cat(what, ": channels must be positive, got ", in, " -> ", out));
  if (stride < 1) throw UserError(cat(what, ": stride must be at least 1, got ", stride));
}

void add_projection_if_needed(ResidualBlock& b, int64_t in, int64_t out, int stride) {
  if (stride == 1 && in == out) return;
  b.add_shortcut("downsample.0", make_conv2d(in, out, 1, stride, 0, false));
  b.add_shortcut("downsample.1", make_batchnorm2d(out));
}

}  // namespace

LayerPtr make_resnet_basic_block(int64_t in_channels, int64_t out_channels, int stride) {
  check_block("resnet_basic", in_channels, out_channels, stride);
  auto b = std::make_unique<ResidualBlock>(
      "resnet_basic", cat("resnet_basic(", in_channels, "->", out_channels, ", s", stride, ")"));
  b->add_main("conv1", make_conv2d(in_channels, out_channels, 3, stride, 1, false));
  b->add_main("bn1", make_batchnorm2d(out_channels));
  b->add_main("relu", make_relu());
  b->add_main("conv2", make_conv2d(out_channels, out_channels, 3, 1, 1, false));
  b->add_main("bn2", make_batchnorm2d(out_channels));
  add_projection_if_needed(*b, in_channels, out_channels, stride);
  return b;
}

// torchvision's ResNet v1.5: the stride sits on the 3x3 conv.
LayerPtr make_resnet_bottleneck_block(int64_t in_channels, int64_t mid_channels, int64_t out_channels,
                                      int stride) {
  check_block("resnet_bottleneck", in_channels, out_channels, stride);
  if (mid_channels < 1) throw UserError(cat("resnet_bottleneck: mid channels must be positive, got ", mid_channels));
  auto b = std::make_unique<ResidualBlock>(
      "resnet_bottleneck", cat("resnet_bottleneck(", in_channels, "->", mid_channels, "->", out_channels,
                               ", s", stride, ")"));
  b->add_main("conv1", make_conv2d(in_channels, mid_channels, 1, 1, 0, false));
  b->add_main("bn1", make_batchnorm2d(mid_channels));
  b->add_main("relu", make_relu());
  b->add_main("conv2", make_conv2d(mid_channels, mid_channels, 3, stride, 1, false));
  b->add_main("bn2", make_batchnorm2d(mid_channels));
  b->add_main("relu", make_relu());
  b->add_main("conv3", make_conv2d(mid_channels, out_channels, 1, 1, 0, false));
  b->add_main("bn3", make_batchnorm2d(out_channels));
  add_projection_if_needed(*b, in_channels, out_channels, stride);
  return b;
}

}  // namespace pd

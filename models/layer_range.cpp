#include "models/layer_range.h"

#include "core/bf16_rounding.h"
#include "core/error.h"

namespace pd {

namespace {
// A kept input is often another layer's saved tensor (a ReLU's output): count it once.
bool keeps_storage(const std::vector<LayerContext>& layers, const Tensor& t) {
  for (const LayerContext& c : layers)
    if (c.keeps(t)) return true;
  return false;
}
}  // namespace

size_t RangeContext::saved_bytes() const {
  size_t n = 0;
  for (const LayerContext& c : layers) n += c.saved_bytes();
  for (const DroppedLayer& d : dropped)
    if (d.input.defined() && !keeps_storage(layers, d.input)) n += d.input.nbytes();
  return n;
}

Tensor forward_layers(const Model& m, const ParameterStore& w, int first, int last, const Tensor& x,
                      const StepInfo& step, RangeContext& ctx) {
  PD_CHECK(w.holds(first) && w.holds(last) && first <= last, "weights do not hold layers [", first, ", ", last, "]");
  const size_t count = static_cast<size_t>(last - first + 1);
  ctx.layers.assign(count, LayerContext{});
  PD_CHECK(ctx.recompute.empty() || ctx.recompute.size() == count, "recompute flags for ", ctx.recompute.size(),
           " layers on a range of ", count);
  const bool recomputes = step.training && !ctx.recompute.empty();
  ctx.dropped.assign(recomputes ? count : 0, DroppedLayer{});
  // Inputs come from the data loader or a transport on the host; the layers
  // compute where the weights are.
  // Under bf16 (core/bf16_rounding.h) the range's input, every layer's
  // weights and every layer's output are bf16 values.
  const Precision p = step.precision;
  Tensor h = rounded_copy_if_bf16(p, x.device() == w.device() ? x : x.to(w.device()));
  std::vector<Tensor> rounded;
  bool exact = true;
  for (int i = first; i <= last; ++i) {
    ForwardArgs a{operand_params(p, w.params(i), rounded), w.buffers(i), step};
    a.step.layer_index = static_cast<uint32_t>(i);
    a.step.output_to_loss = step.output_to_loss && i == last;
    const size_t k = static_cast<size_t>(i - first);
    LayerContext& c = ctx.layers[k];
    const Layer* next = i < last ? &m.layer(i + 1) : nullptr;
    const bool drop = recomputes && ctx.recompute[k];
    if (drop) ctx.dropped[k] = {h, a.step, next, exact};
    h = m.layer(i).forward(a, h, c);
    // The range's output is always rounded: it goes to the loss or a link.
    exact = round_layer_output_if_bf16(p, m.layer(i), next, c, h, exact);
    if (!step.training || drop) c.clear();
  }
  return h;
}

namespace {
// Layer i's forward again, as forward_layers ran it (its context dropped):
// the same input, StepInfo and rounding; the running statistics it moves
// are a copy, thrown away.
void recompute_layer(const Model& m, const ParameterStore& w, int i, DroppedLayer& d, LayerContext& c) {
  std::vector<Tensor> rounded, statistics;
  for (const Tensor& b : w.buffers(i)) statistics.push_back(b.clone());
  ForwardArgs a{operand_params(d.step.precision, w.params(i), rounded), statistics, d.step};
  Tensor h = m.layer(i).forward(a, d.input, c);
  round_layer_output_if_bf16(d.step.precision, m.layer(i), d.next, c, h, d.input_exact);
  d = DroppedLayer{};
}

// The backward pass over [last .. lowest]: fused (each layer's ctx freed as
// soon as it is done) or the B half of a split one (ctx kept for W).
Tensor backward_pass(const Model& m, const ParameterStore& w, ParameterStore& grads, int first, int last,
                     const Tensor& dy, const StepInfo& step, RangeContext& ctx, bool need_input_grad,
                     bool input_only) {
  PD_CHECK(ctx.layers.size() == static_cast<size_t>(last - first + 1), "backward without a matching forward");
  PD_CHECK(grads.holds(first) && grads.holds(last), "gradient store does not hold the range");
  // Under bf16 the incoming gradient, the weights and every input gradient are bf16 values.
  const Precision p = step.precision;
  Tensor g = rounded_copy_if_bf16(p, dy.device() == w.device() ? dy : dy.to(w.device()));
  const int lowest = need_input_grad ? first : first_layer_with_params(m, first, last);
  std::vector<Tensor> rounded;
  for (int i = last; i >= lowest; --i) {
    BackwardArgs a{operand_params(p, w.params(i), rounded), grads.params(i), step, need_input_grad || i > lowest};
    a.step.layer_index = static_cast<uint32_t>(i);
    LayerContext& c = ctx.layers[static_cast<size_t>(i - first)];
    if (!ctx.dropped.empty() && ctx.dropped[static_cast<size_t>(i - first)].input.defined())
      recompute_layer(m, w, i, ctx.dropped[static_cast<size_t>(i - first)], c);
    else if (ctx.unpack_layer)
      ctx.unpack_layer(c);
    const Layer& l = m.layer(i);
    g = input_only ? l.backward_input(a, g, c) : l.backward(a, g, c);
    round_layer_input_grad_if_bf16(p, l, g);
    if (!input_only || !l.defers_weight_gradient()) c.clear();
  }
  return need_input_grad ? g : Tensor{};
}
}  // namespace

Tensor backward_layers(const Model& m, const ParameterStore& w, ParameterStore& grads, int first, int last,
                       const Tensor& dy, const StepInfo& step, RangeContext& ctx, bool need_input_grad) {
  Tensor dx = backward_pass(m, w, grads, first, last, dy, step, ctx, need_input_grad, false);
  ctx.clear();
  return dx;
}

Tensor backward_input_layers(const Model& m, const ParameterStore& w, ParameterStore& grads, int first,
                             int last, const Tensor& dy, const StepInfo& step, RangeContext& ctx,
                             bool need_input_grad) {
  return backward_pass(m, w, grads, first, last, dy, step, ctx, need_input_grad, true);
}

void backward_weights_layers(const Model& m, const ParameterStore& w, ParameterStore& grads, int first,
                             int last, const StepInfo& step, RangeContext& ctx) {
  PD_CHECK(ctx.layers.size() == static_cast<size_t>(last - first + 1), "weight backward without its input backward");
  for (int i = last; i >= first; --i) {
    if (!m.layer(i).defers_weight_gradient()) continue;
    std::vector<Tensor> rounded;
    BackwardArgs a{operand_params(step.precision, w.params(i), rounded), grads.params(i), step, false};
    a.step.layer_index = static_cast<uint32_t>(i);
    LayerContext& c = ctx.layers[static_cast<size_t>(i - first)];
    if (ctx.unpack_layer) ctx.unpack_layer(c);
    m.layer(i).backward_weights(a, c);
  }
  ctx.clear();
}

int first_layer_with_params(const Model& m, int first, int last) {
  int l = first;
  while (l <= last && m.layer(l).param_specs().empty()) ++l;
  return l;
}

}  // namespace pd

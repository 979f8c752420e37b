#pragma once
// Forward and backward through a contiguous range of top-level layers with
// a given weight version: the unit of work of `train` (the whole model) and
// of a pipeline stage in `run` (its range).
#include <vector>

#include "models/model.h"
#include "models/parameters.h"

namespace pd {

// What a recomputed layer's forward needs again: its input (undefined: the
// layer's context was kept) and the call's facts - the StepInfo that keys
// its dropout masks, the layer after it in the range (its bf16 rounding
// depends on it) and whether its input held bf16 values.
struct DroppedLayer {
  Tensor input;
  StepInfo step;
  const Layer* next = nullptr;
  bool input_exact = true;
};

// What forward saved for backward, one context per layer of the range.
// Freed by backward_layers (or clear()) as soon as it is no longer needed.
struct RangeContext {
  std::vector<LayerContext> layers;
  // Activation recomputation (docs/design.md §6): which layers of the range
  // (by offset from its first) forward drops the context of, keeping only
  // their input; the backward re-runs their forward just before their own
  // backward. Empty: none. A setting, kept by clear().
  std::vector<bool> recompute;
  // Per layer when any is recomputed, else empty.
  std::vector<DroppedLayer> dropped;
  // Called on a layer's context just before its backward (or weight
  // backward) reads it, when set: a stage that keeps its stash packed
  // unpacks one layer at a time, so a backward holds one layer unpacked,
  // not the whole range.
  void (*unpack_layer)(LayerContext&) = nullptr;
  size_t saved_bytes() const;  // the contexts and the recomputed layers' inputs
  void clear() {
    layers.clear();
    dropped.clear();
  }
};

// Runs layers [first, last] on x with the weights in w (which must hold
// them), on w's device (x is copied there first if it lives elsewhere, as
// does backward's dy). step.layer_index is set per layer; step.training selects training
// behaviour (dropout, BatchNorm batch statistics and running-stat updates -
// the buffers are shared by all weight versions and updated in place).
// When training, the layers ctx.recompute names keep their input instead
// of their context; the backward passes below recompute the context with
// the same StepInfo (so the same dropout masks) and on a copy of the
// running statistics (so they move once per minibatch): the same bits as
// without recomputation, in FP32 and bf16. A backward over a single layer
// taken out of a wider range (a bucketed backward) moves its `dropped`
// entry along with its context.
Tensor forward_layers(const Model& m, const ParameterStore& w, int first, int last, const Tensor& x,
                      const StepInfo& step, RangeContext& ctx);

// Backward through [first, last] with the same weights forward used: adds
// parameter gradients into grads (a store over the same layers, e.g.
// w.zeros_like_params()) and returns dy w.r.t. the range's input, or an
// undefined tensor when !need_input_grad - then backward stops at the first
// layer with parameters, which computes no input gradient (on `mlp` that
// skips fc1's dx, 14% of the first stage's backward). Consumes ctx.
Tensor backward_layers(const Model& m, const ParameterStore& w, ParameterStore& grads, int first, int last,
                       const Tensor& dy, const StepInfo& step, RangeContext& ctx, bool need_input_grad);

// The same backward in two passes, for zero-bubble schedules: the B pass
// returns dy w.r.t. the range's input (as backward_layers does) and keeps in
// ctx what each layer's weight gradient needs; the W pass then adds the
// parameter gradients into grads and consumes ctx. B then W gives the same
// bits as backward_layers. Layers that do not split their backward
// (Layer::defers_weight_gradient) add their gradients during the B pass, so grads
// must be the same store in both calls.
Tensor backward_input_layers(const Model& m, const ParameterStore& w, ParameterStore& grads, int first,
                             int last, const Tensor& dy, const StepInfo& step, RangeContext& ctx,
                             bool need_input_grad);
void backward_weights_layers(const Model& m, const ParameterStore& w, ParameterStore& grads, int first,
                             int last, const StepInfo& step, RangeContext& ctx);

// The lowest layer of [first, last] that has parameters, or last + 1.
int first_layer_with_params(const Model& m, int first, int last);

}  // namespace pd

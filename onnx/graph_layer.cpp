#include "onnx/graph_layer.h"

#include <algorithm>
#include <chrono>
#include <map>

#include "core/cpu/elementwise_kernels.h"
#include "core/error.h"
#include "models/model_graph.h"

namespace pd::onnx {

namespace {

Tensor sum_of(const Tensor& a, const Tensor& b) {
  PD_CHECK(a.shape() == b.shape(), "gradient shapes differ: ", shape_str(a.shape()), " vs ", shape_str(b.shape()));
  Tensor s = a.clone();  // never in place: a gradient may alias another tensor's
  cpu::add_into(s.numel(), s.f32(), b.f32());
  return s;
}

// Splits a packed boundary [batch, F] into its tensors; one tensor is the boundary itself.
void unpack(const Tensor& packed, const std::vector<BoundaryTensor>& parts, std::vector<Tensor>& slots) {
  if (parts.size() == 1) {
    slots[size_t(parts[0].slot)] = packed;
    return;
  }
  const int64_t batch = packed.dim(0), row = packed.numel() / batch;
  int64_t offset = 0;
  for (const BoundaryTensor& b : parts) {
    Shape shape = b.sample;
    shape.insert(shape.begin(), batch);
    Tensor t = Tensor::empty(shape);
    const int64_t n = shape_numel(b.sample);
    for (int64_t i = 0; i < batch; ++i)
      std::copy_n(packed.f32() + i * row + offset, n, t.f32() + i * n);
    slots[size_t(b.slot)] = std::move(t);
    offset += n;
  }
}

// The inverse: packs the slots' tensors per sample (an absent one, a
// gradient nobody produced, as zeros).
Tensor pack(const std::vector<Tensor>& slots, const std::vector<BoundaryTensor>& parts, int64_t batch) {
  if (parts.size() == 1) return slots[size_t(parts[0].slot)];
  int64_t row = 0;
  for (const BoundaryTensor& b : parts) row += shape_numel(b.sample);
  Tensor packed = Tensor::zeros({batch, row});
  int64_t offset = 0;
  for (const BoundaryTensor& b : parts) {
    const int64_t n = shape_numel(b.sample);
    const Tensor& t = slots[size_t(b.slot)];
    if (t.defined()) {
      PD_CHECK(t.numel() == batch * n, "boundary tensor of ", t.numel(), " values, expected ", batch * n);
      for (int64_t i = 0; i < batch; ++i)
        std::copy_n(t.f32() + i * n, n, packed.f32() + i * row + offset);
    }
    offset += n;
  }
  return packed;
}

using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t) { return std::chrono::duration<double, std::milli>(Clock::now() - t).count(); }

class OnnxSegment : public Layer {
 public:
  explicit OnnxSegment(SegmentSpec s) : s_(std::move(s)) {
    last_use_.assign(static_cast<size_t>(s_.slots), -1);
    is_output_.assign(static_cast<size_t>(s_.slots), false);
    for (size_t j = 0; j < s_.nodes.size(); ++j)
      for (const InputRef& r : s_.nodes[j].inputs)
        if (r.kind == InputRef::Slot) last_use_[size_t(r.index)] = static_cast<int>(j);
    for (const BoundaryTensor& b : s_.outputs) is_output_[size_t(b.slot)] = true;
    requires_grad_[0] = propagate(false);
    requires_grad_[1] = propagate(true);
  }

  std::string type() const override { return "onnx"; }
  std::string describe() const override {
    std::string d = "onnx(";
    std::string last;
    int repeat = 0;
    auto flush = [&] {
      if (last.empty()) return;
      if (d.back() != '(') d += ",";
      d += last;
      if (repeat > 1) d += cat("x", repeat);
    };
    for (const SegmentNode& n : s_.nodes) {
      if (n.op->type() == last) {
        ++repeat;
        continue;
      }
      flush();
      last = n.op->type();
      repeat = 1;
    }
    flush();
    return d + ")";
  }
  std::vector<ParamSpec> param_specs() const override { return s_.params; }
  std::vector<ParamSpec> buffer_specs() const override { return s_.buffers; }
  DType input_dtype() const override { return s_.input_dtype; }

  // The initializers' values, whatever the seed: an imported model starts
  // from the weights it was exported with.
  void init(std::span<Tensor> params, std::span<Tensor> buffers, const CounterRng&) const override {
    for (size_t k = 0; k < params.size(); ++k) params[k].copy_from(*s_.param_init[k]);
    for (size_t k = 0; k < buffers.size(); ++k) buffers[k].copy_from(*s_.buffer_init[k]);
  }

  Shape output_shape(const Shape& sample_in) const override {
    if (sample_in != s_.sample_in)
      throw UserError(cat("the ONNX model was exported for samples of shape ", shape_str(s_.sample_in), ", got ",
                          shape_str(sample_in), " (re-export it with the input size you train with)"));
    return s_.sample_out;
  }

  Tensor forward(const ForwardArgs& a, const Tensor& x, LayerContext& ctx) const override {
    std::vector<Tensor> slots(static_cast<size_t>(s_.slots));
    unpack(x, s_.inputs, slots);
    ctx.saved.clear();
    ctx.children.assign(s_.nodes.size(), LayerContext{});
    UnitClock* clock = UnitClock::active();
    std::vector<Tensor> in;
    for (size_t j = 0; j < s_.nodes.size(); ++j) {
      const SegmentNode& n = s_.nodes[j];
      in.clear();
      for (const InputRef& r : n.inputs) in.push_back(resolve(r, slots, a.params, a.buffers, x.dim(0)));
      const Clock::time_point start = clock ? Clock::now() : Clock::time_point{};  // read only when profiling
      std::vector<Tensor> out = n.op->forward(in, node_step(a.step, n), ctx.children[j]);
      if (clock) {
        clock->forward_ms[size_t(n.unit)] += ms_since(start);
        clock->saved_bytes[size_t(n.unit)] += ctx.children[j].saved_bytes();
      }
      for (size_t k = 0; k < n.outputs.size(); ++k) {
        if (n.outputs[k] < 0) continue;
        PD_CHECK(k < out.size(), n.label, ": output ", k, " not computed");
        slots[size_t(n.outputs[k])] = out[k];
      }
      // An activation dies with its last reader (ops saved what their backward needs).
      for (const InputRef& r : n.inputs)
        if (r.kind == InputRef::Slot && last_use_[size_t(r.index)] == static_cast<int>(j) && !is_output_[size_t(r.index)])
          slots[size_t(r.index)] = Tensor();
    }
    return pack(slots, s_.outputs, x.dim(0));
  }

  Tensor backward(const BackwardArgs& a, const Tensor& dy, LayerContext& ctx) const override {
    PD_CHECK(ctx.children.size() == s_.nodes.size(), "onnx segment: backward without forward");
    const std::vector<bool>& req = requires_grad_[a.need_input_grad ? 1 : 0];
    std::vector<Tensor> grads(static_cast<size_t>(s_.slots));
    unpack(dy, s_.outputs, grads);
    UnitClock* clock = UnitClock::active();
    for (size_t jj = s_.nodes.size(); jj-- > 0;) {
      const SegmentNode& n = s_.nodes[jj];
      std::vector<Tensor> dys;
      bool any = false;
      for (int o : n.outputs) {
        dys.push_back(o >= 0 ? grads[size_t(o)] : Tensor());
        any = any || dys.back().defined();
        if (o >= 0) grads[size_t(o)] = Tensor();
      }
      std::vector<bool> need(n.inputs.size(), false);
      bool any_need = false;
      for (size_t k = 0; k < n.inputs.size(); ++k) {
        const InputRef& r = n.inputs[k];
        need[k] = r.kind == InputRef::Param || (r.kind == InputRef::Slot && req[size_t(r.index)]);
        any_need = any_need || need[k];
      }
      if (!any || !any_need) {
        ctx.children[jj].clear();
        continue;
      }
      const Clock::time_point start = clock ? Clock::now() : Clock::time_point{};  // read only when profiling
      std::vector<Tensor> g = n.op->backward(dys, need, node_step(a.step, n), ctx.children[jj]);
      if (clock) clock->backward_ms[size_t(n.unit)] += ms_since(start);
      for (size_t k = 0; k < n.inputs.size() && k < g.size(); ++k) {
        if (!need[k] || !g[k].defined()) continue;
        const InputRef& r = n.inputs[k];
        if (r.kind == InputRef::Param) {
          Tensor& p = a.grads[size_t(r.index)];
          cpu::add_into(p.numel(), p.f32(), g[k].f32());
        } else {
          Tensor& s = grads[size_t(r.index)];
          s = s.defined() ? sum_of(s, g[k]) : g[k];
        }
      }
    }
    ctx.clear();
    return a.need_input_grad ? pack(grads, s_.inputs, dy.dim(0)) : Tensor();
  }

 private:
  static Tensor resolve(const InputRef& r, const std::vector<Tensor>& slots, std::span<const Tensor> params,
                        std::span<Tensor> buffers, int64_t batch) {
    switch (r.kind) {
      case InputRef::BatchSize: {
        Tensor b = Tensor::empty({1}, DType::I64);
        b.data<int64_t>()[0] = batch;
        return b;
      }
      case InputRef::Absent: return Tensor();
      case InputRef::Slot: return slots[size_t(r.index)];
      case InputRef::Param: return params[size_t(r.index)];
      case InputRef::Buffer: return buffers[size_t(r.index)];
      case InputRef::Constant: return r.constant;
    }
    return Tensor();
  }
  static StepInfo node_step(const StepInfo& s, const SegmentNode& n) {
    StepInfo t = s;
    t.layer_index = n.key;  // one dropout stream per node, the same in whichever layer runs it
    return t;
  }
  // Which slots carry a gradient: those that depend on a parameter, or on
  // the input when its gradient is wanted.
  std::vector<bool> propagate(bool input_grad) const {
    std::vector<bool> r(static_cast<size_t>(s_.slots), false);
    for (const BoundaryTensor& b : s_.inputs) r[size_t(b.slot)] = input_grad;
    for (const SegmentNode& n : s_.nodes) {
      bool any = false;
      for (const InputRef& in : n.inputs)
        any = any || in.kind == InputRef::Param || (in.kind == InputRef::Slot && r[size_t(in.index)]);
      for (int o : n.outputs)
        if (o >= 0) r[size_t(o)] = any;
    }
    return r;
  }

  SegmentSpec s_;
  std::vector<int> last_use_;
  std::vector<bool> is_output_;  // boundary outputs live to the end
  std::vector<bool> requires_grad_[2];
};

}  // namespace

LayerPtr make_onnx_segment(SegmentSpec spec) { return std::make_unique<OnnxSegment>(std::move(spec)); }

}  // namespace pd::onnx

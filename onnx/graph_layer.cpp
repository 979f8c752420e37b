#include "onnx/graph_layer.h"

#include <map>

#include "core/cpu/elementwise_kernels.h"
#include "core/error.h"

namespace pd::onnx {

namespace {

Tensor sum_of(const Tensor& a, const Tensor& b) {
  PD_CHECK(a.shape() == b.shape(), "gradient shapes differ: ", shape_str(a.shape()), " vs ", shape_str(b.shape()));
  Tensor s = a.clone();  // never in place: a gradient may alias another tensor's
  cpu::add_into(s.numel(), s.f32(), b.f32());
  return s;
}

class OnnxSegment : public Layer {
 public:
  explicit OnnxSegment(SegmentSpec s) : s_(std::move(s)) {
    last_use_.assign(static_cast<size_t>(s_.slots), -1);
    for (size_t j = 0; j < s_.nodes.size(); ++j)
      for (const InputRef& r : s_.nodes[j].inputs)
        if (r.kind == InputRef::Slot) last_use_[size_t(r.index)] = static_cast<int>(j);
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
    slots[0] = x;
    ctx.saved.clear();
    ctx.children.assign(s_.nodes.size(), LayerContext{});
    std::vector<Tensor> in;
    for (size_t j = 0; j < s_.nodes.size(); ++j) {
      const SegmentNode& n = s_.nodes[j];
      in.clear();
      for (const InputRef& r : n.inputs) in.push_back(resolve(r, slots, a.params, a.buffers));
      std::vector<Tensor> out = n.op->forward(in, node_step(a.step, n), ctx.children[j]);
      for (size_t k = 0; k < n.outputs.size(); ++k) {
        if (n.outputs[k] < 0) continue;
        PD_CHECK(k < out.size(), n.label, ": output ", k, " not computed");
        slots[size_t(n.outputs[k])] = out[k];
      }
      // An activation dies with its last reader (ops saved what their backward needs).
      for (const InputRef& r : n.inputs)
        if (r.kind == InputRef::Slot && last_use_[size_t(r.index)] == static_cast<int>(j) && r.index != s_.output_slot)
          slots[size_t(r.index)] = Tensor();
    }
    return slots[size_t(s_.output_slot)];
  }

  Tensor backward(const BackwardArgs& a, const Tensor& dy, LayerContext& ctx) const override {
    PD_CHECK(ctx.children.size() == s_.nodes.size(), "onnx segment: backward without forward");
    const std::vector<bool>& req = requires_grad_[a.need_input_grad ? 1 : 0];
    std::vector<Tensor> grads(static_cast<size_t>(s_.slots));
    grads[size_t(s_.output_slot)] = dy;
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
      std::vector<Tensor> g = n.op->backward(dys, need, node_step(a.step, n), ctx.children[jj]);
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
    return a.need_input_grad ? grads[0] : Tensor();
  }

 private:
  static Tensor resolve(const InputRef& r, const std::vector<Tensor>& slots, std::span<const Tensor> params,
                        std::span<Tensor> buffers) {
    switch (r.kind) {
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
    t.layer_index = s.layer_index * 4099u + n.key;  // distinct dropout streams per node
    return t;
  }
  // Which slots carry a gradient: those that depend on a parameter, or on
  // the input when its gradient is wanted.
  std::vector<bool> propagate(bool input_grad) const {
    std::vector<bool> r(static_cast<size_t>(s_.slots), false);
    r[0] = input_grad;
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
  std::vector<bool> requires_grad_[2];
};

}  // namespace

LayerPtr make_onnx_segment(SegmentSpec spec) { return std::make_unique<OnnxSegment>(std::move(spec)); }

}  // namespace pd::onnx

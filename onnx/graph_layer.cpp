#include "onnx/graph_layer.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <memory>
#include <mutex>

#include "core/device_ops.h"
#include "core/error.h"
#include "models/model_graph.h"
#include "onnx/ops/strided.h"

namespace pd::onnx {

namespace {

Tensor sum_of(const Tensor& a, const Tensor& b) {
  PD_CHECK(a.shape() == b.shape(), "gradient shapes differ: ", shape_str(a.shape()), " vs ", shape_str(b.shape()));
  Tensor s = Tensor::empty(a.shape(), DType::F32, a.device());  // never in place: a gradient may alias another tensor's
  device_ops(a.device()).add(s.numel(), a.f32(), b.f32(), s.f32());
  return s;
}

// Copies rows of `cols` floats between a [batch, cols] tensor and the
// columns [offset, offset + cols) of a [batch, row] one.
void copy_columns(int64_t batch, int64_t cols, const Tensor& from, int64_t from_offset, int64_t from_row, Tensor& to,
                  int64_t to_offset, int64_t to_row) {
  const Shape shape{batch, cols};
  copy_strided(shape, from, from_offset, {from_row, 1}, to, to_offset, {to_row, 1});
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
    Tensor t = Tensor::empty(shape, DType::F32, packed.device());
    const int64_t n = shape_numel(b.sample);
    copy_columns(batch, n, packed, offset, row, t, 0, n);
    slots[size_t(b.slot)] = std::move(t);
    offset += n;
  }
}

// The inverse: packs the slots' tensors per sample (an absent one, a
// gradient nobody produced, as zeros) on `device`.
Tensor pack(const std::vector<Tensor>& slots, const std::vector<BoundaryTensor>& parts, int64_t batch, Device device) {
  if (parts.size() == 1) return slots[size_t(parts[0].slot)];
  int64_t row = 0;
  bool complete = true;
  for (const BoundaryTensor& b : parts) {
    row += shape_numel(b.sample);
    complete = complete && slots[size_t(b.slot)].defined();
  }
  Tensor packed = complete ? Tensor::empty({batch, row}, DType::F32, device) : Tensor::zeros({batch, row}, DType::F32, device);
  int64_t offset = 0;
  for (const BoundaryTensor& b : parts) {
    const int64_t n = shape_numel(b.sample);
    const Tensor& t = slots[size_t(b.slot)];
    if (t.defined()) {
      PD_CHECK(t.numel() == batch * n, "boundary tensor of ", t.numel(), " values, expected ", batch * n);
      copy_columns(batch, n, t, 0, n, packed, offset, row);
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
    // The node whose output is the segment's one output, read by no other
    // node: the only one that may hand the loss its logits as it likes
    // (bf16, under bf16 storage).
    if (s_.outputs.size() == 1 && last_use_[size_t(s_.outputs[0].slot)] < 0)
      for (size_t j = 0; j < s_.nodes.size(); ++j)
        for (int o : s_.nodes[j].outputs)
          if (o == s_.outputs[0].slot) loss_node_ = static_cast<int>(j);
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
    for (size_t k = 0; k < params.size(); ++k) s_.param_init[k].write_to(params[k]);
    for (size_t k = 0; k < buffers.size(); ++k) s_.buffer_init[k].write_to(buffers[k]);
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
    const std::vector<std::vector<Tensor>>& constants = constants_on(x.device());
    UnitClock* clock = UnitClock::active();
    std::vector<Tensor> in;
    for (size_t j = 0; j < s_.nodes.size(); ++j) {
      const SegmentNode& n = s_.nodes[j];
      in.clear();
      for (size_t k = 0; k < n.inputs.size(); ++k) {
        const InputRef& r = n.inputs[k];
        in.push_back(r.kind == InputRef::Constant ? constants[j][k] : resolve(r, slots, a.params, a.buffers, x.dim(0)));
      }
      const Clock::time_point start = clock ? Clock::now() : Clock::time_point{};  // read only when profiling
      std::vector<Tensor> out = n.op->forward(in, node_step(a.step, j), ctx.children[j]);
      if (clock) {
        clock->forward_ms[size_t(n.unit)] += ms_since(start);
        clock->saved_bytes[size_t(n.unit)] += saved_bytes_beyond_params(ctx.children[j], a.params);
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
    return pack(slots, s_.outputs, x.dim(0), x.device());
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
      std::vector<Tensor> g = n.op->backward(dys, need, node_step(a.step, jj), ctx.children[jj]);
      if (clock) clock->backward_ms[size_t(n.unit)] += ms_since(start);
      for (size_t k = 0; k < n.inputs.size() && k < g.size(); ++k) {
        if (!need[k] || !g[k].defined()) continue;
        const InputRef& r = n.inputs[k];
        if (r.kind == InputRef::Param) {
          Tensor& p = a.grads[size_t(r.index)];
          PD_CHECK(p.numel() == g[k].numel(), n.label, ": parameter gradient ", shape_str(g[k].shape()), " for ",
                   shape_str(p.shape()));
          device_ops(p.device()).add(p.numel(), p.f32(), g[k].f32(), p.f32());  // p += g
        } else {
          Tensor& s = grads[size_t(r.index)];
          s = s.defined() ? sum_of(s, g[k]) : g[k];
        }
      }
    }
    ctx.clear();
    return a.need_input_grad ? pack(grads, s_.inputs, dy.dim(0), dy.device()) : Tensor();
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
  // The import-time constants (host tensors) as the ops get them: on the
  // activations' device, copied there once and kept; [node][input], an
  // undefined Tensor where the input is no constant.
  const std::vector<std::vector<Tensor>>& constants_on(Device d) const {
    std::lock_guard<std::mutex> lock(constants_mu_);
    for (const auto& c : device_constants_)
      if (c->device == d) return c->tensors;
    auto c = std::make_unique<DeviceConstants>();
    c->device = d;
    for (const SegmentNode& n : s_.nodes) {
      std::vector<Tensor>& row = c->tensors.emplace_back(n.inputs.size());
      for (size_t k = 0; k < n.inputs.size(); ++k) {
        const Tensor& t = n.inputs[k].constant;
        if (n.inputs[k].kind == InputRef::Constant && t.defined()) row[k] = t.device() == d ? t : t.to(d);
      }
    }
    device_constants_.push_back(std::move(c));
    return device_constants_.back()->tensors;
  }
  // Under --precision bf16 a segment is rounded at its boundary only
  // (docs/design.md): its nodes run as under FP32, so that none rounds as it
  // writes (a core ReLU would), except the node that writes the logits,
  // which is at the boundary and may hand the loss bf16 logits (a Gemm).
  StepInfo node_step(const StepInfo& s, size_t j) const {
    StepInfo t = s;
    t.layer_index = s_.nodes[j].key;  // one dropout stream per node, the same in whichever layer runs it
    t.output_to_loss = s.output_to_loss && static_cast<int>(j) == loss_node_;
    if (!t.output_to_loss) t.precision = Precision::FP32;
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
  struct DeviceConstants {
    Device device;
    std::vector<std::vector<Tensor>> tensors;
  };
  mutable std::mutex constants_mu_;
  mutable std::vector<std::unique_ptr<DeviceConstants>> device_constants_;  // one per device used (boxed: stable)
  std::vector<int> last_use_;
  std::vector<bool> is_output_;  // boundary outputs live to the end
  int loss_node_ = -1;
  std::vector<bool> requires_grad_[2];
};

}  // namespace

void InitialValue::write_to(Tensor& dst) const {
  if (tensor) {
    dst.copy_from(*tensor);
    return;
  }
  PD_CHECK(stored && dst.numel() == stored->numel(), "initial value of '", stored ? stored->name : "?", "' does not fit");
  if (dst.device().is_cpu() && dst.dtype() == DType::F32) {
    read_stored_values(*stored, dst.f32());
    return;
  }
  Tensor host = Tensor::empty(dst.shape());
  read_stored_values(*stored, host.f32());
  dst.copy_from(host);
}

LayerPtr make_onnx_segment(SegmentSpec spec) { return std::make_unique<OnnxSegment>(std::move(spec)); }

}  // namespace pd::onnx

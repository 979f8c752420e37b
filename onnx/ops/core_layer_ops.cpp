// ONNX nodes whose semantics match a core layer exactly run that layer:
// the same kernels, and so the same speed, as the zoo's models, on any
// device the layers run on.
#include <functional>

#include "core/layers.h"
#include "onnx/ops/op_util.h"
#include "onnx/ops/ops.h"

namespace pd::onnx {

namespace {

// Input 0 is the layer's input; params/buffers name the node inputs that
// are the layer's parameters and buffers, in its param_specs order.

class CoreLayerOp : public Op {
 public:
  CoreLayerOp(std::string type, LayerPtr layer, std::vector<int> params, std::vector<int> buffers, bool as_map = false)
      : type_(std::move(type)), layer_(std::move(layer)), params_(std::move(params)), buffers_(std::move(buffers)),
        as_map_(as_map) {}
  std::string type() const override { return type_; }

  std::vector<Tensor> forward(std::span<const Tensor> in, const StepInfo& step, LayerContext& ctx) const override {
    std::vector<Tensor> p, b;
    for (int k : params_) p.push_back(in[static_cast<size_t>(k)]);
    for (int k : buffers_) b.push_back(in[static_cast<size_t>(k)]);  // shared storage: updated in place
    ctx.children.resize(1);
    Tensor y = layer_->forward({p, b, step}, as_map_ ? map_view(in[0]) : in[0], ctx.children[0]);
    ctx.saved = p;  // handles only: backward needs the same weight version
    if (as_map_) {
      ctx.saved.push_back(shape_tensor(in[0].shape()));
      y = y.reshape(in[0].shape());
    }
    return {y};
  }

  std::vector<Tensor> backward(std::span<const Tensor> dys, const std::vector<bool>& need, const StepInfo& step,
                               LayerContext& ctx) const override {
    Shape x_shape;
    if (as_map_) {
      x_shape = shape_from_tensor(ctx.saved.back());
      ctx.saved.pop_back();
    }
    std::vector<Tensor> grads;
    for (const Tensor& p : ctx.saved) grads.push_back(Tensor::zeros(p.shape(), DType::F32, p.device()));
    Tensor dx = layer_->backward({ctx.saved, grads, step, need[0]}, as_map_ ? map_view(dys[0]) : dys[0],
                                 ctx.children[0]);
    if (as_map_ && dx.defined()) dx = dx.reshape(x_shape);
    std::vector<Tensor> out(need.size());
    out[0] = dx;
    for (size_t k = 0; k < params_.size(); ++k) out[static_cast<size_t>(params_[k])] = grads[k];
    ctx.clear();
    return out;
  }

 private:
  std::string type_;
  LayerPtr layer_;
  // [N, C] or [N, C, L] as the [N, C, L, 1] map a 2-d layer takes (BatchNorm1d).
  static Tensor map_view(const Tensor& x) {
    return x.reshape({x.dim(0), x.dim(1), x.ndim() > 2 ? x.dim(2) : 1, 1});
  }
  std::vector<int> params_, buffers_;
  bool as_map_;
};

OpPtr wrap(const Node& n, LayerPtr l, std::vector<int> params = {}, std::vector<int> buffers = {}, bool as_map = false) {
  return std::make_unique<CoreLayerOp>(n.op_type, std::move(l), std::move(params), std::move(buffers), as_map);
}

// Kernel, stride and padding as the core layers take them: square kernels,
// equal strides, the same padding on every side, no dilation.
struct Window {
  int kernel = 1, stride = 1, padding = 0;
};
Window square_window(const Node& n) {
  const std::vector<int64_t> k = n.ints_attr("kernel_shape"), s = n.ints_attr("strides"), p = n.ints_attr("pads"),
                             d = n.ints_attr("dilations");
  const Attribute* pad_mode = n.attribute("auto_pad");
  if (pad_mode && pad_mode->s != "NOTSET") unsupported(n, "auto_pad " + pad_mode->s + " is not supported (use explicit pads)");
  if (k.size() != 2 || k[0] != k[1]) unsupported(n, "only square 2-d kernels are supported");
  if (!s.empty() && (s.size() != 2 || s[0] != s[1])) unsupported(n, "only equal strides are supported");
  if (!p.empty() && (p.size() != 4 || p[0] != p[1] || p[0] != p[2] || p[0] != p[3]))
    unsupported(n, "only the same padding on every side is supported");
  for (int64_t v : d)
    if (v != 1) unsupported(n, "dilation is not supported");
  Window w;
  w.kernel = static_cast<int>(k[0]);
  w.stride = s.empty() ? 1 : static_cast<int>(s[0]);
  w.padding = p.empty() ? 0 : static_cast<int>(p[0]);
  return w;
}

void require_rank(const Node& n, const Tensor& x, int rank) {
  if (x.ndim() != rank) unsupported(n, cat("expects a rank-", rank, " input, got ", shape_str(x.shape())));
}

// Whether a core layer (square window, equal strides, the same padding on
// every side, no dilation, floor mode) computes exactly this Conv or pool.
bool core_window_fits(const Node& n) {
  const std::vector<int64_t> k = n.ints_attr("kernel_shape"), s = n.ints_attr("strides"), p = n.ints_attr("pads"),
                             d = n.ints_attr("dilations");
  const Attribute* pad_mode = n.attribute("auto_pad");
  if (pad_mode && pad_mode->s != "NOTSET") return false;
  if (n.int_attr("ceil_mode", 0) != 0) return false;
  if (k.size() != 2 || k[0] != k[1]) return false;
  if (!s.empty() && (s.size() != 2 || s[0] != s[1])) return false;
  if (!p.empty() && (p.size() != 4 || p[0] != p[1] || p[0] != p[2] || p[0] != p[3])) return false;
  for (int64_t v : d)
    if (v != 1) return false;
  if (n.op_type == "AveragePool" && !p.empty() && p[0] > 0 && n.int_attr("count_include_pad", 0) == 0) return false;
  return true;
}

OpPtr conv(const Node& n, const OpInputs& in) {
  const Tensor& x = in.at(0);
  const Tensor& w = in.at(1);
  require_rank(n, x, 4);
  if (in.constant[1]) unsupported(n, "the weight must be an initializer (a trainable parameter)");
  // The core conv2d takes square kernels with equal strides and pads; others go to the general op.
  if (!core_window_fits(n)) return make_general_conv_op(n, in);
  const Window win = square_window(n);
  if (w.ndim() != 4 || w.dim(2) != win.kernel || w.dim(3) != win.kernel) unsupported(n, "weight shape does not match the kernel");
  if (n.int_attr("group", 1) != 1) return make_general_conv_op(n, in);
  if (w.dim(1) != x.dim(1)) unsupported(n, "weight shape does not match the input");
  const bool bias = in.example.size() > 2 && in.example[2].defined();
  std::vector<int> params{1};
  if (bias) params.push_back(2);
  return wrap(n, make_conv2d(x.dim(1), w.dim(0), win.kernel, win.stride, win.padding, bias), params);
}

OpPtr batchnorm(const Node& n, const OpInputs& in) {
  const Tensor& x = in.at(0);
  if (x.ndim() < 2 || x.ndim() > 4)
    unsupported(n, cat("expects a rank-2, -3 or -4 input ([N, C], [N, C, L] or [N, C, H, W]), got ", shape_str(x.shape())));
  for (size_t k = 1; k < 5; ++k) in.at(k);
  if (in.constant[1] || in.constant[2]) unsupported(n, "scale and bias must be initializers");
  if (in.constant[3] || in.constant[4]) unsupported(n, "the running mean and variance must be initializers");
  // Outputs beyond Y (running statistics, opset 13's saved mean/variance)
  // are not computed: the running statistics are updated in place, and a
  // node that reads any of them is refused by the importer.
  // ONNX's momentum weighs the running value (0.9), PyTorch's and ours the batch's (0.1).
  const float momentum = 1.0f - n.float_attr("momentum", 0.9f);
  return wrap(n, make_batchnorm2d(x.dim(1), n.float_attr("epsilon", 1e-5f), momentum), {1, 2}, {3, 4}, x.ndim() < 4);
}

OpPtr maxpool(const Node& n, const OpInputs& in) {
  require_rank(n, in.at(0), 4);
  if (n.int_attr("storage_order", 0) != 0) unsupported(n, "storage_order 1 is not supported");
  if (n.outputs.size() > 1 && !n.outputs[1].empty()) unsupported(n, "the Indices output is not supported");
  if (!core_window_fits(n)) return make_pool_op(n, in);
  const Window w = square_window(n);
  return wrap(n, make_maxpool2d(w.kernel, w.stride, w.padding));
}

OpPtr avgpool(const Node& n, const OpInputs& in) {
  require_rank(n, in.at(0), 4);
  if (!core_window_fits(n)) return make_pool_op(n, in);
  const Window w = square_window(n);
  return wrap(n, make_avgpool2d(w.kernel, w.stride, w.padding));
}

OpPtr gemm(const Node& n, const OpInputs& in) {
  const Tensor& a = in.at(0);
  const Tensor& b = in.at(1);
  // A linear layer (a weight [out, in] and a bias [out], both initializers)
  // runs the core layer; every other Gemm the general op (ops/gemm.cpp).
  const bool bias = in.example.size() > 2 && in.example[2].defined();
  const bool linear = n.int_attr("transA", 0) == 0 && n.int_attr("transB", 0) == 1 &&
                      n.float_attr("alpha", 1.0f) == 1.0f && n.float_attr("beta", 1.0f) == 1.0f && !in.constant[1] &&
                      (in.batched.size() < 2 || !in.batched[1]) && a.ndim() == 2 && in.batch_axis(0) <= 0 &&
                      b.ndim() == 2 && b.dim(1) == a.dim(1) &&
                      (!bias || (!in.constant[2] && (in.batched.size() < 3 || !in.batched[2]) &&
                                 in.example[2].ndim() == 1 && in.example[2].dim(0) == b.dim(0)));
  if (!linear) return make_gemm_op(n, in);
  std::vector<int> params{1};
  if (bias) params.push_back(2);
  return wrap(n, make_linear(b.dim(1), b.dim(0), bias), params);
}

OpPtr layernorm(const Node& n, const OpInputs& in) {
  const Tensor& x = in.at(0);
  const int axis = normalize_axis(n, n.int_attr("axis", -1), x.ndim());
  if (axis != x.ndim() - 1) unsupported(n, "only normalisation over the last axis is supported");
  const bool bias = in.example.size() > 2 && in.example[2].defined();
  if (!bias || in.constant[1] || in.constant[2]) unsupported(n, "scale and bias must be initializers");
  return wrap(n, make_layernorm(x.dim(-1), n.float_attr("epsilon", 1e-5f)), {1, 2});
}

OpPtr dropout(const Node& n, const OpInputs& in) {
  float p = 0.5f;
  bool training = false;  // ONNX's default: inference, the identity
  if (in.example.size() > 1 && in.example[1].defined()) p = const_scalar(n, in, 1);
  if (in.example.size() > 2 && in.example[2].defined()) training = const_scalar(n, in, 2) != 0.0f;
  // The mask output (a training export names it) is not computed; the importer rejects a node reading it.
  return wrap(n, make_dropout(training ? p : 0.0f));
}

}  // namespace

OpPtr make_core_layer_op(const Node& n, const OpInputs& in) {
  const std::string& t = n.op_type;
  if (t == "Conv") return conv(n, in);
  if (t == "BatchNormalization") return batchnorm(n, in);
  if (t == "Relu") return wrap(n, make_relu());
  if (t == "MaxPool") return maxpool(n, in);
  if (t == "AveragePool") return avgpool(n, in);
  if (t == "GlobalAveragePool") {
    require_rank(n, in.at(0), 4);
    return wrap(n, make_adaptive_avgpool2d(1, 1));
  }
  if (t == "Gemm") return gemm(n, in);
  if (t == "LayerNormalization") return layernorm(n, in);
  if (t == "Dropout") return dropout(n, in);
  PD_CHECK(false, "not a core-layer op: ", t);
}

}  // namespace pd::onnx

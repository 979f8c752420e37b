#include "onnx/constant_folding.h"

#include <algorithm>
#include <cmath>
#include <map>

#include "onnx/ops/op_util.h"

namespace pd::onnx {

namespace {

Tensor to_f32(const Tensor& t) {
  if (!t.defined() || t.dtype() == DType::F32) return t;
  Tensor f = Tensor::empty(t.shape());
  for (int64_t i = 0; i < t.numel(); ++i) f.f32()[i] = static_cast<float>(t.data<int64_t>()[i]);
  return f;
}

Tensor to_i64(const Tensor& t) {
  if (t.dtype() == DType::I64) return t;
  Tensor r = Tensor::empty(t.shape(), DType::I64);
  for (int64_t i = 0; i < t.numel(); ++i) r.data<int64_t>()[i] = static_cast<int64_t>(std::llround(t.f32()[i]));
  return r;
}

double value_at(const Tensor& t, int64_t i) {
  return t.dtype() == DType::I64 ? static_cast<double>(t.data<int64_t>()[i]) : t.f32()[i];
}

Tensor ints(const std::vector<int64_t>& v, Shape shape) {
  Tensor t = Tensor::empty(shape, DType::I64);
  std::copy(v.begin(), v.end(), t.data<int64_t>());
  return t;
}

// Elementwise comparison / logic with broadcasting, as I64 0/1.
template <class F>
Tensor compare(const Node& n, const Tensor& a, const Tensor& b, F f) {
  const Shape out = broadcast_shapes(n, a.shape(), b.shape());
  Tensor r = Tensor::empty(out, DType::I64);
  const auto sa = broadcast_strides(a.shape(), out), sb = broadcast_strides(b.shape(), out);
  for_each_broadcast(out, sa, sb, [&](int64_t i, int64_t oa, int64_t ob) {
    r.data<int64_t>()[i] = f(value_at(a, oa), value_at(b, ob)) ? 1 : 0;
  });
  return r;
}

Tensor expand(const Node& n, const Tensor& x, const Shape& target) {
  const Shape out = broadcast_shapes(n, x.shape(), target);
  Tensor r = Tensor::empty(out, x.dtype());
  const auto s = broadcast_strides(x.shape(), out);
  for_each_broadcast(out, s, s, [&](int64_t i, int64_t o, int64_t) {
    if (x.dtype() == DType::I64)
      r.data<int64_t>()[i] = x.data<int64_t>()[o];
    else
      r.f32()[i] = x.f32()[o];
  });
  return r;
}

// Trilu: the upper (upper=1) or lower triangle of the last two axes, from
// diagonal k on; the rest zero (causal masks built with torch.triu).
Tensor trilu(const Node& n, const Tensor& x, int64_t k) {
  if (x.ndim() < 2) unsupported(n, "expects a rank-2 or higher input");
  const bool upper = n.int_attr("upper", 1) != 0;
  const int64_t rows = x.dim(-2), cols = x.dim(-1);
  Tensor r = x.clone();
  for (int64_t i = 0; i < r.numel(); ++i) {
    const int64_t col = i % cols, row = (i / cols) % rows;
    const bool keep = upper ? col - row >= k : col - row <= k;
    if (keep) continue;
    if (r.dtype() == DType::I64)
      r.data<int64_t>()[i] = 0;
    else
      r.f32()[i] = 0.0f;
  }
  return r;
}

// Einsum of constants (torch.outer of rotary embeddings' positions and
// frequencies): every index combination visited once; no ellipsis.
Tensor einsum(const Node& n, const std::vector<Tensor>& in) {
  const Attribute* a = n.attribute("equation");
  if (!a) unsupported(n, "the equation attribute is required");
  std::string eq;
  for (char c : a->s)
    if (c != ' ') eq += c;
  if (eq.find('.') != std::string::npos) unsupported(n, "ellipsis (...) is not supported");
  const size_t arrow = eq.find("->");
  std::vector<std::string> terms;
  for (size_t start = 0;;) {
    const size_t end = eq.find(',', start);
    terms.push_back(eq.substr(start, std::min(end, arrow) - start));
    if (end == std::string::npos || end > arrow) break;
    start = end + 1;
  }
  std::string out;
  if (arrow != std::string::npos) {
    out = eq.substr(arrow + 2);
  } else {
    for (char c = 'A'; c <= 'z'; ++c)
      if (std::count(eq.begin(), eq.end(), c) == 1) out += c;
  }
  if (terms.size() != in.size()) unsupported(n, cat("the equation names ", terms.size(), " operands, the node has ", in.size()));
  std::map<char, int64_t> size;
  for (size_t k = 0; k < terms.size(); ++k) {
    if (int(terms[k].size()) != in[k].ndim()) unsupported(n, cat("operand ", k, " has rank ", in[k].ndim(), ", the equation ", terms[k].size()));
    for (size_t d = 0; d < terms[k].size(); ++d) size[terms[k][d]] = in[k].dim(int(d));
  }
  std::vector<char> letters;
  int64_t total = 1;
  for (auto& [c, s] : size) {
    letters.push_back(c);
    if (s > 0 && total > (int64_t(1) << 24) / s) unsupported(n, "the constant einsum is too large to fold");
    total *= s;
  }
  Shape out_shape;
  for (char c : out) {
    if (!size.count(c)) unsupported(n, cat("output index '", c, "' names no operand's"));
    out_shape.push_back(size[c]);
  }
  Tensor r = Tensor::zeros(out_shape);
  std::map<char, int64_t> at;
  auto offset = [&](const std::string& term, const Shape& shape) {
    int64_t o = 0;
    for (size_t d = 0; d < term.size(); ++d) o = o * shape[d] + at[term[d]];
    return o;
  };
  const std::vector<Tensor> f = [&] {
    std::vector<Tensor> v;
    for (const Tensor& t : in) v.push_back(to_f32(t));
    return v;
  }();
  for (int64_t i = 0; i < total; ++i) {
    int64_t rest = i;
    for (size_t l = letters.size(); l-- > 0;) {
      at[letters[l]] = rest % size[letters[l]];
      rest /= size[letters[l]];
    }
    float p = 1.0f;
    for (size_t k = 0; k < terms.size(); ++k) p *= f[k].f32()[offset(terms[k], f[k].shape())];
    r.f32()[offset(out, out_shape)] += p;
  }
  return r;
}

std::vector<int64_t> as_ints(const Tensor& t) {
  std::vector<int64_t> v;
  for (int64_t i = 0; i < t.numel(); ++i) v.push_back(static_cast<int64_t>(value_at(t, i)));
  return v;
}

std::optional<std::vector<Tensor>> fold_special(const Node& n, const std::vector<Tensor>& in) {
  const std::string& t = n.op_type;
  auto need = [&](size_t k) -> const Tensor& {
    if (k >= in.size() || !in[k].defined()) unsupported(n, cat("input ", k, " is required"));
    return in[k];
  };
  if (t == "Constant") {
    for (const Attribute& a : n.attributes) {
      if (a.name == "value") return std::vector<Tensor>{tensor_from_value(a.t)};
      if (a.name == "value_float") return std::vector<Tensor>{Tensor::from_floats({a.f}, {})};
      if (a.name == "value_floats") return std::vector<Tensor>{Tensor::from_floats(a.floats, {int64_t(a.floats.size())})};
      if (a.name == "value_int") return std::vector<Tensor>{ints({a.i}, {})};
      if (a.name == "value_ints") return std::vector<Tensor>{ints(a.ints, {int64_t(a.ints.size())})};
    }
    unsupported(n, "a Constant without a tensor, float or int value is not supported");
  }
  if (t == "Shape") return std::vector<Tensor>{shape_constant(n, need(0).shape())};
  if (t == "Size") return std::vector<Tensor>{ints({need(0).numel()}, {})};
  if (t == "Equal") return std::vector<Tensor>{compare(n, need(0), need(1), [](double a, double b) { return a == b; })};
  if (t == "Less") return std::vector<Tensor>{compare(n, need(0), need(1), [](double a, double b) { return a < b; })};
  if (t == "Greater") return std::vector<Tensor>{compare(n, need(0), need(1), [](double a, double b) { return a > b; })};
  if (t == "And") return std::vector<Tensor>{compare(n, need(0), need(1), [](double a, double b) { return a != 0 && b != 0; })};
  if (t == "Or") return std::vector<Tensor>{compare(n, need(0), need(1), [](double a, double b) { return a != 0 || b != 0; })};
  if (t == "Not") {
    Tensor r = Tensor::empty(need(0).shape(), DType::I64);
    for (int64_t i = 0; i < r.numel(); ++i) r.data<int64_t>()[i] = value_at(in[0], i) == 0 ? 1 : 0;
    return std::vector<Tensor>{r};
  }
  if (t == "Cast") {
    const int64_t to = n.int_attr("to", 0);
    if (to == kFloat || to == kDouble || to == kFloat16) return std::vector<Tensor>{to_f32(need(0))};
    if (to == kBool) {
      Tensor r = Tensor::empty(need(0).shape(), DType::I64);
      for (int64_t i = 0; i < r.numel(); ++i) r.data<int64_t>()[i] = value_at(in[0], i) != 0 ? 1 : 0;
      return std::vector<Tensor>{r};
    }
    return std::vector<Tensor>{to_i64(need(0))};
  }
  if (t == "Range") {
    const double start = value_at(need(0), 0), limit = value_at(need(1), 0), delta = value_at(need(2), 0);
    if (delta == 0) unsupported(n, "delta is 0");
    const int64_t count = std::max<int64_t>(0, static_cast<int64_t>(std::ceil((limit - start) / delta)));
    const bool is_int = in[0].dtype() == DType::I64;
    Tensor r = Tensor::empty({count}, is_int ? DType::I64 : DType::F32);
    for (int64_t i = 0; i < count; ++i) {
      if (is_int)
        r.data<int64_t>()[i] = static_cast<int64_t>(start + double(i) * delta);
      else
        r.f32()[i] = static_cast<float>(start + double(i) * delta);
    }
    return std::vector<Tensor>{r};
  }
  if (t == "ConstantOfShape") {
    const std::vector<int64_t> shape = as_ints(need(0));
    const Attribute* v = n.attribute("value");
    Tensor fill = v ? tensor_from_value(v->t) : Tensor::from_floats({0.0f}, {1});
    return std::vector<Tensor>{expand(n, fill.reshape({}), shape)};
  }
  if (t == "Expand") return std::vector<Tensor>{expand(n, need(0), as_ints(need(1)))};
  if (t == "Einsum") return std::vector<Tensor>{einsum(n, in)};
  if (t == "Trilu") return std::vector<Tensor>{trilu(n, need(0), in.size() > 1 && in[1].defined() ? as_ints(in[1])[0] : 0)};
  return std::nullopt;
}

// Ops whose integer-valued data inputs are computed in float by the
// run-time op (exact: shapes and indices are far below 2^24) and converted
// back. Parameter-like inputs (Slice bounds, Reshape's shape, axes) stay I64.
const std::vector<size_t>* data_inputs(const std::string& t) {
  static const std::vector<size_t> first{0}, two{0, 1}, where{1, 2}, all{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
  if (t == "Gather" || t == "Slice" || t == "Reshape" || t == "Unsqueeze" || t == "Squeeze" || t == "Flatten" ||
      t == "Transpose" || t == "Identity" || t == "Split" || t == "Neg" || t == "Sqrt" || t == "Sin" || t == "Cos" ||
      t == "Exp" || t == "Reciprocal" || t == "Pow" || t == "Sigmoid" || t == "Tanh" || t == "Erf" ||
      t == "ReduceMean" || t == "ReduceSum")
    return &first;
  if (t == "Add" || t == "Sub" || t == "Mul" || t == "Div") return &two;
  if (t == "Where") return &where;
  if (t == "Concat") return &all;
  return nullptr;
}

}  // namespace

Tensor tensor_from_value(const TensorValue& v) {
  if (v.is_float()) return Tensor::from_floats(v.floats, v.dims);
  return ints(v.ints, v.dims);
}

Tensor shape_constant(const Node& n, const Shape& shape) {
  const int64_t r = static_cast<int64_t>(shape.size());
  int64_t start = n.int_attr("start", 0), end = n.int_attr("end", r);
  if (start < 0) start += r;
  if (end < 0) end += r;
  start = std::clamp<int64_t>(start, 0, r);
  end = std::clamp<int64_t>(end, start, r);
  std::vector<int64_t> v(shape.begin() + start, shape.begin() + end);
  return ints(v, {int64_t(v.size())});
}

std::optional<std::vector<Tensor>> fold_node(const Node& node, const std::vector<Tensor>& inputs) {
  if (auto r = fold_special(node, inputs)) return r;
  const std::vector<size_t>* data = data_inputs(node.op_type);
  if (!data) return std::nullopt;
  OpInputs in;
  in.example = inputs;
  in.constant.assign(inputs.size(), true);
  in.batched.assign(inputs.size(), false);
  bool integer = false;
  for (size_t k : *data) {
    if (k >= inputs.size() || !inputs[k].defined()) continue;
    integer = integer || inputs[k].dtype() == DType::I64;
    in.example[k] = to_f32(inputs[k]);
  }
  // Where's condition and Gather's indices keep their integer type.
  OpPtr op = make_op(node, in);
  LayerContext ctx;
  StepInfo step;
  step.training = false;
  std::vector<Tensor> out = op->forward(in.example, step, ctx);
  // Integer division truncates (a size split in parts: (E + 2) / 3).
  if (integer && node.op_type == "Div")
    for (Tensor& t : out)
      for (int64_t i = 0; i < t.numel(); ++i) t.f32()[i] = std::trunc(t.f32()[i]);
  if (integer)
    for (Tensor& t : out) t = to_i64(t);
  return out;
}

}  // namespace pd::onnx

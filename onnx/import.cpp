#include "onnx/import.h"

#include <algorithm>
#include <filesystem>
#include <map>
#include <memory>
#include <set>

#include "core/error.h"
#include "onnx/constant_folding.h"
#include "onnx/graph_layer.h"
#include "onnx/ops/op_util.h"
#include "onnx/ops/ops.h"

namespace pd::onnx {

namespace {

// What the importer knows of one named tensor of the graph.
struct Value {
  enum Kind { Input, Param, Buffer, Const, Activation } kind = Activation;
  Tensor example;       // the traced value (at the export batch), the constant, or the initial weights
  bool batched = false;
  BatchLayout layout;   // where a batched tensor holds the batch
  int index = -1;       // Param/Buffer: index among the model's; Activation: producing run-time node
};

// A node that runs at training time, with its inputs resolved.
struct RuntimeNode {
  const Node* node = nullptr;
  OpPtr op;
  std::vector<std::string> inputs;   // names ("" omitted)
  std::vector<std::string> outputs;  // names ("" where the op does not produce it)
  bool reads_batch = false;          // the op takes the run-time batch as an extra last input
};

class Importer {
 public:
  Importer(const ModelProto& p, std::string name) : p_(p), g_(p.graph), name_(std::move(name)) {}

  // The model with one layer per single-tensor cut, and its graph of units.
  Model run(std::shared_ptr<const ModelProto> owner) {
    trace();
    const std::vector<int> order = graph_order();
    const std::vector<int> ends = cut_points();
    std::vector<int> layer_of_node(nodes_.size());
    for (size_t j = 0, l = 0; j < nodes_.size(); ++j) {
      layer_of_node[j] = int(l);
      if (l < ends.size() && int(j) == ends[l]) ++l;
    }
    return with_graph(assemble(order, ends), layer_of_node, std::move(owner));
  }

  // One layer per stage: the units of each stage, in graph order.
  Model run_staged(const std::vector<int>& stage_of_unit, std::shared_ptr<const ModelProto> owner) {
    trace();
    if (stage_of_unit.size() != size_t(units_))
      throw UserError(cat(name_, ": the plan places ", stage_of_unit.size(), " units, the model has ", units_,
                          " (plan made for another export?)"));
    std::vector<int> stage_of_node(nodes_.size());
    for (size_t j = 0; j < nodes_.size(); ++j) {
      stage_of_node[j] = stage_of_unit[size_t(unit_of_node_[j])];
      if (stage_of_node[j] < 0) throw UserError(cat(name_, ": unit ", unit_of_node_[j], " has no stage"));
    }
    for (size_t j = 0; j < nodes_.size(); ++j)
      for (const std::string& name : nodes_[j].inputs) {
        if (name.empty() || values_.at(name).kind != Value::Activation) continue;
        const int from = values_.at(name).index;
        if (stage_of_node[size_t(from)] > stage_of_node[j])
          throw UserError(cat(name_, ": the plan runs ", nodes_[size_t(from)].node->label(), " in stage ",
                              stage_of_node[size_t(from)], " after its reader ", nodes_[j].node->label(),
                              " in stage ", stage_of_node[j], " (stages must follow the graph)"));
      }
    std::vector<int> order = graph_order();
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return stage_of_node[size_t(a)] < stage_of_node[size_t(b)]; });
    // Each stage ends where the next begins; stages come in order, so a
    // stage that is skipped has no units.
    std::vector<int> ends;
    for (size_t k = 0; k < order.size(); ++k) {
      const int stage = stage_of_node[size_t(order[k])];
      if (k + 1 < order.size() && stage_of_node[size_t(order[k + 1])] == stage) continue;
      if (stage != int(ends.size())) throw UserError(cat(name_, ": the plan's stage ", ends.size(), " has no units"));
      ends.push_back(int(k));
    }
    return with_graph(assemble(order, ends), stage_of_node, std::move(owner));
  }

 private:
  void trace() {
    check_opset();
    read_initializers();
    read_input();
    check_single_writers();
    for (const Node& n : g_.nodes) check_window_attributes(n);
    for (const Node& n : g_.nodes) {
      try {
        visit(n);
      } catch (const std::logic_error& e) {
        // Inputs no exporter writes (shapes that contradict each other) trip a
        // kernel's internal check: still the file's fault, so exit 2.
        throw UserError(cat(name_, ": ", n.label(), ": its inputs do not fit together: ", e.what()));
      }
    }
    read_output();
    find_units();
  }

  std::vector<int> graph_order() const {
    std::vector<int> order(nodes_.size());
    for (size_t j = 0; j < order.size(); ++j) order[j] = int(j);
    return order;
  }

  // The model's graph of units (each in layer layer_of_node of `m`), which
  // can rebuild the model with one layer per stage from the same file.
  Model with_graph(Model m, const std::vector<int>& layer_of_node, std::shared_ptr<const ModelProto> owner) const {
    auto graph = std::make_shared<ModelGraph>(describe_units(layer_of_node));
    graph->restage = [owner, name = name_](const std::vector<int>& stage_of_unit) {
      return Importer(*owner, name).run_staged(stage_of_unit, owner);
    };
    m.graph = std::move(graph);
    return m;
  }

  // PyTorch's scope path of the node ("/layer1/layer1.0/conv1/Conv" ->
  // "layer1/layer1.0/conv1/Conv"), `fallback` if it has none, made unique
  // among `taken`.
  static std::string display_name(const Node& n, const std::string& fallback, std::set<std::string>& taken) {
    std::string name = n.name;
    while (!name.empty() && name[0] == '/') name.erase(0, 1);
    if (name.empty()) name = fallback;
    while (!taken.insert(name).second) name += "_";
    return name;
  }

  void check_opset() {
    auto it = p_.opsets.find("");
    if (it == p_.opsets.end())
      throw UserError(cat(name_, ": the model declares no ai.onnx opset (truncated file?)"));
    if (it->second < kMinOpset || it->second > kMaxOpset)
      throw UserError(cat(name_, ": opset ", it->second, " is not supported; export with opset ", kMinOpset, "-",
                          kMaxOpset, " (scripts/export_torch.py --opset 17)"));
  }

  void read_initializers() {
    // BatchNormalization's running statistics are buffers, not parameters.
    std::set<std::string> stats;
    for (const Node& n : g_.nodes)
      if (n.op_type == "BatchNormalization")
        for (size_t k = 3; k < n.inputs.size() && k < 5; ++k) stats.insert(n.inputs[k]);
    // Initializers left in the file are traced as views of one zero tensor
    // (their values change no shape): the import holds no weights.
    int64_t largest_stored = 0;
    for (const TensorValue& t : g_.initializers)
      if (t.stored) largest_stored = std::max(largest_stored, t.numel());
    const Tensor zeros = largest_stored ? Tensor::zeros({largest_stored}) : Tensor();
    for (const TensorValue& t : g_.initializers) {
      if (t.name.empty()) throw UserError(cat(name_, ": an initializer has no name"));
      Value v;
      if (t.stored) {
        v.example = zeros.slice_rows(0, t.numel()).reshape(t.dims);
        TensorValue where = t;
        stored_[t.name] = std::make_shared<const TensorValue>(std::move(where));
      } else {
        v.example = tensor_from_value(t);
      }
      if (!t.is_float()) {
        v.kind = Value::Const;
      } else if (stats.count(t.name)) {
        v.kind = Value::Buffer;
        v.index = static_cast<int>(buffers_.size());
        buffers_.push_back(t.name);
      } else {
        v.kind = Value::Param;
        v.index = static_cast<int>(params_.size());
        params_.push_back(t.name);
      }
      values_[t.name] = v;
    }
  }

  // ONNX graphs write each tensor once; a second writer would make the
  // importer's tensor-to-producer map ambiguous.
  void check_single_writers() const {
    std::map<std::string, std::string> writer;
    for (const TensorValue& t : g_.initializers) writer.emplace(t.name, cat("initializer '", t.name, "'"));
    for (const ValueInfo& v : g_.inputs) writer.emplace(v.name, cat("model input '", v.name, "'"));
    for (const Node& n : g_.nodes)
      for (const std::string& out : n.outputs) {
        if (out.empty()) continue;
        auto [it, first] = writer.emplace(out, n.label());
        if (!first)
          throw UserError(cat(name_, ": tensor '", out, "' is written by both ", it->second, " and ", n.label(),
                              " (each tensor must have exactly one writer)"));
      }
  }

  // Kernels, strides, pads and dilations beyond this are a corrupt file,
  // not a model: refused before a window of that size is allocated.
  static constexpr int64_t kMaxWindowAttribute = int64_t{1} << 16;

  void check_window_attributes(const Node& n) const {
    for (const Attribute& a : n.attributes) {
      if (a.name != "kernel_shape" && a.name != "strides" && a.name != "pads" && a.name != "dilations") continue;
      for (int64_t v : a.ints)
        if (v > kMaxWindowAttribute || v < -kMaxWindowAttribute)
          throw UserError(cat(name_, ": ", n.label(), ": attribute '", a.name, "' holds ", v,
                              "; window attributes must be at most ", kMaxWindowAttribute, " in magnitude"));
    }
  }

  void read_input() {
    const ValueInfo* input = nullptr;
    for (const ValueInfo& v : g_.inputs) {
      if (values_.count(v.name)) continue;  // an initializer listed as input (keep_initializers_as_inputs)
      if (input) throw UserError(cat(name_, ": the model has more than one input ('", input->name, "', '", v.name, "'); only one is supported"));
      input = &v;
    }
    if (!input) throw UserError(cat(name_, ": the model has no input"));
    const std::string user = first_reader(input->name);
    if (!input->has_shape || input->dims.size() < 2)
      throw UserError(cat(name_, ": input '", input->name, "' (read by ", user, ") needs a fixed shape [batch, ...]"));
    for (size_t d = 0; d < input->dims.size(); ++d)
      if (input->dims[d] <= 0)
        throw UserError(cat(name_, ": input '", input->name, "' has a dynamic dimension ", d,
                            input->dim_names[d].empty() ? "" : cat(" ('", input->dim_names[d], "')"), ", read by ", user,
                            "; export with fixed sizes (no dynamic_axes)"));
    int64_t elements = 1;
    for (int64_t d : input->dims) {
      if (d > (int64_t(1) << 28) / elements)
        throw UserError(cat(name_, ": input '", input->name, "' of shape ", shape_str(input->dims),
                            " is implausibly large (export with a small batch)"));
      elements *= d;
    }
    Value v;
    v.kind = Value::Input;
    v.batched = true;
    batch_ = input->dims[0];
    input_shape_.assign(input->dims.begin() + 1, input->dims.end());
    if (input->elem_type == kFloat) {
      input_dtype_ = DType::F32;
      v.example = Tensor::zeros(input->dims);
    } else if (input->elem_type == kInt64 || input->elem_type == kInt32) {
      input_dtype_ = DType::I32;  // token ids; the data pipeline delivers I32
      v.example = Tensor::zeros(input->dims, DType::I32);
    } else {
      throw UserError(cat(name_, ": input '", input->name, "' has type ", onnx_type_name(input->elem_type),
                          "; float images or integer token ids are supported"));
    }
    input_name_ = input->name;
    values_[input->name] = v;
  }

  std::string first_reader(const std::string& name) const {
    for (const Node& n : g_.nodes)
      for (const std::string& i : n.inputs)
        if (i == name) return n.label();
    return "no node";
  }

  // Folds the node if its inputs are all known, else builds its run-time op
  // and runs it once on the traced inputs (which gives the output shapes).
  void visit(const Node& n) {
    if (!n.domain.empty() && n.domain != "ai.onnx")
      throw UserError(cat(name_, ": ", n.label(), ": domain '", n.domain, "' is not supported (only ai.onnx)"));
    std::vector<Tensor> in;
    bool all_known = true, shape_only = n.op_type == "Shape" || n.op_type == "Size";
    OpInputs info;
    info.batch = batch_;
    for (const std::string& name : n.inputs) {
      if (name.empty()) {
        in.emplace_back();
        info.constant.push_back(false);
        info.batched.push_back(false);
        info.layout.emplace_back();
        continue;
      }
      auto it = values_.find(name);
      if (it == values_.end())
        throw UserError(cat(name_, ": ", n.label(), ": input '", name,
                            "' is neither the model input, an initializer nor an earlier node's output (a missing initializer?)"));
      const Value& v = it->second;
      if (v.kind == Value::Activation && !v.example.defined())
        throw UserError(cat(name_, ": ", n.label(), ": input '", name,
                          "' is an output the importer does not compute (a Dropout mask, BatchNormalization's running statistics)"));
      in.push_back(v.example);
      info.constant.push_back(v.kind == Value::Const);
      info.batched.push_back(v.batched);
      info.layout.push_back(v.layout);
      all_known = all_known && v.kind == Value::Const;
    }
    info.example = in;
    if (all_known || shape_only) {
      std::optional<std::vector<Tensor>> out;
      try {
        out = fold_node(n, in);
      } catch (const UserError& e) {
        throw UserError(cat(name_, ": ", e.what()));
      }
      if (out) {
        for (size_t k = 0; k < n.outputs.size(); ++k) {
          Value c;
          c.kind = Value::Const;
          if (k < out->size()) c.example = (*out)[k];
          if (!n.outputs[k].empty() && c.example.defined()) values_[n.outputs[k]] = c;
        }
        return;
      }
    }
    if (!is_supported_op(n.op_type)) {
      std::string list;
      for (const std::string& s : supported_ops()) list += (list.empty() ? "" : " ") + s;
      throw UserError(cat(name_, ": ", n.label(), ": op ", n.op_type, " is not supported (supported: ", list, ")"));
    }
    RuntimeNode r;
    r.node = &n;
    r.inputs = n.inputs;
    try {
      r.op = make_op(n, info);
    } catch (const UserError& e) {
      throw UserError(cat(name_, ": ", e.what()));
    }
    // An Expand of a parameter to the batch makes a batched tensor from none.
    const bool makes_batch = n.op_type == "Expand" && expand_creates_batch(info, broadcast_shapes(n, in[0].shape(), const_ints(n, info, 1)));
    r.reads_batch = makes_batch;
    // Trace: run once (training mode; running statistics on scratch copies).
    std::vector<Tensor> trace_in = in;
    if (makes_batch) {
      trace_in.push_back(Tensor::empty({1}, DType::I64));
      trace_in.back().data<int64_t>()[0] = batch_;
    }
    for (size_t k = 0; k < n.inputs.size(); ++k)
      if (!n.inputs[k].empty() && values_.at(n.inputs[k]).kind == Value::Buffer) trace_in[k] = in[k].clone();
    LayerContext ctx;
    StepInfo step;
    std::vector<Tensor> out;
    try {
      out = r.op->forward(trace_in, step, ctx);
    } catch (const UserError& e) {
      throw UserError(cat(name_, ": ", n.label(), ": ", e.what()));
    } catch (const std::logic_error& e) {
      throw UserError(cat(name_, ": ", n.label(), ": cannot run on its inputs: ", e.what()));
    }
    bool batched = makes_batch;
    for (size_t k = 0; k < n.inputs.size(); ++k) batched = batched || info.batched[k];
    const int index = static_cast<int>(nodes_.size());
    for (size_t k = 0; k < n.outputs.size(); ++k) {
      if (n.outputs[k].empty()) {
        r.outputs.emplace_back();
        continue;
      }
      Value v;
      v.kind = Value::Activation;
      v.index = index;
      v.batched = batched;
      if (k < out.size()) {
        v.example = out[k];
        if (batched && !makes_batch) v.layout = output_layout(n, info, out[k]);
        r.outputs.push_back(n.outputs[k]);
      } else {
        r.outputs.emplace_back();  // e.g. BatchNormalization's running statistics: updated in place
      }
      values_[n.outputs[k]] = v;
    }
    nodes_.push_back(std::move(r));
  }

  // Ops that only run on the batch-first layout (the core kernels index
  // samples as dimension 0).
  static bool needs_batch_first(const std::string& op) {
    return op == "Conv" || op == "BatchNormalization" || op == "MaxPool" || op == "AveragePool" ||
           op == "GlobalAveragePool";
  }

  // Where output `y` of node n holds the batch, given its inputs'; a
  // UserError naming the node where the batch cannot be followed.
  BatchLayout output_layout(const Node& n, const OpInputs& in, const Tensor& y) const {
    const std::string& t = n.op_type;
    int first = -1;
    for (size_t k = 0; k < in.batched.size(); ++k)
      if (in.batched[k] && first < 0) first = int(k);
    const BatchLayout l = in.layout_of(size_t(first));
    const Tensor& x = in.example[size_t(first)];
    if (needs_batch_first(t) && !l.standard())
      throw UserError(cat(name_, ": ", n.label(), ": expects the batch first, but its input ", shape_str(x.shape()),
                          " holds it in dimension ", l.axis, " (moved by an earlier Transpose or Reshape)"));
    if (t == "Reshape" || t == "Flatten" || t == "Squeeze" || t == "Unsqueeze") {
      if (batch_ < 2) return BatchLayout{};
      return *reshaped_layout(x.shape(), l, y.shape(), batch_);  // the op checked it
    }
    if (t == "Transpose") {
      std::vector<int64_t> perm = n.ints_attr("perm");
      BatchLayout o = l;
      for (size_t d = 0; d < perm.size(); ++d)
        if ((perm[d] < 0 ? perm[d] + x.ndim() : perm[d]) == l.axis) o.axis = int(d);
      if (perm.empty()) o.axis = x.ndim() - 1 - l.axis;
      return o;
    }
    if (t == "Gather") {
      if (in.batched[1]) return in.layout_of(1);  // an embedding: the ids' layout, then the vector
      const int axis = normalize_axis(n, n.int_attr("axis", 0), x.ndim());
      BatchLayout o = l;
      if (axis < l.axis) o.axis += in.at(1).ndim() - 1;
      return o;
    }
    if (t == "Gemm" && in.batched[0]) {  // the batch in op(A)'s rows (the op checked it): Y's rows
      BatchLayout o = in.layout_of(0);
      o.axis = 0;
      return o;
    }
    if ((t == "ReduceMean" || t == "ReduceSum") && n.int_attr("keepdims", 1) == 0) {
      BatchLayout o = l;
      std::vector<int64_t> axes = in.example.size() > 1 && in.example[1].defined() ? const_ints(n, in, 1) : n.ints_attr("axes");
      for (int64_t a : axes)
        if (normalize_axis(n, a, x.ndim()) < l.axis) --o.axis;
      return o;
    }
    // Elementwise, broadcasting, matrix products, per-axis ops: the batch
    // keeps its place counted from the end, the same in every batched input.
    const int from_end = x.ndim() - l.axis;
    for (size_t k = 0; k < in.batched.size(); ++k) {
      if (!in.batched[k]) continue;
      const BatchLayout& lk = in.layout_of(k);
      if (in.example[k].ndim() - lk.axis != from_end || lk.outer != l.outer || lk.inner != l.inner)
        throw UserError(cat(name_, ": ", n.label(), ": its inputs ", shape_str(x.shape()), " and ",
                            shape_str(in.example[k].shape()), " hold the batch in different dimensions (dimension ",
                            l.axis, " and ", lk.axis, ")"));
    }
    BatchLayout o = l;
    o.axis = y.ndim() - from_end;
    if (o.axis < 0 || o.axis >= y.ndim() || (t == "Gemm" && o.axis != 0) ||
        (t == "LayerNormalization" && o.axis == y.ndim() - 1))
      throw UserError(cat(name_, ": ", n.label(), ": would reduce or contract over the batch dimension (dimension ",
                          l.axis, " of ", shape_str(x.shape()), ")"));
    return o;
  }

  void read_output() {
    if (g_.outputs.size() != 1) throw UserError(cat(name_, ": the model has ", g_.outputs.size(), " outputs; exactly one (the logits) is supported"));
    output_name_ = g_.outputs[0].name;
    auto it = values_.find(output_name_);
    if (it == values_.end() || it->second.kind != Value::Activation || !it->second.example.defined() || !it->second.batched)
      throw UserError(cat(name_, ": output '", output_name_, "' is not computed from the input"));
    const Tensor& y = it->second.example;
    if (!it->second.layout.standard())
      throw UserError(cat(name_, ": output '", output_name_, "' of shape ", shape_str(y.shape()), " holds the batch in dimension ",
                          it->second.layout.axis, "; the logits must have it first (transpose back)"));
    if (y.dtype() != DType::F32) throw UserError(cat(name_, ": output '", output_name_, "' is not float"));
    if (y.ndim() == 2) {
      task_ = Task::Classification;
    } else if (y.ndim() == 3 && input_dtype_ == DType::I32 && input_shape_.size() == 1 && y.dim(1) == input_shape_[0]) {
      task_ = Task::LanguageModel;
    } else {
      throw UserError(cat(name_, ": output '", output_name_, "' has shape ", shape_str(y.shape()),
                          "; expected logits [batch, classes] or, for token input [batch, T], [batch, T, vocab]"));
    }
    classes_ = y.dim(-1);
  }

  // Positions j (a cut after run-time node j) where exactly one activation
  // is live. A parameter read on both sides is tied (models/ties.h): each
  // side's layer holds a copy.
  std::vector<int> cut_points() {
    const int n = static_cast<int>(nodes_.size());
    const std::vector<int> position = index_reads(graph_order());
    std::vector<int> cuts;
    for (int j = 0; j + 1 < n; ++j) {
      const std::vector<std::string> live = boundary(position, j);
      const bool ok = live.size() == 1 && values_.at(live[0]).batched && values_.at(live[0]).layout.standard() &&
                      values_.at(live[0]).example.dtype() == DType::F32;
      if (ok) cuts.push_back(j);
    }
    cuts.push_back(n - 1);
    return cuts;
  }

  // Units: ops that may go to different stages. A node joins the producer
  // of any unbatched activation it reads (a transposed weight must stay
  // with its reader) or of one that does not hold the batch first and every node sharing a buffer with it
  // (the readers of a shared parameter may part: a tie, models/ties.h);
  // a unit then spans the nodes between its first and last (contiguous in
  // graph order, so the units form a DAG).
  void find_units() {
    const int n = static_cast<int>(nodes_.size());
    std::vector<int> reach(static_cast<size_t>(n));  // the furthest node each must share a unit with
    for (int j = 0; j < n; ++j) reach[size_t(j)] = j;
    std::map<std::pair<int, int>, int> first_user;  // (kind, index) of a parameter/buffer -> first node
    for (int j = 0; j < n; ++j)
      for (const std::string& name : nodes_[size_t(j)].inputs) {
        if (name.empty()) continue;
        const Value& v = values_.at(name);
        int from = -1;
        if (v.kind == Value::Activation && (!v.batched || !v.layout.standard())) from = v.index;
        if (v.kind == Value::Buffer) from = first_user.emplace(std::make_pair(int(v.kind), v.index), j).first->second;
        if (from >= 0) reach[size_t(from)] = std::max(reach[size_t(from)], j);
      }
    unit_of_node_.assign(size_t(n), 0);
    units_ = 0;
    for (int j = 0, end = -1; j < n; ++j) {
      if (j > end) ++units_;
      end = std::max(end, reach[size_t(j)]);
      unit_of_node_[size_t(j)] = units_ - 1;
    }
  }

  ModelGraph describe_units(const std::vector<int>& layer_of_node) const {
    ModelGraph g;
    g.units.resize(size_t(units_));
    std::set<std::string> names;
    std::set<std::pair<int, int>> edges;
    std::set<std::pair<int, int>> counted;  // (unit, parameter) already counted: a tied one in each reader
    for (size_t j = 0; j < nodes_.size(); ++j) {
      const int u = unit_of_node_[j];
      ModelGraphUnit& unit = g.units[size_t(u)];
      const RuntimeNode& r = nodes_[j];
      if (unit.name.empty()) {
        unit.layer = layer_of_node[j];
        unit.name = display_name(*r.node, cat("node", j), names);
        unit.op = r.node->op_type;
      } else if (unit.op.find(r.node->op_type) == std::string::npos) {
        unit.op += "+" + r.node->op_type;
      }
      for (const std::string& name : r.inputs) {
        if (name.empty()) continue;
        const Value& v = values_.at(name);
        if (v.kind == Value::Param && counted.insert({u, v.index}).second) unit.parameter_bytes += v.example.nbytes();
        if (v.kind == Value::Activation && unit_of_node_[size_t(v.index)] != u)
          edges.insert({unit_of_node_[size_t(v.index)], u});
      }
    }
    // Bytes each unit sends: its tensors read by another unit, or the output.
    std::set<std::string> sent;
    for (size_t j = 0; j < nodes_.size(); ++j)
      for (const std::string& name : nodes_[j].inputs) {
        if (name.empty()) continue;
        const Value& v = values_.at(name);
        if (v.kind == Value::Activation && unit_of_node_[size_t(v.index)] != unit_of_node_[j]) sent.insert(name);
      }
    sent.insert(output_name_);
    for (const std::string& name : sent) {
      const Value& v = values_.at(name);
      g.units[size_t(unit_of_node_[size_t(v.index)])].output_bytes_per_sample += v.example.nbytes() / size_t(batch_);
    }
    g.edges.assign(edges.begin(), edges.end());
    std::map<int, std::vector<int>> readers;  // a parameter -> the units reading it
    for (const auto& [u, param] : counted) readers[param].push_back(u);
    for (const auto& [param, units] : readers)
      if (units.size() > 1)
        g.shared_parameters.push_back({params_[size_t(param)], values_.at(params_[size_t(param)]).example.nbytes(), units});
    return g;
  }

  // Each node's position in `order`; fills last_read_ for that order.
  std::vector<int> index_reads(const std::vector<int>& order) {
    std::vector<int> position(nodes_.size());
    for (size_t k = 0; k < order.size(); ++k) position[size_t(order[k])] = int(k);
    last_read_.clear();
    for (size_t k = 0; k < order.size(); ++k)
      for (const std::string& name : nodes_[size_t(order[k])].inputs) {
        if (name.empty()) continue;
        const Value::Kind kind = values_.at(name).kind;
        if (kind == Value::Activation || kind == Value::Input)
          last_read_[name] = std::max(last_read_.count(name) ? last_read_[name] : -1, int(k));
      }
    last_read_[output_name_] = int(order.size());
    return position;
  }

  // Tensors alive across a cut: made at or before position `before` of the
  // order (the input: at -1) and read after it (the output: at the end),
  // in a fixed order (by position made, then name) both sides agree on.
  std::vector<std::string> boundary(const std::vector<int>& position, int before) const {
    std::vector<std::pair<int, std::string>> live;
    for (const auto& [name, last] : last_read_) {
      const Value& v = values_.at(name);
      const int born = v.kind == Value::Input ? -1 : position[size_t(v.index)];
      if (born <= before && last > before) live.emplace_back(born, name);
    }
    std::sort(live.begin(), live.end());
    std::vector<std::string> out;
    for (auto& [born, name] : live) out.push_back(std::move(name));
    return out;
  }

  // What a boundary may carry: batch-first tensors, and only float ones
  // when several travel packed together.
  void check_boundary(const std::vector<std::string>& names, int cut) const {
    for (const std::string& name : names) {
      const Value& v = values_.at(name);
      if (!v.batched)
        throw UserError(cat(name_, ": tensor '", name, "' crosses cut ", cut, " but has no batch dimension"));
      if (!v.layout.standard())
        throw UserError(cat(name_, ": tensor '", name, "' crosses cut ", cut, " but does not hold the batch first"));
      if (names.size() > 1 && v.example.dtype() != DType::F32)
        throw UserError(cat(name_, ": cut ", cut, " would carry the integer tensor '", name,
                            "' with other tensors; cut where it is not live"));
    }
  }

  static Shape sample_shape(const Tensor& t) { return Shape(t.shape().begin() + 1, t.shape().end()); }

  // Boundary tensors as segment slots, the first ones numbered from 0.
  std::vector<BoundaryTensor> boundary_slots(const std::vector<std::string>& names,
                                             std::map<std::string, int>& slot, int& slots) const {
    std::vector<BoundaryTensor> out;
    for (const std::string& name : names) {
      auto [it, added] = slot.emplace(name, slots);
      if (added) ++slots;
      out.push_back({it->second, sample_shape(values_.at(name).example)});
    }
    return out;
  }

  static Shape packed_shape(const std::vector<BoundaryTensor>& b) {
    if (b.size() == 1) return b[0].sample;
    int64_t n = 0;
    for (const BoundaryTensor& t : b) n += shape_numel(t.sample);
    return {n};
  }

  // One top-level layer per segment: the nodes order[ends[s-1]+1 .. ends[s]].
  Model assemble(const std::vector<int>& order, const std::vector<int>& ends) {
    Model m;
    m.name = name_;
    m.input_shape = input_shape_;
    m.input_dtype = input_dtype_;
    m.classes = classes_;
    m.task = task_;
    m.spec = {{"name", name_}, {"format", "onnx"}, {"onnx_producer", p_.producer},
              {"opset", p_.opsets.at("")}, {"export_batch", batch_}, {"layers", nlohmann::json::array()}};
    const std::vector<int> position = index_reads(order);
    std::map<int, int> owner;                       // a buffer -> its segment
    std::map<int, std::vector<int>> readers;        // a parameter -> the segments reading it
    std::set<std::string> names;
    std::vector<std::string> in_names = {input_name_};
    int begin = 0;
    for (size_t seg = 0; seg < ends.size(); ++seg) {
      const int end = ends[seg];
      const bool last = seg + 1 == ends.size();
      const std::vector<std::string> out_names = last ? std::vector<std::string>{output_name_} : boundary(position, end);
      if (!last) check_boundary(out_names, end);
      SegmentSpec s;
      std::map<std::string, int> slot;
      s.inputs = boundary_slots(in_names, slot, s.slots);
      std::map<int, int> param_at, buffer_at;  // model index -> segment index
      for (int k = begin; k <= end; ++k) {
        const int j = order[size_t(k)];
        s.nodes.push_back(segment_node(j, slot, s, param_at, buffer_at));
        for (const std::string& name : nodes_[size_t(j)].inputs) {
          if (name.empty()) continue;
          const Value& v = values_.at(name);
          if (v.kind == Value::Param) {
            std::vector<int>& r = readers[v.index];
            if (r.empty() || r.back() != int(seg)) r.push_back(int(seg));
          }
          if (v.kind != Value::Buffer) continue;
          const int at = owner.emplace(v.index, int(seg)).first->second;
          if (at != int(seg))
            throw UserError(cat(name_, ": buffer '", name, "' is used by layers ", at, " and ", seg,
                                "; running statistics must stay in one stage"));
        }
      }
      s.outputs = boundary_slots(out_names, slot, s.slots);
      s.sample_in = packed_shape(s.inputs);
      s.sample_out = packed_shape(s.outputs);
      s.input_dtype = in_names.size() == 1 ? values_.at(in_names[0]).example.dtype() : DType::F32;
      const std::string lname = display_name(*nodes_[size_t(order[size_t(begin)])].node, cat("onnx", m.layers.size()), names);
      m.spec["layers"].push_back({{"name", lname}, {"nodes", end - begin + 1}, {"boundary_tensors", out_names.size()}});
      Shape sin = s.sample_in, sout = s.sample_out;
      m.layers.push_back({lname, make_onnx_segment(std::move(s)), sin, sout});
      begin = end + 1;
      in_names = out_names;
    }
    for (const auto& [param, segs] : readers) {  // each reading layer holds a copy under the initializer's name
      if (segs.size() < 2) continue;
      TieGroup g;
      for (int seg : segs) g.members.push_back({seg, params_[size_t(param)]});
      m.ties.push_back(std::move(g));
    }
    check_ties(m);
    return m;
  }

  SegmentNode segment_node(int j, std::map<std::string, int>& slot, SegmentSpec& s, std::map<int, int>& param_at,
                           std::map<int, int>& buffer_at) {
    RuntimeNode& r = nodes_[size_t(j)];
    SegmentNode sn;
    sn.label = r.node->label();
    sn.key = static_cast<uint32_t>(j);
    sn.unit = unit_of_node_[size_t(j)];
    for (const std::string& name : r.inputs) {
      InputRef ref;
      if (!name.empty()) {
        const Value& v = values_.at(name);
        switch (v.kind) {
          case Value::Const: ref.kind = InputRef::Constant; ref.constant = v.example; break;
          case Value::Param: ref.kind = InputRef::Param; ref.index = local(param_at, v.index, s.params, s.param_init, params_, v, stored(name)); break;
          case Value::Buffer: ref.kind = InputRef::Buffer; ref.index = local(buffer_at, v.index, s.buffers, s.buffer_init, buffers_, v, stored(name)); break;
          default: {
            auto it = slot.find(name);
            PD_CHECK(it != slot.end(), "activation '", name, "' is neither made in the segment nor on its boundary");
            ref.kind = InputRef::Slot;
            ref.index = it->second;
          }
        }
      }
      sn.inputs.push_back(ref);
    }
    if (r.reads_batch) sn.inputs.push_back(InputRef{InputRef::BatchSize});
    for (const std::string& name : r.outputs) {
      if (name.empty()) {
        sn.outputs.push_back(-1);
        continue;
      }
      sn.outputs.push_back(s.slots);
      slot[name] = s.slots++;
    }
    sn.op = std::move(r.op);
    return sn;
  }

  std::shared_ptr<const TensorValue> stored(const std::string& name) const {
    auto it = stored_.find(name);
    return it == stored_.end() ? nullptr : it->second;
  }

  static int local(std::map<int, int>& at, int model_index, std::vector<ParamSpec>& specs,
                   std::vector<InitialValue>& init, const std::vector<std::string>& names, const Value& v,
                   std::shared_ptr<const TensorValue> in_file) {
    auto it = at.find(model_index);
    if (it != at.end()) return it->second;
    const int k = static_cast<int>(specs.size());
    at[model_index] = k;
    specs.push_back({names[size_t(model_index)], v.example.shape()});
    init.push_back(in_file ? InitialValue{nullptr, std::move(in_file)} : InitialValue{std::make_shared<const Tensor>(v.example), nullptr});
    return k;
  }

  const ModelProto& p_;
  const Graph& g_;
  std::string name_;
  std::map<std::string, Value> values_;
  std::map<std::string, std::shared_ptr<const TensorValue>> stored_;  // initializers left in the file
  std::vector<std::string> params_, buffers_;
  std::vector<RuntimeNode> nodes_;
  std::string input_name_, output_name_;
  Shape input_shape_;
  DType input_dtype_ = DType::F32;
  int64_t batch_ = 0, classes_ = 0;
  Task task_ = Task::Classification;
  std::vector<int> unit_of_node_;
  int units_ = 0;
  std::map<std::string, int> last_read_;  // activation or input -> last reading position (assemble's order)
};

}  // namespace

Model import_model(const ModelProto& proto, const std::string& name) {
  return Importer(proto, name).run(std::make_shared<const ModelProto>(proto));
}

Model import_model_file(const std::string& path) {
  auto proto = std::make_shared<const ModelProto>(read_model_file(path));
  return Importer(*proto, std::filesystem::path(path).stem().string()).run(proto);
}

void register_onnx_model_loader() { register_model_file_loader(".onnx", &import_model_file); }

}  // namespace pd::onnx

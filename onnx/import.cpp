#include "onnx/import.h"

#include <filesystem>
#include <map>
#include <set>

#include "core/error.h"
#include "onnx/constant_folding.h"
#include "onnx/graph_layer.h"
#include "onnx/ops/op_util.h"

namespace pd::onnx {

namespace {

// What the importer knows of one named tensor of the graph.
struct Value {
  enum Kind { Input, Param, Buffer, Const, Activation } kind = Activation;
  Tensor example;       // the traced value (at the export batch), the constant, or the initial weights
  bool batched = false;
  int index = -1;       // Param/Buffer: index among the model's; Activation: producing run-time node
};

// A node that runs at training time, with its inputs resolved.
struct RuntimeNode {
  const Node* node = nullptr;
  OpPtr op;
  std::vector<std::string> inputs;   // names ("" omitted)
  std::vector<std::string> outputs;  // names ("" where the op does not produce it)
};

class Importer {
 public:
  Importer(const ModelProto& p, std::string name) : p_(p), g_(p.graph), name_(std::move(name)) {}

  Model run() {
    check_opset();
    read_initializers();
    read_input();
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
    return assemble(cut_points());
  }

 private:
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
    for (const TensorValue& t : g_.initializers) {
      if (t.name.empty()) throw UserError(cat(name_, ": an initializer has no name"));
      Value v;
      v.example = tensor_from_value(t);
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
    // Trace: run once (training mode; running statistics on scratch copies).
    std::vector<Tensor> trace_in = in;
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
    bool batched = false;
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
        r.outputs.push_back(n.outputs[k]);
      } else {
        r.outputs.emplace_back();  // e.g. BatchNormalization's running statistics: updated in place
      }
      values_[n.outputs[k]] = v;
    }
    nodes_.push_back(std::move(r));
  }

  void read_output() {
    if (g_.outputs.size() != 1) throw UserError(cat(name_, ": the model has ", g_.outputs.size(), " outputs; exactly one (the logits) is supported"));
    output_name_ = g_.outputs[0].name;
    auto it = values_.find(output_name_);
    if (it == values_.end() || it->second.kind != Value::Activation || !it->second.example.defined() || !it->second.batched)
      throw UserError(cat(name_, ": output '", output_name_, "' is not computed from the input"));
    const Tensor& y = it->second.example;
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
  // is live and no parameter is shared across the cut.
  std::vector<int> cut_points() const {
    const int n = static_cast<int>(nodes_.size());
    std::map<std::string, int> last_read;  // activation or input -> last reading node
    std::vector<int> param_first(params_.size(), n), param_last(params_.size(), -1);
    for (int j = 0; j < n; ++j)
      for (const std::string& name : nodes_[size_t(j)].inputs) {
        if (name.empty()) continue;
        const Value& v = values_.at(name);
        if (v.kind == Value::Activation || v.kind == Value::Input) last_read[name] = j;
        if (v.kind == Value::Param) {
          param_first[size_t(v.index)] = std::min(param_first[size_t(v.index)], j);
          param_last[size_t(v.index)] = std::max(param_last[size_t(v.index)], j);
        }
      }
    last_read[output_name_] = n;
    std::vector<int> cuts;
    for (int j = 0; j + 1 < n; ++j) {
      int live = 0;
      bool ok = true;
      for (const auto& [name, last] : last_read) {
        const Value& v = values_.at(name);
        const int born = v.kind == Value::Input ? -1 : v.index;
        if (born <= j && last > j) {
          ++live;
          ok = ok && v.batched && v.example.dtype() == DType::F32;
        }
      }
      for (size_t p = 0; p < params_.size(); ++p) ok = ok && !(param_first[p] <= j && param_last[p] > j);
      if (ok && live == 1) cuts.push_back(j);
    }
    cuts.push_back(n - 1);
    return cuts;
  }

  Model assemble(const std::vector<int>& cuts) {
    Model m;
    m.name = name_;
    m.input_shape = input_shape_;
    m.input_dtype = input_dtype_;
    m.classes = classes_;
    m.task = task_;
    m.spec = {{"name", name_}, {"format", "onnx"}, {"onnx_producer", p_.producer},
              {"opset", p_.opsets.at("")}, {"export_batch", batch_}, {"layers", nlohmann::json::array()}};
    std::map<std::string, int> owner_param, owner_buffer;  // which segment holds each initializer
    std::set<std::string> names;
    int begin = 0;
    std::string in_name = input_name_;
    for (int cut : cuts) {
      SegmentSpec s;
      std::map<std::string, int> slot{{in_name, 0}};
      std::map<int, int> param_at, buffer_at;  // model index -> segment index
      std::string out_name;
      for (int j = begin; j <= cut; ++j) {
        RuntimeNode& r = nodes_[size_t(j)];
        SegmentNode sn;
        sn.label = r.node->label();
        sn.key = static_cast<uint32_t>(j - begin);
        for (const std::string& name : r.inputs) {
          InputRef ref;
          if (!name.empty()) {
            const Value& v = values_.at(name);
            switch (v.kind) {
              case Value::Const: ref.kind = InputRef::Constant; ref.constant = v.example; break;
              case Value::Param: ref.kind = InputRef::Param; ref.index = local(param_at, v.index, s.params, s.param_init, params_, v); break;
              case Value::Buffer: ref.kind = InputRef::Buffer; ref.index = local(buffer_at, v.index, s.buffers, s.buffer_init, buffers_, v); break;
              default: {
                auto it = slot.find(name);
                PD_CHECK(it != slot.end(), "activation '", name, "' crosses a single-tensor cut");
                ref.kind = InputRef::Slot;
                ref.index = it->second;
              }
            }
          }
          sn.inputs.push_back(ref);
        }
        for (const std::string& name : r.outputs) {
          if (name.empty()) {
            sn.outputs.push_back(-1);
            continue;
          }
          sn.outputs.push_back(s.slots);
          slot[name] = s.slots++;
        }
        sn.op = std::move(r.op);
        s.nodes.push_back(std::move(sn));
      }
      // The one live activation after the cut (the model output after the last).
      out_name = cut == cuts.back() ? output_name_ : live_after(cut);
      s.output_slot = slot.at(out_name);
      const Value& vin = values_.at(in_name);
      const Value& vout = values_.at(out_name);
      s.sample_in = Shape(vin.example.shape().begin() + 1, vin.example.shape().end());
      s.sample_out = Shape(vout.example.shape().begin() + 1, vout.example.shape().end());
      s.input_dtype = vin.example.dtype();
      std::string lname = nodes_[size_t(begin)].node->name;
      while (!lname.empty() && lname[0] == '/') lname.erase(0, 1);  // PyTorch's scope paths: "/layer1/..."
      if (lname.empty()) lname = cat("onnx", m.layers.size());
      while (!names.insert(lname).second) lname += "_";
      m.spec["layers"].push_back({{"name", lname}, {"nodes", cut - begin + 1}});
      Shape sin = s.sample_in, sout = s.sample_out;
      m.layers.push_back({lname, make_onnx_segment(std::move(s)), sin, sout});
      begin = cut + 1;
      in_name = out_name;
    }
    return m;
  }

  // The activation live right after node j (a cut point).
  std::string live_after(int j) const {
    for (int k = j + 1; k < static_cast<int>(nodes_.size()); ++k)
      for (const std::string& name : nodes_[size_t(k)].inputs) {
        if (name.empty()) continue;
        const Value& v = values_.at(name);
        if ((v.kind == Value::Activation && v.index <= j) || v.kind == Value::Input) return name;
      }
    PD_CHECK(false, "no live activation after node ", j);
  }

  static int local(std::map<int, int>& at, int model_index, std::vector<ParamSpec>& specs,
                   std::vector<std::shared_ptr<const Tensor>>& init, const std::vector<std::string>& names,
                   const Value& v) {
    auto it = at.find(model_index);
    if (it != at.end()) return it->second;
    const int k = static_cast<int>(specs.size());
    at[model_index] = k;
    specs.push_back({names[size_t(model_index)], v.example.shape()});
    init.push_back(std::make_shared<const Tensor>(v.example));
    return k;
  }

  const ModelProto& p_;
  const Graph& g_;
  std::string name_;
  std::map<std::string, Value> values_;
  std::vector<std::string> params_, buffers_;
  std::vector<RuntimeNode> nodes_;
  std::string input_name_, output_name_;
  Shape input_shape_;
  DType input_dtype_ = DType::F32;
  int64_t batch_ = 0, classes_ = 0;
  Task task_ = Task::Classification;
};

}  // namespace

Model import_model(const ModelProto& proto, const std::string& name) { return Importer(proto, name).run(); }

Model import_model_file(const std::string& path) {
  return import_model(read_model_file(path), std::filesystem::path(path).stem().string());
}

void register_onnx_model_loader() { register_model_file_loader(".onnx", &import_model_file); }

}  // namespace pd::onnx

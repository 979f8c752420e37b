#pragma once
// Parameters and buffers of a contiguous range [first, last] of a model's
// top-level layers - the whole model for `train`, one stage for `run`.
// Tensors are named "{layer index}.{param name}" ("0.weight",
// "4.conv1.weight") whichever range holds them, and a layer's initial
// values depend only on (seed, layer index), so stages built separately
// hold exactly the tensors a whole-model build would.
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/safetensors.h"
#include "models/model.h"

namespace pd {

// The name a layer's parameter or buffer is stored under ("4.conv1.weight").
inline std::string stored_tensor_name(int layer, const std::string& name) { return cat(layer, ".", name); }

class ParameterStore {
 public:
  ParameterStore() = default;
  // Allocates and initialises layers [first, last] (init RNG: CounterRng(seed, layer index, 0)).
  static ParameterStore create(const Model& m, int first, int last, uint64_t seed, Device d = Device::cpu());
  static ParameterStore create(const Model& m, uint64_t seed, Device d = Device::cpu()) {
    return create(m, 0, m.size() - 1, seed, d);
  }

  Device device() const { return device_; }  // where every tensor of the store lives
  int first_layer() const { return first_; }
  int last_layer() const { return last_; }
  bool holds(int layer) const { return layer >= first_ && layer <= last_; }

  // One layer's tensors (layer is the model's top-level index).
  std::span<Tensor> params(int layer);
  std::span<const Tensor> params(int layer) const;
  std::span<Tensor> buffers(int layer) const;  // shared storage: writable from a const store

  // Every parameter in layer order, for the optimizer.
  std::vector<Tensor>& all_params() { return params_; }
  const std::vector<Tensor>& all_params() const { return params_; }
  const std::vector<Tensor>& all_buffers() const { return buffers_; }
  const std::vector<std::string>& param_names() const { return param_names_; }
  const std::vector<std::string>& buffer_names() const { return buffer_names_; }
  // A parameter by its stored name ("6.weight"); PD_CHECK that it is held.
  Tensor& param(const std::string& stored);
  // Tied parameters (models/ties.h): parameter i is a copy of another
  // layer's, which files hold under saved_name(i), the owner's name.
  bool is_tie_copy(size_t i) const { return saved_names_[i] != param_names_[i]; }
  const std::string& saved_name(size_t i) const { return saved_names_[i]; }
  // The parameters with each tied tensor once (copies left out): what a
  // gradient norm counts.
  std::vector<Tensor> params_counted_once() const;
  int64_t param_count() const;      // elements
  size_t param_bytes() const;

  // A new weight version: parameters deep-copied, buffers (BatchNorm running
  // statistics) shared - they are not versioned by weight stashing.
  ParameterStore clone_params() const;
  // Zero tensors shaped like the parameters (no buffers): gradients.
  ParameterStore zeros_like_params() const;
  void zero_params();
  void copy_params_from(const ParameterStore& other);  // same layout
  // Exchanges the parameter tensors (not the buffers) with a store of the
  // same layout: how a stage makes a new weight version current without a copy.
  void swap_params(ParameterStore& other);

  // Parameters then buffers, with their names: what --save writes (a tie
  // copy left out: its owner's tensor holds the same values).
  NamedTensors named_tensors() const;
  // Loads every tensor of this store by name from a file's tensors (others
  // are ignored, so a whole-model file fills one stage; a tie copy is filled
  // from its owner's name). A missing name or a wrong shape is a UserError.
  void load(const NamedTensors& tensors, const std::string& source);

 private:
  int first_ = 0, last_ = -1;
  Device device_;
  std::vector<Tensor> params_, buffers_;
  std::vector<std::string> param_names_, buffer_names_;
  std::vector<std::string> saved_names_;  // param_names_, a tie copy's owner's name
  // Index of layer first_+k's first tensor; one extra entry at the end.
  std::vector<size_t> param_begin_, buffer_begin_;
};

// Weights from outside a run (--init, --weights): safetensors files, and
// folders whose *.safetensors files are all read (a checkpoint's step-N
// folder: one file per stage). `source` says which, for messages.
struct WeightFiles {
  NamedTensors tensors;  // every file's, in the order given
  std::string source;
};
WeightFiles read_weight_files(const std::vector<std::string>& paths);

// The given tensors matched to `m`'s parameters and buffers by name and
// returned under the names the model stores them ("{layer}.{name}"), so
// ParameterStore::load fills any layer range - one stage - from them.
// A given tensor holds model tensor "{layer}.{name}" when it is named
//   - "{layer}.{name}" (train/run --save, export, a checkpoint's stage files), or,
//     where no other layer has a tensor called {name} (an ONNX model's
//     initializers, which the graph names uniquely):
//   - "{name}" (a PyTorch state_dict of the module an ONNX file was exported
//     from: its initializers keep the state_dict's names), or
//   - "{k}.{name}" for another layer number k (a graph plan's run numbers
//     layers by stage).
// Ignored: checkpoint optimizer slots ("optimizer.slot.*") and PyTorch's
// BatchNorm counters ("*.num_batches_tracked": the momentum is fixed).
// UserError naming the tensors when one is missing, one matches nothing
// (extra), two hold the same tensor, or one has another shape or dtype.
NamedTensors match_named_weights(const Model& m, const NamedTensors& given, const std::string& source);

// The whole model's weights read from `paths` and matched by name, as
// match_named_weights does but from the files' headers, before any tensor
// is read: only the matched tensors are read. UserError naming the file
// and tensor when a weight is NaN or infinite.
NamedTensors load_named_weights(const Model& m, const std::vector<std::string>& paths);

}  // namespace pd

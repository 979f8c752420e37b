#pragma once
// The graph behind a model whose top-level layers are pieces of a finer
// DAG (an imported ONNX graph). Its units - single ops, or ops that must
// share a stage because they share a buffer or pass a weight-sized tensor -
// are what `profile` times and `plan` cuts on antichains; `restage`
// rebuilds the model with one top-level layer per planned stage, whose
// boundaries may carry several tensors (skip connections included).
#include <cstdint>
#include <functional>
#include <span>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/layer.h"

namespace pd {

struct Model;

struct ModelGraphUnit {
  std::string name;  // unique within the model
  std::string op;    // "Conv", or "Transpose+MatMul" for a group
  int layer = 0;     // the top-level layer of the default model that runs it
  // Per sample: the tensors it makes that another unit reads (or the model output).
  uint64_t output_bytes_per_sample = 0;
  uint64_t parameter_bytes = 0;
};

struct ModelGraph {
  std::vector<ModelGraphUnit> units;        // a topological order
  std::vector<std::pair<int, int>> edges;   // (from unit, to unit), each once
  // Parameters read by several units (tied weights, models/ties.h); each
  // reading unit's parameter_bytes counts its copy.
  struct SharedParameter {
    std::string name;       // the initializer
    uint64_t bytes = 0;     // one copy
    std::vector<int> units; // ascending
  };
  std::vector<SharedParameter> shared_parameters;
  // One top-level layer per stage; stage_of_unit must not decrease along an
  // edge (UserError naming the edge otherwise).
  std::function<Model(const std::vector<int>& stage_of_unit)> restage;
};

// Per-unit costs measured inside layers: while one is installed on a
// thread, layers made of units (onnx/graph_layer) add each unit's forward
// and backward time and the bytes it saves for backward. CPU only: the
// clock is read right after each op (no device synchronisation).
class UnitClock {
 public:
  explicit UnitClock(size_t units) : forward_ms(units, 0), backward_ms(units, 0), saved_bytes(units, 0) {}
  void clear();
  static UnitClock* active();  // this thread's, or null

  // Installs a clock on this thread for its lifetime.
  class Installed {
   public:
    explicit Installed(UnitClock* c);
    ~Installed();
    Installed(const Installed&) = delete;
    Installed& operator=(const Installed&) = delete;

   private:
    UnitClock* previous_;
  };

  std::vector<double> forward_ms, backward_ms;
  std::vector<uint64_t> saved_bytes;
};

// What a layer's context holds beyond the weights it was given: the bytes
// of its saved tensors, less those that are `params` themselves (a layer
// keeping handles to the weight version its backward must use holds no
// copy of it). What the profile records as a layer's or unit's stash.
size_t saved_bytes_beyond_params(const LayerContext& ctx, std::span<const Tensor> params);
// The bytes of what ctx saves that `other` saves too (the same storage: a
// ReLU's output that the next Linear keeps as its input).
size_t saved_bytes_shared_with(const LayerContext& ctx, const LayerContext& other);

}  // namespace pd

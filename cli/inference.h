#pragma once
// What `evaluate` and `predict` share: the model, a split of a data set
// (all of it or its first --samples), and weights read with --weights and
// matched by name (models/parameters.h), on the compute device.
#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "models/dataset.h"
#include "models/model.h"
#include "core/precision.h"
#include "models/parameters.h"

namespace pd::cli {

struct InferenceArgs {
  std::string model, spec_file, model_options, data = "fashion-mnist", data_dir, split = "test";
  std::vector<std::string> weights;
  int64_t samples = 0;  // 0: the whole split
  int64_t batch = 500;
  int threads = 0;      // 0: all cores
  std::string device = "cpu";
  bool deterministic = false;
  bool allow_tf32 = false;
  std::string precision = "fp32";  // --precision
};

// The flags of InferenceArgs (--weights required).
void add_inference_options(CLI::App& cmd, InferenceArgs& a);

struct Inference {
  Model model;
  std::unique_ptr<Dataset> data;  // the split, cut to --samples
  ParameterStore weights;         // on the compute device
  Precision precision = Precision::FP32;  // bf16: the rounding points a bf16 train/run evaluates with
};
// UserError for a bad model, data set, split or weight file.
Inference open_inference(const InferenceArgs& a);

}  // namespace pd::cli

#pragma once
// ONNX export: trained weights written back into the model file they were
// imported from. The output is the input file with the data of each
// parameter and buffer initializer replaced; every other byte - nodes,
// attributes, other initializers, metadata - is copied as it was, so
// whatever loaded the original loads the export.
#include <string>
#include <vector>

#include "core/safetensors.h"

namespace pd::onnx {

// `onnx_bytes` with each initializer the imported model holds as a
// parameter or buffer set to the tensor stored under its name
// ("{layer}.{initializer}", as `train --save` writes it). A tensor missing
// from `weights`, one the model does not have, or one of another shape or
// dtype is a UserError naming it. Checkpoint optimizer slots and older
// weight versions ("optimizer.*", "version.*") are ignored. `source` names the ONNX file in
// messages, `weights_source` the weights.
std::string export_weights(const std::string& onnx_bytes, const std::string& source, const NamedTensors& weights,
                           const std::string& weights_source);

// Reads in.onnx and the safetensors files (several: a checkpoint's stage
// files), writes out.onnx atomically.
void export_model_file(const std::string& onnx_path, const std::vector<std::string>& weight_paths,
                       const std::string& out_path);

}  // namespace pd::onnx

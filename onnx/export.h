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

// Where export_model_file writes the weights: in the .onnx file
// (raw_data), or in one external data file beside it, as the ONNX spec
// lays it out (each tensor's `location` relative to the model's folder,
// `offset`, `length`); automatic: external where the model would reach
// protobuf's 2 GiB (kMaxModelBytes), embedded below.
enum class ExportLayout { automatic, embedded, external };

// The external data file export_model_file writes for `out_path`:
// "{its file name}.data", in its folder.
std::string external_data_file_name(const std::string& out_path);

// Reads in.onnx (its own external data resolved in its folder) and the
// weights (safetensors files, a sharded save's index, a checkpoint's stage
// files), writes out.onnx atomically - after its external data file,
// with that layout. Returns the layout written.
ExportLayout export_model_file(const std::string& onnx_path, const std::vector<std::string>& weight_paths,
                               const std::string& out_path, ExportLayout layout = ExportLayout::automatic);

}  // namespace pd::onnx

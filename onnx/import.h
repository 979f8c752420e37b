#pragma once
// ONNX import: an exported model file becomes a pd::Model whose top-level
// layers are OnnxSegments, cut at the points where exactly one activation
// is live (between ResNet blocks, between transformer blocks), so stages
// are contiguous ranges of them as for every zoo model.
//
// The graph's float initializers are the parameters (named as in the file),
// BatchNormalization's running statistics its buffers; integer and bool
// initializers and everything computable at import (shape arithmetic,
// masks) are constants. A model file the importer cannot run exactly - an
// unsupported op or attribute, a dynamic dimension, a missing initializer,
// a truncated file - is a UserError naming the node and its op.
#include <string>

#include "models/model.h"
#include "onnx/onnx_proto.h"

namespace pd::onnx {

// Opsets the importer accepts (ai.onnx domain).
constexpr int64_t kMinOpset = 13, kMaxOpset = 17;

Model import_model(const ModelProto& proto, const std::string& name);
Model import_model_file(const std::string& path);

// Makes resolve_model accept "--model file.onnx" (the CLI calls this once).
void register_onnx_model_loader();

}  // namespace pd::onnx

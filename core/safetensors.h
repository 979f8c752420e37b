#pragma once
// Reading and writing the safetensors format (8-byte little-endian header
// length, JSON header with dtype/shape/data_offsets, raw little-endian data).
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"

namespace pd {

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

// Writes atomically (temp file + rename). Metadata goes in "__metadata__".
void save_safetensors(const std::string& path, const NamedTensors& tensors,
                      const std::map<std::string, std::string>& metadata = {});
// Throws UserError when the file is missing or malformed.
NamedTensors load_safetensors(const std::string& path,
                              std::map<std::string, std::string>* metadata = nullptr);
// The "__metadata__" of the header, after checking the header as
// load_safetensors does (offsets, shapes, overlaps); no tensor data is read.
std::map<std::string, std::string> read_safetensors_metadata(const std::string& path);

}  // namespace pd

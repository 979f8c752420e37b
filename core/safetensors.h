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
// One tensor as the header describes it (checked as load_safetensors does).
struct SafetensorsEntry {
  std::string name;
  DType dtype;
  Shape shape;
};
// The header's tensors, in file order; no tensor data is read.
std::vector<SafetensorsEntry> read_safetensors_entries(const std::string& path);
// Only the tensors named in `names` (in file order): the others are neither
// allocated nor read. A name the file lacks is left out.
NamedTensors load_safetensors_named(const std::string& path, const std::vector<std::string>& names);
// The "__metadata__" of the header, after checking the header as
// load_safetensors does (offsets, shapes, overlaps); no tensor data is read.
std::map<std::string, std::string> read_safetensors_metadata(const std::string& path);

}  // namespace pd

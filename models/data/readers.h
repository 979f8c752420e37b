#pragma once
// The readers behind open_dataset's images:, npy: and tokens: sources, and
// what they share with the built-in datasets. Internal to models/.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "models/dataset.h"

namespace pd::data {

DataSplits open_image_folder(const std::string& dir, const Model& model, const DataOptions& options);
DataSplits open_npy(const std::string& files, const Model& model, const DataOptions& options);
DataSplits open_tokens(const std::string& file, const Model& model, const DataOptions& options);

// Rows of `inputs` and `labels` as a dataset (defined in dataset.cpp).
std::unique_ptr<Dataset> in_memory_dataset(std::string name, Tensor inputs, Tensor labels, int64_t classes);

// Every k-th item (k = round(1 / val), items k-1, 2k-1, ...) is held out:
// a split that needs no RNG and takes from every part of a sorted list.
// UserError when val is outside (0, 0.5].
int64_t held_out_stride(double val);
inline bool is_held_out(int64_t i, int64_t stride) { return i % stride == stride - 1; }

}  // namespace pd::data

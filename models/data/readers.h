#pragma once
// The readers behind open_dataset's images:, npy: and tokens: sources, and
// what they share with the built-in datasets. Internal to models/.
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/error.h"
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

// Samples idx of a token stream cut into non-overlapping windows of T
// tokens, as int32 [idx.size(), T]; shift 1 gives the next-token targets.
// `windows` is the stream's window count ((tokens - 1) / T).
template <class Token>
Tensor token_windows(const Token* stream, int64_t windows, int64_t T, std::span<const int64_t> idx, int64_t shift) {
  Tensor out = Tensor::empty({static_cast<int64_t>(idx.size()), T}, DType::I32);
  int32_t* p = out.data<int32_t>();
  for (size_t i = 0; i < idx.size(); ++i) {
    PD_CHECK(idx[i] >= 0 && idx[i] < windows, "sample index out of range");
    const Token* src = stream + idx[i] * T + shift;
    for (int64_t k = 0; k < T; ++k) p[static_cast<int64_t>(i) * T + k] = static_cast<int32_t>(src[k]);
  }
  return out;
}

}  // namespace pd::data

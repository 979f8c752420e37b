#pragma once
// Datasets and the order in which training visits them.
//
// The order is a pure function of the seed: epoch e's permutation depends
// on (seed, e) only, and the samples at positions p..p+n-1 of it are the
// same whoever asks. Minibatch m of size b is positions m·b … m·b+b−1, so a
// batch of 64 sees the samples of four microbatches of 16 (minibatches
// 4m..4m+3 of size 16), and any pipeline stage can fetch minibatch m's
// inputs or labels alone, without communication.
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "models/model.h"

namespace pd {

class Dataset {
 public:
  virtual ~Dataset() = default;
  virtual std::string name() const = 0;       // "fashion-mnist/train"
  virtual int64_t size() const = 0;           // samples
  virtual Shape sample_shape() const = 0;     // [1, 28, 28] or [T]
  virtual DType input_dtype() const = 0;      // F32 images, I32 tokens
  virtual Shape label_shape() const = 0;      // [] (one class) or [T] (next tokens)
  virtual int64_t classes() const = 0;        // label values are in [0, classes)
  // [n, sample_shape...] and [n, label_shape...] (I32) for the given sample indices.
  virtual Tensor inputs(std::span<const int64_t> indices) const = 0;
  virtual Tensor labels(std::span<const int64_t> indices) const = 0;
  // The inputs a training step of `epoch` sees: inputs() with augmentation
  // (an image folder's random crop and flip) drawn from (seed, epoch,
  // sample index) alone, so any thread or worker fetches the same bits.
  // Datasets without augmentation return inputs().
  virtual Tensor training_inputs(std::span<const int64_t> indices, uint64_t seed, int64_t epoch) const {
    return inputs(indices);
  }
};

struct DataSplits {
  std::unique_ptr<Dataset> train, test;
};

// Settings of the readers that take any (--data-options KEY=VALUE,...):
//   mean, std    images: per-channel normalisation, values joined by '/'
//                (default ImageNet's for 3 channels, 0.449 / 0.226 for 1)
//   val          images, npy: the held-out share when the data has no test
//                split of its own (default 0.1: every 10th sample); tokens:
//                the share of the stream's end held out without a val file
//   augment      images: 1 random-crop and flip for training (default), 0 off
struct DataOptions {
  std::vector<float> mean, std;  // empty: the default
  double val = 0.1;
  bool augment = true;
  std::vector<std::string> given;  // the keys the user wrote, in order
  // UserError when the user gave mean, std or augment=1 to a reader without
  // images (`reader`: "npy:", "tokens:").
  void refuse_image_options(const std::string& reader) const;
};
// "mean=0.5/0.5/0.5,val=0.2"; UserError naming the bad item.
DataOptions parse_data_options(const std::string& text);

// Opens a dataset by name for a model:
//   fashion-mnist  idx .gz files (train-images-idx3-ubyte.gz, ...) in dir,
//                  default /usr/share/datasets/fashion-mnist; normalised
//   cifar10        data_batch_{1..5}.bin and test_batch.bin in dir (required); normalised
//   text           character-level corpus from the file (or the one file in
//                  dir) given as dir; windows of the model's context, next-byte
//                  targets; the last 10% of the text is the test split
//   synthetic      random but learnable samples shaped for the model (a fixed
//                  data key, so every seed trains on the same data)
//   images:DIR     one subfolder per class of .jpg/.jpeg/.png files (class =
//                  folder, sorted by name); DIR/train and DIR/val when DIR has
//                  them, else every k-th file of each class is held out
//                  (k = 1/val). Decoded on each fetch, resized (shorter side to
//                  8/7 of the model's input side), then a random crop and flip
//                  (training) or the centre crop (evaluation), normalised
//   npy:X.npy,Y.npy  samples [N, input shape...] (f4, f8, u1 scaled by 1/255;
//                  i4/i8/u2 for token models) and integer labels [N] or
//                  [N, label shape]; every k-th row held out
//   npy:FILE.npz   the same from an .npz (stored or deflated) holding x_train,
//                  y_train, x_test, y_test, or x and y
//   tokens:FILE.bin  uint16 token stream (nanoGPT's raw .bin, or llm.c's with
//                  its 1024-byte header); the test split is the sibling
//                  val.bin (train.bin) or *_val.bin (*_train.bin) when present,
//                  else the stream's last `val` share
// Missing or malformed files, or data that does not fit the model, are
// UserErrors (exit code 2) naming what to fix.
DataSplits open_dataset(const std::string& name, const std::string& dir, const Model& model,
                        const DataOptions& options = {});
std::vector<std::string> dataset_names();

// The first n samples of a dataset, gathered once into memory (a synthetic
// dataset generates every sample when asked; a benchmark of the runtime
// wants a real run's cost: gathering samples that are already there).
std::unique_ptr<Dataset> load_into_memory(const Dataset& from, int64_t n);

// Deterministic visiting order of a dataset of n samples.
class SampleOrder {
 public:
  SampleOrder(int64_t dataset_size, uint64_t seed)
      : n_(dataset_size), seed_(seed), cache_(std::make_shared<Cache>()) {}
  int64_t dataset_size() const { return n_; }
  // Whole minibatches per epoch (the last partial one is dropped).
  int64_t minibatches_per_epoch(int64_t batch) const { return batch > 0 ? n_ / batch : 0; }
  // Epoch e's permutation: a function of (seed, e) only.
  std::vector<int64_t> permutation(int64_t epoch) const;
  // Sample indices at positions [first, first+count) of epoch e's permutation.
  std::vector<int64_t> positions(int64_t epoch, int64_t first, int64_t count) const;
  // Minibatch m (0-based within the epoch) of size b: positions m·b … m·b+b−1.
  std::vector<int64_t> minibatch(int64_t epoch, int64_t m, int64_t batch) const {
    return positions(epoch, m * batch, batch);
  }

 private:
  int64_t n_;
  uint64_t seed_;
  // The last permutation computed, shared by copies; safe across threads.
  struct Cache {
    std::mutex mutex;
    int64_t epoch = -1;
    std::shared_ptr<const std::vector<int64_t>> perm;
  };
  std::shared_ptr<const std::vector<int64_t>> cached_permutation(int64_t epoch) const;
  std::shared_ptr<Cache> cache_;
};

struct Batch {
  Tensor inputs, labels;
};
inline Batch fetch(const Dataset& d, std::span<const int64_t> indices) {
  return {d.inputs(indices), d.labels(indices)};
}
// A training step's batch: training_inputs() of (seed, epoch).
inline Batch fetch_training(const Dataset& d, std::span<const int64_t> indices, uint64_t seed, int64_t epoch) {
  return {d.training_inputs(indices, seed, epoch), d.labels(indices)};
}

}  // namespace pd

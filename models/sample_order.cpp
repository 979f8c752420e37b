#include "core/error.h"
#include "core/rng.h"
#include "models/dataset.h"

namespace pd {

namespace {
// RNG stream of the shuffle: (seed, kShuffleStream, epoch). Layer init uses
// (seed, layer index, 0), so a distinct first key keeps the streams apart.
constexpr uint32_t kShuffleStream = 0x5348u;  // "SH"
}  // namespace

// Fisher-Yates driven by a counter-based stream keyed by (seed, epoch): the
// permutation is the same on every worker and for every batch size.
std::vector<int64_t> SampleOrder::permutation(int64_t epoch) const {
  PD_CHECK(epoch >= 0, "negative epoch");
  std::vector<int64_t> p(static_cast<size_t>(n_));
  for (int64_t i = 0; i < n_; ++i) p[static_cast<size_t>(i)] = i;
  CounterRng rng(seed_, kShuffleStream, static_cast<uint32_t>(epoch));
  for (int64_t i = n_ - 1; i > 0; --i) {
    Philox4 r = rng.block(static_cast<uint64_t>(i));
    uint64_t bits = (static_cast<uint64_t>(r.v[0]) << 32) | r.v[1];
    int64_t j = static_cast<int64_t>(bits % static_cast<uint64_t>(i + 1));
    std::swap(p[static_cast<size_t>(i)], p[static_cast<size_t>(j)]);
  }
  return p;
}

std::shared_ptr<const std::vector<int64_t>> SampleOrder::cached_permutation(int64_t epoch) const {
  std::lock_guard<std::mutex> lock(cache_->mutex);
  if (cache_->epoch != epoch) {
    cache_->perm = std::make_shared<const std::vector<int64_t>>(permutation(epoch));
    cache_->epoch = epoch;
  }
  return cache_->perm;
}

std::vector<int64_t> SampleOrder::positions(int64_t epoch, int64_t first, int64_t count) const {
  PD_CHECK(first >= 0 && count >= 0 && first + count <= n_, "positions [", first, ", ", first + count,
           ") outside an epoch of ", n_, " samples");
  auto perm = cached_permutation(epoch);
  return {perm->begin() + first, perm->begin() + first + count};
}

}  // namespace pd

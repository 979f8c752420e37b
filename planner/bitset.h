#pragma once
// A fixed-size bit set sized at run time (std::bitset's size is static).
#include <bit>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace pd {

using std::size_t;

class DynamicBitset {
 public:
  DynamicBitset() = default;
  explicit DynamicBitset(size_t bits) : words_((bits + 63) / 64, 0) {}
  void set(size_t i) { words_[i >> 6] |= uint64_t(1) << (i & 63); }
  void reset(size_t i) { words_[i >> 6] &= ~(uint64_t(1) << (i & 63)); }
  bool test(size_t i) const { return words_[i >> 6] >> (i & 63) & 1; }
  DynamicBitset& operator|=(const DynamicBitset& o) {
    for (size_t w = 0; w < words_.size(); ++w) words_[w] |= o.words_[w];
    return *this;
  }
  bool intersects(const DynamicBitset& o) const {
    for (size_t w = 0; w < words_.size(); ++w)
      if (words_[w] & o.words_[w]) return true;
    return false;
  }
  // Is every bit of *this also set in o?
  bool subset_of(const DynamicBitset& o) const {
    for (size_t w = 0; w < words_.size(); ++w)
      if (words_[w] & ~o.words_[w]) return false;
    return true;
  }
  size_t count() const {
    size_t c = 0;
    for (uint64_t w : words_) c += std::popcount(w);
    return c;
  }
  template <class F>
  void for_each(F&& f) const {
    for (size_t w = 0; w < words_.size(); ++w)
      for (uint64_t bits = words_[w]; bits; bits &= bits - 1) f(w * 64 + std::countr_zero(bits));
  }
  bool operator==(const DynamicBitset& o) const { return words_ == o.words_; }
  const std::vector<uint64_t>& words() const { return words_; }

 private:
  std::vector<uint64_t> words_;
};

}  // namespace pd

#include "runtime/weight_versions.h"

#include "core/error.h"

namespace pd {

const ParameterStore& WeightVersionStore::get(int64_t version) const {
  if (version == version_) return *newest_;
  auto it = old_.find(version);
  PD_CHECK(it != old_.end(), "weight version ", version, " was not kept (newest is ", version_, ")");
  return it->second;
}

void WeightVersionStore::pin(int64_t version) {
  PD_CHECK(has(version), "pinning weight version ", version, " which is not held");
  ++pins_[version];
}

void WeightVersionStore::unpin(int64_t version) {
  auto it = pins_.find(version);
  PD_CHECK(it != pins_.end() && it->second > 0, "unpinning weight version ", version, " which is not pinned");
  if (--it->second == 0) pins_.erase(it);
}

void WeightVersionStore::update(int64_t new_version, int64_t oldest_needed, const UpdateStep& step) {
  PD_CHECK(new_version > version_, "optimizer step creates version ", new_version, " after ", version_);
  if (pins_.count(version_) || version_ >= oldest_needed) {
    // Old versions share the live store's buffers (BatchNorm statistics),
    // and so do the spare and a clone: only the parameters trade places.
    ParameterStore next = spare_.all_params().empty() ? newest_->clone_params() : std::move(spare_);
    spare_ = ParameterStore();
    step(newest_->all_params(), next.all_params());
    newest_->swap_params(next);
    old_.emplace(version_, std::move(next));
    peak_ = std::max(peak_, versions_held());
  } else {
    step(newest_->all_params(), newest_->all_params());
  }
  version_ = new_version;
  release(oldest_needed);
}

void WeightVersionStore::restore(int64_t version, std::map<int64_t, ParameterStore> older) {
  PD_CHECK(pins_.empty(), "restoring weight versions while some are pinned");
  for (const auto& [v, w] : older) PD_CHECK(v < version, "restored version ", v, " is not older than ", version);
  version_ = version;
  old_ = std::move(older);
  peak_ = std::max(peak_, versions_held());
}

void WeightVersionStore::release(int64_t oldest_needed) {
  for (auto it = old_.begin(); it != old_.end();) {
    if (it->first < oldest_needed && !pins_.count(it->first)) {
      if (spare_.all_params().empty()) spare_ = std::move(it->second);
      it = old_.erase(it);
    } else {
      ++it;
    }
  }
}

size_t WeightVersionStore::bytes_held() const {
  size_t n = newest_->param_bytes();
  for (const auto& [v, w] : old_) n += w.param_bytes();
  n += spare_.param_bytes();
  return n;
}

}  // namespace pd

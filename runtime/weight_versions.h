#pragma once
// The weight versions one pipeline stage keeps (docs/design.md §6).
//
// The newest version is the stage's live weights. An older version survives
// an update only when someone still needs it: a minibatch whose forward ran
// on it and whose backward has not (pinned: `stash` and `vertical`), or a
// future forward that will ask for it (`vertical`: the floor the caller
// passes as `oldest_needed`). Everything else is freed at once, so a stage
// holds at most in-flight + 1 versions.
//
// When the current version must be kept, the optimizer writes the new
// weights into other buffers (Optimizer::step_into) and the two sets trade
// places: keeping a version costs no copy. Otherwise it updates in place.
// The buffers of the last version freed are kept as the next update's
// target: without that, every update allocated fresh memory and paid its
// page faults. At most one such spare is kept, so the memory held never
// exceeds the peak of versions held.
#include <cstdint>
#include <functional>
#include <map>
#include <span>

#include "models/parameters.h"

namespace pd {

class WeightVersionStore {
 public:
  // `newest` (the live weights, version `version`) stays owned by the caller;
  // update() may exchange its parameter tensors for others of the same shapes.
  WeightVersionStore(ParameterStore& newest, int64_t version) : newest_(&newest), version_(version) {}

  int64_t newest_version() const { return version_; }
  bool has(int64_t version) const { return version == version_ || old_.count(version) > 0; }
  // The weights of `version`; a logic_error if it was not kept (a bug).
  const ParameterStore& get(int64_t version) const;

  // A minibatch's forward ran on `version` and its backward will too.
  void pin(int64_t version);
  void unpin(int64_t version);

  // Writes the new weights from the current ones (`to` may be `from`).
  using UpdateStep = std::function<void(std::span<const Tensor> from, std::span<Tensor> to)>;
  // Makes version `new_version` by one optimizer step: the current newest is
  // kept if it is pinned or version >= oldest_needed, then versions nobody
  // needs are freed.
  void update(int64_t new_version, int64_t oldest_needed, const UpdateStep& step);
  // Frees old versions nobody needs any more (after a backward unpinned one).
  void release(int64_t oldest_needed);

  // The versions kept besides the newest, by version: what a checkpoint
  // taken with minibatches in flight stores.
  const std::map<int64_t, ParameterStore>& older() const { return old_; }
  // A resumed stage: the newest (the caller's store) is `version`, and
  // `older` the versions its minibatches in flight and future forwards need.
  void restore(int64_t version, std::map<int64_t, ParameterStore> older);

  int versions_held() const { return 1 + static_cast<int>(old_.size()); }
  int peak_versions() const { return peak_; }
  size_t bytes_held() const;  // versions held, plus the spare buffers

 private:
  ParameterStore* newest_;
  int64_t version_;
  std::map<int64_t, ParameterStore> old_;
  std::map<int64_t, int> pins_;
  ParameterStore spare_;  // buffers of the last version freed, or empty
  int peak_ = 1;
};

}  // namespace pd

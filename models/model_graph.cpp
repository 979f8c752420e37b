#include "models/model_graph.h"

#include <algorithm>

namespace pd {

namespace {
thread_local UnitClock* t_active_clock = nullptr;
}

void UnitClock::clear() {
  std::fill(forward_ms.begin(), forward_ms.end(), 0.0);
  std::fill(backward_ms.begin(), backward_ms.end(), 0.0);
  std::fill(saved_bytes.begin(), saved_bytes.end(), 0);
}

UnitClock* UnitClock::active() { return t_active_clock; }

UnitClock::Installed::Installed(UnitClock* c) : previous_(t_active_clock) { t_active_clock = c; }
UnitClock::Installed::~Installed() { t_active_clock = previous_; }

size_t saved_bytes_beyond_params(const LayerContext& ctx, std::span<const Tensor> params) {
  size_t n = 0;
  for (const Tensor& t : ctx.saved) {
    if (!t.defined()) continue;
    bool weight = false;
    for (const Tensor& p : params) weight = weight || (p.defined() && t.same_storage(p));
    if (!weight) n += t.nbytes();
  }
  for (const LayerContext& c : ctx.children) n += saved_bytes_beyond_params(c, params);
  return n;
}

size_t saved_bytes_shared_with(const LayerContext& ctx, const LayerContext& other) {
  size_t n = 0;
  for (const Tensor& t : ctx.saved)
    if (t.defined() && other.keeps(t)) n += t.nbytes();
  for (const LayerContext& c : ctx.children) n += saved_bytes_shared_with(c, other);
  return n;
}

}  // namespace pd

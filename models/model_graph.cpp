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

}  // namespace pd

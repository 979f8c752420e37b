#include "core/compute_settings.h"

#include <algorithm>
#include <mutex>
#include <optional>
#include <thread>

#include "core/cpu/gemm.h"
#include "core/cuda_plugin.h"
#include "core/error.h"
#include "core/precision_names.h"

namespace pd {

static_assert(kMaxComputeThreads == cpu::kMaxComputeThreads, "one limit on compute threads");

namespace {
std::mutex g_mutex;
std::optional<ComputeSettings> g_applied;
}  // namespace

std::string describe(const ComputeSettings& s) {
  return cat(s.device.str(), ", ", s.threads, s.threads == 1 ? " thread, " : " threads, ", to_string(s.precision),
             s.deterministic ? ", deterministic" : "", s.allow_tf32 ? ", tf32" : "");
}

int threads_or_all_cores(int threads) {
  return threads > 0 ? threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

void apply_compute_settings(const ComputeSettings& s) {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (g_applied) {
    if (*g_applied == s) return;
    throw RuntimeFailure(cat("compute settings are applied once per process: this one computes with ",
                             describe(*g_applied), " and cannot change to ", describe(s)));
  }
  if (s.threads < 1 || s.threads > kMaxComputeThreads)
    throw UserError(cat("--threads must be in [1, ", kMaxComputeThreads, "], got ", s.threads));
  open_device(s.device, s.device.str(), s.deterministic, s.allow_tf32);
  cpu::set_compute_threads(s.threads);
  g_applied = s;
}

const ComputeSettings* applied_compute_settings() {
  std::lock_guard<std::mutex> lock(g_mutex);
  return g_applied ? &*g_applied : nullptr;
}

int compute_threads() { return cpu::compute_threads(); }

}  // namespace pd

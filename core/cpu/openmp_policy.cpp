#include "core/cpu/openmp_policy.h"

#include <unistd.h>

#include <cstdlib>

namespace pd::cpu {

void ensure_passive_openmp_wait(char** argv) {
  if (std::getenv("OMP_WAIT_POLICY") != nullptr) return;  // user's choice, or already re-executed
  if (setenv("OMP_WAIT_POLICY", "PASSIVE", 1) != 0) return;
  execv("/proc/self/exe", argv);
  // Only reached if exec failed; running with spinning waits is slower, not wrong.
}

}  // namespace pd::cpu

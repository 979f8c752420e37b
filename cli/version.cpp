#include "cli/commands.h"
#include "core/build_info.h"
#include "core/cpu/openblas_library.h"
#include "core/cuda_plugin.h"
#include "core/error.h"

namespace pd::cli {

std::string version_text() {
  std::string s = cat("pipedream ", PIPEDREAM_VERSION, "\nbackends: cpu (OpenBLAS ",
                      pd::cpu::openblas().config, ")");
  std::string why;
  if (const CudaPluginApi* cuda = cuda_plugin(&why)) {
    // Versions compiled in; needs no GPU.
    s += cat("; cuda (", cuda->versions(), ", ", cuda->visible_device_count(), " GPU(s) visible)");
  } else {
    s += cat("; cuda not available: ", why);
  }
  return s;
}

}  // namespace pd::cli

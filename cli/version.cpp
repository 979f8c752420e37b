#include <cblas.h>

#include "cli/commands.h"
#include "core/build_info.h"
#include "core/error.h"
#if PIPEDREAM_HAVE_CUDA
#include "core/cuda/backend.h"
#endif

namespace pd::cli {

std::string version_text() {
  std::string s = cat("pipedream ", PIPEDREAM_VERSION, "\nbackends: cpu (OpenBLAS ",
                      openblas_get_config(), ")");
#if PIPEDREAM_HAVE_CUDA
  // Versions compiled in; needs no GPU.
  s += cat("; cuda (", pd::cuda::versions(), ")");
#else
  s += "; cuda not compiled in";
#endif
  return s;
}

}  // namespace pd::cli

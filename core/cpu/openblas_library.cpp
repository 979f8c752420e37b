#include "core/cpu/openblas_library.h"

#include <dlfcn.h>
#include <stdlib.h>

#include "core/error.h"

namespace pd::cpu {
namespace {

// The file the linker would have recorded (its SONAME), found by the
// dynamic loader's usual search; set by CMake from the library it found.
#ifndef PD_OPENBLAS_SONAME
#define PD_OPENBLAS_SONAME "libopenblas.so.0"
#endif

template <class F>
F symbol(void* handle, const char* name) {
  void* p = dlsym(handle, name);
  if (!p) throw RuntimeFailure(cat(PD_OPENBLAS_SONAME, " has no symbol ", name, ": install libopenblas0"));
  return reinterpret_cast<F>(p);
}

OpenBlasLibrary load() {
  // No pool of OpenBLAS threads (it would sit idle: see below). Each pool
  // thread maps a 128 MiB work buffer as it starts, and under an
  // address-space limit (ulimit -v) one whose buffer does not fit retries
  // the mmap forever at full CPU: read by the library's constructor, so
  // set before dlopen.
  ::setenv("OPENBLAS_NUM_THREADS", "1", 1);
  // RTLD_GLOBAL: as if linked, one copy of its symbols for the whole process.
  void* handle = dlopen(PD_OPENBLAS_SONAME, RTLD_NOW | RTLD_GLOBAL);
  if (!handle)
    throw RuntimeFailure(cat("cannot load OpenBLAS (", PD_OPENBLAS_SONAME, "): ", dlerror(),
                             "; run scripts/setup.sh (apt-get install libopenblas0)"));
  OpenBlasLibrary lib;
  // OpenBLAS always runs single-threaded, in the calling thread; threads
  // come from one OpenMP pool only. With OpenBLAS's own pool, every GEMM
  // handed work between two pools of threads that spin or sleep
  // differently: at 2 threads on a busy machine each hand-off could cost a
  // scheduler time slice, and a GEMM called from inside an OpenMP loop
  // oversubscribed.
  symbol<decltype(&openblas_set_num_threads)>(handle, "openblas_set_num_threads")(1);
  lib.config = symbol<decltype(&openblas_get_config)>(handle, "openblas_get_config")();
  lib.sgemm = symbol<decltype(&cblas_sgemm)>(handle, "cblas_sgemm");
  return lib;
}

}  // namespace

const OpenBlasLibrary& openblas() {
  static const OpenBlasLibrary library = load();
  return library;
}

}  // namespace pd::cpu

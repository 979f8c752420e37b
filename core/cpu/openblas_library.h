#pragma once
// OpenBLAS, loaded with dlopen on first use instead of linked. Debian's
// OpenBLAS (pthreads) starts its thread pool in a library constructor: a
// process linked against it pays for the pool and its idle threads'
// spinning even when it never multiplies a matrix (`pipedream plan` spent
// most of its time there). Only gemm.cpp and the version text reach it.
// (cblas.h only declares: the declarations type the pointers.)
#include <cblas.h>

#include <string>

namespace pd::cpu {

struct OpenBlasLibrary {
  decltype(&cblas_sgemm) sgemm;
  std::string config;   // openblas_get_config()
};

// Loads the library on the first call (thread-safe) and sets it to one
// thread (gemm.h: threads come from OpenMP only). Throws RuntimeFailure
// naming the library when it cannot be loaded.
const OpenBlasLibrary& openblas();

}  // namespace pd::cpu

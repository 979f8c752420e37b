#pragma once
// OpenMP worker threads busy-wait after every parallel region unless told
// otherwise. Our CPU kernels alternate OpenMP loops with OpenBLAS GEMMs,
// whose own pthread workers then fight the spinning OpenMP threads for the
// same cores: with 2 threads on a busy 2-core machine a `cnn` step went
// from ~0.7 s to over 10 s. Sleeping waits cost a few microseconds per
// region instead.
namespace pd::cpu {

// Call first thing in main(), before MPI_Init and before any OpenMP use.
// When the user has not chosen OMP_WAIT_POLICY, re-executes the program
// once with OMP_WAIT_POLICY=PASSIVE (libgomp reads it only at load time).
// If the re-exec fails the program just continues with the default policy.
void ensure_passive_openmp_wait(char** argv);

}  // namespace pd::cpu

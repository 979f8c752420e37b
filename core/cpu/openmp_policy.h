#pragma once
// OpenMP worker threads busy-wait after every parallel region unless told
// otherwise. On a machine whose cores are shared - several pipeline ranks
// on one box, or other jobs - the spinning threads take the cores that
// the other ranks (and our own next region) need: with 2 threads on a busy
// 2-core machine a `cnn` step once went from ~0.7 s to over 10 s (then
// with OpenBLAS's own pthread pool also fighting them; GEMMs now run on the
// OpenMP threads, see gemm.h). Sleeping waits cost a few microseconds per
// region instead.
namespace pd::cpu {

// Call first thing in main(), before MPI_Init and before any OpenMP use.
// When the user has not chosen OMP_WAIT_POLICY, re-executes the program
// once with OMP_WAIT_POLICY=PASSIVE (libgomp reads it only at load time).
// If the re-exec fails the program just continues with the default policy.
void ensure_passive_openmp_wait(char** argv);

}  // namespace pd::cpu

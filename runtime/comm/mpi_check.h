#pragma once
// PD_MPI_CHECK: every MPI call of the transports goes through it.
//
// Our communicators return errors (MPI_ERRORS_RETURN) instead of aborting
// the job, so a return code nobody reads is a failure nobody sees. As in
// nccl-tests' MPICHECK, a failed call becomes a RuntimeFailure naming the
// call, the file and line it was made at, and MPI's own explanation.
//
// Include after <mpi.h> (with OMPI_SKIP_MPICXX defined).
#include <string>

#include "core/error.h"

namespace pd {

// "MPI_Irecv failed at runtime/comm/mpi_p2p.cpp:120: MPI_ERR_TAG: invalid tag"
std::string mpi_failure_text(int code, const char* call, const char* file, int line);
// MPI's text for an error code (MPI_Error_string).
std::string mpi_error_text(int code);

}  // namespace pd

#define PD_MPI_CHECK(call)                                                                   \
  do {                                                                                      \
    const int pd_mpi_rc_ = (call);                                                          \
    if (pd_mpi_rc_ != MPI_SUCCESS)                                                          \
      throw ::pd::RuntimeFailure(::pd::mpi_failure_text(pd_mpi_rc_, #call, __FILE__, __LINE__)); \
  } while (0)

// The same, with what the call was for ("send tag 3 ... with rank 2: ").
#define PD_MPI_CHECK_FOR(context, call)                                                       \
  do {                                                                                       \
    const int pd_mpi_rc_ = (call);                                                           \
    if (pd_mpi_rc_ != MPI_SUCCESS)                                                           \
      throw ::pd::RuntimeFailure(::pd::cat(context, ": ",                                     \
                                           ::pd::mpi_failure_text(pd_mpi_rc_, #call, __FILE__, __LINE__))); \
  } while (0)

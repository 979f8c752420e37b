#pragma once
// Shared by the MPI test programs: one transport for the whole process
// (MPI can be initialized once), made by mpi_test_main.cpp.
#include "runtime/comm/mpi_transport.h"

namespace pd::testing {
MpiTransport& transport();
}

#pragma once
// Point-to-point tensors of the MPI transport: a send and a receive are
// MpiOps on the engine's p2p communicator (wire format in mpi_p2p.cpp).
// Internal to runtime/comm/.
#include <cstdint>

#include "runtime/comm/transport.h"

namespace pd {

class MpiEngine;

// Sends t (copied first if small or on a device) to peer under tag.
Request start_mpi_send(MpiEngine& engine, const Tensor& t, int peer, int tag, int64_t meta);
// Receives from peer under tag into `into`, or into a new tensor of the
// sent shape when `into` is undefined.
Request start_mpi_recv(MpiEngine& engine, Tensor into, int peer, int tag);

}  // namespace pd

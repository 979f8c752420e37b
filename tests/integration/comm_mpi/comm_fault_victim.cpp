// A job that fails on purpose, run under mpirun by comm_fault_test.cpp.
//   comm_fault_victim kill    rank 1 SIGKILLs itself; the others wait on it
//   comm_fault_victim silent  rank 1 stops talking; the others time out
//   comm_fault_victim throw   rank 1 leaves main with an exception
//   comm_fault_victim stop    "trains" until a SIGINT/SIGTERM reaches any
//                             rank, then all stop after the same step
//   comm_fault_victim unmatched  rank 0 leaves a receive nobody matches
//                             and shuts down normally (timeout 30 s)
// The other ranks do what the executor does: wait (timeout 3 s), and on a
// RuntimeFailure abort the job naming the culprit.
#include <chrono>
#include <csignal>
#include <cstdio>
#include <string>
#include <thread>

#include "core/error.h"
#include "runtime/comm/mpi_transport.h"

// A normal shutdown cancels a receive nobody will match instead of waiting
// the timeout for it, and the receive then reports why it ended.
int unmatched_receive_at_shutdown(pd::MpiTransport& tr) {
  tr.set_timeout(30.0);  // a shutdown that waited for the receive would take this long
  pd::Request never_sent;
  if (tr.rank() == 0) never_sent = tr.irecv_any(1, 5);
  tr.barrier();
  const auto start = std::chrono::steady_clock::now();
  tr.shutdown();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  printf("rank %d: shutdown took %.2f s\n", tr.rank(), seconds);
  if (seconds > 10) return 3;
  if (tr.rank() != 0) return 0;
  try {
    never_sent.test();
    printf("rank 0: the receive was not cancelled\n");
    return 3;
  } catch (const pd::RuntimeFailure& e) {
    printf("rank 0: the receive reports: %s\n", e.what());
  }
  return 0;
}

// Shaped like a `pipedream` subcommand: the transport lives inside, errors
// propagate to main, which prints them (as cli/main.cpp does).
int run(const std::string& mode) {
  pd::MpiTransport tr(3.0);
  tr.barrier();
  if (mode == "unmatched") return unmatched_receive_at_shutdown(tr);
  if (mode == "stop") {
    for (int step = 0;; ++step) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));  // a minibatch
      if (tr.any_rank_stopping()) {
        printf("rank %d: stopped cleanly after step %d\n", tr.rank(), step);
        fflush(stdout);
        return 0;
      }
    }
  }
  if (tr.rank() == 1) {
    if (mode == "kill") raise(SIGKILL);
    if (mode == "silent") std::this_thread::sleep_for(std::chrono::seconds(60));
    if (mode == "throw") throw pd::RuntimeFailure("rank 1 hit a bug on purpose");
    return 0;
  }
  try {
    pd::Request r = tr.irecv(pd::Tensor::empty({8}), 1, 0);
    r.wait();
  } catch (const pd::RuntimeFailure& e) {
    tr.abort(e.what());
  }
  fprintf(stderr, "rank %d: unexpectedly received a message\n", tr.rank());
  return 3;
}

int main(int argc, char** argv) {
  try {
    return run(argc > 1 ? argv[1] : "");
  } catch (const std::exception& e) {
    fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}

// main() for GoogleTest programs run under mpirun: every rank runs every
// test (tests branch on rank); only rank 0 prints (every rank with
// PD_TEST_ALL_RANKS set); the exit code is
// non-zero on every rank when a test failed on any rank.
#include <gtest/gtest.h>

#include <cstdlib>
#include <memory>

#include "tests/integration/comm_mpi/mpi_test_main.h"

namespace pd::testing {
namespace {
std::unique_ptr<MpiTransport> g_transport;
}
MpiTransport& transport() { return *g_transport; }
}  // namespace pd::testing

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  // A failing test must not hang the suite: waits give up after 20 s.
  pd::testing::g_transport = std::make_unique<pd::MpiTransport>(20.0);
  auto& t = *pd::testing::g_transport;
  if (t.rank() != 0 && !std::getenv("PD_TEST_ALL_RANKS")) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
  }
  int failed = RUN_ALL_TESTS();
  pd::Tensor flag = pd::Tensor::full({1}, failed ? 1.0f : 0.0f);
  t.all_reduce(*t.world_group(), {flag}, pd::ReduceOp::Sum);
  if (flag.f32()[0] > 0 && t.rank() == 0 && !failed)
    fprintf(stderr, "a test failed on another rank (rerun with PD_TEST_ALL_RANKS=1 to see its output)\n");
  pd::testing::g_transport.reset();
  return flag.f32()[0] > 0 ? 1 : 0;
}

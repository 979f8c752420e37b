// Without the CUDA backend compiled in, the GPU suite is one skipped test
// saying so (the other files compile to nothing).
#include <gtest/gtest.h>

#if !defined(PIPEDREAM_HAVE_CUDA)
TEST(CudaBackend, NotBuilt) { GTEST_SKIP() << "pipedream was built without CUDA (PIPEDREAM_CUDA=OFF or no nvcc)"; }
#endif

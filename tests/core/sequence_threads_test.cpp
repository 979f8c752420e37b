#include <gtest/gtest.h>

#include "core/cpu/attention_kernels.h"
#include "core/cpu/dropout_kernels.h"
#include "core/cpu/embedding_kernels.h"
#include "core/cpu/gelu_kernels.h"
#include "core/cpu/gemm.h"
#include "core/cpu/layernorm_kernels.h"
#include "core/cpu/linear_kernels.h"
#include "core/cpu/residual_kernels.h"
#include "tests/core/sequence_reference.h"

namespace pd {
namespace {

// Every output of these kernels is computed by one thread with the same
// arithmetic whatever the split, so the bits do not depend on the thread
// count (sizes are above the parallel grain, so the threaded paths run).
std::vector<std::vector<float>> run_elementwise_kernels() {
  const int64_t R = 600, D = 512, n = R * D, V = 100, T = 60;
  auto x = testing::random_vec(n, 1, 4.0f), dy = testing::random_vec(n, 2);
  auto w = testing::random_vec(D, 3), b = testing::random_vec(D, 4);
  std::vector<std::vector<float>> out;
  auto add = [&](std::vector<float> v) { out.push_back(std::move(v)); };
  std::vector<float> y(n), dx(n), mean(R), rstd(R), dw(D, 0.0f), db(D, 0.0f);
  cpu::gelu_forward(x.data(), y.data(), n);
  add(y);
  cpu::gelu_backward(x.data(), dy.data(), dx.data(), n);
  add(dx);
  cpu::dropout_apply({3, 1, 2, 0}, 0.1f, x.data(), y.data(), n);
  add(y);
  cpu::layernorm_forward(x.data(), w.data(), b.data(), y.data(), mean.data(), rstd.data(), R, D, 1e-5f);
  add(y);
  cpu::layernorm_backward(x.data(), w.data(), mean.data(), rstd.data(), dy.data(), dx.data(), dw.data(),
                          db.data(), R, D);
  add(dx);
  add(dw);
  add(db);
  std::vector<float> cs(D, 0.0f);
  cpu::add_column_sums(dy.data(), R, D, cs.data());
  add(cs);
  cpu::residual_add(x.data(), dy.data(), y.data(), n);
  add(y);
  std::vector<int32_t> ids(R);
  for (int64_t i = 0; i < R; ++i) ids[i] = static_cast<int32_t>((i * 37) % V);
  auto tok = testing::random_vec(V * D, 5), pos = testing::random_vec(T * D, 6);
  std::vector<float> dtok(V * D, 0.0f), dpos(T * D, 0.0f);
  cpu::embedding_forward(ids.data(), tok.data(), pos.data(), y.data(), R / T, T, D);
  add(y);
  cpu::embedding_backward(ids.data(), dy.data(), dtok.data(), dpos.data(), R / T, T, D);
  add(dtok);
  add(dpos);
  // Attention in row blocks: single-threaded GEMMs inside OpenMP threads.
  cpu::AttentionShape as{2, 128, 4, 64};
  const int64_t n_qkv = 2 * 128 * 3 * 256, n_out = 2 * 128 * 256;
  auto qkv = testing::random_vec(n_qkv, 7, 2.0f), dout = testing::random_vec(n_out, 8);
  std::vector<float> probs(2 * 4 * 128 * 128), att(n_out), dqkv(n_qkv);
  cpu::attention_forward(as, qkv.data(), probs.data(), att.data());
  add(att);
  cpu::attention_backward(as, qkv.data(), probs.data(), dout.data(), dqkv.data());
  add(dqkv);
  return out;
}

TEST(SequenceKernels, GiveTheSameBitsOnAnyThreadCount) {
  int keep = cpu::compute_threads();
  cpu::set_compute_threads(1);
  auto one = run_elementwise_kernels();
  cpu::set_compute_threads(2);
  auto two = run_elementwise_kernels();
  cpu::set_compute_threads(keep);
  ASSERT_EQ(one.size(), two.size());
  for (size_t k = 0; k < one.size(); ++k) EXPECT_EQ(one[k], two[k]) << "kernel output " << k;
}

}  // namespace
}  // namespace pd

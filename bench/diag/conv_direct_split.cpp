// Diagnostic, not part of the build: the direct convolution kernels
// (core/cpu/conv_direct_kernels.h) against im2col + sgemm on resnet18's
// convolutions at batch N and image size S, one thread, thread CPU time,
// minimum over reps after a warm-up, the two routes timed alternately
// (ABAB) in one process. Per convolution: forward, input gradient (dx; for
// stride 1 the direct route is a direct forward of dy with the flipped
// kernel, as conv2d_backward_input does) and weight gradient (dw), and
// which route conv2d_* take ("chosen"). Build and run (after the build):
//   g++ -O2 -std=c++20 -I. -Ibuild bench/diag/conv_direct_split.cpp -Lbuild/lib -lpd_core -Wl,-rpath,$PWD/build/lib -o /tmp/conv_direct_split
//   OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 /tmp/conv_direct_split 8 224
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <vector>

#include "core/cpu/conv_direct_kernels.h"
#include "core/cpu/conv_kernels.h"
#include "bench/diag/resnet18_convs.h"
#include "core/cpu/gemm.h"

using namespace pd::cpu;
using pd::diag::cpu_ms;
using pd::diag::ResnetConv;
using pd::diag::resnet18_convs;

template <class F>
static void keep_min(double& best, F f) {
  const double t0 = cpu_ms();
  f();
  best = std::min(best, cpu_ms() - t0);
}

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: conv_direct_split N S [reps]\n");
    return 2;
  }
  const int64_t N = std::atoll(argv[1]), S = std::atoll(argv[2]);
  const int reps = argc > 3 ? std::atoi(argv[3]) : 3;
  set_compute_threads(1);
  if (!conv_direct_available()) {
    std::fprintf(stderr, "no AVX-512 on this host\n");
    return 1;
  }
  const std::vector<ResnetConv> convs = resnet18_convs(S);
  double tot[2][3] = {}, chosen_total = 0;
  for (const ResnetConv& cv : convs) {
    const ConvShape g = cv.shape(N);
    ConvShape t = g;  // dx of a stride-1 convolution as a forward one
    t.in_channels = g.out_channels;
    t.out_channels = g.in_channels;
    t.padding = g.kernel_h - 1 - g.padding;
    const int64_t ysize = N * cv.o * g.out_h() * g.out_w();
    std::vector<float> x(static_cast<size_t>(N * cv.c * cv.h * cv.h)), w(static_cast<size_t>(cv.o * g.patch()));
    for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>((i * 7919) % 1000) * 1e-3f - 0.5f;
    for (size_t i = 0; i < w.size(); ++i) w[i] = static_cast<float>((i * 104729) % 1000) * 1e-5f - 0.005f;
    std::vector<float> y(static_cast<size_t>(ysize), 0.1f), dx(x.size()), dw(w.size()), wf(w.size());
    double best[2][3];
    for (auto& r : best) std::fill(r, r + 3, 1e9);
    const bool direct_dx = !cv.first && cv.s == 1;
    for (int r = 0; r <= reps; ++r) {
      double warm[2][3];
      for (auto& q : warm) std::fill(q, q + 3, 1e9);
      double(*into)[3] = r == 0 ? warm : best;
      keep_min(into[0][0], [&] { conv2d_forward_im2col(g, x.data(), w.data(), nullptr, y.data()); });
      keep_min(into[1][0], [&] { conv2d_direct_forward(g, x.data(), w.data(), nullptr, y.data()); });
      if (!cv.first) {
        keep_min(into[0][1], [&] { conv2d_backward_im2col(g, nullptr, w.data(), y.data(), dx.data(), nullptr, nullptr); });
        keep_min(into[1][1], [&] {
          if (direct_dx)
            conv2d_direct_forward(t, y.data(), w.data(), nullptr, dx.data());  // unflipped: values do not matter here
          else
            conv2d_backward_im2col(g, nullptr, w.data(), y.data(), dx.data(), nullptr, nullptr);
        });
      }
      keep_min(into[0][2], [&] { conv2d_backward_im2col(g, x.data(), nullptr, y.data(), nullptr, dw.data(), nullptr); });
      keep_min(into[1][2], [&] { conv2d_direct_backward_params(g, x.data(), y.data(), dw.data()); });
    }
    if (cv.first) best[0][1] = best[1][1] = 0;
    const bool cf = conv_direct_forward_chosen(g), cw = conv_direct_params_chosen(g);
    const bool cdx = direct_dx && conv_direct_forward_chosen(t);
    const double chosen = best[cf][0] + best[cdx][1] + best[cw][2];
    std::printf(
        "{\"conv\":\"%s\",\"count\":%ld,\"im2col_fwd_dx_dw_ms\":[%.2f,%.2f,%.2f],\"direct_fwd_dx_dw_ms\":[%.2f,%.2f,%.2f],"
        "\"direct/im2col\":[%.2f,%.2f,%.2f],\"chosen_direct\":[%d,%d,%d]}\n",
        cv.name, static_cast<long>(cv.count), best[0][0], best[0][1], best[0][2], best[1][0], best[1][1], best[1][2],
        best[1][0] / best[0][0], best[0][1] > 0 ? best[1][1] / best[0][1] : 1.0, best[1][2] / best[0][2], cf, cdx, cw);
    for (int i = 0; i < 2; ++i)
      for (int j = 0; j < 3; ++j) tot[i][j] += best[i][j] * static_cast<double>(cv.count);
    chosen_total += chosen * static_cast<double>(cv.count);
  }
  std::printf(
      "{\"conv\":\"total\",\"im2col_fwd_dx_dw_ms\":[%.1f,%.1f,%.1f],\"direct_fwd_dx_dw_ms\":[%.1f,%.1f,%.1f],"
      "\"im2col_ms\":%.1f,\"chosen_ms\":%.1f}\n",
      tot[0][0], tot[0][1], tot[0][2], tot[1][0], tot[1][1], tot[1][2], tot[0][0] + tot[0][1] + tot[0][2],
      chosen_total);
}

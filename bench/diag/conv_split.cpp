// Diagnostic, not part of the build: pipedream's CPU convolution kernels on
// resnet18's convolutions (torchvision layout) at batch N and image size S,
// one thread, thread CPU time (minimum over reps after one warm-up). Per
// convolution: forward, input gradient (dx), weight gradient (dw); for the
// forward also its two parts done whole-batch: im2col and one OpenBLAS sgemm
// (conv2d_forward itself chunks the batch). conv_split_torch.py is the
// PyTorch side. Build and run (from the repository root, after the build):
//   g++ -O2 -std=c++20 -I. -Ibuild -I/usr/include/x86_64-linux-gnu/openblas-pthread bench/diag/conv_split.cpp -Lbuild/lib -lpd_core -lopenblas -Wl,-rpath,$PWD/build/lib -o /tmp/conv_split
//   OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 /tmp/conv_split 8 224
#include <cblas.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <vector>

#include "core/cpu/conv_kernels.h"
#include "bench/diag/resnet18_convs.h"
#include "core/cpu/gemm.h"

using namespace pd::cpu;
using pd::diag::cpu_ms;
using pd::diag::ResnetConv;
using pd::diag::resnet18_convs;

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: conv_split N S [reps]\n");
    return 2;
  }
  const int64_t N = std::atoll(argv[1]), S = std::atoll(argv[2]);
  const int reps = argc > 3 ? std::atoi(argv[3]) : 3;
  set_compute_threads(1);
  const std::vector<ResnetConv> convs = resnet18_convs(S);
  double tf = 0, tdx = 0, tdw = 0;
  for (const ResnetConv& cv : convs) {
    const ConvShape g = cv.shape(N);
    const int64_t P = g.patch(), cols = N * g.out_h() * g.out_w();
    std::vector<float> x(static_cast<size_t>(N * cv.c * cv.h * cv.h), 0.5f), w(static_cast<size_t>(cv.o * P), 0.01f);
    std::vector<float> y(static_cast<size_t>(cv.o * cols), 0.1f), dx(x.size()), dw(w.size());
    std::vector<float> col(static_cast<size_t>(P * cols)), y2(y.size());
    double bf = 1e9, bdx = 1e9, bdw = 1e9, bi = 1e9, bg = 1e9;
    for (int r = 0; r <= reps; ++r) {
      const double t0 = cpu_ms();
      conv2d_forward(g, x.data(), w.data(), nullptr, y.data());
      const double t1 = cpu_ms();
      if (!cv.first) conv2d_backward_input(g, w.data(), y.data(), dx.data());
      const double t2 = cpu_ms();
      conv2d_backward_params(g, x.data(), y.data(), dw.data(), nullptr);
      const double t3 = cpu_ms();
      im2col(g, x.data(), 0, N, col.data());
      const double t4 = cpu_ms();
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(cv.o), static_cast<int>(cols),
                  static_cast<int>(P), 1.f, w.data(), static_cast<int>(P), col.data(), static_cast<int>(cols), 0.f,
                  y2.data(), static_cast<int>(cols));
      const double t5 = cpu_ms();
      if (r == 0) continue;
      bf = std::min(bf, t1 - t0);
      bdx = std::min(bdx, t2 - t1);
      bdw = std::min(bdw, t3 - t2);
      bi = std::min(bi, t4 - t3);
      bg = std::min(bg, t5 - t4);
    }
    const double gflop = 2.0 * static_cast<double>(cv.o * cols * P) * 1e-9;
    std::printf(
        "{\"conv\":\"%s\",\"count\":%ld,\"fwd_ms\":%.2f,\"dx_ms\":%.2f,\"dw_ms\":%.2f,\"fwd_gflops\":%.0f,"
        "\"gemm_M_N_K\":[%ld,%ld,%ld],\"whole_im2col_ms\":%.2f,\"whole_sgemm_ms\":%.2f,\"sgemm_gflops\":%.0f}\n",
        cv.name, static_cast<long>(cv.count), bf, bdx, bdw, gflop / bf * 1e3, static_cast<long>(cv.o),
        static_cast<long>(cols), static_cast<long>(P), bi, bg, gflop / bg * 1e3);
    tf += bf * static_cast<double>(cv.count);
    tdx += bdx * static_cast<double>(cv.count);
    tdw += bdw * static_cast<double>(cv.count);
  }
  std::printf("{\"conv\":\"total\",\"fwd_ms\":%.1f,\"dx_ms\":%.1f,\"dw_ms\":%.1f,\"all_ms\":%.1f}\n", tf, tdx, tdw,
              tf + tdx + tdw);
}

#!/usr/bin/python3
"""Diagnostic: PyTorch's side of bench/diag/conv_split.cpp.

resnet18's convolutions at batch N and image size S in PyTorch (oneDNN on
CPU), one thread, thread CPU time (minimum over reps after one warm-up):
forward, input gradient (dx) and weight gradient (dw) through
aten::convolution_backward, one JSON line per convolution and a total.

  OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 /usr/bin/python3 bench/diag/conv_split_torch.py 8 224
"""
import json
import sys
import time

import torch
import torch.nn.functional as F


def main():
    if len(sys.argv) < 3:
        print("usage: conv_split_torch.py N S [reps]", file=sys.stderr)
        return 2
    n, s = int(sys.argv[1]), int(sys.argv[2])
    reps = int(sys.argv[3]) if len(sys.argv) > 3 else 3
    torch.set_num_threads(1)
    a, b, c, d = s // 4, s // 8, s // 16, s // 32
    convs = [("stem 7x7s2 3->64", 3, s, 64, 7, 2, 3, 1, True), ("l1 3x3 64", 64, a, 64, 3, 1, 1, 4, False),
             ("l2 3x3s2 64->128", 64, a, 128, 3, 2, 1, 1, False), ("l2 1x1s2 down", 64, a, 128, 1, 2, 0, 1, False),
             ("l2 3x3 128", 128, b, 128, 3, 1, 1, 3, False), ("l3 3x3s2 128->256", 128, b, 256, 3, 2, 1, 1, False),
             ("l3 1x1s2 down", 128, b, 256, 1, 2, 0, 1, False), ("l3 3x3 256", 256, c, 256, 3, 1, 1, 3, False),
             ("l4 3x3s2 256->512", 256, c, 512, 3, 2, 1, 1, False), ("l4 1x1s2 down", 256, c, 512, 1, 2, 0, 1, False),
             ("l4 3x3 512", 512, d, 512, 3, 1, 1, 3, False)]
    total = [0.0, 0.0, 0.0]
    ct = time.thread_time
    bwd = torch.ops.aten.convolution_backward
    with torch.no_grad():
        for name, ci, h, co, k, st, p, count, first in convs:
            x = torch.randn(n, ci, h, h)
            w = torch.randn(co, ci, k, k) * 0.01
            best = [1e9] * 3
            for r in range(reps + 1):
                t0 = ct()
                y = F.conv2d(x, w, None, st, p)
                t1 = ct()
                if not first:
                    bwd(y, x, w, None, [st, st], [p, p], [1, 1], False, [0, 0], 1, [True, False, False])
                t2 = ct()
                bwd(y, x, w, None, [st, st], [p, p], [1, 1], False, [0, 0], 1, [False, True, False])
                t3 = ct()
                if r:
                    best = [min(best[0], t1 - t0), min(best[1], t2 - t1), min(best[2], t3 - t2)]
            best = [v * 1e3 for v in best]
            gflop = 2.0 * co * n * y.shape[2] * y.shape[3] * ci * k * k * 1e-9
            print(json.dumps({"conv": name, "count": count, "fwd_ms": round(best[0], 2), "dx_ms": round(best[1], 2),
                              "dw_ms": round(best[2], 2), "fwd_gflops": round(gflop / best[0] * 1e3)}))
            total = [t + v * count for t, v in zip(total, best)]
    print(json.dumps({"conv": "total", "fwd_ms": round(total[0], 1), "dx_ms": round(total[1], 1),
                      "dw_ms": round(total[2], 1), "all_ms": round(sum(total), 1)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Compares two profiles of the same model (repeat runs of `pipedream profile`).

    scripts/profile_spread.py a.json b.json [--min-ms 0.5]

Per layer: forward and backward medians of both runs and their relative
difference |a-b| / min(a,b). Layers whose times are below --min-ms in both
runs are listed but not counted in the first summary line (clock and
scheduler noise dominate there). Summary: the largest and the median
relative difference over the counted layer times, then over all of them;
the same for each layer's share of its run's layer sum (what the planner's
split depends on); the difference of the per-layer sums, of the whole-step
times and of the host speed probes (a fixed GEMM timed during each run:
the machine's own speed); and each run's sum-vs-step figure.
"""
import argparse
import json
import statistics


def rel(a, b):
    lo = min(a, b)
    return abs(a - b) / lo if lo > 0 else 0.0


def within(diffs):
    return (f"within 10%: {sum(d <= 0.10 for d in diffs)}/{len(diffs)}, "
            f"max diff {100 * max(diffs):.1f}%")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("a")
    ap.add_argument("b")
    ap.add_argument("--min-ms", type=float, default=0.5)
    args = ap.parse_args()
    a, b = (json.load(open(p)) for p in (args.a, args.b))
    if [n["name"] for n in a["nodes"]] != [n["name"] for n in b["nodes"]]:
        raise SystemExit("the profiles have different layers")
    counted, every = [], []  # counted: (a's time, b's time) of the layer times >= --min-ms
    print(f"{'layer':14s} {'fwd a':>9s} {'fwd b':>9s} {'diff':>6s}   {'bwd a':>9s} {'bwd b':>9s} {'diff':>6s}")
    for na, nb in zip(a["nodes"], b["nodes"]):
        cells = []
        for key in ("forward_ms", "backward_ms"):
            x, y = na[key], nb[key]
            d = rel(x, y)
            big = max(x, y) >= args.min_ms
            every.append(d)
            if big:
                counted.append((x, y))
            cells.append(f"{x:9.3f} {y:9.3f} {100 * d:5.1f}%{'' if big else '*'}")
        print(f"{na['name'][:14]:14s} {cells[0]}  {cells[1]}")
    sa = sum(n["forward_ms"] + n["backward_ms"] for n in a["nodes"])
    sb = sum(n["forward_ms"] + n["backward_ms"] for n in b["nodes"])
    print(f"(* below {args.min_ms} ms in both runs: not counted below)")
    if counted:
        diffs = [rel(x, y) for x, y in counted]
        print(f"layer times counted: {len(diffs)}; max diff {100 * max(diffs):.1f}%, "
              f"median diff {100 * statistics.median(diffs):.1f}%, "
              f"within 10%: {sum(d <= 0.10 for d in diffs)}/{len(diffs)}")
    print(f"all layer times: {within(every)}")
    print(f"layer sum: {sa:.3f} vs {sb:.3f} ms ({100 * rel(sa, sb):.1f}%); whole step: "
          f"{a['step_forward_backward_ms']:.3f} vs {b['step_forward_backward_ms']:.3f} ms "
          f"({100 * rel(a['step_forward_backward_ms'], b['step_forward_backward_ms']):.1f}%)")
    # Each layer's share of its run's layer sum: what decides the planner's
    # split. A host that runs uniformly faster moves every time, not shares.
    if counted:
        print("shares of the layer sum, layer times counted: "
              + within([rel((x + 1e-12) / sa, (y + 1e-12) / sb) for x, y in counted]))
    pa, pb = a.get("host_probe_ms", 0), b.get("host_probe_ms", 0)
    if pa > 0 and pb > 0:
        print(f"host speed probe: {pa:.3f} vs {pb:.3f} ms ({100 * rel(pa, pb):.1f}%)")
        # b's times at a's host speed: what is left once the machine's own
        # change of speed is taken out.
        if counted:
            print("layer times counted, b scaled by the probes' ratio: "
                  + within([rel(x, y * pa / pb) for x, y in counted]))
    for name, p, s in (("a", a, sa), ("b", b, sb)):
        step = p["step_forward_backward_ms"]
        print(f"run {name}: layer sum / whole step = {s:.3f} / {step:.3f} ms = {100 * (s - step) / step:+.1f}%")


if __name__ == "__main__":
    main()

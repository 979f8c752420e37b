#!/usr/bin/env python3
"""Diagnostic, not part of the build: one `run --trace` against the
`simulate --trace` replay of the same plan, action by action, to find where
a run loses time the replay does not (issue 45's gpt-mini residual).

Checks that both executed the schedule's action list in its order, then
prints per minibatch (over the steady middle half): each rank's time idle
for an input (its previous action ended before the action that makes its
input), the dependency edges that cost most, the hand-off lag (input's end
to the consumer's start), the wall time per action kind, and, with
--v-tail, the F and B chain through a V placement's last stages.

  pipedream schedule --plan P --schedule S --microbatches M --minibatches N --format csv -o list.csv
  pipedream simulate --plan P --profile PROF --schedule S --microbatches M --minibatches N \\
      --cores 2 --threads 1 --realistic-latency --trace replay.json
  bench/diag/run_against_replay.py list.csv RUN.trace.json replay.json [--v-tail]

Straight placements (stage s on rank s) and V placements (stages r and
2p-1-r on rank r) only: the stage of a replay event is derived from its
chunk that way.
"""
import collections
import csv
import json
import sys

KINDS = ("F", "B", "W")
REPLAY_KIND = {"forward": "F", "backward": "B", "backward-weight": "W"}


def action_lists(path):
    rows = list(csv.reader(line for line in open(path) if not line.startswith("#")))[1:]
    lists = collections.defaultdict(list)
    for r in rows:
        if r[2] in KINDS:
            lists[int(r[0])].append((r[2], int(r[1]), int(r[3]), int(r[4])))
    return lists


def run_times(path, lists):
    """(kind, stage, minibatch, microbatch) -> (rank, start ms, end ms), by zipping each rank's
    trace events with its list (the trace names no stage)."""
    events = [e for e in json.load(open(path))["traceEvents"] if e.get("ph") == "X" and e["cat"] in KINDS]
    times = {}
    for rank, actions in lists.items():
        mine = sorted((e for e in events if e["pid"] == rank), key=lambda e: e["ts"])
        if len(mine) != len(actions):
            sys.exit(f"rank {rank}: the run traced {len(mine)} actions, the list has {len(actions)}")
        for i, (e, a) in enumerate(zip(mine, actions)):
            if e["cat"] != a[0]:
                sys.exit(f"rank {rank}: action {i} ran {e['cat']}, the list says {a}")
            times[a] = (rank, e["ts"] / 1000, (e["ts"] + e["dur"]) / 1000)
    return times


def replay_times(path, stages):
    times = {}
    for e in json.load(open(path))["traceEvents"]:
        if e.get("ph") != "X":
            continue
        rank, chunk = e["tid"], e["args"]["chunk"]
        stage = rank if chunk == 0 else stages - 1 - rank
        times[(REPLAY_KIND[e["cat"]], stage, e["args"]["minibatch"], e["args"]["microbatch"])] = (
            rank, e["ts"] / 1000, (e["ts"] + e["dur"]) / 1000)
    return times


def producer(a, stages):
    kind, s, mb, mi = a
    if kind == "F" and s > 0:
        return ("F", s - 1, mb, mi)
    if kind == "B" and s < stages - 1:
        return ("B", s + 1, mb, mi)
    return None


def report(name, times, lists, stages, lo, hi, v_tail):
    n = hi - lo
    idle, lag, count = collections.Counter(), collections.Counter(), collections.Counter()
    edges, wall, walls = collections.Counter(), collections.Counter(), collections.Counter()
    for rank, actions in lists.items():
        ordered = sorted(actions, key=lambda a: times[a][1])
        if ordered != actions:
            print(f"{name}: rank {rank} did not follow the list's order")
        prev_end = None
        for a in actions:
            _, start, end = times[a]
            if lo <= a[2] < hi:
                wall[(rank, a[0])] += end - start
                walls[(rank, a[0])] += 1
                p = producer(a, stages)
                if p and prev_end is not None and times[p][2] > prev_end:
                    idle[rank] += start - prev_end
                    lag[rank] += start - times[p][2]
                    edges[(rank, a[0], a[1], p[1])] += start - prev_end
                    count[(rank, a[0], a[1], p[1])] += 1
            prev_end = end
    print(f"{name}: idle for an input, ms per minibatch: " +
          " ".join(f"rank {r} {idle[r] / n:.1f}" for r in sorted(lists)))
    print(f"{name}: of which hand-off lag (input's end to start): " +
          " ".join(f"rank {r} {lag[r] / n:.1f}" for r in sorted(lists)))
    for (r, k, s, ps), v in edges.most_common(6):
        print(f"    rank {r} {k} of stage {s} waiting on stage {ps}: {v / n:.1f} ms ({count[(r, k, s, ps)]} waits)")
    print(f"{name}: wall ms per action: " +
          " ".join(f"r{r}{k} {wall[(r, k)] / walls[(r, k)]:.1f}" for (r, k) in sorted(wall)))
    if v_tail:
        half = stages // 2
        hops = [("F", s) for s in range(half, stages)] + [("B", s) for s in range(stages - 1, half - 1, -1)]
        gaps = collections.defaultdict(list)
        for mb in range(lo, hi):
            for mi in range(max(a[3] for a in times) + 1):
                keys = [(k, s, mb, mi) for k, s in hops]
                if not all(k in times for k in keys):
                    continue
                for a, b in zip(keys, keys[1:]):
                    gaps[f"{a[0]}{a[1]}>{b[0]}{b[1]}"].append(times[b][1] - times[a][2])
                gaps["round trip"].append(times[keys[-1]][1] - times[keys[0]][2])
        print(f"{name}: V tail, mean gap ms: " + " ".join(f"{k} {sum(v) / len(v):.1f}" for k, v in gaps.items()))


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    if len(args) != 3:
        sys.exit(__doc__)
    lists = action_lists(args[0])
    stages = 1 + max(a[1] for acts in lists.values() for a in acts)
    minibatches = 1 + max(a[2] for acts in lists.values() for a in acts)
    lo, hi = minibatches // 4, 3 * minibatches // 4
    v_tail = "--v-tail" in sys.argv
    report("run", run_times(args[1], lists), lists, stages, lo, hi, v_tail)
    report("replay", replay_times(args[2], stages), lists, stages, lo, hi, v_tail)


if __name__ == "__main__":
    main()

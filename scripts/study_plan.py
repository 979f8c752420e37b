#!/usr/bin/python3
"""Writes a hand-chosen pipeline plan (pipedream-plan/1) for a chain profile:
stage boundaries and replica counts are given, the stage costs are the sums
of the profile's per-layer costs, so `pipedream run` trains it and
`pipedream simulate` replays it.

  study_plan.py PROFILE.json --starts 0,13,25,37 --replicas 1,1,1,1 -o plan.json
      [--bandwidth GBps] [--profile-path PATH]

--starts: the first layer (profile node index) of each stage, beginning
with 0; a stage ends where the next begins, the last at the last layer.
--replicas: replicas per stage (default 1 each); ranks are assigned in
order. The topology is flat: every worker at --bandwidth GB/s (default 10).
The planner would choose its own partition; this fixes one (for a study
where every stage must hold several layers with parameters).
"""
import argparse
import json
import sys


def ints(text):
    try:
        return [int(t) for t in text.split(",") if t.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}': give comma-separated integers") from None


def make_plan(profile, starts, replicas, bandwidth, profile_path):
    nodes = profile["nodes"]
    n = len(nodes)
    if [e for e in profile.get("edges", []) if e[1] != e[0] + 1]:
        raise SystemExit("study_plan.py: the profile is not a chain (edges other than i -> i+1)")
    if not starts or starts[0] != 0 or any(b <= a for a, b in zip(starts, starts[1:])) or starts[-1] >= n:
        raise SystemExit(f"study_plan.py: --starts must begin at 0 and increase below {n} (the layers), got {starts}")
    if replicas is None:
        replicas = [1] * len(starts)
    if len(replicas) != len(starts) or min(replicas) < 1:
        raise SystemExit("study_plan.py: --replicas needs one positive count per stage")
    ends = [s - 1 for s in starts[1:]] + [n - 1]
    stages, rank = [], 0
    for i, (a, b) in enumerate(zip(starts, ends)):
        layer = nodes[a:b + 1]
        fwd = sum(x["forward_ms"] for x in layer) / 1e3
        bwd = sum(x["backward_ms"] for x in layer) / 1e3
        stage = {
            "index": i, "layers": [a, b], "layer_names": [x["name"] for x in layer],
            "replicas": replicas[i], "ranks": list(range(rank, rank + replicas[i])),
            "forward_s": fwd, "backward_s": bwd, "compute_s": fwd + bwd,
            "parameter_bytes": sum(x.get("parameter_bytes", 0) for x in layer),
            "output_bytes": 0 if b == n - 1 else layer[-1]["output_bytes"],
        }
        rank += replicas[i]
        stages.append(stage)
    workers = rank
    return {
        "format": "pipedream-plan/1",
        "config": "-".join(str(r) for r in replicas),
        "schedule": "1f1b-rr",
        "noam": -(-workers // replicas[0]),
        "profile": {"path": profile_path, "model": profile.get("model"), "batch_size": profile.get("batch_size"),
                    "device": profile.get("device")},
        "topology": {"levels": [{"count": workers, "bandwidth_GBps": bandwidth}]},
        "stages": stages,
    }


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("profile")
    p.add_argument("--starts", type=ints, required=True)
    p.add_argument("--replicas", type=ints)
    p.add_argument("--bandwidth", type=float, default=10.0)
    p.add_argument("--profile-path", help="path recorded in the plan (default: PROFILE as given)")
    p.add_argument("-o", "--output", required=True)
    a = p.parse_args(argv)
    with open(a.profile, encoding="utf-8") as f:
        profile = json.load(f)
    plan = make_plan(profile, a.starts, a.replicas, a.bandwidth, a.profile_path or a.profile)
    with open(a.output, "w", encoding="utf-8") as f:
        json.dump(plan, f, indent=1)
        f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

#!/usr/bin/python3
"""Summarises the runs of scripts/study_staleness.sh.

  study_summary.py DIR

Reads DIR/<shape>/<opt>-<lr>/<policy>/seed<N>/ep<k>.jsonl (the metrics of a
`pipedream run --reference` of k epochs), DIR/single/<opt>-<lr>/train/
seed<N>/metrics.jsonl (`pipedream train`, one evaluation per epoch) and the
`simulate --json` reports in DIR/sim/, and writes

  DIR/summary.json  one object per (shape, optimizer, lr, policy): final test
                    accuracy per seed, mean, min, max, std, divergences,
                    and the mean accuracy after every epoch
  DIR/summary.md    the same as a Markdown table
  DIR/summary-wide.md  one row per (optimizer, lr, shape), one column per
                    policy (the table of docs/results.md)
  DIR/curves/       per run, its test accuracy after every epoch as eval
                    lines (x: epochs, and "seconds": simulated wall time),
                    and fig-*.json, the figures for `plot.py bands`

A run counts as diverged when any loss it logged is not finite, when it
failed, or when its final test accuracy is below 15% (10 classes: chance is
10%). Missing runs (a grid still running) are reported as such.
"""
import glob
import json
import math
import os
import re
import statistics
import sys

CHANCE_LIMIT = 0.15
POLICIES = ["train", "stash", "vertical", "none", "flush"]
POLICY_LABELS = {"train": "1 worker (train)", "stash": "stash", "vertical": "vertical sync",
                 "none": "no stashing (none)", "flush": "1f1b-flush"}


def read_lines(path):
    out = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if line:
                try:
                    out.append(json.loads(line))
                except json.JSONDecodeError:
                    out.append({"event": "failed"})
    return out


def finite(v):
    return isinstance(v, (int, float)) and math.isfinite(v)


def run_result(lines):
    """(test accuracy, test loss, diverged by a non-finite loss or failure)."""
    bad = any(l.get("event") == "failed" for l in lines)
    for l in lines:
        if l.get("event") == "step" and not finite(l.get("loss")):
            bad = True
    evals = [l for l in lines if l.get("event") == "eval"]
    if not evals:
        return None, None, True
    e = evals[-1]
    acc, loss = e.get("test_accuracy"), e.get("test_loss")
    if not finite(loss):
        bad = True
    return (acc if finite(acc) else None), (loss if finite(loss) else None), bad


def sim_seconds_per_epoch(out, shape, policy, train_n):
    name = "single-train" if shape == "single" else f"{shape}-{policy}"
    path = os.path.join(out, "sim", f"{name}.json")
    if not os.path.isfile(path):
        return None
    j = json.load(open(path, encoding="utf-8"))
    tput = j.get("throughput_samples_per_s") or 0
    return train_n / tput if tput > 0 else None


def main(argv):
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    out = argv[0]
    epochs = int(open(os.path.join(out, "epochs")).read().strip())
    done = glob.glob(os.path.join(out, "data", "done-*-*"))
    if not done:
        print(f"study_summary.py: {out}/data has no subset (run scripts/study_staleness.sh)", file=sys.stderr)
        return 2
    train_n, test_n = (int(x) for x in re.match(r"done-(\d+)-(\d+)", os.path.basename(done[0])).groups())

    # cells: (shape, opt, lr, policy) -> {seed: per-epoch [(acc, loss, bad)]}
    cells = {}
    for path in glob.glob(os.path.join(out, "*", "*", "*", "seed*")):
        rel = os.path.relpath(path, out).split(os.sep)
        shape, optlr, policy, seed = rel
        if shape in ("sim", "data", "curves"):
            continue
        opt, lr = optlr.split("-", 1)
        seed = int(seed[4:])
        per_epoch = []
        if policy == "train":
            f = os.path.join(path, "metrics.jsonl")
            if not os.path.isfile(f):
                continue
            lines = read_lines(f)
            _, _, bad = run_result(lines)
            for l in lines:
                if l.get("event") == "eval":
                    acc, loss = l.get("test_accuracy"), l.get("test_loss")
                    per_epoch.append((acc if finite(acc) else None, loss if finite(loss) else None, bad))
        else:
            for k in range(1, epochs + 1):
                f = os.path.join(path, f"ep{k}.jsonl")
                if not os.path.isfile(f):
                    break
                per_epoch.append(run_result(read_lines(f)))
        if per_epoch:
            cells.setdefault((shape, opt, lr, policy), {})[seed] = per_epoch

    curves_dir = os.path.join(out, "curves")
    os.makedirs(curves_dir, exist_ok=True)
    rows = []
    for (shape, opt, lr, policy), seeds in sorted(cells.items()):
        spe = sim_seconds_per_epoch(out, shape, policy, train_n)
        finals, diverged, complete = {}, 0, 0
        for seed, per_epoch in sorted(seeds.items()):
            curve = os.path.join(curves_dir, shape, f"{opt}-{lr}", policy, f"seed{seed}.jsonl")
            os.makedirs(os.path.dirname(curve), exist_ok=True)
            with open(curve, "w", encoding="utf-8") as f:
                for k, (acc, loss, bad) in enumerate(per_epoch, 1):
                    line = {"event": "eval", "epoch": k - 1, "test_accuracy": acc, "test_loss": loss}
                    if spe:
                        line["seconds"] = k * spe
                    f.write(json.dumps(line) + "\n")
            if len(per_epoch) == epochs:
                complete += 1
                acc, _, bad = per_epoch[-1]
                finals[seed] = acc
                if bad or acc is None or acc < CHANCE_LIMIT or any(b for _, _, b in per_epoch):
                    diverged += 1
        accs = [a for a in finals.values() if a is not None]
        mean_by_epoch = []
        for k in range(epochs):
            at = [s[k][0] for s in seeds.values() if len(s) > k and s[k][0] is not None]
            mean_by_epoch.append(statistics.mean(at) if at else None)
        rows.append({
            "shape": "1 worker" if shape == "single" else shape, "optimizer": opt, "lr": float(lr),
            "policy": policy, "seeds_complete": complete, "seeds_started": len(seeds),
            "final_accuracy": {str(k): v for k, v in finals.items()},
            "mean": statistics.mean(accs) if accs else None, "min": min(accs) if accs else None,
            "max": max(accs) if accs else None, "std": statistics.stdev(accs) if len(accs) > 1 else None,
            "diverged": diverged, "mean_accuracy_by_epoch": mean_by_epoch,
            "simulated_seconds_per_epoch": spe,
        })

    order = {"1 worker": 0}
    def key(r):
        return (r["optimizer"] != "sgd", r["lr"], order.get(r["shape"], 1), r["shape"], POLICIES.index(r["policy"]))
    rows.sort(key=key)
    with open(os.path.join(out, "summary.json"), "w", encoding="utf-8") as f:
        json.dump({"epochs": epochs, "train_images": train_n, "test_images": test_n,
                   "chance_limit": CHANCE_LIMIT, "rows": rows}, f, indent=1)

    def pct(v):
        return "-" if v is None else f"{100 * v:.1f}"
    lines = [f"Final test accuracy (%) after {epochs} epochs of {train_n} images (test: {test_n}), "
             "mean [min-max] over seeds; diverged = non-finite loss or final accuracy below "
             f"{100 * CHANCE_LIMIT:.0f}%.", "",
             "| optimizer | lr | shape | policy | final accuracy, mean [min-max] | diverged | seeds | sim. s/epoch |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        acc = f"{pct(r['mean'])} [{pct(r['min'])}-{pct(r['max'])}]" if r["mean"] is not None else "(not finished)"
        spe = "-" if r["simulated_seconds_per_epoch"] is None else f"{r['simulated_seconds_per_epoch']:.3f}"
        seeds = f"{r['seeds_complete']}" + ("" if r["seeds_complete"] == r["seeds_started"] else
                                             f" (+{r['seeds_started'] - r['seeds_complete']} unfinished)")
        lines.append(f"| {r['optimizer']} | {r['lr']:g} | {r['shape']} | {r['policy']} | {acc} | "
                     f"{r['diverged']}/{r['seeds_complete']} | {seeds} | {spe} |")
    with open(os.path.join(out, "summary.md"), "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))

    shapes = sorted({s for s, _, _, _ in cells if s != "single"}, key=lambda s: (-s.count("-"), s))
    # The wide table: one column per policy, one worker beside every shape.
    idx = {(r["optimizer"], r["lr"], r["shape"], r["policy"]): r for r in rows}
    def cell(r):
        if r is None or r["mean"] is None:
            return "-"
        text = f"{pct(r['mean'])} [{pct(r['min'])}-{pct(r['max'])}]"
        return text + (f" **{r['diverged']}/{r['seeds_complete']} div.**" if r["diverged"] else "")
    wide = ["| optimizer | lr | shape | 1 worker (`train`) | `stash` | `vertical` | `none` | `1f1b-flush` |",
            "|---|---|---|---|---|---|---|---|"]
    for opt, lr in sorted({(r["optimizer"], r["lr"]) for r in rows}, key=lambda k: (k[0] != "sgd", k[1])):
        for shape in shapes:
            row_cells = [cell(idx.get((opt, lr, shape, p))) for p in ("stash", "vertical", "none", "flush")]
            wide.append(f"| {opt} | {lr:g} | {shape} | {cell(idx.get((opt, lr, '1 worker', 'train')))} | "
                        + " | ".join(row_cells) + " |")
    totals = {}
    for r in rows:
        t = totals.setdefault(r["policy"], [0, 0])
        t[0] += r["diverged"]
        t[1] += r["seeds_complete"]
    wide += ["", "Diverged runs, all cells: " + ", ".join(
        f"`{p}` {totals[p][0]}/{totals[p][1]}" for p in POLICIES if p in totals) + "."]
    with open(os.path.join(out, "summary-wide.md"), "w", encoding="utf-8") as f:
        f.write("\n".join(wide) + "\n")

    # Time to accuracy, the paper's metric, on the simulated clock.
    targets = (0.75, 0.80)
    tta = ["| optimizer | lr | shape | " + " | ".join(
               f"{p} to {int(100 * t)}%" for t in targets for p in ("train", "stash", "none", "flush")) + " |",
           "|---|---|---|" + "---|" * (4 * len(targets))]
    def reach(r, target):
        if r is None or not r["simulated_seconds_per_epoch"]:
            return "-"
        for k, a in enumerate(r["mean_accuracy_by_epoch"], 1):
            if a is not None and a >= target:
                return f"{k * r['simulated_seconds_per_epoch']:.2f} s"
        return "-"
    for opt, lr in sorted({(r["optimizer"], r["lr"]) for r in rows}, key=lambda k: (k[0] != "sgd", k[1])):
        for shape in shapes:
            c = [reach(idx.get((opt, lr, "1 worker" if p == "train" else shape, p)), t)
                 for t in targets for p in ("train", "stash", "none", "flush")]
            tta.append(f"| {opt} | {lr:g} | {shape} | " + " | ".join(c) + " |")
    with open(os.path.join(out, "time-to-accuracy.md"), "w", encoding="utf-8") as f:
        f.write("\n".join(tta) + "\n")

    # Figures: per optimizer and x axis, one panel per (lr, shape), one band
    # per policy (mean and min-max over seeds); 1 worker in every panel.
    for opt in sorted({o for _, o, _, _ in cells}):
        lrs = sorted({lr for _, o, lr, _ in cells if o == opt}, key=float)
        for axis in ("epoch", "time"):
            panels = []
            for lr in lrs:
                for shape in shapes:
                    series = []
                    for policy in POLICIES:
                        src = "single" if policy == "train" else shape
                        d = os.path.join(curves_dir, src, f"{opt}-{lr}", policy)
                        files = sorted(glob.glob(os.path.join(d, "seed*.jsonl")))
                        if files:
                            series.append({"label": POLICY_LABELS[policy], "files": [os.path.abspath(x) for x in files]})
                    if series:
                        panels.append({"title": f"{shape}, {opt} lr {lr}", "series": series})
            if not panels:
                continue
            spec = {"title": f"{opt}{' (momentum 0.9)' if opt == 'sgd' else ''}: test accuracy, mean and "
                             f"min-max over seeds", "x": axis, "columns": len(shapes), "y": "test_accuracy",
                    "panels": panels}
            with open(os.path.join(curves_dir, f"fig-{opt}-{axis}.json"), "w", encoding="utf-8") as f:
                json.dump(spec, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

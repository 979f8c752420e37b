#!/usr/bin/python3
"""Plots pipedream's outputs as PNG files.

  plot.py curves RUN.jsonl [LABEL=RUN.jsonl ...] -o curves.png [--x step,time,epoch]
      Loss and accuracy of one or more `pipedream train` / `pipedream run`
      metrics files (--metrics), overlaid, against steps, wall time and/or
      epochs. Training loss is the line; test loss and test accuracy (the
      "eval" lines) are the markers; the training minibatch accuracy that
      `run` writes is the faint line. When the files have them, a third row
      draws the learning rate (the step lines' "lr") and, with
      --clip-grad-norm, the gradient norm before clipping ("grad_norm" lines).

  plot.py throughput SIM.json [LABEL=SIM.json ...] -o throughput.png
      Bars of simulated throughput, one per `pipedream simulate --json`
      output. The label is LABEL= when given, else the file's name without
      its extension (so name the files after their configs: 7-1.json).

  plot.py bands FIGURE.json -o bands.png
      Mean and spread (min-max band) over seeds of test accuracy (or any eval
      field), in one panel per group of series. FIGURE.json:
        {"title": "...", "x": "epoch" | "time", "y": "test_accuracy",
         "columns": 3, "panels": [{"title": "...", "series": [
             {"label": "stash", "files": ["seed0.jsonl", "seed1.jsonl"]}]}]}
      Each file is a metrics.jsonl; its "eval" lines give the points: x is
      epochs done (the line's epoch + 1) or its "seconds". A seed whose value
      is missing at some x is left out of the band there.
      (scripts/study_staleness.sh writes such figures.)

Uses matplotlib from Debian: run with /usr/bin/python3 after
`apt-get install python3-matplotlib`. Exit status 2 means the input was
wrong (the message says what to fix), 3 that matplotlib is missing.
"""
import argparse
import json
import math
import os
import sys

EXIT_USAGE = 2
EXIT_NO_MATPLOTLIB = 3


class InputError(Exception):
    """A problem with the user's files or arguments, with what to fix."""


def labelled_paths(items):
    """'LABEL=path' or 'path' (label: the file name without extension)."""
    out = []
    for item in items:
        label, sep, path = item.partition("=")
        if not sep or not label:
            path = item
            label = os.path.splitext(os.path.basename(item))[0]
        if not os.path.isfile(path):
            raise InputError(f"{path}: no such file (give FILE or LABEL=FILE)")
        out.append((label, path))
    labels = [label for label, _ in out]
    duplicates = sorted({label for label in labels if labels.count(label) > 1})
    if duplicates:
        raise InputError(f"two inputs are labelled {', '.join(duplicates)}: give them distinct LABEL=FILE names")
    return out


class ResumedClock:
    """A resumed run's "seconds" continue the interrupted run's (this build
    writes them so); a log written before restarts at zero where the run
    resumed. Where a line's seconds go back, the later lines are shifted by
    the largest seconds seen before, so the time axis never runs backwards."""

    def __init__(self):
        self.offset = 0.0
        self.latest = 0.0

    def continue_(self, line):
        t = value(line, "seconds")
        if t is None:
            return
        if t + self.offset < self.latest:
            self.offset = self.latest
        line["seconds"] = t + self.offset
        self.latest = max(self.latest, line["seconds"])


def read_metrics(path, norms=None):
    """The step and eval lines of a metrics.jsonl, with x positions resolved;
    its grad_norm lines are appended to `norms` when given."""
    steps, evals = [], []
    clock = ResumedClock()
    found_norms = []
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                j = json.loads(line)
            except json.JSONDecodeError as e:
                raise InputError(f"{path}:{number}: not JSON ({e.msg}); is this a metrics.jsonl from "
                                 "`pipedream train/run --metrics`?") from None
            if not isinstance(j, dict):
                continue
            clock.continue_(j)
            if j.get("event") == "step":
                if "step" not in j:
                    raise InputError(f"{path}:{number}: a step line without \"step\"")
                steps.append(j)
            elif j.get("event") == "eval":
                evals.append(j)
            elif j.get("event") == "grad_norm" and "step" in j:
                found_norms.append(j)
    if not steps and not evals:
        raise InputError(f"{path}: no \"step\" or \"eval\" lines; is this a metrics.jsonl from "
                         "`pipedream train/run --metrics`?")
    # x = steps done. `run` writes an eval's step; `train` only its epoch,
    # which ends at the last step logged in that epoch.
    last_step_of_epoch = {}
    for s in steps:
        e = s.get("epoch", 0)
        last_step_of_epoch[e] = max(last_step_of_epoch.get(e, 0), s["step"] + 1)
    for s in steps:
        s["_steps_done"] = s["step"] + 1
    for e in evals:
        if "step" in e:
            e["_steps_done"] = e["step"]
        else:
            e["_steps_done"] = last_step_of_epoch.get(e.get("epoch", 0))
    for n in found_norms:
        n["_steps_done"] = n["step"] + 1
    if norms is not None:
        norms.extend(found_norms)
    return steps, evals


def value(line, key):
    """A finite number, or None (a diverged loss is written as null)."""
    v = line.get(key)
    if isinstance(v, (int, float)) and math.isfinite(v):
        return float(v)
    return None


def x_of(line, axis, steps_per_epoch):
    if axis == "step":
        return line.get("_steps_done")
    if axis == "time":
        return value(line, "seconds")
    done = line.get("_steps_done")  # epochs done, fractional
    return None if done is None or not steps_per_epoch else done / steps_per_epoch


def steps_per_epoch_of(steps):
    """Steps in an epoch, from where the logged steps change epoch: exact
    with --log-every 1, within half the logging interval otherwise (None
    when no epoch ended)."""
    last_of_first = [s["step"] for s in steps if s.get("epoch", 0) == 0]
    first_of_second = [s["step"] for s in steps if s.get("epoch", 0) == 1]
    if not last_of_first or not first_of_second:
        return None
    return (max(last_of_first) + 1 + min(first_of_second)) / 2


AXIS_TITLES = {"step": "step", "time": "wall time (s)", "epoch": "epoch"}


def plot_curves(args, plt):
    norms = {}
    runs = []
    for label, path in labelled_paths(args.inputs):
        norms[label] = []
        runs.append((label, *read_metrics(path, norms[label])))
    # A third row when any file has a learning rate or gradient norms.
    with_rates = any(value(s, "lr") is not None for _, steps, _ in runs for s in steps) or any(norms.values())
    axes_wanted = list(dict.fromkeys(args.x))
    if "time" in axes_wanted:
        untimed = [label for label, steps, evals in runs if not any("seconds" in l for l in steps + evals)]
        if untimed:
            print(f"plot.py: {', '.join(untimed)}: no \"seconds\" in the metrics (written by an older build); "
                  "dropping the time axis", file=sys.stderr)
            axes_wanted = [a for a in axes_wanted if a != "time"] or ["step"]
    if "epoch" in axes_wanted:
        unknown = [label for label, steps, _ in runs if steps_per_epoch_of(steps) is None]
        if unknown:
            print(f"plot.py: {', '.join(unknown)}: shorter than two epochs, so the epoch length is unknown; "
                  "dropping the epoch axis", file=sys.stderr)
            axes_wanted = [a for a in axes_wanted if a != "epoch"] or ["step"]

    rows = 3 if with_rates else 2
    fig, grid = plt.subplots(rows, len(axes_wanted), figsize=(6 * len(axes_wanted), 4 * rows), squeeze=False)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for col, axis in enumerate(axes_wanted):
        loss_ax, acc_ax = grid[0][col], grid[1][col]
        for i, (label, steps, evals) in enumerate(runs):
            color = colors[i % len(colors)]
            per_epoch = steps_per_epoch_of(steps)

            def points(lines, key):
                pts = [(x_of(l, axis, per_epoch), value(l, key)) for l in lines]
                pts = [(x, y) for x, y in pts if x is not None and y is not None]
                return [x for x, _ in pts], [y for _, y in pts]

            xs, ys = points(steps, "loss")
            if xs:
                loss_ax.plot(xs, ys, color=color, linewidth=1, label=f"{label} train")
            xs, ys = points(evals, "test_loss")
            if xs:
                loss_ax.plot(xs, ys, color=color, marker="o", linestyle="--", label=f"{label} test")
            xs, ys = points(steps, "accuracy")
            if xs:
                acc_ax.plot(xs, ys, color=color, linewidth=0.8, alpha=0.35, label=f"{label} train minibatch")
            xs, ys = points(evals, "test_accuracy")
            if xs:
                acc_ax.plot(xs, ys, color=color, marker="o", linestyle="--", label=f"{label} test")
            if with_rates:
                lr_ax = grid[2][col]
                xs, ys = points(steps, "lr")
                if xs:
                    lr_ax.plot(xs, ys, color=color, linewidth=1, label=f"{label} lr")
                xs, ys = points(norms[label], "grad_norm")
                if xs:
                    norm_ax = lr_ax.twinx() if not hasattr(lr_ax, "_pd_norm_ax") else lr_ax._pd_norm_ax
                    lr_ax._pd_norm_ax = norm_ax
                    norm_ax.plot(xs, ys, color=color, linewidth=0.8, linestyle=":", label=f"{label} grad norm")
                    norm_ax.set_ylabel("gradient norm before clipping (dotted)")
        if with_rates:
            lr_ax = grid[2][col]
            lr_ax.set_title(f"learning rate and gradient norm against {AXIS_TITLES[axis]}")
            lr_ax.set_ylabel("learning rate")
            lr_ax.set_xlabel(AXIS_TITLES[axis])
            lr_ax.grid(alpha=0.3)
            handles, labels = lr_ax.get_legend_handles_labels()
            if hasattr(lr_ax, "_pd_norm_ax"):
                more = lr_ax._pd_norm_ax.get_legend_handles_labels()
                handles, labels = handles + more[0], labels + more[1]
            if handles:
                lr_ax.legend(handles, labels, fontsize="small")
        loss_ax.set_title(f"loss against {AXIS_TITLES[axis]}")
        loss_ax.set_ylabel("loss")
        acc_ax.set_title(f"accuracy against {AXIS_TITLES[axis]}")
        acc_ax.set_ylabel("accuracy")
        for ax in (loss_ax, acc_ax):
            ax.set_xlabel(AXIS_TITLES[axis])
            ax.grid(alpha=0.3)
            if ax.get_legend_handles_labels()[0]:
                ax.legend(fontsize="small")
    if args.title:
        fig.suptitle(args.title)
    fig.tight_layout()
    return fig


def read_simulation(path):
    try:
        with open(path, encoding="utf-8") as f:
            j = json.load(f)
    except json.JSONDecodeError as e:
        raise InputError(f"{path}: not JSON ({e.msg}); write it with `pipedream simulate --json ... > {path}`") from None
    if not isinstance(j, dict) or "time_per_minibatch_s" not in j:
        raise InputError(f"{path}: no \"time_per_minibatch_s\"; is this the output of `pipedream simulate --json`?")
    return j


def plot_throughput(args, plt):
    sims = [(label, read_simulation(path)) for label, path in labelled_paths(args.inputs)]
    known = [s.get("throughput_samples_per_s", 0) > 0 for _, s in sims]
    if all(known):
        values = [s["throughput_samples_per_s"] for _, s in sims]
        ylabel = "samples/s"
    elif not any(known):
        # No batch size in the plans: minibatches per second still compare.
        values = [1.0 / s["time_per_minibatch_s"] if s["time_per_minibatch_s"] > 0 else 0.0 for _, s in sims]
        ylabel = "minibatches/s"
    else:
        missing = [label for (label, _), k in zip(sims, known) if not k]
        raise InputError(f"{', '.join(missing)}: throughput unknown (the plan's profile has no batch size) while "
                         "the others have one; rerun those simulations with --batch-size N")
    labels = [label for label, _ in sims]
    fig, ax = plt.subplots(figsize=(max(5, 1.2 * len(labels) + 2), 4.5))
    bars = ax.bar(range(len(labels)), values, color="tab:blue")
    ax.set_xticks(range(len(labels)))
    ax.set_xticklabels(labels, rotation=30 if len(labels) > 4 else 0, ha="right" if len(labels) > 4 else "center")
    for bar, v in zip(bars, values):
        ax.annotate(f"{v:.4g}", (bar.get_x() + bar.get_width() / 2, bar.get_height()), ha="center", va="bottom",
                    fontsize="small")
    ax.set_ylabel(f"simulated throughput ({ylabel})")
    ax.set_title(args.title or "simulated throughput by configuration")
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    return fig


def read_figure(path):
    try:
        with open(path, encoding="utf-8") as f:
            fig = json.load(f)
    except json.JSONDecodeError as e:
        raise InputError(f"{path}: not JSON ({e.msg})") from None
    panels = fig.get("panels") if isinstance(fig, dict) else None
    if not isinstance(panels, list) or not panels:
        raise InputError(f"{path}: no \"panels\" list (see `plot.py --help`)")
    if fig.get("x", "epoch") not in ("epoch", "time"):
        raise InputError(f"{path}: \"x\" must be epoch or time, got {fig.get('x')!r}")
    for i, panel in enumerate(panels):
        series = panel.get("series") if isinstance(panel, dict) else None
        if not isinstance(series, list) or not series:
            raise InputError(f"{path}: panel {i} has no \"series\" list")
        for s in series:
            if not isinstance(s, dict) or not isinstance(s.get("files"), list) or not s["files"]:
                raise InputError(f"{path}: panel {i}: every series needs a \"label\" and a non-empty \"files\" list")
            for f in s["files"]:
                if not os.path.isfile(f):
                    raise InputError(f"{f}: no such file (named in {path})")
    return fig


def band_points(files, axis, key):
    """x -> values over files, from each file's eval lines."""
    by_x = {}
    for path in files:
        _, evals = read_metrics(path)
        for e in evals:
            y = value(e, key)
            if axis == "epoch":
                x = e.get("epoch", 0) + 1
            else:
                x = value(e, "seconds")
            if x is None or y is None:
                continue
            by_x.setdefault(x, []).append(y)
    xs = sorted(by_x)
    return xs, [by_x[x] for x in xs]


def plot_bands(args, plt):
    if len(args.inputs) != 1:
        raise InputError("bands takes one FIGURE.json (see `plot.py --help`)")
    fig_spec = read_figure(args.inputs[0])
    axis, key = fig_spec.get("x", "epoch"), fig_spec.get("y", "test_accuracy")
    panels = fig_spec["panels"]
    cols = max(1, min(int(fig_spec.get("columns", 3)), len(panels)))
    rows = (len(panels) + cols - 1) // cols
    fig, grid = plt.subplots(rows, cols, figsize=(max(7.0, 4.2 * cols), 3.3 * rows + 0.8), squeeze=False, sharey=True)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    labels = []
    for p in panels:  # one colour per label across panels
        for s in p["series"]:
            if s.get("label") not in labels:
                labels.append(s.get("label"))
    for i, panel in enumerate(panels):
        ax = grid[i // cols][i % cols]
        for s in panel["series"]:
            xs, ys = band_points(s["files"], axis, key)
            if not xs:
                continue
            color = colors[labels.index(s.get("label")) % len(colors)]
            mean = [sum(v) / len(v) for v in ys]
            ax.plot(xs, mean, color=color, marker="o", markersize=3, linewidth=1.3,
                    label=f"{s.get('label')} (n={len(s['files'])})")
            ax.fill_between(xs, [min(v) for v in ys], [max(v) for v in ys], color=color, alpha=0.18, linewidth=0)
        ax.set_title(panel.get("title", ""), fontsize="medium")
        ax.set_xlabel("epoch" if axis == "epoch" else "simulated wall time (s)")
        ax.set_ylabel(key.replace("_", " "))
        ax.grid(alpha=0.3)
    for j in range(len(panels), rows * cols):
        grid[j // cols][j % cols].axis("off")
    handles, names = grid[0][0].get_legend_handles_labels()
    seen = set(names)
    for row in grid:  # a series absent from the first panel still gets a legend entry
        for ax in row:
            for h, n in zip(*ax.get_legend_handles_labels()):
                if n not in seen:
                    handles.append(h)
                    names.append(n)
                    seen.add(n)
    if handles:
        fig.legend(handles, names, loc="lower center", ncol=min(len(names), 3), fontsize="small")
    title = args.title or fig_spec.get("title")
    if title:
        fig.suptitle(title, fontsize="medium")
    legend_rows = (len(handles) + 2) // 3
    fig.tight_layout(rect=(0, (0.25 + 0.22 * legend_rows) / fig.get_figheight() if handles else 0, 1, 1))
    return fig


def x_axes(text):
    axes = [a.strip() for a in text.split(",") if a.strip()]
    bad = [a for a in axes if a not in AXIS_TITLES]
    if bad or not axes:
        raise argparse.ArgumentTypeError(f"'{text}': give a comma-separated list of step, time, epoch")
    return axes


def parse_args(argv):
    parser = argparse.ArgumentParser(
        prog="plot.py", description=__doc__.split("\n\n")[0],
        epilog=__doc__.split("\n\n", 1)[1], formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", metavar="{curves,throughput,bands}")
    sub.required = True
    curves = sub.add_parser("curves", help="loss and accuracy of metrics.jsonl files")
    curves.add_argument("inputs", nargs="+", metavar="[LABEL=]METRICS.jsonl")
    curves.add_argument("--x", type=x_axes, default=["step", "time"], metavar="AXES",
                        help="x axes, one column each, comma-separated from step,time,epoch (default: step,time)")
    throughput = sub.add_parser("throughput", help="throughput of `simulate --json` outputs")
    throughput.add_argument("inputs", nargs="+", metavar="[LABEL=]SIMULATION.json")
    bands = sub.add_parser("bands", help="mean and min-max over seeds, panels described by a FIGURE.json")
    bands.add_argument("inputs", nargs=1, metavar="FIGURE.json")
    bands.add_argument("--dpi", type=int, default=110, help="resolution of the PNG (default 110)")
    for p in (curves, throughput, bands):
        p.add_argument("-o", "--output", required=True, help="PNG file to write")
        p.add_argument("--title", help="figure title")
    return parser.parse_args(argv)


def main(argv):
    args = parse_args(argv)
    if not args.output.lower().endswith(".png"):
        print(f"plot.py: --output {args.output}: give a .png file name", file=sys.stderr)
        return EXIT_USAGE
    try:
        import matplotlib
        matplotlib.use("Agg")  # files only: no display needed
        import matplotlib.pyplot as plt
    except ImportError:
        print("plot.py: matplotlib is not installed; install it with `sudo apt-get install python3-matplotlib` "
              "and run this script with /usr/bin/python3", file=sys.stderr)
        return EXIT_NO_MATPLOTLIB
    try:
        plotters = {"curves": plot_curves, "throughput": plot_throughput, "bands": plot_bands}
        fig = plotters[args.command](args, plt)
    except InputError as e:
        print(f"plot.py: {e}", file=sys.stderr)
        return EXIT_USAGE
    out_dir = os.path.dirname(args.output)
    if out_dir:
        os.makedirs(out_dir, exist_ok=True)
    try:
        fig.savefig(args.output, dpi=getattr(args, "dpi", 110))
    except OSError as e:
        print(f"plot.py: cannot write {args.output}: {e.strerror}", file=sys.stderr)
        return EXIT_USAGE
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

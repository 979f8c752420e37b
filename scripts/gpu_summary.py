#!/usr/bin/env python3
"""What scripts/gpu_check.sh measured, as ratios and a markdown summary.

  gpu_summary.py ratios GPU_CHECK.jsonl   one {"compare": ...} JSON line per
      workload, batch and recipe measured by both pipedream-bench core and
      bench/torch_peer.py in that file: pipedream's fp32 against PyTorch's
      fp32 (TF32 off), --allow-tf32 against PyTorch's fp32 with TF32
      ("tf32"), bf16 against PyTorch's amp recipe (bf16 autocast, SDPA,
      channels_last + TF32). ratio = pipedream / PyTorch samples per second;
      "ratio_vs_torch_best" divides by PyTorch's fastest recipe measured for
      that workload and batch; "same_parameters" says whether the models
      match.
  gpu_summary.py layer PROFILE.json --recipe R [--layer ln_f]   one
      {"profile": ...} line: that layer's forward and backward ms and their
      ratio, from a `pipedream profile` output.
  gpu_summary.py table GPU_CHECK.jsonl    markdown to paste: throughput per
      workload x recipe with ratios, the layer ratios, the pipelines'
      bitwise checks, bench-comm, and every step's exit code and seconds.

Reads only what is in the file: it never fills in a figure that was not
measured (a missing one prints as "-").
"""
import argparse
import json
import sys

# pipedream's recipe -> the PyTorch recipe it is compared with.
PEER_RECIPE = {"fp32": "fp32", "tf32": "tf32", "bf16": "amp"}
RECIPE_ORDER = ["fp32", "tf32", "bf16"]


def read_lines(path):
    out = []
    with open(path) as f:
        for raw in f:
            raw = raw.strip()
            if not raw.startswith("{"):
                continue
            try:
                out.append(json.loads(raw))
            except json.JSONDecodeError:
                continue
    return out


def ours_recipe(line):
    """fp32, tf32 or bf16: what gpu_check.sh tagged the step with, else
    from bench core's "precision" and "allow_tf32" fields."""
    if line.get("recipe"):
        return line["recipe"]
    if line.get("precision") == "bf16":
        return "bf16"
    return "tf32" if line.get("allow_tf32") else "fp32"


def ratios(lines):
    ours, peer = {}, {}
    for l in lines:
        if l.get("suite") == "core" and not l.get("step", "").startswith("op_times"):  # timed runs: fewer steps
            ours[(l["workload"], l["batch"], ours_recipe(l))] = l
        elif l.get("suite") == "torch-peer" and not l.get("step", "").startswith("torch_op_times"):
            peer[(l["workload"], l["batch"], l.get("recipe", "fp32"))] = l
    out = []
    for (workload, batch, recipe), a in sorted(ours.items()):
        b = peer.get((workload, batch, PEER_RECIPE.get(recipe, recipe)))
        if not b:
            continue
        best = max(l["samples_per_s"] for (w, n, _), l in peer.items() if (w, n) == (workload, batch))
        line = {"compare": workload, "batch": batch, "recipe": recipe, "peer_recipe": b.get("recipe", "fp32"),
                "device": a.get("device"), "pipedream_samples_per_s": a["samples_per_s"],
                "torch_samples_per_s": b["samples_per_s"], "ratio": a["samples_per_s"] / b["samples_per_s"],
                "ratio_vs_torch_best": a["samples_per_s"] / best,
                "pipedream_median_step_ms": a["median_step_ms"], "torch_median_step_ms": b["median_step_ms"],
                "pipedream_parameters": a.get("parameters"), "torch_parameters": b.get("parameters"),
                "same_parameters": a.get("parameters") == b.get("parameters")}
        if "tokens_per_s" in b:
            line["torch_tokens_per_s"] = b["tokens_per_s"]
            line["pipedream_tokens_per_s"] = b["tokens_per_s"] * line["ratio"]
        out.append(line)
    return out


def layer_ratio(profile_path, recipe, layer):
    with open(profile_path) as f:
        profile = json.load(f)
    for node in profile.get("nodes", []):
        if node.get("name") == layer:
            fwd, bwd = node["forward_ms"], node["backward_ms"]
            return {"profile": profile.get("model"), "batch": profile.get("batch_size"), "recipe": recipe,
                    "device": profile.get("device"), "layer": layer, "forward_ms": fwd, "backward_ms": bwd,
                    "backward_over_forward": bwd / fwd if fwd > 0 else None}
    raise SystemExit(f"error: {profile_path} has no layer named '{layer}'")


def fmt(x, digits=0):
    if x is None:
        return "-"
    if isinstance(x, float):
        return f"{x:,.{digits}f}"
    return str(x)


def top_times_table(ops, setting, title, words):
    """The 10 largest lines per (workload, batch, setting) of a per-entry
    timing (pipedream's DeviceOps entries or PyTorch's operators), and
    their total. words: the setting's column, the entry's column, the
    entries' plural, what the step's median is."""
    if not ops:
        return
    column, entry, plural, step = words
    print(f"\n{title}:\n")
    print(f"| workload | batch | {column} | {entry} | calls per step | ms per step | share of {plural}' time |")
    print("|---|---|---|---|---|---|---|")
    def key(l):
        return (l["workload"], l["batch"], setting(l))
    for run in sorted({key(l) for l in ops}):
        mine = sorted((l for l in ops if key(l) == run), key=lambda l: -l["ms_per_step"])
        for l in mine[:10]:
            print(f"| {run[0]} | {run[1]} | {run[2]} | {l['op']} | {fmt(l['calls_per_step'], 1)} | "
                  f"{fmt(l['ms_per_step'], 3)} | {fmt(l['share_of_ops'], 3)} |")
        total = sum(l["ms_per_step"] for l in mine)
        print(f"| {run[0]} | {run[1]} | {run[2]} | (all {len(mine)} {plural}; {step}: "
              f"{fmt(mine[0]['median_step_ms'], 2)} ms) | | {fmt(total, 2)} | 1 |")


def table(lines):
    compare = [l for l in lines if "compare" in l] or ratios(lines)
    by_key = {(c["compare"], c["batch"], c["recipe"]): c for c in compare}
    rows = sorted({(c["compare"], c["batch"]) for c in compare}, key=lambda k: (k[0], k[1]))
    machine = next((l for l in lines if l.get("check") == "machine"), {})
    print(f"GPU: {machine.get('gpus', '-')}, driver {machine.get('driver', '-')}, {machine.get('date', '-')}")
    torch_version = next((l.get("torch") for l in lines if l.get("suite") == "torch-peer"), "-")
    print(f"PyTorch {torch_version}; every figure from the same run.\n")
    recipes = [r for r in RECIPE_ORDER if any(c["recipe"] == r for c in compare)]
    recipes += sorted({c["recipe"] for c in compare} - set(recipes))
    print("Samples per second; ratio = ours / PyTorch. \"bf16 vs best\": ours bf16 against PyTorch's fastest "
          "recipe on that workload.\n")
    head = ["workload", "batch"]
    for r in recipes:
        head += [f"ours {r}", f"PyTorch {PEER_RECIPE.get(r, r)}", "ratio"]
    if "bf16" in recipes:
        head.append("bf16 vs best")
    head.append("params equal")
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for workload, batch in rows:
        cells = [workload, str(batch)]
        same = []
        for recipe in recipes:
            c = by_key.get((workload, batch, recipe))
            if c:
                cells += [fmt(c["pipedream_samples_per_s"], 1), fmt(c["torch_samples_per_s"], 1),
                          f"**{c['ratio']:.2f}**"]
                same.append(c["same_parameters"])
            else:
                cells += ["-", "-", "-"]
        if "bf16" in recipes:
            c = by_key.get((workload, batch, "bf16"))
            cells.append(f"{c['ratio_vs_torch_best']:.2f}" if c else "-")
        cells.append("yes" if same and all(same) else ("NO" if same else "-"))
        print("| " + " | ".join(cells) + " |")
    tokens = [c for c in compare if "torch_tokens_per_s" in c]
    if tokens:
        print("\nGPT workloads in tokens/s (samples x context):\n")
        print("| workload | batch | recipe | ours tokens/s | PyTorch tokens/s | ours ms/step | PyTorch ms/step |")
        print("|---|---|---|---|---|---|---|")
        for c in sorted(tokens, key=lambda c: (c["compare"], c["batch"], c["recipe"])):
            print(f"| {c['compare']} | {c['batch']} | {c['recipe']} vs {c['peer_recipe']} | "
                  f"{fmt(c['pipedream_tokens_per_s'])} | {fmt(c['torch_tokens_per_s'])} | "
                  f"{fmt(c['pipedream_median_step_ms'], 2)} | {fmt(c['torch_median_step_ms'], 2)} |")

    layers = [l for l in lines if "profile" in l and "layer" in l]
    if layers:
        print("\nPer-layer profile (`pipedream profile --device cuda`):\n")
        print("| model | batch | precision | layer | forward ms | backward ms | backward / forward |")
        print("|---|---|---|---|---|---|---|")
        for l in layers:
            print(f"| {l['profile']} | {l['batch']} | {l['recipe']} | {l['layer']} | {fmt(l['forward_ms'], 3)} | "
                  f"{fmt(l['backward_ms'], 3)} | {fmt(l['backward_over_forward'], 2)} |")

    def storage(l):
        return l["precision"] + (" (bf16 storage)" if l.get("bf16_storage") else "")
    top_times_table([l for l in lines if l.get("suite") == "core_ops"], storage,
                    "Device time per DeviceOps entry (`pipedream-bench core --op-times`, the 10 largest per run)",
                    ("precision", "entry", "entries", "the step untimed"))
    top_times_table([l for l in lines if l.get("suite") == "torch_peer_ops"], lambda l: l["recipe"],
                    "PyTorch's device time per operator (`bench/torch_peer.py --op-times`, torch.profiler, "
                    "the 10 largest per run)", ("recipe", "operator", "operators", "the step unprofiled"))

    equal = [l for l in lines if "tensors" in l and "differ" in l]
    if equal:
        print("\nPipelines against `run --reference` (bit for bit):\n")
        for l in equal:
            verdict = "equal" if not l["differ"] else f"DIFFER in {len(l['differ'])}: {', '.join(l['differ'][:5])}"
            print(f"- {l.get('step', 'run')}: {l['tensors']} tensors, {verdict}")

    comm = [l for l in lines if l.get("kind") in ("p2p", "allreduce")]
    if comm:
        print("\n`bench-comm` (2 ranks):\n")
        print("| step | kind | transport | MB | GB/s | ms |")
        print("|---|---|---|---|---|---|")
        for l in comm:
            gbps = l.get("bandwidth_GBps", l.get("busbw_GBps"))
            ms = l.get("time_ms")
            if ms is None and l.get("bandwidth_GBps"):
                ms = l["bytes"] / (l["bandwidth_GBps"] * 1e9) * 1e3
            print(f"| {l.get('step', '-')} | {l['kind']} | {l.get('transport', '-')} | {l['bytes'] / 1e6:.1f} | "
                  f"{fmt(gbps, 2)} | {fmt(ms, 2)} |")

    tests = [l for l in lines if "gtest" in l]
    checks = [l for l in lines if "check" in l and "exit_code" in l]
    if checks or tests:
        print("\nSteps:\n")
        for t in tests:
            print(f"- {t['gtest']}: {t.get('passed', 0)} passed, {t.get('failed', 0)} failed, "
                  f"{t.get('skipped', 0)} skipped")
        for c in checks:
            extra = " (timed out)" if c.get("timed_out") else ""
            print(f"- {c['check']}: exit {c['exit_code']}{extra}, {c['seconds']} s")
        for c in (l for l in lines if "check" in l and isinstance(l.get("skipped"), str)):
            print(f"- {c['check']}: skipped ({c['skipped']})")
    summary = next((l for l in lines if l.get("check") == "summary"), None)
    if summary:
        print(f"\nFailed steps: {', '.join(summary.get('failed', [])) or 'none'}; "
              f"skipped: {', '.join(summary.get('skipped', [])) or 'none'}; {summary.get('seconds', '-')} s in all")


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="mode", required=True)
    r = sub.add_parser("ratios", help="pipedream / PyTorch ratio lines (JSON)")
    r.add_argument("jsonl")
    t = sub.add_parser("table", help="markdown summary of a gpu_check.jsonl")
    t.add_argument("jsonl")
    l = sub.add_parser("layer", help="one layer's backward / forward from a profile")
    l.add_argument("profile")
    l.add_argument("--recipe", required=True, help="fp32 or bf16 (what the profile ran)")
    l.add_argument("--layer", default="ln_f")
    a = p.parse_args()
    if a.mode == "layer":
        print(json.dumps(layer_ratio(a.profile, a.recipe, a.layer)))
        return 0
    lines = read_lines(a.jsonl)
    if a.mode == "ratios":
        for line in ratios(lines):
            print(json.dumps(line))
    else:
        table(lines)
    return 0


if __name__ == "__main__":
    sys.exit(main())

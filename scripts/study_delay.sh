#!/usr/bin/env bash
# A follow-up to scripts/study_staleness.sh: how much does the delay alone
# cost? One worker, `pipedream train --gradient-delay d` (each step's
# gradient computed on the weights of d steps earlier: delayed SGD, which
# `vertical` on an unreplicated pipeline is with d = stages - 1), for
# d = 0..3, on the study's model, data and epochs, SGD (momentum 0.9) at lr
# 0.001 and Adam at 0.0003, seeds 0 1 2 (final accuracy only).
#
#   scripts/study_delay.sh [--out DIR] [--study DIR]
#
# --study DIR: the staleness study's outputs (default runs/staleness), whose
# data subset is reused. Outputs in DIR (default runs/staleness-delay): one
# metrics file per run and summary.md, which also prints the study's
# 1-1-1-1 vertical result beside d = 3 (the same algorithm).
# Environment: BUILD_DIR (default build), NICE (15).
set -euo pipefail
cd "$(dirname "$0")/.."

out=runs/staleness-delay
study=runs/staleness
while [ $# -gt 0 ]; do
  case "$1" in
    --out) out=${2:?--out needs a folder}; shift 2 ;;
    --study) study=${2:?--study needs a folder}; shift 2 ;;
    -h|--help) sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "study_delay.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
pipedream=${BUILD_DIR:-build}/bin/pipedream
[ -x "$pipedream" ] || { echo "study_delay.sh: $pipedream not found: build it first with scripts/setup.sh" >&2; exit 2; }
[ -d "$study/data" ] || { echo "study_delay.sh: $study has no data: run scripts/study_staleness.sh first" >&2; exit 2; }
nice=(nice -n "${NICE:-15}")
epochs=$(cat "$study/epochs")
mkdir -p "$out"

for ol in "sgd:0.001" "adam:0.0003"; do
  IFS=: read -r opt lr <<<"$ol"
  for d in 0 1 2 3; do
    for seed in 0 1 2; do
      f="$out/$opt-$lr-d$d-seed$seed.jsonl"
      [ -s "$f" ] && continue
      "${nice[@]}" "$pipedream" train --model configs/study/mlp16-ln.json --data fashion-mnist --data-dir "$study/data" \
        --batch 64 --optimizer "$opt" --lr "$lr" --epochs "$epochs" --seed "$seed" --threads 1 \
        --gradient-delay "$d" --metrics "$f.part" >"${f%.jsonl}.log" 2>&1
      mv "$f.part" "$f"
    done
  done
done

/usr/bin/python3 - "$out" "$study" <<'EOF' | tee "$out/summary.md"
import glob, json, os, re, statistics, sys
out, study = sys.argv[1], sys.argv[2]
def final(f):
    evals = [json.loads(l) for l in open(f) if '"eval"' in l]
    return evals[-1]["test_accuracy"] if evals else None
cells = {}
for f in glob.glob(os.path.join(out, "*.jsonl")):
    opt, lr, d, seed = re.match(r"(\w+)-(.+)-d(\d)-seed(\d)\.jsonl", os.path.basename(f)).groups()
    cells.setdefault((opt, float(lr), int(d)), {})[int(seed)] = final(f)
def fmt(v):
    v = [x for x in v if x is not None]
    return f"{100 * statistics.mean(v):.1f} [{100 * min(v):.1f}-{100 * max(v):.1f}]" if v else "-"
print("One worker, delayed gradients (`train --gradient-delay d`): final test accuracy (%), mean [min-max] over seeds 0-2")
print()
print("| optimizer | lr | d = 0 | d = 1 | d = 2 | d = 3 | 1-1-1-1 vertical (study) | seed 0: d = 3 vs vertical |")
print("|---|---|---|---|---|---|---|---|")
for opt, lr in sorted({(o, l) for o, l, _ in cells}, key=lambda x: x[0] != "sgd"):
    row = [fmt(cells.get((opt, lr, d), {}).values()) for d in range(4)]
    vdir = os.path.join(study, "1-1-1-1", f"{opt}-{lr:g}", "vertical")
    vert = [final(f) for f in sorted(glob.glob(os.path.join(vdir, "seed*", "ep*.jsonl")))
            if f.endswith(f"ep{open(os.path.join(study, 'epochs')).read().strip()}.jsonl")]
    d3 = cells.get((opt, lr, 3), {}).get(0)
    v0f = os.path.join(vdir, "seed0", f"ep{open(os.path.join(study, 'epochs')).read().strip()}.jsonl")
    v0 = final(v0f) if os.path.isfile(v0f) else None
    same = "-" if d3 is None or v0 is None else f"{100 * d3:.2f} / {100 * v0:.2f}"
    print(f"| {opt} | {lr:g} | " + " | ".join(row) + f" | {fmt(vert)} | {same} |")
EOF

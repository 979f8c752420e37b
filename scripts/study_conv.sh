#!/usr/bin/env bash
# A spot check of scripts/study_staleness.sh on a convolutional network:
# do its findings carry over from the LayerNorm MLP to a small VGG-like net
# with BatchNorm (configs/study/vgg-fm-bn.json: 8 conv3x3 + BatchNorm +
# ReLU, 2 linear layers, 56K parameters)? One shape, 1-1-1-1 (4 stages of 2
# convolutions and 2 BatchNorms each, the last also the 2 linear layers:
# every stage holds at least 4 layers with parameters), SGD with momentum
# 0.9 at lr 0.01, 0.05 and 0.1, stash / vertical / none / 1f1b-flush and one
# worker, seeds 0, 1 and 2, 3 epochs of a 4000-image subset (test: 2000);
# final accuracy only. Convolutions cost ~16x the MLP per sample here,
# hence the smaller grid.
#
#   scripts/study_conv.sh [--out DIR]
#
# Outputs in DIR (default runs/staleness-conv): data/, sim/ (profile,
# plan), one metrics file per run and summary.md.
# Environment: BUILD_DIR (default build), NICE (15).
set -euo pipefail
cd "$(dirname "$0")/.."

out=runs/staleness-conv
while [ $# -gt 0 ]; do
  case "$1" in
    --out) out=${2:?--out needs a folder}; shift 2 ;;
    -h|--help) sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "study_conv.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
pipedream=${BUILD_DIR:-build}/bin/pipedream
[ -x "$pipedream" ] || { echo "study_conv.sh: $pipedream not found: build it first with scripts/setup.sh" >&2; exit 2; }
nice=(nice -n "${NICE:-15}")
py=/usr/bin/python3
model=configs/study/vgg-fm-bn.json
epochs=3
mkdir -p "$out/sim"
[ -f "$out/data/done" ] || { "$py" scripts/fmnist_subset.py "$out/data" --train 4000 --test 2000; touch "$out/data/done"; }
[ -f "$out/sim/profile.json" ] || "${nice[@]}" "$pipedream" profile --model "$model" --batch 64 --threads 1 --min-time 3 \
  -o "$out/sim/profile.json" >"$out/sim/profile.log"
"$py" scripts/study_plan.py "$out/sim/profile.json" --starts 0,7,14,21 -o "$out/sim/1-1-1-1.json"

for lr in 0.01 0.05 0.1; do
  for seed in 0 1 2; do
    for policy in train stash vertical none flush; do
      f="$out/lr$lr-$policy-seed$seed.jsonl"
      [ -s "$f" ] && continue
      common=(--model "$model" --data fashion-mnist --data-dir "$out/data" --optimizer sgd --lr "$lr"
              --epochs "$epochs" --seed "$seed" --metrics "$f.part")
      case "$policy" in
        train) "${nice[@]}" "$pipedream" train "${common[@]}" --batch 64 --threads 1 >"${f%.jsonl}.log" 2>&1 ;;
        flush) "${nice[@]}" "$pipedream" run --reference --plan "$out/sim/1-1-1-1.json" "${common[@]}" \
                 --schedule 1f1b-flush --batch 64 --microbatches 4 >"${f%.jsonl}.log" 2>&1 ;;
        *) "${nice[@]}" "$pipedream" run --reference --plan "$out/sim/1-1-1-1.json" "${common[@]}" \
             --batch 64 --weights "$policy" >"${f%.jsonl}.log" 2>&1 ;;
      esac
      mv "$f.part" "$f"
    done
  done
done

"$py" - "$out" <<'EOF' | tee "$out/summary.md"
import glob, json, math, os, re, statistics, sys
out = sys.argv[1]
cells = {}
for f in glob.glob(os.path.join(out, "*.jsonl")):
    lr, policy, seed = re.match(r"lr(.+)-(\w+)-seed(\d+)\.jsonl", os.path.basename(f)).groups()
    lines = [json.loads(l) for l in open(f) if l.strip()]
    evals = [l for l in lines if l.get("event") == "eval"]
    acc = evals[-1].get("test_accuracy") if evals else None
    bad = acc is None or acc < 0.15 or any(
        l.get("event") == "step" and not (isinstance(l.get("loss"), (int, float)) and math.isfinite(l["loss"]))
        for l in lines)
    cells.setdefault((float(lr), policy), []).append((acc, bad))
print("vgg-fm-bn, 1-1-1-1, SGD momentum 0.9, 3 epochs of 4000 images: final test accuracy (%), mean [min-max] over seeds 0-2")
print()
policies = ["train", "stash", "vertical", "none", "flush"]
print("| lr | " + " | ".join(policies) + " |")
print("|---|" + "---|" * len(policies))
for lr in sorted({lr for lr, _ in cells}):
    row = []
    for p in policies:
        runs = cells.get((lr, p), [])
        accs = [a for a, _ in runs if a is not None]
        text = f"{100 * statistics.mean(accs):.1f} [{100 * min(accs):.1f}-{100 * max(accs):.1f}]" if accs else "-"
        div = sum(b for _, b in runs)
        row.append(text + (f" ({div}/{len(runs)} div.)" if div else ""))
    print(f"| {lr:g} | " + " | ".join(row) + " |")
EOF

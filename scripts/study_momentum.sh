#!/usr/bin/env bash
# A follow-up to scripts/study_staleness.sh: is the collapse of the 4-stage
# pipeline under SGD at lr 0.003, momentum 0.9 a matter of momentum?
# "Asynchrony begets momentum" (Mitliagkas et al. 2016) shows that delayed
# gradients act like extra momentum, so a delayed run with momentum 0.9 is
# over-damped/unstable where a smaller explicit momentum is not. This trades
# explicit momentum for learning rate at a fixed effective step
# lr / (1 - momentum) = 0.03, on the 1-1-1-1 plan of the study, for stash,
# none and one worker, 3 seeds, 5 epochs (final accuracy only).
#
#   scripts/study_momentum.sh [--out DIR] [--study DIR]
#
# --study DIR: the staleness study's outputs (default runs/staleness), whose
# data subset and plan are reused (run scripts/study_staleness.sh first).
# Outputs in DIR (default runs/staleness-momentum): one metrics file per
# run and summary.md. Environment: BUILD_DIR (default build), NICE (15).
set -euo pipefail
cd "$(dirname "$0")/.."

out=runs/staleness-momentum
study=runs/staleness
while [ $# -gt 0 ]; do
  case "$1" in
    --out) out=${2:?--out needs a folder}; shift 2 ;;
    --study) study=${2:?--study needs a folder}; shift 2 ;;
    -h|--help) sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "study_momentum.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
pipedream=${BUILD_DIR:-build}/bin/pipedream
[ -x "$pipedream" ] || { echo "study_momentum.sh: $pipedream not found: build it first with scripts/setup.sh" >&2; exit 2; }
[ -f "$study/sim/1-1-1-1.json" ] && [ -d "$study/data" ] || {
  echo "study_momentum.sh: $study has no plan or data: run scripts/study_staleness.sh first" >&2; exit 2; }
nice=(nice -n "${NICE:-15}")
model=configs/study/mlp16-ln.json
epochs=$(cat "$study/epochs")
mkdir -p "$out"

for lm in "0.003:0.9" "0.015:0.5" "0.03:0"; do
  IFS=: read -r lr momentum <<<"$lm"
  for seed in 0 1 2; do
    for policy in train stash none; do
      f="$out/lr$lr-m$momentum-$policy-seed$seed.jsonl"
      [ -s "$f" ] && continue
      common=(--model "$model" --data fashion-mnist --data-dir "$study/data" --batch 64 --optimizer sgd
              --lr "$lr" --momentum "$momentum" --epochs "$epochs" --seed "$seed" --metrics "$f.part")
      if [ "$policy" = train ]; then
        "${nice[@]}" "$pipedream" train "${common[@]}" --threads 1 >"${f%.jsonl}.log" 2>&1
      else
        "${nice[@]}" "$pipedream" run --reference --plan "$study/sim/1-1-1-1.json" --weights "$policy" "${common[@]}" \
          >"${f%.jsonl}.log" 2>&1
      fi
      mv "$f.part" "$f"
    done
  done
done

/usr/bin/python3 - "$out" <<'EOF' | tee "$out/summary.md"
import glob, json, math, os, re, statistics, sys
out = sys.argv[1]
cells = {}
for f in sorted(glob.glob(os.path.join(out, "*.jsonl"))):
    lr, m, policy, seed = re.match(r"lr(.+)-m(.+)-(train|stash|none)-seed(\d+)\.jsonl", os.path.basename(f)).groups()
    lines = [json.loads(l) for l in open(f) if l.strip()]
    evals = [l for l in lines if l.get("event") == "eval"]
    acc = evals[-1].get("test_accuracy") if evals else None
    bad = any(l.get("event") == "step" and not (isinstance(l.get("loss"), (int, float)) and math.isfinite(l["loss"]))
              for l in lines)
    cells.setdefault((float(m), float(lr), policy), []).append((acc, bad or acc is None or acc < 0.15))
print("1-1-1-1, SGD, effective step lr/(1-momentum) = 0.03: final test accuracy (%), mean [min-max] over seeds")
print()
print("| lr | momentum | policy | final accuracy | diverged |")
print("|---|---|---|---|---|")
order = {"train": 0, "stash": 1, "none": 2}
for (m, lr, policy), runs in sorted(cells.items(), key=lambda kv: (-kv[0][0], order[kv[0][2]])):
    accs = [a for a, _ in runs if a is not None]
    acc = f"{100 * statistics.mean(accs):.1f} [{100 * min(accs):.1f}-{100 * max(accs):.1f}]" if accs else "-"
    print(f"| {lr:g} | {m:g} | {policy} | {acc} | {sum(b for _, b in runs)}/{len(runs)} |")
EOF

#!/usr/bin/env bash
# Imported resnet18 against the zoo's resnet18 and against PyTorch.
# Exports torchvision's resnet18 (10 classes) with scripts/export_torch.py at
# the given image size and batch into a temporary folder, then, --rounds
# times, times the same training step (zero grads, forward, cross-entropy,
# backward, SGD momentum 0.9) in three programs, one process each:
#   imported  pipedream-bench core --model resnet18.onnx
#   zoo       pipedream-bench core --model resnet18 --model-options image_size=S,classes=10
#   torch     bench/torch_peer.py --torchvision resnet18 --input 3,S,S --classes 10
# in the order imported, zoo, torch in even rounds and torch, zoo, imported
# in odd ones (ABC CBA), so that a drift of the machine's speed hits all alike.
# Prints JSON lines: one per round ("round": r; each side's samples/s, the
# ratios and the load average), then the summary:
#   {"model","size","batch","threads","rounds","steps","parameters",
#    "imported_samples_per_s","zoo_samples_per_s","torch_samples_per_s",   (medians over rounds)
#    "ratio_vs_zoo","ratio_vs_torch",                                       (medians of per-round ratios)
#    "ratio_vs_zoo_per_round","ratio_vs_torch_per_round",
#    "imported_best_step_ms","zoo_best_step_ms","torch_best_step_ms",
#    "ratio_best_step_vs_zoo","ratio_best_step_vs_torch",
#    "ratio_cpu_time_vs_zoo","ratio_cpu_time_vs_torch","loadavg_1min","omp_wait_policy"}
# Ratios are imported / other in samples/s (> 1: the imported model is
# faster); best-step and CPU-time ratios are other's time / imported's time,
# as in compare_core.sh (the steadier figures on a loaded machine at
# --threads 1). Exits 1 if the three parameter counts differ.
#
# Usage: bench/onnx_speed.sh [--size S] [--batch B] [--rounds R] [--steps K] [--warmup W]
#                            [--threads N] [--bench PATH] [--python PATH] [--keep DIR]
#                            [--omp-wait-policy PASSIVE|ACTIVE]
#   defaults: --size 64 --batch 32 --rounds 3 --steps 10 --warmup 3 --threads 1;
#   --size a multiple of 32, at least 64 (the zoo's resnet18 has torchvision's ImageNet stem from 64 on);
#   --keep DIR writes the .onnx file and the raw JSON lines there instead of a temporary folder.
set -euo pipefail

size=64 batch=32 rounds=3 steps=10 warmup=3 threads=1 keep=""
wait_policy="${OMP_WAIT_POLICY:-PASSIVE}"
here="$(cd "$(dirname "$0")" && pwd)"
bench="${PIPEDREAM_BENCH:-$here/../build/bin/pipedream-bench}"
python=/usr/bin/python3

while [[ $# -gt 0 ]]; do
  case "$1" in
    --size) size="$2"; shift 2 ;;
    --batch) batch="$2"; shift 2 ;;
    --rounds) rounds="$2"; shift 2 ;;
    --steps) steps="$2"; shift 2 ;;
    --warmup) warmup="$2"; shift 2 ;;
    --threads) threads="$2"; shift 2 ;;
    --bench) bench="$2"; shift 2 ;;
    --python) python="$2"; shift 2 ;;
    --keep) keep="$2"; shift 2 ;;
    --omp-wait-policy) wait_policy="$2"; shift 2 ;;
    -h|--help) sed -n '2,31p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "error: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
for v in size batch rounds steps threads; do
  [[ "${!v}" =~ ^[1-9][0-9]*$ ]] || { echo "error: --$v must be a positive integer" >&2; exit 2; }
done
[[ "$warmup" =~ ^[0-9]+$ ]] || { echo "error: --warmup must be a non-negative integer" >&2; exit 2; }
(( size % 32 == 0 && size >= 64 )) ||
  { echo "error: --size must be a multiple of 32 and at least 64 (below 64 the zoo's resnet18 has a CIFAR stem, not torchvision's)" >&2; exit 2; }
[[ -x "$bench" ]] || { echo "error: $bench not found: build it (cmake --build build --target pipedream-bench)" >&2; exit 2; }
"$python" -c 'import torch, torchvision' 2>/dev/null ||
  { echo "error: $python cannot import torch and torchvision (apt-get install python3-torch python3-torchvision)" >&2; exit 2; }

if [[ -n "$keep" ]]; then
  mkdir -p "$keep"; dir="$keep"
else
  dir="$(mktemp -d)"; trap 'rm -rf "$dir"' EXIT
fi
onnx="$dir/resnet18-${size}-b${batch}.onnx"
results="$dir/rows-${size}-b${batch}.jsonl"
: > "$results"

# Pin both programs' thread pools as compare_core.sh does: Debian's PyTorch
# calls OpenBLAS through libblas.so.3, which otherwise uses every core.
export OMP_NUM_THREADS="$threads" OPENBLAS_NUM_THREADS="$threads" MKL_NUM_THREADS="$threads"
export OMP_WAIT_POLICY="$wait_policy"

"$python" "$here/../scripts/export_torch.py" resnet18 -o "$onnx" --input "3,$size,$size" --classes 10 \
  --batch "$batch" > /dev/null

common=(--threads "$threads" --warmup "$warmup" --steps "$steps" --batch "$batch")
tag() { sed "s/^{/{\"round\":$1,\"side\":\"$2\",\"loadavg_1min\":$3,/"; }
run_side() {  # side round
  local load; load="$(cut -d' ' -f1 /proc/loadavg)"
  case "$1" in
    imported) "$bench" core "${common[@]}" --model "$onnx" ;;
    zoo) "$bench" core "${common[@]}" --model resnet18 --model-options "image_size=$size,classes=10" ;;
    torch) "$python" "$here/torch_peer.py" "${common[@]}" --torchvision resnet18 --input "3,$size,$size" --classes 10 ;;
  esac | tag "$2" "$1" "$load" >> "$results"
}

for ((r = 0; r < rounds; r++)); do
  if (( r % 2 == 0 )); then order=(imported zoo torch); else order=(torch zoo imported); fi
  for side in "${order[@]}"; do run_side "$side" "$r"; done
  "$python" - "$results" "$r" <<'EOF'
import json, sys
rows = {r["side"]: r for r in map(json.loads, open(sys.argv[1])) if r["round"] == int(sys.argv[2])}
i, z, t = rows["imported"], rows["zoo"], rows["torch"]
print(json.dumps({"round": int(sys.argv[2]),
                  "imported_samples_per_s": round(i["samples_per_s"], 2), "zoo_samples_per_s": round(z["samples_per_s"], 2),
                  "torch_samples_per_s": round(t["samples_per_s"], 2),
                  "ratio_vs_zoo": round(i["samples_per_s"] / z["samples_per_s"], 3),
                  "ratio_vs_torch": round(i["samples_per_s"] / t["samples_per_s"], 3),
                  "cpu_ms": [round(x["median_step_cpu_ms"], 1) for x in (i, z, t)],
                  "loadavg_1min": [x["loadavg_1min"] for x in (i, z, t)]}), flush=True)
EOF
done

"$python" - "$results" "$size" "$batch" "$threads" "$steps" "$wait_policy" <<'EOF'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
size, batch, threads, steps = map(int, sys.argv[2:6])
by = {s: {r["round"]: r for r in rows if r["side"] == s} for s in ("imported", "zoo", "torch")}
rounds = sorted(set(by["imported"]) & set(by["zoo"]) & set(by["torch"]))
params = {s: by[s][rounds[0]]["parameters"] for s in by}
status = 0
if len(set(params.values())) != 1:
    print(f"error: parameter counts differ: {params}", file=sys.stderr)
    status = 1
med = lambda xs: statistics.median(list(xs))
sps = {s: med(by[s][k]["samples_per_s"] for k in rounds) for s in by}
vs = {o: [by["imported"][k]["samples_per_s"] / by[o][k]["samples_per_s"] for k in rounds] for o in ("zoo", "torch")}
best = {s: min(by[s][k]["min_step_ms"] for k in rounds) for s in by}
cpu = {o: med(by[o][k]["median_step_cpu_ms"] / by["imported"][k]["median_step_cpu_ms"] for k in rounds)
       for o in ("zoo", "torch")}
print(json.dumps({
    "model": "resnet18", "size": size, "batch": batch, "threads": threads, "rounds": len(rounds), "steps": steps,
    "parameters": params["imported"],
    **{f"{s}_samples_per_s": round(sps[s], 2) for s in by},
    "ratio_vs_zoo": round(med(vs["zoo"]), 3), "ratio_vs_torch": round(med(vs["torch"]), 3),
    "ratio_vs_zoo_per_round": [round(x, 3) for x in vs["zoo"]],
    "ratio_vs_torch_per_round": [round(x, 3) for x in vs["torch"]],
    **{f"{s}_best_step_ms": round(best[s], 2) for s in by},
    "ratio_best_step_vs_zoo": round(best["zoo"] / best["imported"], 3),
    "ratio_best_step_vs_torch": round(best["torch"] / best["imported"], 3),
    "ratio_cpu_time_vs_zoo": round(cpu["zoo"], 3), "ratio_cpu_time_vs_torch": round(cpu["torch"], 3),
    "loadavg_1min": [[by[s][k]["loadavg_1min"] for s in ("imported", "zoo", "torch")] for k in rounds],
    "omp_wait_policy": sys.argv[6]}))
sys.exit(status)
EOF

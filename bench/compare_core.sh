#!/usr/bin/env bash
# Compares `pipedream-bench core` with its PyTorch peer (bench/torch_peer.py)
# at the same thread count. Runs are interleaved - each round runs every
# workload once in each program, alternating which goes first - so that
# load from other processes hits both alike. Prints one JSON line per
# workload:
#   {"workload","threads","pipedream_samples_per_s","torch_samples_per_s","ratio",
#    "ratio_per_round","pipedream_best_step_ms","torch_best_step_ms","ratio_best_step","ratio_cpu_time",
#    "rounds","parameters","loadavg_1min","omp_wait_policy"}
# where the samples/s are medians over rounds and "ratio" is the median of
# the per-round ratios pipedream/torch (> 1: pipedream is faster).
# "ratio_best_step" compares the fastest single step of each program: on a
# machine loaded by other processes it is the steadier estimate, and so is
# "ratio_cpu_time" (torch/pipedream median process CPU time per step) at
# --threads 1; at more threads CPU time also counts threads spinning idle.
#
# Usage: bench/compare_core.sh [--threads N] [--rounds R] [--workloads LIST]
#                              [--warmup W] [--steps K] [--bench PATH] [--python PATH]
#                              [--omp-wait-policy PASSIVE|ACTIVE]   (default PASSIVE, for both)
set -euo pipefail

threads=1 rounds=3 workloads="mlp,cnn,vgg-mini,gpt-mini" warmup=3 steps=10
wait_policy="${OMP_WAIT_POLICY:-PASSIVE}"
here="$(cd "$(dirname "$0")" && pwd)"
bench="${PIPEDREAM_BENCH:-$here/../build/bin/pipedream-bench}"
python=/usr/bin/python3

while [[ $# -gt 0 ]]; do
  case "$1" in
    --threads) threads="$2"; shift 2 ;;
    --rounds) rounds="$2"; shift 2 ;;
    --workloads) workloads="$2"; shift 2 ;;
    --warmup) warmup="$2"; shift 2 ;;
    --steps) steps="$2"; shift 2 ;;
    --bench) bench="$2"; shift 2 ;;
    --python) python="$2"; shift 2 ;;
    --omp-wait-policy) wait_policy="$2"; shift 2 ;;
    -h|--help) sed -n '2,19p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "error: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
[[ -x "$bench" ]] || { echo "error: $bench not found: build it (cmake --build build --target pipedream-bench)" >&2; exit 2; }
"$python" -c 'import torch' 2>/dev/null || { echo "error: $python cannot import torch (apt-get install python3-torch)" >&2; exit 2; }
[[ "$threads" =~ ^[1-9][0-9]*$ ]] || { echo "error: --threads must be a positive integer" >&2; exit 2; }
[[ "$rounds" =~ ^[1-9][0-9]*$ ]] || { echo "error: --rounds must be a positive integer" >&2; exit 2; }

# Both programs use OpenBLAS (PyTorch through libblas.so.3) and OpenMP; pin
# both pools, or OpenBLAS inside torch would use every core whatever
# torch.set_num_threads says.
export OMP_NUM_THREADS="$threads" OPENBLAS_NUM_THREADS="$threads" MKL_NUM_THREADS="$threads"
# pipedream re-executes itself with passive OpenMP waits (spinning OpenMP
# workers starve the OpenBLAS threads); PyTorch mixes OpenMP and OpenBLAS
# too, so both get the same policy.
export OMP_WAIT_POLICY="$wait_policy"

common=(--threads "$threads" --warmup "$warmup" --steps "$steps")
results="$(mktemp)"
trap 'rm -f "$results"' EXIT
IFS=',' read -r -a names <<< "$workloads"
for ((r = 0; r < rounds; r++)); do
  for w in "${names[@]}"; do
    load="$(cut -d' ' -f1 /proc/loadavg)"
    pd() { "$bench" core "${common[@]}" --workloads "$w" | sed "s/^{/{\"round\":$r,\"loadavg_1min\":$load,/"; }
    torch() { "$python" "$here/torch_peer.py" "${common[@]}" --workloads "$w" | sed "s/^{/{\"round\":$r,\"loadavg_1min\":$load,/"; }
    if (( r % 2 == 0 )); then pd; torch; else torch; pd; fi >> "$results"
  done
done

"$python" - "$results" "$threads" "$wait_policy" <<'EOF'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
threads = int(sys.argv[2])
status = 0
for w in dict.fromkeys(r["workload"] for r in rows):
    pd = {r["round"]: r for r in rows if r["workload"] == w and r["suite"] == "core"}
    th = {r["round"]: r for r in rows if r["workload"] == w and r["suite"] == "torch-peer"}
    rounds = sorted(set(pd) & set(th))
    p_params, t_params = pd[rounds[0]]["parameters"], th[rounds[0]]["parameters"]
    if p_params != t_params:
        print(f"error: {w}: parameter counts differ (pipedream {p_params}, torch {t_params})", file=sys.stderr)
        status = 1
    ratios = [pd[k]["samples_per_s"] / th[k]["samples_per_s"] for k in rounds]
    # Fastest step of all rounds: the least disturbed by other processes.
    best_pd = min(pd[k]["min_step_ms"] for k in rounds)
    best_th = min(th[k]["min_step_ms"] for k in rounds)
    print(json.dumps({
        "workload": w, "threads": threads,
        "pipedream_samples_per_s": round(statistics.median(pd[k]["samples_per_s"] for k in rounds), 2),
        "torch_samples_per_s": round(statistics.median(th[k]["samples_per_s"] for k in rounds), 2),
        "ratio": round(statistics.median(ratios), 3),
        "ratio_per_round": [round(x, 3) for x in ratios],
        "pipedream_best_step_ms": round(best_pd, 2), "torch_best_step_ms": round(best_th, 2),
        "ratio_best_step": round(best_th / best_pd, 3),
        "ratio_cpu_time": round(statistics.median(th[k]["median_step_cpu_ms"] / pd[k]["median_step_cpu_ms"]
                                                  for k in rounds), 3), "rounds": len(rounds), "parameters": p_params,
        "loadavg_1min": [pd[k]["loadavg_1min"] for k in rounds], "omp_wait_policy": sys.argv[3]}))
sys.exit(status)
EOF

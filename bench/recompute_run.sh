#!/usr/bin/env bash
# Issue 41's run of the joint choice: gpt-mini planned by `plan --memory
# LIMIT` (recomputation chosen with the partition) on 4 CPU workers of this
# host, run, and compared with `simulate`'s time per minibatch and with the
# plan's peak memory per worker.
#   bench/recompute_run.sh [--out DIR] [--memory 80MB] [--minibatches 20] [--runs 2]
# Profiles gpt-mini at batch 8 (one thread, and four at once to measure what
# the cores share), measures this host's links over the 4 ranks
# (bench-comm, bench/host_measures.sh), plans `--straight --memory LIMIT`,
# runs the plan RUNS times and simulates it with --cores (this host's)
# --threads 1 --contention C. Measured: the steady state (the middle half of
# the minibatches, as simulate's). Prints JSON lines: one per run, one per
# rank (peak memory beyond the data set against the plan's stage), and a
# summary. Environment: BUILD_DIR (default build).
set -euo pipefail
cd "$(dirname "$0")/.."

out=runs/recompute-run
memory=80MB
minibatches=20
runs=2
while [ $# -gt 0 ]; do
  case "$1" in
    --out) out=${2:?}; shift 2 ;;
    --memory) memory=${2:?}; shift 2 ;;
    --minibatches) minibatches=${2:?}; shift 2 ;;
    --runs) runs=${2:?}; shift 2 ;;
    -h|--help) sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "recompute_run.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
pipedream=${BUILD_DIR:-build}/bin/pipedream
[ -x "$pipedream" ] || { echo "recompute_run.sh: $pipedream not found: build first" >&2; exit 2; }
mkdir -p "$out"
cores=$(nproc)
batch=8
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
# shellcheck source=bench/host_measures.sh
. bench/host_measures.sh
trap '[ ${#HOGS[@]} -eq 0 ] || kill "${HOGS[@]}" 2>/dev/null || true' EXIT

mpirun --bind-to none -np 4 "$pipedream" bench-comm --p2p-sizes 64KB,1MB,4MB --allreduce-sizes 4KB,1MB,8MB \
  --latency-iters 50 -o "$out/topology.json" > /dev/null
add_busy_cores_measures "$out/topology.json" "$out" mpirun --bind-to none -np 4 "$pipedream"
c=$(profile_with_contention "$pipedream" "$out" "$cores" "$out/gpt-mini.profile.json" --model gpt-mini --batch "$batch" \
  --warmup 1 --iters 5 --min-time 3)
"$pipedream" plan --profile "$out/gpt-mini.profile.json" --topology "$out/topology.json" --straight --memory "$memory" \
  -o "$out/plan.json" > "$out/plan.txt"
recomputed=$(jq -c '[.stages[] | .recompute_layers // [] | length]' "$out/plan.json")
sim=$("$pipedream" simulate --plan "$out/plan.json" --profile "$out/gpt-mini.profile.json" --minibatches "$minibatches" \
  --cores "$cores" --threads 1 --contention "$c" --json | jq -r --argjson n "$batch" '$n / .throughput_samples_per_s')
measured=()
for ((k = 0; k < runs; ++k)); do
  metrics="$out/run$k.jsonl"
  "$pipedream" run --plan "$out/plan.json" --model gpt-mini --data synthetic --minibatches "$minibatches" --batch "$batch" \
    --no-eval --threads-per-worker 1 --timeout 600 --metrics "$metrics" > "$out/run$k.txt" 2>&1
  t=$(jq -r 'select(.event == "summary") | .steady_time_per_minibatch_s' "$metrics")
  measured+=("$t")
  echo "{\"bench\": \"recompute_run\", \"run\": $k, \"steady_time_per_minibatch_s\": $t, \"simulated_s\": $sim}"
  jq -c --slurpfile plan "$out/plan.json" 'select(.event == "rank") |
    {bench: "recompute_run", run: '"$k"', rank, stage, peak_training_bytes,
     plan_bytes: $plan[0].stages[.stage].memory_bytes,
     ratio: (.peak_training_bytes / $plan[0].stages[.stage].memory_bytes)}' "$metrics"
done
mean=$(printf '%s\n' "${measured[@]}" | awk '{ s += $1 } END { print s / NR }')
echo "{\"bench\": \"recompute_run\", \"memory\": \"$memory\", \"recomputed_layers_per_stage\": $recomputed, \"contention\": $c, \"mean_steady_time_per_minibatch_s\": $mean, \"simulated_s\": $sim, \"ratio\": $(awk -v m="$mean" -v s="$sim" 'BEGIN { printf "%.3f", m / s }')}"

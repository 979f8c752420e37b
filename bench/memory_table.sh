#!/usr/bin/env bash
# Predicted against measured peak memory per worker: cnn and gpt-mini
# (depth 6) on 4 CPU workers under every schedule of the registry, with
# and without activation recomputation (plans made with --recompute none
# and full). Predicted: `simulate --plan P --profile F --json`'s
# predicted_memory_bytes per rank (planner/stage_memory.h's
# worker_memory_bytes over the schedule's replay); measured: `run
# --metrics`'s peak_training_bytes per rank (the allocator's peak less what
# was resident before training). Neither depends on the host's load: a
# message becomes its receiver's tensor when its receive takes it, not
# when it arrives (runtime/comm/README.md); repeated runs differ by a few KB.
#
#   bench/memory_table.sh [--out DIR] [--models cnn,gpt-mini] [--schedules a,b] [--recompute none,full]
#
# Plans are straight, on 4 workers (1f1b-rr, 2bw, gpipe, 1f1b-flush,
# zb-h1, zb-h2) or 8 (interleaved-1f1b with --virtual-stages 2, zb-v,
# dualpipev: two stages per worker). Batch 8: 8 minibatches (1f1b-rr) or
# 3 batches of 4 microbatches (dualpipev: 8, its M >= 2 x workers).
# Prints one JSON object per worker and run, then a Markdown table; DIR
# (default runs/memory-table) keeps profiles, plans and metrics.
# Environment: BUILD_DIR (default build); REUSE_RUNS=1 keeps the runs
# already measured in DIR (their plans unchanged) and predicts again.
set -euo pipefail
cd "$(dirname "$0")/.."

out=runs/memory-table
models="cnn gpt-mini"
schedules="1f1b-rr 2bw gpipe 1f1b-flush zb-h1 zb-h2 interleaved-1f1b zb-v dualpipev"
modes="none full"
while [ $# -gt 0 ]; do
  case "$1" in
    --out) out=${2:?}; shift 2 ;;
    --models) models=${2:?}; models=${models//,/ }; shift 2 ;;
    --schedules) schedules=${2:?}; schedules=${schedules//,/ }; shift 2 ;;
    --recompute) modes=${2:?}; modes=${modes//,/ }; shift 2 ;;
    -h|--help) sed -n '2,23p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "memory_table.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
pipedream=${BUILD_DIR:-build}/bin/pipedream
[ -x "$pipedream" ] || { echo "memory_table.sh: $pipedream not found: build first" >&2; exit 2; }
command -v jq > /dev/null || { echo "memory_table.sh: needs jq" >&2; exit 2; }
mkdir -p "$out"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
batch=8

model_args() {  # name -> model and options
  case "$1" in
    cnn) echo "--model cnn" ;;
    gpt-mini) echo "--model gpt-mini --model-options depth=6" ;;
  esac
}

schedule_args() {  # schedule -> plan workers, then its flags for simulate and run
  case "$1" in
    1f1b-rr) echo "4 --schedule 1f1b-rr --minibatches 8" ;;
    dualpipev) echo "8 --schedule dualpipev --microbatches 8 --minibatches 3" ;;
    interleaved-1f1b) echo "8 --schedule interleaved-1f1b --virtual-stages 2 --microbatches 4 --minibatches 3" ;;
    zb-v) echo "8 --schedule zb-v --microbatches 4 --minibatches 3" ;;
    *) echo "4 --schedule $1 --microbatches 4 --minibatches 3" ;;
  esac
}

mb() { awk -v b="$1" 'BEGIN { printf "%.2f", b / 1e6 }'; }

table="| model | schedule | recompute | rank: measured / predicted MB (diff) | worst |\n|---|---|---|---|---|\n"
rows=0 within=0
for model in $models; do
  profile="$out/$model.profile.json"
  # shellcheck disable=SC2046
  [ -f "$profile" ] || "$pipedream" profile $(model_args "$model") --batch "$batch" --threads 1 -o "$profile" > /dev/null
  for mode in $modes; do
    for w in 4 8; do
      [ -n "${REUSE_RUNS:-}" ] && [ -f "$out/$model.$mode.plan$w.json" ] && continue
      "$pipedream" plan --profile "$profile" --workers "$w" --bandwidth 4 --straight --recompute "$mode" \
        -o "$out/$model.$mode.plan$w.json" > /dev/null
    done
    for schedule in $schedules; do
      read -r w flags <<< "$(schedule_args "$schedule")"
      plan="$out/$model.$mode.plan$w.json"
      sim="$out/$model.$mode.$schedule.sim.json"
      metrics="$out/$model.$mode.$schedule.jsonl"
      # shellcheck disable=SC2086
      "$pipedream" simulate --plan "$plan" --profile "$profile" $flags --json > "$sim"
      if [ -z "${REUSE_RUNS:-}" ] || [ ! -s "$metrics" ]; then
        rm -f "$metrics"
        # shellcheck disable=SC2046,SC2086
        "$pipedream" run --plan "$plan" $(model_args "$model") --data synthetic $flags --batch "$batch" --no-eval \
          --threads-per-worker 1 --timeout 600 --metrics "$metrics" > "$metrics.log" 2>&1
      fi
      cells="" worst=0
      for rank in $(jq -r '.workers[].rank' "$sim"); do
        predicted=$(jq -r --argjson r "$rank" '.workers[] | select(.rank == $r) | .predicted_memory_bytes' "$sim")
        measured=$(jq -r --argjson r "$rank" 'select(.event == "rank" and .rank == $r) | .peak_training_bytes' "$metrics")
        diff=$(awk -v m="$measured" -v p="$predicted" 'BEGIN { printf "%.1f", 100 * (m / p - 1) }')
        echo "{\"bench\": \"memory_table\", \"model\": \"$model\", \"schedule\": \"$schedule\", \"recompute\": \"$mode\", \"rank\": $rank, \"measured_bytes\": $measured, \"predicted_bytes\": $predicted, \"diff_percent\": $diff}"
        cells+="${cells:+, }$rank: $(mb "$measured") / $(mb "$predicted") (${diff}%)"
        worst=$(awk -v a="$worst" -v d="$diff" 'BEGIN { d = d < 0 ? -d : d; print (d > a ? d : a) }')
      done
      rows=$((rows + 1))
      awk -v d="$worst" 'BEGIN { exit !(d <= 10) }' && within=$((within + 1))
      table+="| $model | $schedule | $mode | $cells | ${worst}% |\n"
    done
  done
done
printf "%b" "$table"
echo "$within of $rows rows within 10% on every worker"

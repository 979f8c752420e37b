#!/usr/bin/env bash
# Shared cores (issue 15): does `pipedream simulate --cores` predict a
# 4-worker `pipedream run` on this machine, whose workers share its cores?
#   bench/shared_cores.sh [--out DIR] [--rounds N] [--models "cnn gpt-mini"] [--quiet-wait S]
# Per model: profile at the whole batch (M = 8 microbatches x b, one thread),
# plan a straight pipeline on 4 workers, then run 1f1b-rr (minibatches of
# M x b) and 1f1b-flush (M microbatches of b) alternated ABBA, N rounds
# (default 2); each next to `simulate` without --cores (every worker its
# own device) and with --cores $(nproc) --threads 1.
# On a shared host other programs take cores the model gives the workers:
# before the profile and every run the script waits (up to S seconds,
# default 300) until other programs keep less than 0.25 of a core busy over
# a second, and records what they took during the run (/proc/stat's busy
# time less the run's own CPU, in cores). It also records the CPU the
# workers' communication threads (pd-comm) used against their compute
# threads. Prints JSON lines (one per run, one per model and schedule with
# medians over the runs whose others' load stayed below 0.25 core, or all
# runs if none did) and a Markdown table. DIR (default runs/shared-cores)
# keeps profiles, plans, metrics. Environment: BUILD_DIR (default build).
set -euo pipefail
cd "$(dirname "$0")/.."

out=runs/shared-cores
rounds=2
models="cnn gpt-mini"
quiet_wait=300
while [ $# -gt 0 ]; do
  case "$1" in
    --out) out=${2:?}; shift 2 ;;
    --rounds) rounds=${2:?}; shift 2 ;;
    --models) models=${2:?}; shift 2 ;;
    --quiet-wait) quiet_wait=${2:?}; shift 2 ;;
    -h|--help) sed -n '2,19p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "shared_cores.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
pipedream=${BUILD_DIR:-build}/bin/pipedream
[ -x "$pipedream" ] || { echo "shared_cores.sh: $pipedream not found: build first" >&2; exit 2; }
command -v jq > /dev/null || { echo "shared_cores.sh: needs jq" >&2; exit 2; }
mkdir -p "$out"
export OMPI_MCA_rmaps_base_oversubscribe=1  # more workers than cores is the point
if [ "$(id -u)" = 0 ]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi
M=8
workers=4
cores=$(nproc)
hz=$(getconf CLK_TCK)
quiet=0.25  # cores other programs may keep busy for a run to count as quiet

model_args() {
  case "$1" in
    cnn) echo "--model cnn" ;;
    gpt-mini) echo "--model gpt-mini --model-options depth=6" ;;
  esac
}
micro() { case "$1" in cnn) echo 16 ;; gpt-mini) echo 2 ;; esac; }
# Steps per run: 1f1b-rr minibatches (enough that fill and drain are a few
# percent of the run), 1f1b-flush batches.
rr_steps() { case "$1" in cnn) echo 48 ;; gpt-mini) echo 24 ;; esac; }
flush_steps=12

median() { sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
busy_jiffies() { awk '/^cpu / { print $2 + $3 + $4 + $7 + $8 + $9 }' /proc/stat; }
# Cores other programs kept busy over the last second (nothing of ours runs).
others_now() {
  local before after
  before=$(busy_jiffies)
  sleep 1
  after=$(busy_jiffies)
  awk -v b="$before" -v a="$after" -v hz="$hz" 'BEGIN { printf "%.2f", (a - b) / hz }'
}
wait_for_quiet() {
  local waited=0 load
  while :; do
    load=$(others_now)
    if awk -v l="$load" -v q="$quiet" 'BEGIN { exit !(l < q) }' || [ "$waited" -ge "$quiet_wait" ]; then break; fi
    waited=$((waited + 1))
  done
  echo "$waited"
}
# Every 0.2 s until killed: the workers' threads' CPU ticks so far (thread,
# name, ticks); the last line per thread is its total.
sample_worker_threads() {
  while :; do
    awk '$2 == "(pd-comm)" || $2 == "(pipedream)" { print FILENAME, $2, $14 + $15 }' \
      /proc/[0-9]*/task/[0-9]*/stat 2> /dev/null || true
    sleep 0.2
  done
}

schedule_flags() {  # model schedule -> run flags
  local b
  b=$(micro "$1")
  case "$2" in
    1f1b-rr) echo "--batch $((M * b)) --minibatches $(rr_steps "$1")" ;;
    1f1b-flush) echo "--schedule 1f1b-flush --microbatches $M --batch $b --minibatches $flush_steps" ;;
  esac
}
simulate_flags() {
  case "$1" in
    1f1b-rr) echo "--schedule 1f1b-rr" ;;
    1f1b-flush) echo "--schedule 1f1b-flush --microbatches $M" ;;
  esac
}

table="| model | schedule | measured samples/s (quiet runs; all runs) | others' cores during them | simulated, own devices | measured / own devices | simulated, ${cores} shared cores | measured / shared cores |\n|---|---|---|---|---|---|---|---|\n"
for model in $models; do
  b=$(micro "$model")
  waited=$(wait_for_quiet)
  before=$(busy_jiffies)
  start=$(date +%s.%N)
  # shellcheck disable=SC2046
  /usr/bin/time -f "%U %S" -o "$out/$model.profile.cpu" "$pipedream" profile $(model_args "$model") \
    --batch $((M * b)) --threads 1 --warmup 1 --iters 5 --min-time 3 -o "$out/$model.profile.json" > /dev/null 2>&1
  wall=$(echo "$(date +%s.%N) - $start" | bc -l)
  own=$(awk '{ print $1 + $2 }' "$out/$model.profile.cpu")
  load=$(awk -v b="$before" -v a="$(busy_jiffies)" -v hz="$hz" -v own="$own" -v w="$wall" \
    'BEGIN { x = ((a - b) / hz - own) / w; printf "%.2f", x < 0 ? 0 : x }')
  echo "{\"bench\": \"shared_cores\", \"model\": \"$model\", \"step\": \"profile\", \"waited_s\": $waited, \"other_load_cores\": $load}"
  "$pipedream" plan --profile "$out/$model.profile.json" --workers "$workers" --straight --bandwidth 10 \
    -o "$out/$model.plan.json" > /dev/null
  rm -f "$out/$model".*.runs
  order=""
  for ((i = 0; i < rounds; ++i)); do order+=" 1f1b-rr 1f1b-flush 1f1b-flush 1f1b-rr"; done
  for schedule in $order; do
    metrics="$out/$model.$schedule.$RANDOM.jsonl"
    waited=$(wait_for_quiet)
    sample_worker_threads > "$metrics.threads" &
    sampler=$!
    before=$(busy_jiffies)
    start=$(date +%s.%N)
    # shellcheck disable=SC2046
    /usr/bin/time -f "%U %S" -o "$metrics.cpu" "$pipedream" run --plan "$out/$model.plan.json" $(model_args "$model") \
      --data synthetic $(schedule_flags "$model" "$schedule") --no-eval --threads-per-worker 1 --timeout 300 \
      --metrics "$metrics" > /dev/null 2> "$metrics.log"
    wall=$(echo "$(date +%s.%N) - $start" | bc -l)
    after=$(busy_jiffies)
    kill "$sampler"
    wait "$sampler" 2> /dev/null || true
    own=$(awk '{ print $1 + $2 }' "$metrics.cpu")
    # Cores other programs kept busy during the run (never below 0: the
    # jiffy counts are coarse).
    load=$(awk -v b="$before" -v a="$after" -v hz="$hz" -v own="$own" -v w="$wall" \
      'BEGIN { x = ((a - b) / hz - own) / w; printf "%.2f", x < 0 ? 0 : x }')
    read -r compute_cpu comm_cpu < <(awk -v hz="$hz" '{ t[$1] = $3; n[$1] = $2 }
      END { for (k in t) s[n[k]] += t[k]; printf "%.2f %.2f\n", s["(pipedream)"] / hz, s["(pd-comm)"] / hz }' \
      "$metrics.threads")
    sps=$(jq -r 'select(.event == "summary") | .samples_per_s' "$metrics")
    echo "{\"bench\": \"shared_cores\", \"model\": \"$model\", \"schedule\": \"$schedule\", \"samples_per_s\": $sps, \"wall_s\": $wall, \"waited_s\": $waited, \"other_load_cores\": $load, \"compute_threads_cpu_s\": $compute_cpu, \"comm_threads_cpu_s\": $comm_cpu}"
    echo "$sps $load" >> "$out/$model.$schedule.runs"
  done
  for schedule in 1f1b-rr 1f1b-flush; do
    # shellcheck disable=SC2046
    own_devices=$("$pipedream" simulate --plan "$out/$model.plan.json" --profile "$out/$model.profile.json" \
      $(simulate_flags "$schedule") --json | jq -r '.throughput_samples_per_s')
    # shellcheck disable=SC2046
    shared=$("$pipedream" simulate --plan "$out/$model.plan.json" --profile "$out/$model.profile.json" \
      $(simulate_flags "$schedule") --cores "$cores" --threads 1 --json | jq -r '.throughput_samples_per_s')
    runs="$out/$model.$schedule.runs"
    quiet_runs=$(awk -v q="$quiet" '$2 < q { print $1 }' "$runs")
    [ -n "$quiet_runs" ] || quiet_runs=$(awk '{ print $1 }' "$runs")
    med=$(median <<< "$quiet_runs")
    load=$(awk '{ print $2 }' "$runs" | paste -sd' ')
    r_own=$(awk -v m="$med" -v s="$own_devices" 'BEGIN { printf "%.2f", m / s }')
    r_shared=$(awk -v m="$med" -v s="$shared" 'BEGIN { printf "%.2f", m / s }')
    echo "{\"bench\": \"shared_cores\", \"model\": \"$model\", \"schedule\": \"$schedule\", \"cores\": $cores, \"median_samples_per_s\": $med, \"quiet_runs\": $(wc -l <<< "$quiet_runs"), \"simulated_own_devices_samples_per_s\": $own_devices, \"simulated_shared_cores_samples_per_s\": $shared, \"measured_over_own_devices\": $r_own, \"measured_over_shared_cores\": $r_shared}"
    all=$(awk '{ printf "%.0f ", $1 }' "$runs")
    quiet_list=$(for x in $quiet_runs; do printf '%.0f ' "$x"; done)
    table+="| $model | $schedule | $(printf '%.0f' "$med") (${quiet_list% }; ${all% }) | $load | $(printf '%.0f' "$own_devices") | $r_own | $(printf '%.0f' "$shared") | $r_shared |\n"
  done
done
printf "%b" "$table"

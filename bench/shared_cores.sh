#!/usr/bin/env bash
# Shared cores: does `pipedream simulate --cores` predict a
# 4-worker `pipedream run` on this machine, whose workers share its cores?
#   bench/shared_cores.sh [--out DIR] [--rounds N] [--models "cnn gpt-mini"] [--quiet-wait S]
# Models: cnn, gpt-mini (zoo), resnet18-onnx (torchvision resnet18, 64x64),
# gpt-onnx (scripts/torch_models/gpt_decoder.py, 4 blocks of width 128, 64
# tokens), the last two exported to ONNX with scripts/export_torch.py.
# Each round also runs as many profiles side by side as the runs have
# workers (4): their step, scaled by their share of the cores (nproc / 4),
# against the profile's is the contention passed to `simulate --contention`
# - what sharing the cores costs beyond the share itself (memory bandwidth,
# caches refilled after every time slice).
# Per model and round (N rounds, default 3), the user's whole path: profile
# at the whole batch (M = 8 microbatches x b, one thread; and at b, for the
# flush schedule's microbatches: profile --microbatches M), plan a straight
# pipeline on 4 workers, run 1f1b-rr (minibatches of M x b) and 1f1b-flush
# (M microbatches of b) in the order ABBA, and simulate each schedule on
# that round's plan without --cores (every worker its own device) and with
# --cores $(nproc) --threads 1; each run is also compared in its steady
# state: its `steady_samples_per_s` (the middle half of its steps) against
# the replay's throughput over the middle half of the replay, which leaves
# out fill, drain and the one-time costs of a run's first steps (first
# touch of every buffer, MPI's connection set-up). Profiling every round keeps profile and
# runs close in time on a host whose speed drifts; ratios are per run
# against its round's prediction.
# A shared host's other programs take cores the model gives the workers
# (and with the kernel's autogroups, nice does not keep them out), so
# before each profile and run the script waits, up to S seconds (default
# 600), until other programs keep at most 0.3 cores busy over 2 s, and
# records the cores they kept busy during it (/proc/stat's busy time less
# its own CPU); only runs (and rounds whose profile and contention runs)
# stayed below 0.3 count as quiet. For every run it also simulates with the cores others left:
# --cores max(nproc - L, nproc / 2), L the cores they kept busy in the 2 s
# before it (the kernel shares the cores fairly between sessions, so one
# other busy session leaves this one at least half), and records the CPU
# the workers' communication threads (pd-comm) used against their compute
# threads.
# Prints JSON lines (one per run, one per model and schedule with medians
# over quiet runs, or over all if none was quiet) and a Markdown table. DIR
# (default runs/shared-cores) keeps profiles, plans, metrics. Environment:
# BUILD_DIR (default build).
set -euo pipefail
cd "$(dirname "$0")/.."

out=runs/shared-cores
rounds=3
models="cnn gpt-mini"
quiet_wait=600
while [ $# -gt 0 ]; do
  case "$1" in
    --out) out=${2:?}; shift 2 ;;
    --rounds) rounds=${2:?}; shift 2 ;;
    --models) models=${2:?}; shift 2 ;;
    --quiet-wait) quiet_wait=${2:?}; shift 2 ;;
    -h|--help) sed -n '2,40p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
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

# Models: zoo ones, and PyTorch models exported to ONNX here (the user's
# whole path: export_torch.py, then profile, plan, run, simulate; their
# profiles are per unit and their plans cut on antichains).
model_args() {
  case "$1" in
    cnn) echo "--model cnn" ;;
    gpt-mini) echo "--model gpt-mini --model-options depth=6" ;;
    resnet18-onnx | gpt-onnx) echo "--model $out/$1.onnx" ;;
  esac
}
export_onnx() {
  case "$1" in
    resnet18-onnx) scripts/export_torch.py resnet18 -o "$out/$1.onnx" --input 3,64,64 --classes 10 ;;
    gpt-onnx) scripts/export_torch.py scripts/torch_models/gpt_decoder.py:GPTDecoder -o "$out/$1.onnx" --tokens 64 \
      --kwargs '{"vocab": 256, "dim": 128, "heads": 4, "layers": 4, "context": 64}' ;;
    *) return 0 ;;
  esac > /dev/null
}
micro() { case "$1" in cnn) echo 16 ;; gpt-mini | gpt-onnx) echo 2 ;; resnet18-onnx) echo 4 ;; esac; }
# Steps per run: 1f1b-rr minibatches (enough that fill and drain are a few
# percent of the run), 1f1b-flush batches.
rr_steps() { case "$1" in cnn) echo 48 ;; gpt-mini | gpt-onnx | resnet18-onnx) echo 24 ;; esac; }
flush_steps=12

median() { sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
busy_jiffies() { awk '/^cpu / { print $2 + $3 + $4 + $7 + $8 + $9 }' /proc/stat; }
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
    1f1b-flush) echo "--schedule 1f1b-flush --microbatches $M --batch $((M * b)) --minibatches $flush_steps" ;;
  esac
}
# The run's schedule and length: simulate replays as many steps as the run
# trains, and its throughput below is steps x samples / makespan, as the
# run's is (fill and drain included).
simulate_flags() {  # model schedule
  case "$2" in
    1f1b-rr) echo "--schedule 1f1b-rr --minibatches $(rr_steps "$1")" ;;
    1f1b-flush) echo "--schedule 1f1b-flush --microbatches $M --minibatches $flush_steps" ;;
  esac
}
steps_of() { case "$2" in 1f1b-rr) rr_steps "$1" ;; 1f1b-flush) echo "$flush_steps" ;; esac; }
# simulate's --json report -> samples/s over the whole replay.
run_throughput() { jq -r --argjson n "$1" '$n / .makespan_s'; }

# A command's CPU and the cores other programs kept busy while it ran
# (never below 0: the jiffy counts are coarse). Sets own_cpu and load.
timed() {
  local cpu_file=$1 before start wall
  shift
  before=$(busy_jiffies)
  start=$(date +%s.%N)
  /usr/bin/time -f "%U %S" -o "$cpu_file" "$@"
  wall=$(echo "$(date +%s.%N) - $start" | bc -l)
  own_cpu=$(awk '{ print $1 + $2 }' "$cpu_file")
  load=$(awk -v b="$before" -v a="$(busy_jiffies)" -v hz="$hz" -v own="$own_cpu" -v w="$wall" \
    'BEGIN { x = ((a - b) / hz - own) / w; printf "%.2f", x < 0 ? 0 : x }')
}
quiet=0.3  # cores other programs may keep busy for a run to count as quiet
is_quiet() { awk -v l="$1" -v q="$quiet" 'BEGIN { exit !(l < q) }'; }
# Waits until other programs keep less than $quiet cores busy over 2 s (or
# $quiet_wait seconds have passed); prints the seconds waited and the cores
# they kept busy in the last 2 s (what they want when nothing of ours runs).
wait_for_quiet() {
  local waited=0 before after load
  while :; do
    before=$(busy_jiffies)
    sleep 2
    after=$(busy_jiffies)
    load=$(awk -v b="$before" -v a="$after" -v hz="$hz" 'BEGIN { printf "%.2f", (a - b) / hz / 2 }')
    if is_quiet "$load" || [ "$waited" -ge "$quiet_wait" ]; then break; fi
    waited=$((waited + 2))
  done
  echo "$waited $load"
}
ratio() { awk -v m="$1" -v s="$2" 'BEGIN { printf "%.3f", m / s }'; }

table="| model | schedule | quiet runs / runs | measured samples/s, median (runs) | others' busy cores (runs) | simulated, own devices (rounds) | measured / own devices, median (runs) | simulated, ${cores} shared cores (rounds) | measured / shared cores, median (runs) | measured / cores others left, median of all runs (runs) | simulated, ${cores} shared cores + contention (rounds) | measured / that, median (runs) | simulated steady state, ${cores} shared cores (rounds) | steady state: measured / simulated, median (runs) | simulated steady state + contention (rounds) | steady state: measured / that, median (runs) |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n"
for model in $models; do
  [ -n "$(model_args "$model")" ] || { echo "shared_cores.sh: unknown model '$model'" >&2; exit 2; }
  export_onnx "$model"
  b=$(micro "$model")
  rm -f "$out/$model".*.runs "$out/$model".*.runs.counted "$out/$model".*.sims
  for ((round = 0; round < rounds; ++round)); do
    profile="$out/$model.$round.profile.json"
    plan="$out/$model.$round.plan.json"
    read -r waited load_before < <(wait_for_quiet)
    # shellcheck disable=SC2046
    # --microbatches: the flush runs' microbatches of b cost what they cost at b, not 1/M of the batch's.
    timed "$profile.cpu" "$pipedream" profile $(model_args "$model") --batch $((M * b)) --microbatches "$M" --threads 1 \
      --warmup 1 --iters 5 --min-time 3 -o "$profile" > /dev/null 2>&1
    echo "{\"bench\": \"shared_cores\", \"model\": \"$model\", \"round\": $round, \"step\": \"profile\", \"waited_s\": $waited, \"other_load_before_cores\": $load_before, \"other_load_cores\": $load}"
    profile_load=$load
    # What the cores share besides themselves: the profiled step run by as
    # many processes as the runs have workers, each getting its share of the
    # cores, against the profile's (simulate --contention).
    # Others' programs would pass for contention: wait for quiet, record their load.
    read -r corun_waited _ < <(wait_for_quiet)
    # shellcheck disable=SC2016
    timed "$out/$model.$round.corun.cpu" bash -c 'for ((k = 0; k < $1; ++k)); do
        "$2" profile $3 --batch "$4" --threads 1 --warmup 1 --iters 5 --min-time 3 -o "$5.corun$k.json" > /dev/null 2>&1 &
      done; wait' _ "$workers" "$pipedream" "$(model_args "$model")" $((M * b)) "$out/$model.$round"
    corun_load=$load
    share=$(awk -v c="$cores" -v w="$workers" 'BEGIN { print (w > c) ? c / w : 1 }')
    contention=$(jq -n --slurpfile c <(cat "$out/$model.$round".corun*.json) --slurpfile p "$profile" --argjson share "$share" \
      '(($c | map(.step_forward_backward_ms) | add / length) * $share / $p[0].step_forward_backward_ms - 1)
       | if . < 0 then 0 else . end')
    echo "{\"bench\": \"shared_cores\", \"model\": \"$model\", \"round\": $round, \"step\": \"contention\", \"contention\": $contention, \"waited_s\": $corun_waited, \"other_load_cores\": $corun_load}"
    "$pipedream" plan --profile "$profile" --workers "$workers" --straight --bandwidth 10 -o "$plan" > /dev/null
    declare -A own_devices shared contended shared_steady contended_steady
    for schedule in 1f1b-rr 1f1b-flush; do
      samples=$(( $(steps_of "$model" "$schedule") * M * b ))
      # shellcheck disable=SC2046
      own_devices[$schedule]=$("$pipedream" simulate --plan "$plan" --profile "$profile" $(simulate_flags "$model" "$schedule") \
        --json | run_throughput "$samples")
      # shellcheck disable=SC2046
      "$pipedream" simulate --plan "$plan" --profile "$profile" $(simulate_flags "$model" "$schedule") \
        --cores "$cores" --threads 1 --json > "$out/$model.$round.$schedule.shared.json"
      shared[$schedule]=$(run_throughput "$samples" < "$out/$model.$round.$schedule.shared.json")
      # Its steady state: the middle half of the replay (the run reports the same window).
      shared_steady[$schedule]=$(jq -r '.throughput_samples_per_s' "$out/$model.$round.$schedule.shared.json")
      # shellcheck disable=SC2046
      "$pipedream" simulate --plan "$plan" --profile "$profile" $(simulate_flags "$model" "$schedule") \
        --cores "$cores" --threads 1 --contention "$contention" --json > "$out/$model.$round.$schedule.contended.json"
      contended[$schedule]=$(run_throughput "$samples" < "$out/$model.$round.$schedule.contended.json")
      contended_steady[$schedule]=$(jq -r '.throughput_samples_per_s' "$out/$model.$round.$schedule.contended.json")
      echo "${own_devices[$schedule]} ${shared[$schedule]} ${contended[$schedule]} ${shared_steady[$schedule]}" \
        "${contended_steady[$schedule]}" >> "$out/$model.$schedule.sims"
    done
    for schedule in 1f1b-rr 1f1b-flush 1f1b-flush 1f1b-rr; do
      metrics="$out/$model.$round.$schedule.$RANDOM.jsonl"
      read -r waited load_before < <(wait_for_quiet)
      sample_worker_threads > "$metrics.threads" &
      sampler=$!
      # shellcheck disable=SC2046
      timed "$metrics.cpu" "$pipedream" run --plan "$plan" $(model_args "$model") --data synthetic \
        $(schedule_flags "$model" "$schedule") --no-eval --threads-per-worker 1 --timeout 300 --metrics "$metrics" \
        > /dev/null 2> "$metrics.log"
      kill "$sampler"
      wait "$sampler" 2> /dev/null || true
      read -r compute_cpu comm_cpu < <(awk -v hz="$hz" '{ t[$1] = $3; n[$1] = $2 }
        END { for (k in t) s[n[k]] += t[k]; printf "%.2f %.2f\n", s["(pipedream)"] / hz, s["(pd-comm)"] / hz }' \
        "$metrics.threads")
      sps=$(jq -r 'select(.event == "summary") | .samples_per_s' "$metrics")
      steady=$(jq -r 'select(.event == "summary") | .steady_samples_per_s' "$metrics")
      r_steady=$(ratio "$steady" "${shared_steady[$schedule]}")
      r_steady_contended=$(ratio "$steady" "${contended_steady[$schedule]}")
      r_own=$(ratio "$sps" "${own_devices[$schedule]}")
      r_shared=$(ratio "$sps" "${shared[$schedule]}")
      r_contended=$(ratio "$sps" "${contended[$schedule]}")
      samples=$(( $(steps_of "$model" "$schedule") * M * b ))
      # What the cores others left would give: nproc less the cores they
      # kept busy just before the run, but at least half the cores (autogroup
      # fair share against one other busy session).
      cores_left=$(awk -v c="$cores" -v l="$load_before" 'BEGIN { print (c - l < c / 2) ? c / 2 : c - l }')
      # shellcheck disable=SC2046
      left=$("$pipedream" simulate --plan "$plan" --profile "$profile" $(simulate_flags "$model" "$schedule") \
        --cores "$cores_left" --threads 1 --json |
        run_throughput "$samples")
      r_left=$(ratio "$sps" "$left")
      quiet_run=false
      if is_quiet "$load" && is_quiet "$profile_load" && is_quiet "$corun_load"; then quiet_run=true; fi
      echo "{\"bench\": \"shared_cores\", \"model\": \"$model\", \"round\": $round, \"schedule\": \"$schedule\", \"samples_per_s\": $sps, \"simulated_own_devices_samples_per_s\": ${own_devices[$schedule]}, \"simulated_shared_cores_samples_per_s\": ${shared[$schedule]}, \"measured_over_own_devices\": $r_own, \"measured_over_shared_cores\": $r_shared, \"contention\": $contention, \"simulated_contended_samples_per_s\": ${contended[$schedule]}, \"measured_over_contended\": $r_contended, \"simulated_cores_left_samples_per_s\": $left, \"measured_over_cores_left\": $r_left, \"quiet\": $quiet_run, \"waited_s\": $waited, \"other_load_before_cores\": $load_before, \"cores_left\": $cores_left, \"other_load_cores\": $load, \"compute_threads_cpu_s\": $compute_cpu, \"comm_threads_cpu_s\": $comm_cpu, \"steady_samples_per_s\": $steady, \"simulated_shared_cores_steady_samples_per_s\": ${shared_steady[$schedule]}, \"steady_measured_over_shared_cores\": $r_steady, \"simulated_contended_steady_samples_per_s\": ${contended_steady[$schedule]}, \"steady_measured_over_contended\": $r_steady_contended}"
      echo "$sps $load $r_own $r_shared $r_left $r_contended $r_steady $r_steady_contended $quiet_run" >> "$out/$model.$schedule.runs"
    done
  done
  for schedule in 1f1b-rr 1f1b-flush; do
    runs="$out/$model.$schedule.runs"
    sims="$out/$model.$schedule.sims"
    # Medians over the quiet runs, or over all when none was quiet.
    if grep -q ' true$' "$runs"; then grep ' true$' "$runs" > "$runs.counted"; else cp "$runs" "$runs.counted"; fi
    counted=$(wc -l < "$runs.counted")
    med=$(awk '{ print $1 }' "$runs.counted" | median)
    med_own=$(awk '{ print $3 }' "$runs.counted" | median)
    med_shared=$(awk '{ print $4 }' "$runs.counted" | median)
    med_left=$(awk '{ print $5 }' "$runs" | median)
    med_contended=$(awk '{ print $6 }' "$runs.counted" | median)
    med_steady=$(awk '{ print $7 }' "$runs.counted" | median)
    med_steady_contended=$(awk '{ print $8 }' "$runs.counted" | median)
    echo "{\"bench\": \"shared_cores\", \"model\": \"$model\", \"schedule\": \"$schedule\", \"cores\": $cores, \"runs\": $(wc -l < "$runs"), \"quiet_runs\": $(grep -c ' true$' "$runs" || true), \"counted_runs\": $counted, \"median_samples_per_s\": $med, \"median_measured_over_own_devices\": $med_own, \"median_measured_over_shared_cores\": $med_shared, \"median_measured_over_cores_left_all_runs\": $med_left, \"median_measured_over_contended\": $med_contended, \"median_steady_measured_over_shared_cores\": $med_steady, \"median_steady_measured_over_contended\": $med_steady_contended}"
    col() { awk -v c="$2" -v f="$3" '{ printf "%s" f, (NR > 1 ? " " : ""), $c }' "$1"; }
    table+="| $model | $schedule | $(grep -c ' true$' "$runs" || true) / $(wc -l < "$runs") | $(printf '%.0f' "$med") ($(col "$runs.counted" 1 %.0f)) | $(col "$runs" 2 %s) | $(col "$sims" 1 %.0f) | $(printf '%.2f' "$med_own") ($(col "$runs.counted" 3 %.2f)) | $(col "$sims" 2 %.0f) | $(printf '%.2f' "$med_shared") ($(col "$runs.counted" 4 %.2f)) | $(printf '%.2f' "$med_left") ($(col "$runs" 5 %.2f)) | $(col "$sims" 3 %.0f) | $(printf '%.2f' "$med_contended") ($(col "$runs.counted" 6 %.2f)) | $(col "$sims" 4 %.0f) | $(printf '%.2f' "$med_steady") ($(col "$runs.counted" 7 %.2f)) | $(col "$sims" 5 %.0f) | $(printf '%.2f' "$med_steady_contended") ($(col "$runs.counted" 8 %.2f)) |\n"
  done
done
printf "%b" "$table"

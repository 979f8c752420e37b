#!/usr/bin/env bash
# Measured against simulated: cnn and gpt-mini on
# 4 CPU workers (mpirun through `pipedream run`, one compute thread each)
# with 1f1b-flush, interleaved-1f1b (v = 2), zb-h1, zb-h2, zb-v and dualpipev
# at the same batch and microbatch count, runs alternated (each order, then
# the reverse, then the order again: --rounds, default 3) and their median
# taken; next to `pipedream simulate`'s prediction on the profiled plans.
#   bench/schedules_measured.sh [--out DIR] [--steps N] [--rounds R] [--workers P] [--models cnn,gpt-mini]
# --workers P (default 4) plans P stages on P workers and 2P on P for the
# interleaved and V schedules; --workers 2 on this 2-core host is the
# control where no core is shared.
# Profiles each model once at the whole batch and at its microbatch (profile
# --microbatches M: the simulator costs a microbatch as measured, not as
# 1/M of the batch), measures this host's links (bench-comm over the 4
# ranks: bandwidth, latency, the communication threads' CPU with the cores
# kept busy) and what the cores share (--contention: 4 profiles at once),
# plans it straight on 4 workers (1f1b-flush, zb-h1, zb-h2) and on 8
# (interleaved: stage k on worker k mod 4; zb-v, dualpipev: stages w and 7 - w
# on worker w) over that topology, then runs. Measured: the
# steady state (the middle half of the steps, as simulate's); predicted:
# simulate --cores (this host's) --threads 1 --contention C
# --realistic-latency (messages wait for a time slice while the cores are
# all taken: latency_busy_us).
# The host's speed drifts 10-20% in phases of seconds to minutes, between
# the profile and a run as much as between runs. So each run is also
# traced, and its speed taken from its own actions: the CPU seconds its
# ranks' F, B, W and steps took per minibatch (mean over the minibatches
# of its steady window) over what the profile says they take (the plan's stages at the
# microbatch, times M, plus the optimizer). Dividing the profile's times
# by that and replaying it (without --contention: the run's CPU has it)
# predicts the run at the speed it ran: every timing but the compute's own
# speed - bubbles, sharing of the cores, messages, wake-ups - stays the
# replay's. Both ratios are printed.
# Prints JSON lines (one per run, then one per model and schedule with the
# medians), a Markdown table, a line counting the rows within 10%
# of the prediction (ratios to three places, so 0.897 is not read as 0.90)
# and a last line naming the rows whose runs' median compute was more than
# 10% off the profile's (the host not quiet: compare those at the runs'
# speed); DIR (default runs/schedules-measured) keeps
# profiles, plans, metrics and traces. Environment: BUILD_DIR (default build).
set -euo pipefail
cd "$(dirname "$0")/.."

out=runs/schedules-measured
steps=32
rounds=3
workers=4
models="cnn gpt-mini"
while [ $# -gt 0 ]; do
  case "$1" in
    --out) out=${2:?}; shift 2 ;;
    --steps) steps=${2:?}; shift 2 ;;
    --rounds) rounds=${2:?}; shift 2 ;;
    --workers) workers=${2:?}; shift 2 ;;
    --models) models=${2:?}; models=${models//,/ }; shift 2 ;;
    -h|--help) sed -n '2,24p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "schedules_measured.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
[[ "$rounds" =~ ^[1-9][0-9]*$ ]] || { echo "schedules_measured.sh: --rounds must be a positive integer, got '$rounds'" >&2; exit 2; }
[[ "$workers" =~ ^[1-9][0-9]*$ ]] && ((workers >= 2)) ||
  { echo "schedules_measured.sh: --workers must be an integer >= 2, got '$workers'" >&2; exit 2; }
pipedream=${BUILD_DIR:-build}/bin/pipedream
[ -x "$pipedream" ] || { echo "schedules_measured.sh: $pipedream not found: build first" >&2; exit 2; }
mkdir -p "$out"
M=8
schedules="1f1b-flush interleaved-1f1b zb-h1 zb-h2 zb-v dualpipev"

model_args() {  # name -> model and options
  case "$1" in
    cnn) echo "--model cnn" ;;
    gpt-mini) echo "--model gpt-mini --model-options depth=6" ;;
  esac
}
micro() { case "$1" in cnn) echo 16 ;; gpt-mini) echo 2 ;; esac; }

schedule_args() {  # schedule -> the plan's stages and the flags
  case "$1" in
    1f1b-flush) echo "$workers --schedule 1f1b-flush" ;;
    zb-h1) echo "$workers --schedule zb-h1" ;;
    zb-h2) echo "$workers --schedule zb-h2" ;;
    interleaved-1f1b) echo "$((2 * workers)) --schedule interleaved-1f1b --virtual-stages 2" ;;
    zb-v) echo "$((2 * workers)) --schedule zb-v" ;;
    dualpipev) echo "$((2 * workers)) --schedule dualpipev" ;;
  esac
}

# A profile with every *_ms field times FACTOR.
#   scaled_profile OUT PROFILE FACTOR
scaled_profile() {
  jq --argjson f "$3" 'reduce (paths(numbers) | select(.[-1] | type == "string" and endswith("_ms"))) as $p
      (.; setpath($p; getpath($p) * $f))' "$2" > "$1"
}

# CPU seconds a minibatch's compute takes by the profile: each stage's
# layers at the microbatch, M times, and their optimizer step.
#   profile_cpu_per_minibatch PLAN PROFILE MICROBATCH
profile_cpu_per_minibatch() {
  jq -n --slurpfile plan "$1" --slurpfile prof "$2" --argjson m "$M" --argjson b "$3" \
    '($prof[0].nodes) as $n | [$plan[0].stages[] | .layers as [$a, $z] | range($a; $z + 1) as $i | $n[$i]
      | (.at_batch[] | select(.batch == $b) | .forward_ms + .backward_ms) * $m + (.optimizer_ms // 0)] | add / 1000'
}

# CPU seconds a run's ranks spent computing per minibatch, from its trace:
# every non-wait span by minibatch (an F, B or W of microbatch i belongs to
# minibatch i / M, a step to its own), the mean over the minibatches of the
# run's steady window (those done after the n/4-th up to the 3n/4-th: the
# host's speed while the window's time was measured, bursts included).
#   run_cpu_per_minibatch TRACE
run_cpu_per_minibatch() {
  jq --argjson m "$M" '[.traceEvents[] | select(.ph == "X" and .cat != "wait" and .args.cpu_ms != null)
      | {k: (if .cat == "step" then .args.item else (.args.item / $m | floor) end), c: .args.cpu_ms}]
      | group_by(.k) | map(map(.c) | add) | length as $n
      | [to_entries[] | select(.key > ($n / 4 | floor) and .key <= ($n * 3 / 4 | floor)) | .value]
      | add / length / 1000' "$1"
}

median() { sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

cores=$(nproc)
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
# shellcheck source=bench/host_measures.sh
. bench/host_measures.sh
trap '[ ${#HOGS[@]} -eq 0 ] || kill "${HOGS[@]}" 2>/dev/null || true' EXIT

# This host's one level, measured by the 4 ranks a run has: bandwidth and
# latency on idle cores, then the communication threads' CPU with the
# cores busy (bench/host_measures.sh).
measure_topology() {  # out.json
  mpirun --bind-to none -np 4 "$pipedream" bench-comm --p2p-sizes 64KB,1MB,4MB --allreduce-sizes 4KB,1MB,8MB \
    --latency-iters 50 -o "$1" > /dev/null
  add_busy_cores_measures "$1" "$out" mpirun --bind-to none -np 4 "$pipedream"
}

measure_topology "$out/topology.json"
table="| model (${workers} workers) | schedule | measured samples/s (runs) | simulated samples/s | measured / simulated | runs' compute CPU / profile's | measured / simulated at the runs' speed (runs) | cores bound (${cores} cores) | measured / cores bound |\n|---|---|---|---|---|---|---|---|---|\n"
rows=0
within=0
worst=""
drifted=""
for model in $models; do
  b=$(micro "$model")
  batch=$((M * b))
  # shellcheck disable=SC2046
  c=$(profile_with_contention "$pipedream" "$out" "$cores" "$out/$model.profile.json" $(model_args "$model") \
    --batch "$batch" --warmup 1 --iters 5 --min-time 3 --microbatches "$M")
  for w in $workers $((2 * workers)); do
    jq --argjson w "$w" '.levels[0].count = $w' "$out/topology.json" > "$out/topology$w.json"
    "$pipedream" plan --profile "$out/$model.profile.json" --topology "$out/topology$w.json" --straight \
      -o "$out/$model.plan$w.json" > /dev/null
  done
  # Odd rounds in the list's order, even rounds reversed: a slow phase of
  # the host lands on different schedules each round, and the median of 3
  # drops a run caught in one.
  order=""
  for ((r = 0; r < rounds; r++)); do
    if ((r % 2 == 0)); then order+=" $schedules"; else order+=" $(echo "$schedules" | tr ' ' '\n' | tac | tr '\n' ' ')"; fi
  done
  for schedule in $order; do
    read -r w flags <<< "$(schedule_args "$schedule")"
    metrics="$out/$model.$schedule.$RANDOM.jsonl"
    # shellcheck disable=SC2046,SC2086
    "$pipedream" run --plan "$out/$model.plan$w.json" $(model_args "$model") --data synthetic $flags --microbatches "$M" \
      --batch "$batch" --minibatches "$steps" --no-eval --threads-per-worker 1 --timeout 300 --metrics "$metrics" \
      --trace "$metrics.trace.json" > /dev/null 2> "$metrics.log"
    sps=$(jq -r 'select(.event == "summary") | .steady_samples_per_s' "$metrics")
    speed=$(awk -v r="$(run_cpu_per_minibatch "$metrics.trace.json")" \
      -v p="$(profile_cpu_per_minibatch "$out/$model.plan$w.json" "$out/$model.profile.json" "$b")" 'BEGIN { print r / p }')
    scaled_profile "$metrics.profile.json" "$out/$model.profile.json" "$speed"
    # shellcheck disable=SC2086
    at_speed=$("$pipedream" simulate --plan "$out/$model.plan$w.json" --profile "$metrics.profile.json" $flags \
      --microbatches "$M" --minibatches 16 --cores "$cores" --threads 1 --realistic-latency --json \
      | jq -r '.throughput_samples_per_s')
    echo "{\"bench\": \"schedules_measured\", \"model\": \"$model\", \"schedule\": \"$schedule\", \"workers\": $workers, \"steady_samples_per_s\": $sps, \"compute_cpu_over_profile\": $speed, \"simulated_at_run_speed_samples_per_s\": $at_speed}"
    echo "$sps" >> "$out/$model.$schedule.sps"
    echo "$speed" >> "$out/$model.$schedule.speed"
    awk -v m="$sps" -v s="$at_speed" 'BEGIN { printf "%.2f\n", m / s }' >> "$out/$model.$schedule.at_speed"
  done
  for schedule in $schedules; do
    read -r w flags <<< "$(schedule_args "$schedule")"
    # shellcheck disable=SC2086
    sim=$("$pipedream" simulate --plan "$out/$model.plan$w.json" --profile "$out/$model.profile.json" $flags \
      --microbatches "$M" --minibatches 16 --cores "$cores" --threads 1 --contention "$c" --realistic-latency --json \
      | jq -r '.throughput_samples_per_s')
    # With more workers than cores, the cores bound a batch: its whole
    # compute (every stage's F + B) spread over them.
    bound=$(jq -r --argjson c "$cores" --argjson n "$batch" '($n * $c) / ([.stages[] | .forward_s + .backward_s] | add)' \
      "$out/$model.plan$w.json")
    runs=$(paste -sd' ' "$out/$model.$schedule.sps")
    med=$(median < "$out/$model.$schedule.sps")
    speeds=$(for x in $(cat "$out/$model.$schedule.speed"); do printf '%.2f ' "$x"; done)
    speed_med=$(median < "$out/$model.$schedule.speed")
    # The runs' median compute more than 10% off the profile's: the host
    # was not quiet between the profile and these runs.
    if awk -v s="$speed_med" 'BEGIN { exit !(s > 1.1 || s < 1 / 1.1) }'; then drifted+=" $model/$schedule"; fi
    at_speed_runs=$(paste -sd' ' "$out/$model.$schedule.at_speed")
    at_speed_med=$(median < "$out/$model.$schedule.at_speed")
    rm "$out/$model.$schedule.sps" "$out/$model.$schedule.speed" "$out/$model.$schedule.at_speed"
    # Three places: a row at 0.897 is outside 10%, though it rounds to 0.90.
    ratio=$(awk -v m="$med" -v s="$sim" 'BEGIN { printf "%.3f", m / s }')
    rows=$((rows + 1))
    if awk -v r="$ratio" 'BEGIN { exit !(r >= 0.9 && r <= 1.1) }'; then within=$((within + 1)); fi
    if [ -z "$worst" ] || awk -v r="$ratio" -v w="${worst##* }" 'BEGIN { d = r - 1; e = w - 1; exit !(d * d > e * e) }'; then
      worst="$model $schedule $ratio"
    fi
    bound_ratio=$(awk -v m="$med" -v s="$bound" 'BEGIN { printf "%.2f", m / s }')
    echo "{\"bench\": \"schedules_measured\", \"model\": \"$model\", \"schedule\": \"$schedule\", \"workers\": $workers, \"median_steady_samples_per_s\": $med, \"simulated_samples_per_s\": $sim, \"ratio\": $ratio, \"contention\": $c, \"cores_bound_samples_per_s\": $bound, \"median_ratio_at_run_speed\": $at_speed_med, \"median_compute_cpu_over_profile\": $speed_med}"
    runs=$(for x in $runs; do printf '%.0f ' "$x"; done)
    table+="| $model | $schedule | $(printf '%.0f' "$med") (${runs% }) | $(printf '%.0f' "$sim") | $ratio | ${speeds% } | $at_speed_med (${at_speed_runs}) | $(printf '%.0f' "$bound") | $bound_ratio |\n"
  done
done
printf "%b" "$table"
echo "rows within 10% of simulate's prediction: $within of $rows (farthest: $worst)"
drifted=${drifted# }
echo "rows whose runs computed more than 10% off the profile's speed (median; the host not quiet): ${drifted:-none}"

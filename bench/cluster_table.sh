#!/usr/bin/env bash
# The end-to-end table on a cluster made here (scripts/cluster.sh, 2 hosts x
# 2 workers): for each link rate, bench-comm measures the two-level
# topology (with each level's all-reduce bus bandwidth, at 8 MB: the
# simulator prices replicated stages with it), and again with every core
# kept busy for the CPU its communication threads spend per message and
# per byte (comm_cpu_*: what the shared cores lose to them, priced as the
# run's 4 compute threads leave them), for the all-reduce as it runs
# beside compute (allreduce_busy_GBps) and for a message's latency
# (latency_busy_us: its receiver waits for a time slice); for each model, the
# planner's plan, a straight pipeline, data
# parallelism and one worker are predicted (simulate on the measured
# topology, messages arriving with their last byte: --realistic-latency,
# the 4 ranks sharing this machine's cores: --cores, and what
# else they share: --contention, 4 profiles at once against one alone, taken
# alternately; the plans are made from the mean of the lone profiles) and measured
# (run, synthetic data, --no-eval, the middle half of the run: steady
# state), in ABBA order. A lone profile is taken before every run, and each
# plan is priced on the mean of all the lone profiles (simulate --recost):
# the host's speed drifts 10-20% over minutes, and a prediction from one
# profile taken minutes before the runs carries that drift. One JSON line per row; at the end, on stderr, the
# rows within 15% of their prediction and, per rate and model, the pairs
# whose measured order is not the predicted one, each with whether the two
# plans' runs overlap (bench/cluster_table_summary.jq).
# Each row also sets the communication threads' CPU per minibatch (all
# ranks) that simulate priced beside the runs' measured one (comm_cpu_s).
#   bench/cluster_table.sh [--rates "1gbit 200mbit"] [--models "cnn gpt-mini"] [--minibatches N] [--repeats R]
# --minibatches N: per run (default 240 for cnn, 60 for gpt-mini).
# --repeats R runs the ABBA sequence R times (default 1: two runs per row);
# a row's measured time is the median of its 2R runs (runs in the JSON).
# Needs root (network namespaces). Leaves no cluster behind.
set -euo pipefail
cd "$(dirname "$0")/.."
RATES="1gbit 200mbit"
MODELS="cnn gpt-mini"
MINIBATCHES=
REPEATS=1
while [ $# -gt 0 ]; do
  case "$1" in
    --rates) RATES=$2; shift 2 ;;
    --models) MODELS=$2; shift 2 ;;
    --minibatches) MINIBATCHES=$2; shift 2 ;;
    --repeats) REPEATS=$2; shift 2 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
BIN=$(pwd)/${BUILD_DIR:-build}/bin/pipedream
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export PD_CLUSTER_NAME=ptab
CORES=$(nproc)
WORK=$(mktemp -d /tmp/pipedream-cluster-table-XXXXXX)
# shellcheck source=bench/host_measures.sh
. bench/host_measures.sh
trap 'kill "${HOGS[@]}" 2>/dev/null || true; scripts/cluster.sh down --name ptab >/dev/null 2>&1 || true; rm -rf "$WORK"' EXIT

batch_of() { case "$1" in gpt-mini) echo 8 ;; *) echo 32 ;; esac; }
# Minibatches per run unless --minibatches: the steady state (the middle
# half) spans 2-4 s of either model, not a few of the scheduler's slices.
minibatches_of() { if [ -n "$MINIBATCHES" ]; then echo "$MINIBATCHES"; else case "$1" in gpt-mini) echo 60 ;; *) echo 240 ;; esac; fi; }

# Data parallelism: the one-worker plan's stage (its costs) on 4 replicas
# of the measured topology.
data_parallel_plan() {  # one.json topology.json out
  jq --slurpfile t "$2" '.topology = $t[0] | .stages[0].replicas = 4 | .stages[0].ranks = [0, 1, 2, 3]
                         | .config = "4" | del(.predicted) | del(.baselines)' "$1" > "$3"
}

predict() {  # plan contention -> the simulate report's JSON (the ranks sharing the cores, messages
              # arriving with their last byte after the latency measured with the cores busy; the
              # plan's split priced on the mean of the lone profiles taken between the runs, so that
              # prediction and measurement sample the host's drift alike; the profile also starts
              # replicated stages' gradient buckets during the backward, as run's do)
  "$BIN" simulate --plan "$1" --profile "$WORK/prof_mean.json" --recost --cores "$CORES" --threads 1 \
    --contention "$2" --realistic-latency --json 2>/dev/null
}

measure() {  # plan model batch -> steady-state seconds per minibatch
  local workers; workers=$(jq '[.stages[].replicas] | add' "$1")
  local args=(run --plan "$1" --model "$2" --batch "$3" --data synthetic --no-eval --threads-per-worker 1
              --minibatches "$(minibatches_of "$2")" --timeout 120 --metrics "$WORK/m.jsonl")
  if [ "$workers" -eq 1 ]; then
    "$BIN" "${args[@]}" >/dev/null 2>&1
  else
    scripts/cluster.sh mpirun --bind-to none -np "$workers" "$BIN" "${args[@]}" >/dev/null 2>&1
  fi
  jq -s 'map(select(.event == "summary"))[0] | .steady_time_per_minibatch_s // empty' \
    "$WORK/m.jsonl"
}

measured_comm_cpu() {  # -> the last run's communication threads' CPU per minibatch, all ranks (s)
  jq -s '(map(select(.event == "summary"))[0].steps) as $n
         | if $n then (map(select(.event == "rank") | .comm_cpu_s // 0) | add // 0) / $n else 0 end' "$WORK/m.jsonl"
}

for rate in $RATES; do
  scripts/cluster.sh up --name ptab --hosts 2 --slots 2 --rate "$rate" >/dev/null
  scripts/cluster.sh mpirun --bind-to none -np 4 "$BIN" bench-comm --p2p-sizes 64KB,1MB,4MB \
    --allreduce-sizes 4KB,1MB,8MB --latency-iters 50 -o "$WORK/topo.json" >/dev/null
  add_busy_cores_measures "$WORK/topo.json" "$WORK" scripts/cluster.sh mpirun --bind-to none -np 4 "$BIN"
  for model in $MODELS; do
    b=$(batch_of "$model")
    c=$(profile_with_contention "$BIN" "$WORK" "$CORES" "$WORK/prof.json" --model "$model" --batch "$b" \
      --iters 5 --min-time 5)
    "$BIN" plan --profile "$WORK/prof.json" --topology "$WORK/topo.json" -o "$WORK/planned.json" >/dev/null
    "$BIN" plan --straight --profile "$WORK/prof.json" --topology "$WORK/topo.json" -o "$WORK/straight.json" >/dev/null
    "$BIN" plan --profile "$WORK/prof.json" --workers 1 --bandwidth 1 -o "$WORK/one.json" >/dev/null
    data_parallel_plan "$WORK/one.json" "$WORK/topo.json" "$WORK/dp.json"
    declare -A runs=() comm=()
    n=0
    rm -f "$WORK"/lone.*.json
    for ((k = 0; k < REPEATS; ++k)); do
      for kind in planned straight dp one one dp straight planned; do  # ABBA
        "$BIN" profile --model "$model" --batch "$b" --threads 1 --iters 5 --min-time 2 \
          -o "$WORK/lone.$k.$kind.$((++n)).json" >/dev/null 2>&1
        t=$(measure "$WORK/$kind.json" "$model" "$b")
        runs[$kind]="${runs[$kind]:-} ${t:-0}"
        comm[$kind]="${comm[$kind]:-} $(measured_comm_cpu)"
      done
    done
    mean_profile "$WORK/prof_mean.json" "$WORK"/alone?.json "$WORK"/lone.*.json
    for kind in planned straight dp one; do
      predict "$WORK/$kind.json" "$c" > "$WORK/sim.json"
      # shellcheck disable=SC2086  # the runs are one word each
      runs_s=$(printf '%s\n' ${runs[$kind]} | jq -cs .)
      # shellcheck disable=SC2086
      comm_s=$(printf '%s\n' ${comm[$kind]} | jq -cs .)
      jq -cn --arg rate "$rate" --arg model "$model" --arg kind "$kind" --argjson batch "$b" \
        --arg config "$(jq -r .config "$WORK/$kind.json")" --slurpfile topo "$WORK/topo.json" \
        --slurpfile sim "$WORK/sim.json" --argjson runs "$runs_s" --argjson comm "$comm_s" --argjson contention "$c" \
        'def median: sort | if length % 2 == 1 then .[length / 2 | floor] else (.[length / 2 - 1] + .[length / 2]) / 2 end;
         ($runs | median) as $measured | $sim[0].time_per_minibatch_s as $predicted
         | {rate: $rate, model: $model, batch: $batch, plan: $kind, config: $config,
            topology: $topo[0].levels, contention: $contention, predicted_ms: ($predicted * 1000),
            measured_ms: ($measured * 1000), measured_runs_ms: ($runs | map(. * 1000)),
            measured_over_predicted: ($measured / $predicted),
            predicted_comm_cpu_ms: (($sim[0].comm_cpu_per_minibatch_s // 0) * 1000),
            measured_comm_cpu_ms: (($comm | median) * 1000)}' | tee -a "$WORK/rows.jsonl"
    done
    unset runs comm
  done
  scripts/cluster.sh down --name ptab >/dev/null
done
# On stderr: rows within 15%, and per group whether the measured order is the predicted one.
jq -rs -f bench/cluster_table_summary.jq "$WORK/rows.jsonl" >&2

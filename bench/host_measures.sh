# Sourced by bench/cluster_table.sh and bench/schedules_measured.sh: what
# this host's cores cost a run besides the profile, measured the same way
# for both. The callers kill "${HOGS[@]}" in their EXIT trap.
HOGS=()

# The communication threads' CPU per level (TopologyLevel::comm_cpu_GBps,
# comm_cpu_us_per_message), the all-reduce bus bandwidth
# (allreduce_busy_GBps, 8 MB) and the per-message latency
# (latency_busy_us) measured while one spinning process per rank
# keeps the cores busy, as a run's compute threads do (cold caches,
# contended cores, time slices), merged into the topology; its other
# figures stay the idle-core ones.
#   add_busy_cores_measures TOPOLOGY WORKDIR LAUNCHER... (LAUNCHER: how 4 ranks start, ending in the pipedream binary)
add_busy_cores_measures() {
  local topology=$1 work=$2 k
  shift 2
  for ((k = 0; k < 4; ++k)); do (while :; do :; done) & HOGS+=($!); done
  "$@" bench-comm --p2p-sizes 4MB --allreduce-sizes 4KB,8MB --latency-iters 50 -o "$work/busy.json" > /dev/null
  kill "${HOGS[@]}"
  wait "${HOGS[@]}" 2> /dev/null || true
  HOGS=()
  jq --slurpfile b "$work/busy.json" '.levels |= [to_entries[] | .value + ($b[0].levels[.key]
      | {comm_cpu_GBps, comm_cpu_us_per_message, allreduce_busy_GBps: .allreduce_GBps, latency_busy_us: .latency_us}
      | with_entries(select(.value != null)))]' "$topology" \
    > "$work/merged.json"
  mv "$work/merged.json" "$topology"
}

# The profile a table predicts from, and what the cores share besides
# themselves (simulate --contention), measured alternately so that the
# host's drift (10-20%, in phases of seconds to minutes) falls on both
# alike: one profile alone, 4 at once (each at its share of the cores),
# 4 at once again, one alone. Writes OUT, the mean of the two lone
# profiles (every *_ms field), and prints the contention (>= 0): the
# mean step of the 4-at-once profiles at their share against the lone ones'.
# The lone profiles stay in WORKDIR as alone1.json and alone2.json
# (cluster_table.sh averages them with the ones it takes between its runs).
#   profile_with_contention PIPEDREAM WORKDIR CORES OUT PROFILE-ARGS...
profile_with_contention() {
  local bin=$1 work=$2 cores=$3 out=$4 k round
  shift 4
  "$bin" profile "$@" --threads 1 -o "$work/alone1.json" > /dev/null 2>&1
  for round in 1 2; do
    for ((k = 0; k < 4; ++k)); do
      "$bin" profile "$@" --threads 1 -o "$work/corun$round.$k.json" > /dev/null 2>&1 &
    done
    wait
  done
  "$bin" profile "$@" --threads 1 -o "$work/alone2.json" > /dev/null 2>&1
  mean_profile "$out" "$work/alone1.json" "$work/alone2.json"
  jq -n --slurpfile c <(cat "$work"/corun?.?.json) --slurpfile p "$out" \
    --argjson share "$(awk -v c="$cores" 'BEGIN { print (4 > c) ? c / 4 : 1 }')" \
    '(($c | map(.step_forward_backward_ms) | add / length) * $share / $p[0].step_forward_backward_ms - 1) | if . < 0 then 0 else . end'
}

# Profiles of one model taken at different times, as one: every *_ms field
# the mean of theirs.
#   mean_profile OUT PROFILE...
mean_profile() {
  local out=$1
  shift
  jq -s '. as $ps | $ps[0] | reduce (paths(numbers) | select(.[-1] | type == "string" and endswith("_ms"))) as $p
           (.; setpath($p; $ps | map(getpath($p)) | add / length))' "$@" > "$out"
}

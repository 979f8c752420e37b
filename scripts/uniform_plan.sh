# shellcheck shell=bash
# Sourced by scripts/bubbles.sh and scripts/zero_bubble_table.sh: a
# straight plan of identical stages, one a worker, no communication cost
# (output_bytes absent: 0), for replaying schedules on unit costs.
#   uniform_plan FILE STAGES FORWARD_S BACKWARD_S
uniform_plan() {
  local file=$1 n=$2 f=$3 b=$4 i config
  config=$(printf '1%.0s-' $(seq "$n")); config=${config%-}
  {
    printf '{"format": "pipedream-plan/1", "config": "%s", "schedule": "1f1b-flush",\n' "$config"
    printf ' "profile": {"model": "uniform", "batch_size": 64},\n'
    printf ' "topology": {"levels": [{"count": %s, "bandwidth_GBps": 10}]},\n "stages": [' "$n"
    for ((i = 0; i < n; i++)); do
      [ "$i" -gt 0 ] && printf ','
      printf '\n  {"index": %s, "layers": [%s, %s], "replicas": 1, "ranks": [%s], "forward_s": %s, "backward_s": %s}' \
        "$i" "$i" "$i" "$i" "$f" "$b"
    done
    printf ']}\n'
  } > "$file"
}

#!/usr/bin/env bash
# What `plan --schedule auto` picks under memory limits: for gpt-mini and
# PipeDream's profiles (alexnet, vgg16, resnet18, resnet50, gnmt) on W
# workers of one flat level, the family it chooses, its predicted time per
# minibatch (the replay's; 1f1b-rr's the planner's), the runner-up (the
# fastest other family that fits) and whether zb-v fits and how fast it is.
# Families predicted within 15% of the pick are ties, never ranked: the
# pick "wins" only when every other family is more than 15% slower.
#   bench/schedule_auto_table.sh [--out DIR] [--workers W] [--bandwidth GBps] [--models a,b,...]
# Limits per model: none, then each family's peak memory without a limit
# (the fullest worker at its best microbatch count), rounded up to the
# 0.01 of its unit, largest first - each limit the least that still admits
# that family's unlimited choice. gpt-mini (depth 6: 9 layers, enough for
# 8 stages) is profiled here at batch 16 and at its microbatches of M = 4,
# 8, 16 (one thread) unless GPT_PROFILE names a profile; PipeDream's
# profiles record no batch, so their microbatches cost 1/M of the minibatch.
# Prints one JSON object per (model, limit) on stdout, then a Markdown
# table on stderr; DIR (default runs/schedule-auto) keeps each plan's
# output. Environment: BUILD_DIR (default build), GPT_PROFILE.
set -euo pipefail
cd "$(dirname "$0")/.."

out=runs/schedule-auto
workers=4
bandwidth=10
models="gpt-mini alexnet vgg16 resnet18 resnet50 gnmt"
while [ $# -gt 0 ]; do
  case "$1" in
    --out) out=${2:?--out needs a folder}; shift 2 ;;
    --workers) workers=${2:?}; shift 2 ;;
    --bandwidth) bandwidth=${2:?}; shift 2 ;;
    --models) models=${2:?}; models=${models//,/ }; shift 2 ;;
    -h|--help) sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "schedule_auto_table.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
pipedream=${BUILD_DIR:-build}/bin/pipedream
[ -x "$pipedream" ] || { echo "schedule_auto_table.sh: $pipedream not found: build first" >&2; exit 2; }
mkdir -p "$out"

profile_of() {  # model -> profile file
  case "$1" in
    gpt-mini)
      local gpt=${GPT_PROFILE:-$out/gpt-mini.profile.json}
      [ -f "$gpt" ] || "$pipedream" profile --model gpt-mini --model-options depth=6 --batch 16 --threads 1 \
        --microbatches 4,8,16 --min-time 2 -o "$gpt" > "$out/gpt-mini.profile.log"
      echo "$gpt" ;;
    *) echo "tests/data/pipedream-profiles/$1/graph.txt" ;;
  esac
}

# families FILE: plan's families table as JSON lines
# {family, fits, chosen, microbatches, time_s, memory_bytes} (fits false, no time: not considered).
families() {
  awk '
    /^schedule families/ { on = 1; next }
    on && /^  family / { next }
    on && !/^  / { on = 0 }
    !on { next }
    $2 == "not" && $3 == "considered:" { printf "{\"family\":\"%s\",\"fits\":false,\"chosen\":false}\n", $1; next }
    {
      scale["s"] = 1; scale["ms"] = 1e-3; scale["us"] = 1e-6
      bytes["B"] = 1; bytes["KB"] = 1e3; bytes["MB"] = 1e6; bytes["GB"] = 1e9; bytes["TB"] = 1e12
      fits = ($0 ~ /does not fit/) ? "false" : "true"
      chosen = ($0 ~ /<- chosen/) ? "true" : "false"
      m = ($3 == "-") ? "null" : $3
      printf "{\"family\":\"%s\",\"fits\":%s,\"chosen\":%s,\"microbatches\":%s,\"time_s\":%.9g,\"memory_bytes\":%.6g,\"memory_text\":\"%s %s\"}\n",
        $1, fits, chosen, m, $4 * scale[$5], $7 * bytes[$8], $7, $8
    }' "$1"
}

# limit_above "7.81 GB" -> "7.82GB": the next 0.01 of the unit (plan prints 2 decimals, rounded).
limit_above() { awk '{ printf "%.2f%s\n", $1 + 0.01, $2 }' <<< "$1"; }

rows=()
for model in $models; do
  profile=$(profile_of "$model")
  base=(plan --profile "$profile" --workers "$workers" --bandwidth "$bandwidth" --schedule auto)
  "$pipedream" "${base[@]}" > "$out/$model-none.txt" 2>&1 || true
  mapfile -t limits < <(families "$out/$model-none.txt" | jq -r 'select(.fits) | .memory_text' |
    sort -u | while read -r l; do limit_above "$l"; done |
    awk '{ v = $0; u = $0; sub(/[A-Z]+$/, "", v); sub(/^[0-9.]+/, "", u);
           f = (u == "GB") ? 1e9 : (u == "MB") ? 1e6 : (u == "KB") ? 1e3 : 1; print v * f, $0 }' |
    sort -g -r | awk '{ print $2 }')
  for limit in none "${limits[@]}"; do
    file="$out/$model-$limit.txt"
    if [ "$limit" = none ]; then extra=(); else extra=(--memory "$limit"); fi
    "$pipedream" "${base[@]}" "${extra[@]}" > "$file" 2>&1 || true
    families "$file" | jq -s -c --arg model "$model" --arg limit "$limit" --argjson workers "$workers" \
      --argjson bandwidth "$bandwidth" '
      (map(select(.fits)) | sort_by(.time_s)) as $fit
      | (map(select(.chosen))[0]) as $pick
      | ($fit | map(select(.family != $pick.family))[0]) as $runner
      | (map(select(.family == "zb-v"))[0]) as $zbv
      | {model: $model, workers: $workers, bandwidth_GBps: $bandwidth, memory_limit: $limit,
         chosen: $pick.family, chosen_time_s: $pick.time_s, chosen_microbatches: $pick.microbatches,
         chosen_memory: $pick.memory_text,
         runner_up: $runner.family, runner_up_time_s: $runner.time_s,
         tie: (if $runner == null then false else ($runner.time_s <= 1.15 * $pick.time_s) end),
         tied_with: (if $pick == null then [] else [$fit[] | select(.family != $pick.family and .time_s <= 1.15 * $pick.time_s) | .family] end),
         zb_v_fits: ($zbv.fits // false), zb_v_time_s: $zbv.time_s,
         families: .}'
  done
done | tee "$out/table.jsonl"

{
  echo "| model | memory limit | chosen (M) | predicted time/batch | runner-up | its time | verdict | zb-v |"
  echo "|---|---|---|---|---|---|---|---|"
  jq -r '
    def t: if . == null then "-" else (. * 1e5 | round / 100 | tostring) + " ms" end;
    "| \(.model) | \(.memory_limit) | \(.chosen // "nothing fits")\(if .chosen_microbatches then " (\(.chosen_microbatches))" else "" end) | \(.chosen_time_s | t) | \(.runner_up // "-") | \(.runner_up_time_s | t) | \(if .chosen == null then "-" elif .runner_up == null then "only one fits" elif .tie then "tie (" + (.tied_with | join(", ")) + " within 15%)" else "wins by \(((.runner_up_time_s / .chosen_time_s - 1) * 100) | round)%" end) | \(if .zb_v_fits then (.zb_v_time_s | t) else "does not fit" end) |"' \
    "$out/table.jsonl"
} >&2

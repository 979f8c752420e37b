#!/usr/bin/env bash
# Activation recomputation chosen with the partition (docs/design.md §5),
# against the manual settings: for each profile and memory limit, the
# closed-form optimum of `plan` with --recompute none, full, every-other
# and auto (the joint choice), each "does not fit" or its predicted time
# per minibatch. One JSON object per line on stdout, then a Markdown table
# on stderr.
#
#   bench/recompute_table.sh [BUILD_DIR]
#
# Profiles: gpt-mini (profiled here at batch 8 unless gpt-mini.profile.json
# exists), and PipeDream's gnmt and vgg16 (tests/data). Limits: from 1.2x
# the least memory that fits without recomputation down to the least that
# fits with it (plan's advice when nothing fits), and 10% below.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build}
pd=$build/bin/pipedream
workers=${WORKERS:-4}
gpt=${GPT_PROFILE:-gpt-mini.profile.json}
[ -f "$gpt" ] || "$pd" profile --model gpt-mini --batch 8 --threads 1 -o "$gpt" >/dev/null
profiles=("$gpt" "$root/tests/data/pipedream-profiles/gnmt/graph.txt" "$root/tests/data/pipedream-profiles/vgg16/graph.txt")
bandwidths=(4 1.25 1.25)

# "12.3 ms" -> seconds, from plan's "predicted time per minibatch" line; "" when it does not fit.
predicted() {
  local out
  if ! out=$("$pd" plan --closed-form "$@" 2>&1); then
    echo ""
    return
  fi
  echo "$out" | sed -n 's/^predicted time per minibatch \([0-9.]*\) \([mu]*s\).*/\1 \2/p' |
    awk '{ s = $1; if ($2 == "ms") s /= 1e3; else if ($2 == "us") s /= 1e6; printf "%.9g\n", s }'
}

# The least memory per worker that fits with --recompute MODE, from the
# advice of a plan that does not fit ("... fits (--memory N[ --recompute MODE])").
least_fitting() {
  local mode=$1
  shift
  "$pd" plan --closed-form "$@" --memory 1 --recompute "$mode" 2>&1 |
    sed -n "s/.*fits (--memory \([0-9]*\)\( --recompute $mode\)\{0,1\}).*/\1/p" | head -1 || true
}

table="| profile | limit (MB) | no recompute | full | every other | joint |\n|---|---|---|---|---|---|"
for i in "${!profiles[@]}"; do
  p=${profiles[$i]}
  args=(--profile "$p" --workers "$workers" --bandwidth "${bandwidths[$i]}")
  none=$(least_fitting none "${args[@]}")
  joint=$(least_fitting auto "${args[@]}")
  name=$(basename "$(dirname "$p")")
  [ "$name" = "." ] && name=$(basename "$p" .profile.json)
  # Above and at the least without recomputation, down to the least with it, and below.
  previous=
  for f in 1.2 1.0 0.75 0.5 0.25 0 -0.1; do
    limit=$(awk -v n="$none" -v j="$joint" -v f="$f" 'BEGIN { printf "%.0f", (f > 1 ? n * f : f >= 0 ? j + (n - j) * f : j * (1 + f)) }')
    [ "$limit" = "$previous" ] && continue
    previous=$limit
    row="| $name | $(awk -v l="$limit" 'BEGIN { printf "%.1f", l / 1e6 }')"
    json="{\"profile\": \"$name\", \"workers\": $workers, \"memory_bytes\": $limit"
    for mode in none full every-other auto; do
      t=$(predicted "${args[@]}" --memory "$limit" --recompute "$mode")
      json="$json, \"${mode//-/_}_s\": ${t:-null}"
      if [ -z "$t" ]; then row="$row | does not fit"; else row="$row | $(awk -v t="$t" 'BEGIN { printf "%.2f ms", t * 1e3 }')"; fi
    done
    echo "$json}"
    table="$table\n$row |"
  done
done
echo -e "$table" >&2

#!/usr/bin/env bash
# The zero-bubble table (Qi et al. ICLR 2024; DeepSeek's DualPipeV) in
# simulation: uniform stages with F = B = W = 1 (a whole stage's forward
# takes 1, its backward 2, which the splitting schedules run as B = W = 1;
# the V shapes run 2p stages of half that), p = 4 workers, M = 8 and 16
# microbatches. For 1f1b-flush, zb-h1, zb-h2, zb-v and dualpipev: the bubble
# (mean idle share of the workers over 4 batches) next to the closed forms,
# the steady-state time per batch (3 s of compute a worker), each worker's
# peak of microbatches held (a V's are chunk-microbatches, half a stage's)
# and the fullest worker's in units of 1F1B's (p whole stages').
#   scripts/zero_bubble_table.sh [--out DIR] [--svg]
# Prints a Markdown table; DIR (default runs/zero_bubble) keeps the plans,
# the `simulate --json` reports and, with --svg, each schedule's picture
# (M = 8). No communication cost (output_bytes 0). Environment: BUILD_DIR.
set -euo pipefail
cd "$(dirname "$0")/.."

out=runs/zero_bubble
svg=0
while [ $# -gt 0 ]; do
  case "$1" in
    --out) out=${2:?--out needs a folder}; shift 2 ;;
    --svg) svg=1; shift ;;
    -h|--help) sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "zero_bubble_table.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
pipedream=${BUILD_DIR:-build}/bin/pipedream
[ -x "$pipedream" ] || { echo "zero_bubble_table.sh: $pipedream not found: build first" >&2; exit 2; }
mkdir -p "$out"

# shellcheck source=scripts/uniform_plan.sh
. scripts/uniform_plan.sh

p=4
uniform_plan "$out/p$p.plan.json" "$p" 1 2
uniform_plan "$out/p${p}x2.plan.json" "$((2 * p))" 0.5 1

# row SCHEDULE PLAN SHARE M CLOSED: "| schedule | M | bubble | closed form | time per batch | peaks | fullest |"
row() {
  local s=$1 plan=$2 share=$3 m=$4 closed=$5 name
  name="$s-M$m"
  local extra=()
  [ "$m" = 8 ] && [ "$svg" = 1 ] && extra=(--svg "$out/$s.svg")
  "$pipedream" simulate --plan "$plan" --schedule "$s" --microbatches "$m" --minibatches 4 --json "${extra[@]}" \
    > "$out/$name.json"
  jq -r --arg s "$s" --arg m "$m" --arg closed "$closed" --argjson share "$share" --argjson p "$p" \
    '"| \($s) | \($m) | \(([.workers[].bubble_fraction] | add / length) * 1000 | round / 10)% | \($closed) | \(.time_per_minibatch_s * 10000 | round / 10000) s | \([.workers[].peak_held | tostring] | join("/")) | \(([.workers[].peak_held] | max) * $share / $p * 100 | round / 100)x |"' \
    "$out/$name.json"
}

echo "| schedule | M | bubble (simulated) | closed form | time per batch (compute 3 s) | peak held per worker 0..p-1 | fullest (1F1B = 1x) |"
echo "|---|---|---|---|---|---|---|"
for m in 8 16; do
  one=$(awk -v p="$p" -v m="$m" 'BEGIN { printf "%.1f%%", 100 * (p - 1) / (m + p - 1) }')
  h1=$(awk -v p="$p" -v m="$m" 'BEGIN { printf "%.1f%%", 100 * (p - 1) / (3 * m + p - 1) }')
  row 1f1b-flush "$out/p$p.plan.json" 1 "$m" "(p-1)/(m+p-1) = $one"
  row zb-h1 "$out/p$p.plan.json" 1 "$m" "a third of 1F1B's: $h1"
  row zb-h2 "$out/p$p.plan.json" 1 "$m" "0"
  row zb-v "$out/p${p}x2.plan.json" 0.5 "$m" "0"
  row dualpipev "$out/p${p}x2.plan.json" 0.5 "$m" "(PP/2-1)(F&B+B-3W), PP = 2p: 6 steps a batch (F&B = F+B), 3 overlapped"
done

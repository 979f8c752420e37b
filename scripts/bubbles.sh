#!/usr/bin/env bash
# Pipeline bubbles in simulation: on uniform
# stages with F:B:W = 1:1:1 (a stage's forward takes 1, its backward 2, which
# zb-h1 splits into B = W = 1), for S = 4 and 8 workers and M = 8, 16, 32
# microbatches per batch, `pipedream simulate` of 1f1b-flush, interleaved-1f1b
# (v = 2: 2S stages of half the work, stage k on worker k mod S) and zb-h1,
# next to the papers' closed forms, and each schedule's peak in-flight
# microbatches (the most any worker holds between F and its last backward
# pass: B, or W for zb-h1; interleaved counts chunk-microbatches, each half
# a stage's activations).
#   scripts/bubbles.sh [--out DIR]
# Prints a Markdown table; DIR (default runs/bubbles) keeps the plans and
# the `simulate --json` reports. No communication (output_bytes 0).
# Environment: BUILD_DIR (default build).
set -euo pipefail
cd "$(dirname "$0")/.."

out=runs/bubbles
while [ $# -gt 0 ]; do
  case "$1" in
    --out) out=${2:?--out needs a folder}; shift 2 ;;
    -h|--help) sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "bubbles.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
pipedream=${BUILD_DIR:-build}/bin/pipedream
[ -x "$pipedream" ] || { echo "bubbles.sh: $pipedream not found: build first (scripts/setup.sh)" >&2; exit 2; }
mkdir -p "$out"

# shellcheck source=scripts/uniform_plan.sh
. scripts/uniform_plan.sh

# simulate NAME PLAN ARGS... -> "bubble peak" (mean bubble over workers, max peak_held)
simulate() {
  local name=$1 plan=$2
  shift 2
  "$pipedream" simulate --plan "$plan" --minibatches 8 --json "$@" > "$out/$name.json"
  jq -r '[([.workers[].bubble_fraction] | add / length), ([.workers[].peak_held] | max)] | @tsv' "$out/$name.json"
}

pct() { awk -v x="$1" 'BEGIN { printf "%.1f%%", 100 * x }'; }

echo "| S | M | 1f1b-flush | (S-1)/(M+S-1) | interleaved v=2 | (S-1)/(2M+S-1) | zb-h1 | (S-1)/(3M+S-1) | peak in flight: 1f1b / interleaved (chunks) / zb-h1 |"
echo "|---|---|---|---|---|---|---|---|---|"
for S in 4 8; do
  uniform_plan "$out/uniform-$S.plan.json" "$S" 1 2
  uniform_plan "$out/uniform-${S}x2.plan.json" "$((2 * S))" 0.5 1
  for M in 8 16 32; do
    read -r f1 p1 < <(simulate "1f1b-flush-S$S-M$M" "$out/uniform-$S.plan.json" --schedule 1f1b-flush --microbatches "$M")
    read -r fi pi < <(simulate "interleaved-S$S-M$M" "$out/uniform-${S}x2.plan.json" --schedule interleaved-1f1b \
      --virtual-stages 2 --microbatches "$M")
    read -r fz pz < <(simulate "zb-h1-S$S-M$M" "$out/uniform-$S.plan.json" --schedule zb-h1 --microbatches "$M")
    c1=$(awk -v s="$S" -v m="$M" 'BEGIN { print (s - 1) / (m + s - 1) }')
    ci=$(awk -v s="$S" -v m="$M" 'BEGIN { print (s - 1) / (2 * m + s - 1) }')
    cz=$(awk -v s="$S" -v m="$M" 'BEGIN { print (s - 1) / (3 * m + s - 1) }')
    echo "| $S | $M | $(pct "$f1") | $(pct "$c1") | $(pct "$fi") | $(pct "$ci") | $(pct "$fz") | $(pct "$cz") | $p1 / $pi / $pz |"
  done
done

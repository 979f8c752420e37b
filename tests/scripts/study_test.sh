#!/usr/bin/env bash
# ctest `study_script`: scripts/study_staleness.sh --quick runs end to end
# (data subset, profiles, hand-written plans, simulations, every policy and
# one worker, summary and figures) and its outputs hold what
# docs/results.md reads: a summary with every policy, per-run accuracy
# curves, the wide table and, with matplotlib, PNG figures.
#   tests/scripts/study_test.sh SOURCE_DIR PIPEDREAM_BINARY (BUILD_DIR/bin/pipedream)
# Exits 77 (ctest SKIP_RETURN_CODE) without the Fashion-MNIST dataset.
set -euo pipefail
source_dir=$1
build_dir=$(cd "$(dirname "$2")/.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

if [ ! -f /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ]; then
  echo "SKIP: Fashion-MNIST is not installed (apt-get install dataset-fashion-mnist)"
  exit 77
fi
BUILD_DIR=$build_dir NICE=0 "$source_dir/scripts/study_staleness.sh" --quick --out "$work/study" >"$work/log" 2>&1 ||
  { cat "$work/log"; fail "study_staleness.sh --quick failed"; }

summary="$work/study/summary.json"
[ -s "$summary" ] || fail "no summary.json"
for policy in train stash vertical none flush; do
  /usr/bin/python3 - "$summary" "$policy" <<'PY' || fail "summary.json has no complete $policy row"
import json, sys
rows = [r for r in json.load(open(sys.argv[1]))["rows"] if r["policy"] == sys.argv[2]]
sys.exit(0 if rows and rows[0]["seeds_complete"] == 1 and rows[0]["mean"] is not None
         and len(rows[0]["mean_accuracy_by_epoch"]) == 2 and rows[0]["simulated_seconds_per_epoch"] else 1)
PY
done
[ "$(wc -l <"$work/study/curves/1-1-1-1/sgd-0.001/stash/seed0.jsonl")" -eq 2 ] || fail "the stash curve does not hold 2 epochs"
grep -q '| sgd | 0.001 | 1-1-1-1 |' "$work/study/summary-wide.md" || fail "summary-wide.md lacks the 1-1-1-1 row"
[ -s "$work/study/time-to-accuracy.md" ] || fail "no time-to-accuracy.md"
if /usr/bin/python3 -c 'import matplotlib' 2>/dev/null; then
  for f in sgd-epoch sgd-time; do
    [ "$(head -c 8 "$work/study/curves/fig-$f.png" | od -An -tx1 | tr -d ' \n')" = "89504e470d0a1a0a" ] ||
      fail "fig-$f.png is not a PNG"
  done
fi
# A rerun skips every finished run.
BUILD_DIR=$build_dir NICE=0 "$source_dir/scripts/study_staleness.sh" --quick --out "$work/study" >"$work/log2" 2>&1 ||
  { cat "$work/log2"; fail "the rerun failed"; }
echo "PASS"

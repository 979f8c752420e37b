#!/usr/bin/env bash
# profile -> plan -> simulate over every zoo model (run by hand; minutes).
#   scripts/profile_zoo_chain.sh [out-dir]   (default runs/zoo-chain)
# Small batches and one measured iteration: this checks that the chain
# works, not the numbers. WORKERS (default 4), BATCH (default 2), THREADS
# (default 1) override.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-runs/zoo-chain}
workers=${WORKERS:-4}
batch=${BATCH:-2}
threads=${THREADS:-1}
mkdir -p "$out"
rm -f "$out"/*.profile.json "$out"/*.plan.json
bin=build/bin/pipedream
models=$($bin models | awk 'NR > 1 && NF >= 5 && $3 ~ /^[0-9]+$/ {print $1}')
for m in $models; do
  echo "== $m"
  start=$(date +%s.%N)
  $bin profile --model "$m" --batch "$batch" --threads "$threads" --warmup 0 --iters 1 \
    -o "$out/$m.profile.json" | tail -n 3
  $bin plan --profile "$out/$m.profile.json" --workers "$workers" --bandwidth 10 --fewer-workers \
    -o "$out/$m.plan.json" | tail -n 3
  echo "   $(echo "$(date +%s.%N) - $start" | bc) s"
done
# simulate: the CLI when it is there, else the simulator library through a test.
if $bin simulate --help 2>/dev/null | grep -q -- "--plan"; then
  for m in $models; do $bin simulate --plan "$out/$m.plan.json" --profile "$out/$m.profile.json"; done
else
  PD_CHAIN_DIR="$out" build/tests/test_profiler --gtest_filter=ProfileChain.PlansInFolderSimulate
fi

#!/usr/bin/env bash
# profile -> plan -> simulate over every zoo model (run by hand; minutes).
#   scripts/profile_zoo_chain.sh [out-dir]   (default runs/zoo-chain)
# Small batches and one measured iteration: this checks that the chain
# works, not the numbers. WORKERS (default 4), BATCH (default 2), THREADS
# (default 1) and MODELS (space-separated names; default: every zoo
# model) override. `gpt`
# (163M parameters, 1024 tokens) takes a minute or more per step on a core.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-runs/zoo-chain}
workers=${WORKERS:-4}
batch=${BATCH:-2}
threads=${THREADS:-1}
mkdir -p "$out"
rm -f "$out"/*.profile.json "$out"/*.plan.json
bin=build/bin/pipedream
models=${MODELS:-$($bin models | awk 'NR > 1 && NF >= 5 && $3 ~ /^[0-9]+$/ {print $1}')}
for m in $models; do
  echo "== $m"
  start=$(date +%s.%N)
  $bin profile --model "$m" --batch "$batch" --threads "$threads" --warmup 0 --iters 1 --min-time 0 \
    -o "$out/$m.profile.json" | tail -n 3
  $bin plan --profile "$out/$m.profile.json" --workers "$workers" --bandwidth 10 --fewer-workers \
    -o "$out/$m.plan.json" | tail -n 3
  # no replication: a pipeline of several stages whatever the numbers say
  $bin plan --profile "$out/$m.profile.json" --workers "$workers" --bandwidth 10 --straight \
    -o "$out/$m-straight.plan.json" | (grep "^config" || true)
  echo "   $(echo "$(date +%s.%N) - $start" | bc) s"
done
# simulate: the CLI when it is there, else the simulator library through a test.
if $bin simulate --help 2>/dev/null | grep -q -- "--plan"; then
  for m in $models; do
    for plan in "$out/$m.plan.json" "$out/$m-straight.plan.json"; do
      echo "== simulate $plan"
      $bin simulate --plan "$plan" --profile "$out/$m.profile.json" | tail -n 4
    done
  done
else
  PD_CHAIN_DIR="$out" build/tests/test_profiler --gtest_filter=ProfileChain.PlansInFolderSimulate
fi

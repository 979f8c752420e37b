#!/usr/bin/env bash
# The staleness study (docs/results.md §1): does weight stashing matter, and does
# vertical sync cost anything? Trains one deep model on Fashion-MNIST with
# PipeDream's 1F1B-RR schedule under every weight policy (stash, vertical,
# none), with the synchronous 1F1B-flush schedule, and on one worker
# (`pipedream train`), over a grid of pipeline shapes, optimizers, learning
# rates and seeds; then summarises and plots. docs/results.md §1 reads it.
#
#   scripts/study_staleness.sh [--out DIR] [--quick] [--no-runs]
#
#   --out DIR   outputs (default runs/staleness); reruns skip finished runs
#   --quick     a tiny grid (one shape, sgd at one lr, one seed, 2 epochs):
#               checks the script end to end in about a minute
#   --no-runs   only the summary and figures of the runs already there
#
# Model: configs/study/mlp16-ln.json, 16 linear layers of width 128, each
# hidden one followed by LayerNorm and ReLU (every stage below holds at
# least 4 linear layers: weight stashing only changes a stage's gradient
# when the stage holds several layers with parameters).
# Shapes (hand-written plans, scripts/study_plan.py): 1-1-1-1 (4 stages of
# 4 linear layers, the largest delay: stage 0 is 3 updates stale), 2-1-1
# (3 stages of 6/5/5 linear layers, stage 0 replicated) and 3-1 (2 stages
# of 8, stage 0 replicated 3 times).
# Grid: sgd (momentum 0.9) at lr 0.001 and 0.003, adam at 0.0001 and
# 0.0003, constant learning rate, batch 64, seeds 0 1 2, 5 epochs of a
# 10000-image subset of the training set (test: 5000 images),
# scripts/fmnist_subset.py. 1f1b-flush trains microbatches of 16, 4 per
# step: every update averages 64 samples, as `train --batch 64` does.
# Every pipelined run uses `pipedream run --reference` (one process, the
# same bits as MPI). `run --reference` evaluates at the end only, so the
# accuracy after k epochs is the final accuracy of a run of k epochs - the
# same trajectory (step losses identical), truncated.
#
# Simulated wall time: every plan is replayed by `pipedream simulate
# --realistic-latency` on a profile of the model measured here (one thread,
# batch 64; batch 16 for 1f1b-flush, 4 microbatches), one CPU core per
# worker, flat 10 GB/s links; seconds per epoch = samples per epoch /
# simulated throughput.
#
# Outputs in DIR: data/ (the subset), sim/ (profiles, plans, simulate
# reports), <shape>/<opt>-<lr>/<policy>/seed<N>/ep<k>.jsonl (metrics of
# the run of k epochs) and .log, single/<opt>-<lr>/train/seed<N>/metrics.jsonl,
# summary.json, summary.md, curves/ and figures (*.png, scripts/plot.py).
# Environment: BUILD_DIR (default build), NICE (default 15).
set -euo pipefail
cd "$(dirname "$0")/.."

out=runs/staleness
quick=0
runs=1
while [ $# -gt 0 ]; do
  case "$1" in
    --out) out=${2:?--out needs a folder}; shift 2 ;;
    --quick) quick=1; shift ;;
    --no-runs) runs=0; shift ;;
    -h|--help) sed -n '2,46p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "study_staleness.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done

pipedream=${BUILD_DIR:-build}/bin/pipedream
[ -x "$pipedream" ] || { echo "study_staleness.sh: $pipedream not found: build it first with scripts/setup.sh" >&2; exit 2; }
py=/usr/bin/python3
nice=(nice -n "${NICE:-15}")
model=configs/study/mlp16-ln.json

# shape name : first layer of each stage : replicas per stage
shapes=("1-1-1-1:0,13,25,37:1,1,1,1" "2-1-1:0,19,34:2,1,1" "3-1:0,25:3,1")
optlrs=("sgd:0.001" "sgd:0.003" "adam:0.0001" "adam:0.0003")
policies=(stash vertical none flush)
seeds=(0 1 2)
epochs=5
train_n=10000
test_n=5000
if [ "$quick" = 1 ]; then
  shapes=("1-1-1-1:0,13,25,37:1,1,1,1")
  optlrs=("sgd:0.001")
  seeds=(0)
  epochs=2
  train_n=2000
  test_n=1000
fi
mkdir -p "$out/sim"
echo "$epochs" >"$out/epochs"

# Data: a fixed subset, so that an epoch is short.
data="$out/data"
if [ ! -f "$data/done-$train_n-$test_n" ]; then
  rm -rf "$data"
  "$py" scripts/fmnist_subset.py "$data" --train "$train_n" --test "$test_n"
  touch "$data/done-$train_n-$test_n"
fi

# Profiles, plans and simulated time per epoch of every (shape, policy).
for b in 64 16; do
  prof="$out/sim/profile-b$b.json"
  [ -f "$prof" ] || "${nice[@]}" "$pipedream" profile --model "$model" --batch "$b" --threads 1 --min-time 3 \
    -o "$prof" >"$out/sim/profile-b$b.log"
done
"$py" scripts/study_plan.py "$out/sim/profile-b64.json" --starts 0 -o "$out/sim/single.json"
"$pipedream" simulate --plan "$out/sim/single.json" --realistic-latency --json >"$out/sim/single-train.json"
for s in "${shapes[@]}"; do
  IFS=: read -r shape starts replicas <<<"$s"
  "$py" scripts/study_plan.py "$out/sim/profile-b64.json" --starts "$starts" --replicas "$replicas" -o "$out/sim/$shape.json"
  "$py" scripts/study_plan.py "$out/sim/profile-b16.json" --starts "$starts" --replicas "$replicas" -o "$out/sim/$shape-b16.json"
  for w in stash vertical none; do
    "$pipedream" simulate --plan "$out/sim/$shape.json" --weights "$w" --realistic-latency --json >"$out/sim/$shape-$w.json"
  done
  "$pipedream" simulate --plan "$out/sim/$shape-b16.json" --schedule 1f1b-flush --microbatches 4 --realistic-latency \
    --json >"$out/sim/$shape-flush.json"
done

common=(--model "$model" --data fashion-mnist --data-dir "$data" --seed)

# One run: skipped when its metrics exist (the grid can be resumed).
# run_one DIR LOG METRICS COMMAND...
run_one() {
  local metrics=$3
  [ -s "$metrics" ] && return 0
  local tmp="$metrics.part"
  if "${nice[@]}" "${@:4}" --metrics "$tmp" >"$2" 2>&1; then
    mv "$tmp" "$metrics"
  else
    # A failed run (diverged, or refused) keeps its log and metrics: the
    # summary counts it.
    echo "study_staleness.sh: run failed, see $2" >&2
    mv "$tmp" "$metrics" 2>/dev/null || echo '{"event":"failed"}' >"$metrics"
  fi
}

if [ "$runs" = 1 ]; then
  started=$(date +%s)
  for ol in "${optlrs[@]}"; do
    IFS=: read -r opt lr <<<"$ol"
    for seed in "${seeds[@]}"; do
      dir="$out/single/$opt-$lr/train/seed$seed"
      mkdir -p "$dir"
      run_one "$dir" "$dir/train.log" "$dir/metrics.jsonl" \
        "$pipedream" train "${common[@]}" "$seed" --batch 64 --optimizer "$opt" --lr "$lr" --epochs "$epochs" --threads 1
    done
  done
  for s in "${shapes[@]}"; do
    IFS=: read -r shape _ _ <<<"$s"
    for ol in "${optlrs[@]}"; do
      IFS=: read -r opt lr <<<"$ol"
      for seed in "${seeds[@]}"; do
        for policy in "${policies[@]}"; do
          dir="$out/$shape/$opt-$lr/$policy/seed$seed"
          mkdir -p "$dir"
          if [ "$policy" = flush ]; then
            how=(--schedule 1f1b-flush --batch 64 --microbatches 4)
          else
            how=(--batch 64 --weights "$policy")
          fi
          for k in $(seq 1 "$epochs"); do
            run_one "$dir" "$dir/ep$k.log" "$dir/ep$k.jsonl" \
              "$pipedream" run --reference --plan "$out/sim/$shape.json" "${common[@]}" "$seed" \
              --optimizer "$opt" --lr "$lr" --epochs "$k" "${how[@]}"
          done
        done
        echo "$(date +%T) done $shape $opt lr $lr seed $seed ($(( $(date +%s) - started )) s)" >&2
      done
    done
  done
fi

"$py" scripts/study_summary.py "$out"
if /usr/bin/python3 -c 'import matplotlib' 2>/dev/null; then
  for spec in "$out"/curves/fig-*.json; do
    "$py" scripts/plot.py bands "$spec" -o "${spec%.json}.png" >&2
  done
else
  echo "study_staleness.sh: matplotlib not installed (apt-get install python3-matplotlib): no figures" >&2
fi
echo "outputs in $out/ (summary.md, curves/fig-*.png)" >&2

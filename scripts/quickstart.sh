#!/usr/bin/env bash
# Quick start: install what is missing, build, then the main job in one
# command - profile the `cnn` model, plan it for 4 CPU workers, and train it
# on Fashion-MNIST with the pipelined runtime (4 MPI processes, 1F1B-RR with
# weight stashing), printing the plan, a progress bar, test accuracy and
# throughput. Outputs in runs/quickstart/:
#   plan.json        the plan the planner chose (edit it and pass --plan to reuse)
#   metrics.jsonl    loss/accuracy per step, evaluations, per-rank busy fraction and memory
#   trace.json       Chrome trace of every rank (open in https://ui.perfetto.dev)
#   final.safetensors  the trained model, all stages merged
#   curves.png       loss and accuracy against step and time (needs matplotlib)
# EPOCHS=1 scripts/quickstart.sh for a shorter run.
#
# --straight asks the planner for one worker per stage: for a model this
# small on one machine its unconstrained optimum is plain data parallelism
# (config "4"), which shows no pipeline. Drop --straight to see that.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
out=runs/quickstart
mkdir -p "$out"
build/bin/pipedream run --plan auto --workers 4 --straight --plan-out "$out/plan.json" \
  --model cnn --data fashion-mnist --epochs "${EPOCHS:-2}" --batch 64 \
  --optimizer adam --lr 0.001 --lr-schedule cosine --seed 0 --threads-per-worker 1 \
  --metrics "$out/metrics.jsonl" --trace "$out/trace.json" --save "$out/final.safetensors"

# The curves are a convenience: without matplotlib the quick start still
# succeeds and says how to draw them.
plot=(/usr/bin/python3 scripts/plot.py curves "quickstart=$out/metrics.jsonl" -o "$out/curves.png")
if /usr/bin/python3 -c 'import matplotlib' 2>/dev/null; then
  "${plot[@]}" || echo "quickstart: drawing $out/curves.png failed (the training above succeeded)" >&2
else
  echo "quickstart: for loss/accuracy curves install matplotlib (sudo apt-get install python3-matplotlib)," \
       "then run: ${plot[*]}"
fi

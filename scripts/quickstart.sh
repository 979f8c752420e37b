#!/usr/bin/env bash
# Quick start: install what is missing, build, and run the main job —
# train the `cnn` model on Fashion-MNIST for two epochs on one worker,
# with metrics in runs/quickstart/metrics.jsonl and the final weights in
# runs/quickstart/final.safetensors.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
out=runs/quickstart
mkdir -p "$out"
build/bin/pipedream models
build/bin/pipedream train --model cnn --data fashion-mnist --epochs "${EPOCHS:-2}" --batch 64 \
  --optimizer sgd --lr 0.05 --momentum 0.9 --seed 1 --threads "$(nproc)" \
  --metrics "$out/metrics.jsonl" --save "$out/final.safetensors"
echo "metrics: $out/metrics.jsonl   weights: $out/final.safetensors"

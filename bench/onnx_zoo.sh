#!/bin/bash
# The zoo of onnx/README.md: per model, one JSON line with its parameters,
# the top-level layers the import made, whether `run --plan auto --workers
# 4` equals `--reference` bit for bit, and the training step time at one
# thread against PyTorch CPU eager on the same batch (forward, loss,
# backward, SGD step; medians over 10 steps after 3). The numerics against
# PyTorch (loss, gradients, and every weight after 5 SGD steps) are
# tests/onnx/torch_numerics_test.cpp's (ctest -R TorchNumerics).
#
#   bench/onnx_zoo.sh [BUILD_DIR] [MODEL...]     (default: the whole zoo)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=$(cd "${1:-$ROOT/build}" && pwd)
shift || true
PD=$BUILD/bin/pipedream
PY=/usr/bin/python3
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
cd "$OUT"  # run --plan auto writes its plan to the working directory
export OMP_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
LM=$ROOT/scripts/torch_models/transformer_lm.py
declare -A ARGS=(
  [resnet50]="resnet50 --input 3,64,64 --classes 10"
  [mobilenet_v3_small]="mobilenet_v3_small --input 3,32,32 --classes 10"
  [efficientnet_b0]="efficientnet_b0 --input 3,64,64 --classes 10"
  [convnext_tiny]="convnext_tiny --input 3,32,32 --classes 10"
  [vit_b_16]="vit_b_16 --input 3,32,32 --classes 10 --kwargs {\"image_size\":32}"
  [EncoderLM]="$LM:EncoderLM --tokens 32"
  [GPT2]="$LM:GPT2 --tokens 32"
  [Llama]="$LM:Llama --tokens 32"
)
MODELS=("$@")
[ ${#MODELS[@]} -gt 0 ] || MODELS=(resnet50 mobilenet_v3_small efficientnet_b0 convnext_tiny vit_b_16 EncoderLM GPT2 Llama)
BATCH=8
for m in "${MODELS[@]}"; do
  onnx=$OUT/$m.onnx
  # shellcheck disable=SC2086
  $PY "$ROOT/scripts/export_torch.py" ${ARGS[$m]} -o "$onnx" --batch $BATCH --dropout 0 >/dev/null
  $PD models --model "$onnx" >"$OUT/models.txt"
  head=$(head -1 "$OUT/models.txt")
  params=$(sed -E 's/^[^:]*: ([^ ]+) parameters.*/\1/' <<<"$head")
  layers=$(sed -E 's/.* ([0-9]+) top-level layers.*/\1/' <<<"$head")
  common="--model $onnx --data synthetic --seed 5 --no-eval --batch $BATCH --minibatches 4"
  $PD run --plan auto --workers 4 $common --save "$OUT/mpi.st" >"$OUT/run.log" 2>&1
  $PD run --plan auto --workers 4 --reference $common --save "$OUT/ref.st" >"$OUT/ref.log" 2>&1
  plan=$(grep -m1 -oE "plan [0-9-]+[^:]*" "$OUT/ref.log" || true)
  equal=$(cmp -s "$OUT/mpi.st" "$OUT/ref.st" && echo true || echo false)
  seconds() {  # cumulative seconds after $1 steps (train --metrics)
    $PD train --model "$onnx" --data synthetic --threads 1 --batch $BATCH --minibatches "$1" --no-eval \
      --metrics "$OUT/m.jsonl" >/dev/null 2>&1
    tail -1 "$OUT/m.jsonl" | $PY -c 'import json,sys; print(json.load(sys.stdin)["seconds"])'
  }
  ours=$($PY -c "print(round(($(seconds 13) - $(seconds 3)) / 10 * 1000, 1))")
  # shellcheck disable=SC2086
  torch=$(ROOT=$ROOT BATCH=$BATCH $PY "$ROOT/bench/onnx_zoo_torch_step.py" ${ARGS[$m]})
  echo "{\"model\":\"$m\",\"parameters\":\"$params\",\"layers\":$layers,\"plan_auto_4\":\"$plan\",\"run_equals_reference\":$equal,\"step_ms\":$ours,\"torch_eager_step_ms\":$torch,\"batch\":$BATCH,\"threads\":1}"
done

#!/bin/bash
# A model that no single worker can train, trained by four.
#
# Exports bench/big_model/wide_mlp.py with PyTorch (width 8192, depth 8,
# inputs 8192: 2.15 GB of weights, so PyTorch's exporter itself writes
# external data), caps EVERY pipedream process at CAP bytes with a memory
# cgroup of its own (bench/big_model/capped.sh; each MPI rank its own), and
#  - runs `models`, `profile --memory CAP` and `plan --memory CAP` under it;
#  - checks that `train --memory CAP` on one worker exits 2, before allocating;
#  - trains on 4 workers for STEPS steps (Adam: weights, gradients and two
#    moments, 8.6 GB in all, over 3x CAP), each rank under CAP, printing each
#    rank's measured peak resident memory beside the plan's figure;
#  - loads the run's --save shards into the PyTorch module and checks that
#    every tensor moved from the exported weights.
# SCHEDULE=1f1b-flush runs that family of the plan's table instead of the
# planner's choice. Prints one JSON line per step (bench/README.md). Needs root (cgroups),
# python3-torch, python3-onnx and about 4 x CAP of free memory.
#   bench/big_model.sh                      # defaults below
#   WIDTH=1024 CAP=64000000 bench/big_model.sh   # a small rehearsal
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${BUILD:-$ROOT/build}
OUT=${OUT:-/tmp/pd_big_model}
WIDTH=${WIDTH:-8192} DEPTH=${DEPTH:-8} CAP=${CAP:-2800000000} STEPS=${STEPS:-3} BATCH=${BATCH:-8}
PD=$BUILD/bin/pipedream
CAPPED=$ROOT/bench/big_model/capped.sh
mkdir -p "$OUT"
if [ -z "${SKIP_EXPORT:-}" ]; then rm -rf "$OUT"/*; fi  # SKIP_EXPORT=1: keep OUT's export
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1

json() { echo "{\"bench\": \"big_model\", $1}"; }
kb() { tail -1 "$1"; }  # /usr/bin/time writes "Command exited with non-zero status N" first

start=$(date +%s)
[ -n "${SKIP_EXPORT:-}" ] || OMP_NUM_THREADS=2 /usr/bin/python3 "$ROOT/scripts/export_torch.py" "$ROOT/bench/big_model/wide_mlp.py:WideMLP" \
  -o "$OUT/mlp.onnx" --input "$WIDTH" --batch 2 \
  --kwargs "{\"width\": $WIDTH, \"depth\": $DEPTH, \"inputs\": $WIDTH}" ${EXTERNAL:+--external-data} >"$OUT/export.log" 2>&1
weights=$(du -cb "$OUT"/* | tail -1 | cut -f1)
external=$(ls "$OUT" | grep -vc -e '\.onnx$' -e '\.log$' || true)
json "\"step\": \"export\", \"seconds\": $(( $(date +%s) - start )), \"files_bytes\": $weights, \"external_data_files\": $external, \"onnx_bytes\": $(stat -c %s "$OUT/mlp.onnx")"

step() {  # step NAME EXPECTED_STATUS CMD...: runs CMD capped, prints its line
  local name=$1 want=$2
  shift 2
  local t0=$(date +%s) status=0
  "$CAPPED" "$CAP" "$name" "$OUT/$name.peak_kb" "$@" >"$OUT/$name.log" 2>&1 || status=$?
  json "\"step\": \"$name\", \"exit\": $status, \"expected_exit\": $want, \"seconds\": $(( $(date +%s) - t0 )), \"peak_rss_bytes\": $(( $(kb "$OUT/$name.peak_kb") * 1024 )), \"cap_bytes\": $CAP"
  if [ "$status" != "$want" ]; then tail -20 "$OUT/$name.log" >&2; [ "$name" = plan ] && return 1; exit 1; fi
}

step models 0 "$PD" models --model "$OUT/mlp.onnx"
step profile 0 "$PD" profile --model "$OUT/mlp.onnx" --memory "$CAP" --batch "$BATCH" --warmup 0 --iters 2 --optimizer adam --threads 2 -o "$OUT/profile.json"
# The planner finds a cut under the cap itself (uneven measured times once
# made its fastest cut hold 3 Gemms on a stage, over the cap: fixed since).
# Should it find none, the run (said in a line) takes a plan of 4 stages
# with DEPTH/4 Gemm layers each, 1f1b-flush.
if ! step plan 0 "$PD" plan --profile "$OUT/profile.json" --workers 4 --bandwidth 4 --straight --memory "$CAP" --schedule auto -o "$OUT/plan.json"; then
  per=$(( DEPTH / 4 )) last=$(( 2 * DEPTH + 1 ))
  /usr/bin/python3 - "$OUT/plan.json" "$per" "$last" <<'PY'
import json, sys
path, per, last = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
ends = [2 * per * (s + 1) for s in range(3)] + [last]   # Flatten, then (Gemm, Relu) pairs
stages, first = [], 0
for s, end in enumerate(ends):
    stages.append({"index": s, "layers": [first, end], "replicas": 1, "ranks": [s]})
    first = end + 1
json.dump({"format": "pipedream-plan/1", "config": "1-1-1-1", "stages": stages}, open(path, "w"))
PY
  echo "run it with --schedule 1f1b-flush --microbatches 4 (the bench's balanced plan)" > "$OUT/plan.log"
  json "\"step\": \"plan_fallback\", \"why\": \"the planner found no partition under the cap\", \"plan\": \"4 stages of $per Gemm layers, 1f1b-flush\""
fi
step train_one_worker 2 "$PD" train --model "$OUT/mlp.onnx" --data synthetic --optimizer adam --batch "$BATCH" --minibatches "$STEPS" --memory "$CAP"
json "\"step\": \"train_one_worker_message\", \"message\": $(grep -m1 'training state' "$OUT/train_one_worker.log" | /usr/bin/python3 -c 'import json,sys; print(json.dumps(sys.stdin.read().strip()))')"

# The schedule and microbatch count the planner chose (the first line of
# plan.log naming both: its `pipedream run` command); interleaved-1f1b runs
# stages/4 virtual stages per worker.
# SCHEDULE=name overrides the family (its microbatch count from the plan's table).
read -r CHOSEN CHOSEN_MICRO < <(sed -n 's/.*--schedule \([^ ]*\) --microbatches \([0-9]*\).*/\1 \2/p' "$OUT/plan.log" | head -1) || true
MICRO=""
if [ -n "${SCHEDULE:-}" ]; then MICRO=$(grep -E "^  $SCHEDULE " "$OUT/plan.log" | awk '{print $3}' | head -1); fi
if ! [[ "$MICRO" =~ ^[0-9]+$ ]]; then SCHEDULE=${CHOSEN:-1f1b-flush} MICRO=${CHOSEN_MICRO:-4}; fi  # not in the table: the choice
while [ $(( BATCH % MICRO )) != 0 ]; do MICRO=$(( MICRO - 1 )); done
EXTRA=""
if [ "$SCHEDULE" = interleaved-1f1b ]; then
  EXTRA="--virtual-stages $(( $(/usr/bin/python3 -c "import json; print(len(json.load(open('$OUT/plan.json'))['stages']))") / 4 ))"
fi
json "\"step\": \"schedule\", \"schedule\": \"$SCHEDULE\", \"microbatches\": $MICRO, \"batch\": $BATCH"

# 4 ranks, each in its own cgroup capped at CAP.
t0=$(date +%s)
status=0
mpirun --allow-run-as-root --oversubscribe --bind-to none -np 4 \
  "$CAPPED" "$CAP" run "$OUT/run.RANK.peak_kb" \
  "$PD" run --plan "$OUT/plan.json" --model "$OUT/mlp.onnx" --data synthetic --optimizer adam \
  --schedule "$SCHEDULE" --microbatches "$MICRO" $EXTRA --batch "$BATCH" --minibatches "$STEPS" --no-eval --threads-per-worker 1 \
  --save "$OUT/trained.safetensors.index.json" >"$OUT/run.log" 2>&1 || status=$?
json "\"step\": \"run\", \"exit\": $status, \"seconds\": $(( $(date +%s) - t0 )), \"workers\": 4, \"steps\": $STEPS, \"cap_bytes\": $CAP"
if [ "$status" != 0 ]; then tail -30 "$OUT/run.log" >&2; exit 1; fi
# Each rank's measured peak resident memory beside the plan's figure for its
# stages (the schedule family's replayed memory, from the plan's table) and
# the run's own allocator peak.
FAMILY_MEMORY=$(grep -E "^  $SCHEDULE " "$OUT/plan.log" | sed 's/ *<- chosen//' | awk '{print $(NF-1), $NF}' | head -1 || true)
for r in 0 1 2 3; do
  run_line=$( (grep -E "^  rank $r " "$OUT/run.log" || true) | head -1 | /usr/bin/python3 -c 'import json,sys; print(json.dumps(sys.stdin.read().strip()))')
  json "\"step\": \"run_rank\", \"rank\": $r, \"peak_rss_bytes\": $(( $(kb "$OUT/run.$r.peak_kb") * 1024 )), \"cap_bytes\": $CAP, \"plan_fullest_worker\": \"$FAMILY_MEMORY\", \"run_says\": $run_line"
done

# The shards into the PyTorch module.
/usr/bin/python3 - "$OUT" "$WIDTH" "$DEPTH" "$ROOT" <<'PY'
import json, os, struct, sys
import numpy as np, torch
out, width, depth, root = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
sys.path.insert(0, os.path.join(root, "bench", "big_model"))
from wide_mlp import WideMLP

def read_safetensors(path):
    with open(path, "rb") as f:
        header = json.loads(f.read(struct.unpack("<Q", f.read(8))[0]))
        base = f.tell()
        tensors = {}
        for name, t in header.items():
            if name == "__metadata__":
                continue
            b, e = t["data_offsets"]
            f.seek(base + b)
            tensors[name] = torch.from_numpy(np.frombuffer(f.read(e - b), np.float32).reshape(t["shape"]).copy())
        return tensors

index = json.load(open(os.path.join(out, "trained.safetensors.index.json")))
files = sorted(set(index["weight_map"].values()))
model = WideMLP(width=width, depth=depth, inputs=width)
state = {}
for f in files:
    for name, t in read_safetensors(os.path.join(out, f)).items():
        state[name.split(".", 1)[1]] = t
        del t
model.load_state_dict(state, strict=True)  # every tensor, named and shaped as the module's
del state
with torch.no_grad():
    logits = model(torch.randn(2, width))
print(json.dumps({"bench": "big_model", "step": "load_into_pytorch", "shards": len(files),
                  "tensors": len(model.state_dict()), "logits_finite": bool(torch.isfinite(logits).all())}))
PY

#!/usr/bin/env bash
# Everything that needs a GPU, in one go (for a machine lent for ~30 min):
# builds with CUDA, runs the GPU tests (test_gpu, then the mpirun GPU
# pipelines test_gpu_pipeline), then `pipedream-bench core --device cuda` on
# cnn, vgg-mini, resnet50 (batch 64) and gpt-mini (its own batch 8, and 64),
# the PyTorch eager peer on the same GPU when that PyTorch has CUDA, and
# bench-comm through the staged transport (and NCCL with >= 2 GPUs).
#
# Output: JSON lines - one {"check": ...} line per step (exit code, seconds,
# where its log went) plus every benchmark's own lines - to stdout and to
# $OUT/gpu_check.jsonl when $OUT is set (logs to $OUT/logs/). Never stops at
# a failing step: the summary line at the end lists them.
#
# Usage: scripts/gpu_check.sh [--build-dir DIR] [--skip-build] [--steps K] [--python PATH]
set -uo pipefail

here="$(cd "$(dirname "$0")/.." && pwd)"
build="$here/build"
skip_build=0
steps=20
python="${PYTHON:-python3}"
while [[ $# -gt 0 ]]; do
  case "$1" in
    --build-dir) build="$2"; shift 2 ;;
    --skip-build) skip_build=1; shift ;;
    --steps) steps="$2"; shift 2 ;;
    --python) python="$2"; shift 2 ;;
    -h|--help) sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "error: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done

out="${OUT:-$build/gpu_check}"
mkdir -p "$out/logs"
jsonl="$out/gpu_check.jsonl"
: > "$jsonl"
failed=()

emit() { echo "$1" | tee -a "$jsonl"; }

# step NAME CMD...: runs CMD, logs to $out/logs/NAME.log, emits a check line.
step() {
  local name="$1"; shift
  local log="$out/logs/$name.log" t0 t1 rc
  t0=$(date +%s.%N)
  "$@" > "$log" 2>&1
  rc=$?
  t1=$(date +%s.%N)
  emit "$(printf '{"check": "%s", "exit_code": %d, "seconds": %s, "log": "%s"}' "$name" "$rc" \
          "$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }')" "$log")"
  [[ $rc -eq 0 ]] || failed+=("$name")
  return $rc
}

# Benchmark lines (stdout lines starting with '{') go into the JSON lines too.
bench_step() {
  local name="$1"; shift
  step "$name" "$@"
  grep '^{' "$out/logs/$name.log" | tee -a "$jsonl"
}

mpirun_cmd=(mpirun --allow-run-as-root --oversubscribe --bind-to none)

emit "$(printf '{"check": "machine", "gpus": "%s", "driver": "%s", "nproc": %d, "date": "%s"}' \
        "$(nvidia-smi --query-gpu=name,memory.total --format=csv,noheader 2>/dev/null | paste -sd ';')" \
        "$(nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null | head -1)" \
        "$(nproc)" "$(date -u +%FT%TZ)")"
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)

if [[ $skip_build -eq 0 ]]; then
  step configure cmake -S "$here" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DPIPEDREAM_CUDA=ON
  step build cmake --build "$build" -j"$(nproc)"
fi
bin="$build/bin"

# 1. GPU tests: kernels/layers/optimizers vs CPU, cnn step, CLI on the GPU.
step test_gpu "$build/tests/test_gpu" --gtest_color=no --gtest_output="json:$out/test_gpu.json"
summarise_gtest() { grep -E '^\[  (PASSED|FAILED)  \]|^\[  SKIPPED \] [0-9]+ test' "$1" | sed 's/^/# /'; }
summarise_gtest "$out/logs/test_gpu.log"
# 2. Pipelines under mpirun: staged (bitwise vs --reference), cnn step vs
#    CPU, NCCL (skips with one GPU: NCCL refuses two ranks on one GPU).
step test_gpu_pipeline "${mpirun_cmd[@]}" -np 2 "$build/tests/test_gpu_pipeline" --gtest_color=no
summarise_gtest "$out/logs/test_gpu_pipeline.log"
# 3. The CLI end to end on the GPU: train, and a 2-rank staged run against
#    its --reference (weights must be identical files' tensors).
data=(--data synthetic)
[[ -d /usr/share/datasets/fashion-mnist ]] && data=(--data fashion-mnist)
step train_cnn "$bin/pipedream" train --model cnn --epochs 1 "${data[@]}" --device cuda --metrics "$out/train_cnn.jsonl"
plan="$out/plan-cnn-2.json"
cat > "$plan" <<'PLAN'
{"format": "pipedream-plan/1", "schedule": "1f1b-rr", "config": "1-1",
 "stages": [{"index": 0, "layers": [0, 4], "replicas": 1, "ranks": [0]},
            {"index": 1, "layers": [5, 9], "replicas": 1, "ranks": [1]}]}
PLAN
run_args=(--plan "$plan" --model cnn --data synthetic --minibatches 200 --batch 64 --device cuda --deterministic --no-eval)
step run_staged "${mpirun_cmd[@]}" -np 2 "$bin/pipedream" run "${run_args[@]}" --save "$out/run_staged.safetensors"
step run_reference "$bin/pipedream" run "${run_args[@]}" --reference --save "$out/run_reference.safetensors"
step run_staged_equals_reference "$python" - "$out/run_staged.safetensors" "$out/run_reference.safetensors" <<'PY'
import json, struct, sys
def tensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        head = json.loads(f.read(n))
        data = f.read()
    head.pop("__metadata__", None)
    return {k: data[v["data_offsets"][0]:v["data_offsets"][1]] for k, v in head.items()}
a, b = tensors(sys.argv[1]), tensors(sys.argv[2])
diff = sorted(k for k in a if a[k] != b.get(k))
print(json.dumps({"tensors": len(a), "differ": diff}))
sys.exit(1 if diff or a.keys() != b.keys() else 0)
PY
if [[ $gpus -ge 2 ]]; then
  step run_nccl "${mpirun_cmd[@]}" -np 2 "$bin/pipedream" run "${run_args[@]}" --transport nccl --save "$out/run_nccl.safetensors"
fi

# 4. Throughput against PyTorch eager on the same GPU.
common=(--device cuda --warmup 5 --steps "$steps")
bench_step bench_core_b64 "$bin/pipedream-bench" core --workloads cnn,vgg-mini,resnet50,gpt-mini --batch 64 "${common[@]}"
bench_step bench_core_gpt8 "$bin/pipedream-bench" core --workloads gpt-mini "${common[@]}"
if "$python" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
  bench_step torch_b64 "$python" "$here/bench/torch_peer.py" --workloads cnn,vgg-mini,resnet50,gpt-mini --batch 64 "${common[@]}"
  bench_step torch_gpt8 "$python" "$here/bench/torch_peer.py" --workloads gpt-mini "${common[@]}"
else
  emit '{"check": "torch_peer", "skipped": "this python has no PyTorch with CUDA"}'
fi

# pipedream / PyTorch per (workload, batch): the target is ratio >= 0.9.
"$python" - "$jsonl" <<'PY' | tee -a "$jsonl"
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
pd = {(l["workload"], l["batch"]): l for l in lines if l.get("suite") == "core"}
pt = {(l["workload"], l["batch"]): l for l in lines if l.get("suite") == "torch-peer"}
for key in sorted(pd.keys() & pt.keys()):
    a, b = pd[key]["samples_per_s"], pt[key]["samples_per_s"]
    print(json.dumps({"compare": key[0], "batch": key[1], "device": pd[key]["device"],
                      "pipedream_samples_per_s": a, "torch_samples_per_s": b, "ratio": a / b,
                      "pipedream_median_step_ms": pd[key]["median_step_ms"],
                      "torch_median_step_ms": pt[key]["median_step_ms"]}))
PY

# 5. Communication: staged (2 ranks share a GPU if there is one), NCCL with 2+ GPUs.
bench_step bench_comm_staged "${mpirun_cmd[@]}" -np 2 "$bin/pipedream" bench-comm --transport staged --jsonl -
if [[ $gpus -ge 2 ]]; then
  bench_step bench_comm_nccl "${mpirun_cmd[@]}" -np "$gpus" "$bin/pipedream" bench-comm --transport nccl --jsonl -
fi

list=""
for f in "${failed[@]}"; do list+="${list:+, }\"$f\""; done
emit "{\"check\": \"summary\", \"failed\": [$list]}"
[[ ${#failed[@]} -eq 0 ]]

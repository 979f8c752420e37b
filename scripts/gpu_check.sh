#!/usr/bin/env bash
# Everything that needs a GPU, in one command of about 6 minutes on one
# H100/H200 with --skip-build (a kit from ../shared/tools/gpu-kit/pack.sh):
#  1. throughput, pipedream against PyTorch on the same GPU in the same run:
#     `pipedream-bench core --device cuda` on cnn, vgg-mini, resnet50
#     (batch 64), gpt-mini (batch 8 and 64) and the zoo's gpt (batch 8 x
#     1024 tokens), in fp32 (TF32 off), with --precision bf16 and with
#     --allow-tf32, and bench/torch_peer.py on the same workloads in fp32
#     (TF32 off), with --amp (bf16 autocast, SDPA, channels_last + TF32)
#     and with --allow-tf32: one "compare" line per workload and recipe
#     (scripts/gpu_summary.py ratios: fp32/fp32, bf16/amp, tf32/tf32);
#     and two imported ONNX models (scripts/export_torch.py at batch 4:
#     transformer_lm.py's GPT2 and resnet50 at 64x64) timed the same way
#     in fp32 at batch 64, workloads onnx-gpt2 and onnx-resnet50;
#  2. `pipedream profile --device cuda` on gpt-mini at batch 64, fp32 and
#     bf16: LayerNorm ln_f's backward / forward; on the zoo's gpt at batch
#     8, fp32 and bf16: every layer's forward and backward;
#  3. 2-rank staged pipelines (cnn, fp32 and bf16) against `run --reference`,
#     bit for bit, and `train` on the GPU;
#  4. `bench-comm --transport staged`, 2 ranks: 16 MB point-to-point and a
#     32 MB all-reduce, with OMPI_MCA_btl_vader_single_copy_mechanism=none
#     (as the GPU machines set it) and without it (MPI's single copy);
#     NCCL too with 2+ GPUs;
#  5. the GPU tests: test_gpu (imported ONNX models trained on the GPU
#     against the CPU among them), then test_gpu_pipeline under mpirun;
#  6. `pipedream-bench core --op-times` in bf16 on the zoo's gpt (batch 8,
#     with and without bf16 storage) and resnet50 (batch 64): device time
#     per DeviceOps entry, and PyTorch's device time per operator for the
#     same steps in its amp recipe (torch.profiler), last so the budget cuts
#     them first.
# Each step has a time limit and the whole a budget (--budget, 380 s): a
# step that would start past the budget is skipped and listed as such.
#
# Output: JSON lines - one {"check": ...} line per step (exit code,
# seconds, limit, its log) plus every benchmark's lines tagged with "step"
# - to stdout and to $OUT/gpu_check.jsonl when $OUT is set (else
# BUILD/gpu_check/), logs in logs/; at the end a markdown summary
# (summary.md, from scripts/gpu_summary.py table) to paste. Never stops at
# a failing step: the summary line lists them and the skipped ones; the
# exit code is 1 if any step failed or was skipped, 2 for bad arguments or
# when no GPU is visible.
#
# Usage: scripts/gpu_check.sh [--build-dir DIR] [--skip-build] [--steps K]
#          [--warmup K] [--budget SECONDS] [--python PATH]
# --python: a python3 with a CUDA PyTorch, run without the kit's
# LD_LIBRARY_PATH (default: /opt/pdkit/python3 when it exists, else $PYTHON
# or python3).
set -uo pipefail

here="$(cd "$(dirname "$0")/.." && pwd)"
build="$here/build"
skip_build=0
steps=20
warmup=5
budget=380
python="${PYTHON:-python3}"
[[ -x /opt/pdkit/python3 ]] && python=/opt/pdkit/python3
while [[ $# -gt 0 ]]; do
  case "$1" in
    --build-dir) build="$2"; shift 2 ;;
    --skip-build) skip_build=1; shift ;;
    --steps) steps="$2"; shift 2 ;;
    --warmup) warmup="$2"; shift 2 ;;
    --budget) budget="$2"; shift 2 ;;
    --python) python="$2"; shift 2 ;;
    -h|--help) sed -n '2,40p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "error: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
for n in "$steps" "$warmup" "$budget"; do
  [[ "$n" =~ ^[0-9]+$ ]] || { echo "error: --steps, --warmup and --budget take whole numbers, got '$n'" >&2; exit 2; }
done

# Without a GPU every step would fail, one after another: say so at once.
if ! command -v nvidia-smi > /dev/null || ! nvidia-smi -L 2> /dev/null | grep -q '^GPU'; then
  echo "error: no GPU is visible (nvidia-smi -L lists none): scripts/gpu_check.sh runs on a GPU machine" >&2
  exit 2
fi

out="${OUT:-$build/gpu_check}"
rm -rf "$out/logs"  # no log of an earlier run may stand for a step skipped in this one
mkdir -p "$out/logs"
jsonl="$out/gpu_check.jsonl"
: > "$jsonl"
failed=()
skipped=()
started=$(date +%s)
summary_py="$here/scripts/gpu_summary.py"

emit() { echo "$1" | tee -a "$jsonl"; }

# step NAME LIMIT_S CMD...: runs CMD under `timeout` (LIMIT_S, cut to what
# is left of the budget), logs to logs/NAME.log, emits a check line.
step() {
  local name="$1" limit="$2"; shift 2
  local log="$out/logs/$name.log" t0 t1 rc left timed_out=false
  left=$(( budget - ($(date +%s) - started) ))
  if (( left < 10 )); then
    emit "$(printf '{"check": "%s", "skipped": "time budget of %d s spent"}' "$name" "$budget")"
    skipped+=("$name")
    return 1
  fi
  (( limit > left )) && limit=$left
  t0=$(date +%s.%N)
  timeout -k 5 "$limit" "$@" > "$log" 2>&1
  rc=$?
  t1=$(date +%s.%N)
  [[ $rc -eq 124 || $rc -eq 137 ]] && timed_out=true
  emit "$(printf '{"check": "%s", "exit_code": %d, "seconds": %s, "limit_s": %d, "timed_out": %s, "log": "%s"}' \
          "$name" "$rc" "$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }')" "$limit" "$timed_out" "$log")"
  [[ $rc -eq 0 ]] || failed+=("$name")
  return $rc
}

# bench_step NAME LIMIT_S TAGS CMD...: a step whose stdout JSON lines join
# the output, each tagged with "step": NAME and TAGS (e.g. '"recipe": "bf16", ').
bench_step() {
  local name="$1" limit="$2" tags="$3"; shift 3
  step "$name" "$limit" "$@"
  grep '^{' "$out/logs/$name.log" | sed "s/^{/{\"step\": \"$name\", $tags/" | tee -a "$jsonl"
}

# gtest's counts from a log, as one JSON line.
gtest_counts() {
  local name="$1" log="$out/logs/$1.log" passed failed_n skipped_n
  [[ -f "$log" ]] || return 0
  passed=$(grep -E '^\[  PASSED  \] [0-9]+ test' "$log" | grep -oE '[0-9]+' | head -1)
  failed_n=$(grep -E '^\[  FAILED  \] [0-9]+ test' "$log" | grep -oE '[0-9]+' | head -1)
  skipped_n=$(grep -E '^\[  SKIPPED \] [0-9]+ test' "$log" | grep -oE '[0-9]+' | head -1)
  emit "$(printf '{"gtest": "%s", "passed": %d, "failed": %d, "skipped": %d}' "$name" "${passed:-0}" "${failed_n:-0}" "${skipped_n:-0}")"
}

mpirun_cmd=(mpirun --allow-run-as-root --oversubscribe --bind-to none)

emit "$(printf '{"check": "machine", "gpus": "%s", "driver": "%s", "nproc": %d, "date": "%s", "budget_s": %d, "python": "%s"}' \
        "$(nvidia-smi --query-gpu=name,memory.total --format=csv,noheader 2>/dev/null | paste -sd ';')" \
        "$(nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null | head -1)" \
        "$(nproc)" "$(date -u +%FT%TZ)" "$budget" "$python")"
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)

if [[ $skip_build -eq 0 ]]; then
  cmake -S "$here" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DPIPEDREAM_CUDA=ON > "$out/logs/configure.log" 2>&1 &&
    cmake --build "$build" -j"$(nproc)" > "$out/logs/build.log" 2>&1
  emit "$(printf '{"check": "build", "exit_code": %d, "log": "%s"}' $? "$out/logs/build.log")"
  started=$(date +%s)  # the budget is for the measurements
fi
bin="$build/bin"

# 1. Throughput, ours and PyTorch's, each recipe. Limits: the expected
#    seconds on an H100 (process start, cuDNN/cuBLAS set-up, warm-up and
#    --steps steps) with room; the zoo gpt's fp32 step is ~0.3 s.
common=(--device cuda --warmup "$warmup" --steps "$steps")
# Ours: fp32 (TF32 off), bf16, and fp32 with --allow-tf32 ("tf32").
core_recipe() {
  local recipe="$1" precision=() tag="\"recipe\": \"$1\", "
  [[ $recipe == bf16 ]] && precision=(--precision bf16)
  [[ $recipe == tf32 ]] && precision=(--allow-tf32)
  bench_step "core_${recipe}_b64" 45 "$tag" "$bin/pipedream-bench" core --workloads cnn,vgg-mini,resnet50,gpt-mini \
    --batch 64 "${common[@]}" "${precision[@]}"
  bench_step "core_${recipe}_gpt_mini_b8" 15 "$tag" "$bin/pipedream-bench" core --workloads gpt-mini --batch 8 \
    "${common[@]}" "${precision[@]}"
  bench_step "core_${recipe}_gpt_b8" 40 "$tag" "$bin/pipedream-bench" core --model gpt --batch 8 "${common[@]}" \
    "${precision[@]}"
}
core_recipe fp32
# Imported ONNX models: the segment interpreter's ops on the GPU. Exported
# with any PyTorch (CPU is enough), at batch 4; trained at batch 64.
onnx_dir="$out/onnx"
if timeout 60 "$python" -c 'import torch, torchvision' > "$out/logs/onnx_torch_probe.log" 2>&1; then
  mkdir -p "$onnx_dir"
  lm="$here/scripts/torch_models/transformer_lm.py"
  if step onnx_export 90 bash -c "'$python' '$here/scripts/export_torch.py' '$lm:GPT2' --tokens 32 --batch 4 --dropout 0 \
        -o '$onnx_dir/onnx-gpt2.onnx' && '$python' '$here/scripts/export_torch.py' resnet50 --input 3,64,64 \
        --classes 10 --batch 4 --dropout 0 -o '$onnx_dir/onnx-resnet50.onnx'"; then
    for m in gpt2 resnet50; do
      bench_step "core_fp32_onnx_${m}_b64" 30 '"recipe": "fp32", ' "$bin/pipedream-bench" core \
        --model "$onnx_dir/onnx-$m.onnx" --batch 64 "${common[@]}"
    done
  fi
else
  emit "$(printf '{"check": "onnx_export", "skipped": "%s cannot import torch and torchvision (logs/onnx_torch_probe.log)"}' "$python")"
  skipped+=(onnx_export)
fi
core_recipe bf16
peer_workloads=cnn:64,vgg-mini:64,resnet50:64,gpt-mini:64,gpt-mini:8,gpt:8
have_torch=0
timeout 90 "$python" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' \
  > "$out/logs/torch_probe.log" 2>&1 && have_torch=1
if [[ $have_torch -eq 1 ]]; then
  bench_step torch_fp32 60 "" "$python" "$here/bench/torch_peer.py" --workloads "$peer_workloads" "${common[@]}"
  bench_step torch_amp 45 "" "$python" "$here/bench/torch_peer.py" --amp --workloads "$peer_workloads" "${common[@]}"
else
  emit "$(printf '{"check": "torch_peer", "skipped": "%s has no PyTorch with CUDA (logs/torch_probe.log)"}' "$python")"
  skipped+=(torch_peer)
fi
core_recipe tf32
if [[ $have_torch -eq 1 ]]; then
  bench_step torch_tf32 60 "" "$python" "$here/bench/torch_peer.py" --allow-tf32 --workloads "$peer_workloads" \
    "${common[@]}"
fi
"$python" "$summary_py" ratios "$jsonl" | tee -a "$jsonl"

# 2. Per-layer profile of gpt-mini at batch 64: LayerNorm ln_f's backward / forward.
for recipe in fp32 bf16; do
  precision=()
  [[ $recipe == bf16 ]] && precision=(--precision bf16)
  prof="$out/profile-gpt-mini-b64-$recipe.json"
  if step "profile_$recipe" 30 "$bin/pipedream" profile --model gpt-mini --batch 64 --device cuda --warmup 2 \
       --iters 10 --min-time 0 "${precision[@]}" -o "$prof"; then
    "$python" "$summary_py" layer "$prof" --recipe "$recipe" --layer ln_f | tee -a "$jsonl"
  fi
done

# 2b. Per-layer profile of the zoo's gpt at batch 8 x 1024 tokens, fp32 next
#     to bf16: every layer's forward and backward ms into the summary's
#     per-layer table, to see where bf16's time goes (each capped at 12 s).
for recipe in fp32 bf16; do
  precision=()
  [[ $recipe == bf16 ]] && precision=(--precision bf16)
  prof="$out/profile-gpt-b8-$recipe.json"
  if step "profile_gpt_b8_$recipe" 12 "$bin/pipedream" profile --model gpt --batch 8 --device cuda --warmup 1 \
       --iters 3 --min-time 0 "${precision[@]}" -o "$prof"; then
    for layer in $("$python" -c 'import json, sys; print(" ".join(n["name"] for n in json.load(open(sys.argv[1]))["nodes"]))' "$prof"); do
      "$python" "$summary_py" layer "$prof" --recipe "$recipe" --layer "$layer" | tee -a "$jsonl"
    done
  fi
done

# 3. Pipelines on the GPU: a 2-rank staged cnn run against its --reference,
#    fp32 and bf16 (the weights must be identical tensors), and train.
plan="$out/plan-cnn-2.json"
cat > "$plan" <<'PLAN'
{"format": "pipedream-plan/1", "schedule": "1f1b-rr", "config": "1-1",
 "stages": [{"index": 0, "layers": [0, 4], "replicas": 1, "ranks": [0]},
            {"index": 1, "layers": [5, 9], "replicas": 1, "ranks": [1]}]}
PLAN
compare_py="$out/safetensors_equal.py"
cat > "$compare_py" <<'PY'
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
run_args=(--plan "$plan" --model cnn --data synthetic --minibatches 200 --batch 64 --device cuda --deterministic --no-eval)
for recipe in bf16 fp32; do
  precision=()
  [[ $recipe == bf16 ]] && precision=(--precision bf16)
  step "run_staged_$recipe" 40 "${mpirun_cmd[@]}" -np 2 "$bin/pipedream" run "${run_args[@]}" "${precision[@]}" \
    --save "$out/run_staged_$recipe.safetensors"
  step "run_reference_$recipe" 30 "$bin/pipedream" run "${run_args[@]}" "${precision[@]}" --reference \
    --save "$out/run_reference_$recipe.safetensors"
  bench_step "run_staged_equals_reference_$recipe" 15 "\"recipe\": \"$recipe\", " "$python" "$compare_py" \
    "$out/run_staged_$recipe.safetensors" "$out/run_reference_$recipe.safetensors"
done
if [[ $gpus -ge 2 ]]; then
  step run_nccl 40 "${mpirun_cmd[@]}" -np 2 "$bin/pipedream" run "${run_args[@]}" --transport nccl \
    --save "$out/run_nccl.safetensors"
fi
data=(--data synthetic)
[[ -d /usr/share/datasets/fashion-mnist ]] && data=(--data fashion-mnist)
step train_cnn 30 "$bin/pipedream" train --model cnn --minibatches 300 "${data[@]}" --device cuda \
  --metrics "$out/train_cnn.jsonl"

# 4. Communication between 2 ranks on this host through the staged
#    transport, with the single-copy mechanism off (as the machine's
#    environment sets it) and on; NCCL with 2+ GPUs.
comm_args=(--transport staged --p2p-sizes 16MB --allreduce-sizes 32MB --latency-iters 20 --jsonl -)
bench_step bench_comm_staged_single_copy_none 45 '"single_copy": "none", ' \
  env OMPI_MCA_btl_vader_single_copy_mechanism=none "${mpirun_cmd[@]}" -np 2 "$bin/pipedream" bench-comm "${comm_args[@]}"
bench_step bench_comm_staged_single_copy_default 30 '"single_copy": "default", ' \
  env -u OMPI_MCA_btl_vader_single_copy_mechanism "${mpirun_cmd[@]}" -np 2 "$bin/pipedream" bench-comm "${comm_args[@]}"
if [[ $gpus -ge 2 ]]; then
  bench_step bench_comm_nccl 45 "" "${mpirun_cmd[@]}" -np "$gpus" "$bin/pipedream" bench-comm --transport nccl \
    --p2p-sizes 16MB --allreduce-sizes 32MB --jsonl -
fi

# 5. GPU tests: kernels/layers/optimizers against the CPU, the cnn step, the
#    CLI on the GPU; then pipelines under mpirun (staged bitwise against
#    --reference, NCCL skips with one GPU).
step test_gpu 150 "$build/tests/test_gpu" --gtest_color=no --gtest_output="json:$out/test_gpu.json"
gtest_counts test_gpu
step test_gpu_pipeline 60 "${mpirun_cmd[@]}" -np 2 "$build/tests/test_gpu_pipeline" --gtest_color=no
gtest_counts test_gpu_pipeline

# 6. Device time per DeviceOps entry (core/op_times.h) over 5 steps, to see
#     what inside the layers keeps bf16 from PyTorch's speed; the zoo gpt in
#     bf16 also without bf16 storage (PIPEDREAM_BF16_STORAGE=0: the blocks'
#     activations as FP32 tensors holding bf16 values), for the difference.
bench_step op_times_gpt_b8_bf16_fp32_storage 25 '"recipe": "bf16", ' env PIPEDREAM_BF16_STORAGE=0 \
  "$bin/pipedream-bench" core --model gpt --batch 8 --device cuda --warmup 2 --steps 5 --op-times --precision bf16
bench_step op_times_gpt_b8_bf16 25 '"recipe": "bf16", ' "$bin/pipedream-bench" core --model gpt --batch 8 \
  --device cuda --warmup 2 --steps 5 --op-times --precision bf16
bench_step op_times_resnet50_b64_bf16 25 '"recipe": "bf16", ' "$bin/pipedream-bench" core --workloads resnet50 \
  --batch 64 --device cuda --warmup 2 --steps 5 --op-times --precision bf16
# PyTorch's own per-operator device time for the same two steps in its amp
# recipe, the other side of each table.
if [[ $have_torch -eq 1 ]]; then
  bench_step torch_op_times_amp 60 "" "$python" "$here/bench/torch_peer.py" --amp --device cuda \
    --workloads gpt:8,resnet50:64 --warmup 2 --steps 5 --op-times
fi

list=""
for f in "${failed[@]}"; do list+="${list:+, }\"$f\""; done
slist=""
for f in "${skipped[@]}"; do slist+="${slist:+, }\"$f\""; done
emit "$(printf '{"check": "summary", "failed": [%s], "skipped": [%s], "seconds": %d}' "$list" "$slist" \
        $(( $(date +%s) - started )))"
"$python" "$summary_py" table "$jsonl" > "$out/summary.md" 2> "$out/logs/summary.log" && cat "$out/summary.md"
[[ ${#failed[@]} -eq 0 && ${#skipped[@]} -eq 0 ]]

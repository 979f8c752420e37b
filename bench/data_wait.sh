#!/usr/bin/env bash
# Data wait: the share of `pipedream train`'s step time spent waiting for
# minibatches, with and without loader threads (JSON lines on stdout).
#   bench/data_wait.sh [--bin build/bin/pipedream] [--out DIR] [--steps N] [--device cpu|cuda]
# Cases:
#   resnet18 on images:DIR (a generated folder of 4 classes x 75 JPEG and
#     PNG files of about 320x256, decoded, resized, cropped and flipped on
#     every fetch) at batch 16: --loader-threads 0 and the default;
#   resnet50 on synthetic data at batch 8: --loader-threads 0 and the default.
# The figures are the run's own: the summary line's data wait (ms per step
# and share of the step time). The folder is written with Debian's
# python3-pil (/usr/bin/python3). On a shared host, note the load beside
# the figures (each line carries the 1-minute load average at its start).
set -euo pipefail
BIN=build/bin/pipedream OUT=$(mktemp -d) STEPS=6 DEVICE=cpu
while [ $# -gt 0 ]; do
  case "$1" in
    --bin) BIN=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    --steps) STEPS=$2; shift 2 ;;
    --device) DEVICE=$2; shift 2 ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done
mkdir -p "$OUT"
IMAGES=$OUT/images
if [ ! -d "$IMAGES" ]; then
  /usr/bin/python3 - "$IMAGES" <<'PY'
import os, sys, random
from PIL import Image
root = sys.argv[1]
rng = random.Random(0)
for c in range(4):
    d = os.path.join(root, f"class{c}")
    os.makedirs(d, exist_ok=True)
    for i in range(75):
        w, h = 320 + rng.randrange(-32, 33), 256 + rng.randrange(-32, 33)
        img = Image.effect_noise((w, h), 40 + 10 * c).convert("RGB")
        img.save(os.path.join(d, f"img{i:03d}" + (".jpg" if i % 2 == 0 else ".png")))
PY
fi

run() {  # case loader_threads args...
  local name=$1 threads=$2
  shift 2
  local load
  load=$(cut -d' ' -f1 /proc/loadavg)
  local flag=()
  [ "$threads" != default ] && flag=(--loader-threads "$threads")
  local out
  out=$("$BIN" train "$@" --minibatches "$STEPS" --no-eval --device "$DEVICE" "${flag[@]}" 2>/dev/null | grep '^trained')
  # "trained 6 steps in 40.1 s (2 samples/s), data wait 3.1 ms/step (0.0% of step time, 1 loader threads)"
  echo "$out" | sed -E 's/^trained ([0-9]+) steps in ([0-9.]+) s \(([0-9.]+) samples\/s\), data wait ([0-9.]+) ms\/step \(([0-9.]+)% of step time, ([0-9]+) loader threads\).*/\1 \2 \3 \4 \5 \6/' |
    { read -r steps secs sps wait_ms share loaders
      printf '{"bench":"data_wait","case":"%s","device":"%s","loader_threads":%s,"steps":%s,"seconds":%s,"samples_per_s":%s,"data_wait_ms_per_step":%s,"data_wait_share_pct":%s,"load_1min":%s,"nproc":%s}\n' \
        "$name" "$DEVICE" "$loaders" "$steps" "$secs" "$sps" "$wait_ms" "$share" "$load" "$(nproc)"; }
}

R18=(--model resnet18 --model-options classes=4 --data "images:$IMAGES" --batch 16)
R50=(--model resnet50 --data synthetic --batch 8)
run resnet18-images 0 "${R18[@]}"
run resnet18-images default "${R18[@]}"
run resnet50-synthetic 0 "${R50[@]}"
run resnet50-synthetic default "${R50[@]}"

#!/bin/bash
# Loss curves of --precision bf16 against fp32 on the CPU: cnn on
# Fashion-MNIST and gpt-mini on a character-level text, STEPS steps each
# (same seed, data order and initial weights), one JSON line per run on
# stdout, and an SVG of the four curves.
#
#   bench/bf16_curves.sh [--steps 300] [--threads N] [--out DIR] [--svg FILE]
#
# Lines: {"suite": "bf16-curves", "model", "precision", "steps",
# "final_loss" (mean of the last 10 steps), "min_loss", "seconds",
# "metrics" (the run's metrics file)}. Needs build/bin/pipedream and the
# Debian package dataset-fashion-mnist; the text is the GPL-3 licence text
# every Debian system has (/usr/share/common-licenses/GPL-3).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
steps=300
threads=$(nproc)
out=/tmp/pipedream_bf16_curves
svg=""
while [ $# -gt 0 ]; do
  case "$1" in
    --steps) steps="$2"; shift 2 ;;
    --threads) threads="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    --svg) svg="$2"; shift 2 ;;
    *) echo "unknown option $1 (see the header of $0)" >&2; exit 2 ;;
  esac
done
pipedream="$root/build/bin/pipedream"
[ -x "$pipedream" ] || { echo "build $pipedream first" >&2; exit 2; }
text=/usr/share/common-licenses/GPL-3
mkdir -p "$out"

run() {  # model precision args...
  local model="$1" precision="$2"
  shift 2
  local metrics="$out/$model-$precision.jsonl"
  rm -f "$metrics"
  local start end
  start=$(date +%s.%N)
  "$pipedream" train --model "$model" "$@" --minibatches "$steps" --seed 1 --threads "$threads" --no-eval \
    --log-every 1 --precision "$precision" --metrics "$metrics" > /dev/null 2>&1
  end=$(date +%s.%N)
  python3 - "$metrics" "$model" "$precision" "$steps" "$start" "$end" <<'PY'
import json, sys
path, model, precision, steps, start, end = sys.argv[1:]
losses = [j["loss"] for j in map(json.loads, open(path)) if j.get("event") == "step"]
print(json.dumps({"suite": "bf16-curves", "model": model, "precision": precision, "steps": int(steps),
                  "final_loss": sum(losses[-10:]) / len(losses[-10:]), "min_loss": min(losses),
                  "seconds": round(float(end) - float(start), 1), "metrics": path}))
PY
}

for precision in fp32 bf16; do
  run cnn "$precision" --data fashion-mnist --batch 64 --lr 0.01
  run gpt-mini "$precision" --model-options context=64 --data text --data-dir "$text" --batch 8 \
    --optimizer adam --lr 0.001
done

[ -n "$svg" ] || exit 0
# Two panels (cnn, gpt-mini), fp32 and bf16 overlaid: a 10-step running mean.
python3 - "$out" "$svg" <<'PY'
import json, sys
out, svg = sys.argv[1:]
def curve(model, precision):
    losses = [j["loss"] for j in map(json.loads, open(f"{out}/{model}-{precision}.jsonl")) if j.get("event") == "step"]
    return [sum(losses[max(0, i - 9):i + 1]) / len(losses[max(0, i - 9):i + 1]) for i in range(len(losses))]
W, H, pad = 360, 240, 40
parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{2 * W}" height="{H}" font-family="sans-serif" font-size="11">']
for k, model in enumerate(["cnn", "gpt-mini"]):
    curves = {p: curve(model, p) for p in ["fp32", "bf16"]}
    n = max(len(c) for c in curves.values())
    lo = min(min(c) for c in curves.values()); hi = max(max(c) for c in curves.values())
    x0 = k * W
    def xy(i, v):
        return (x0 + pad + (W - 1.5 * pad) * i / max(1, n - 1), H - pad - (H - 1.7 * pad) * (v - lo) / max(1e-9, hi - lo))
    parts.append(f'<rect x="{x0 + pad}" y="{0.7 * pad}" width="{W - 1.5 * pad}" height="{H - 1.7 * pad}" fill="none" stroke="#999"/>')
    parts.append(f'<text x="{x0 + W / 2}" y="16" text-anchor="middle">{model}: training loss (10-step mean)</text>')
    parts.append(f'<text x="{x0 + pad - 4}" y="{H - pad}" text-anchor="end">{lo:.2f}</text>')
    parts.append(f'<text x="{x0 + pad - 4}" y="{0.7 * pad + 8}" text-anchor="end">{hi:.2f}</text>')
    parts.append(f'<text x="{x0 + W - 0.5 * pad}" y="{H - pad + 14}" text-anchor="end">step {n}</text>')
    for p, colour, dash in [("fp32", "#1f77b4", ""), ("bf16", "#d62728", ' stroke-dasharray="4 2"')]:
        pts = " ".join(f"{x:.1f},{y:.1f}" for x, y in (xy(i, v) for i, v in enumerate(curves[p])))
        parts.append(f'<polyline points="{pts}" fill="none" stroke="{colour}" stroke-width="1.2"{dash}/>')
    parts.append(f'<text x="{x0 + W - 0.6 * pad}" y="{0.7 * pad + 14}" text-anchor="end" fill="#1f77b4">fp32</text>')
    parts.append(f'<text x="{x0 + W - 0.6 * pad}" y="{0.7 * pad + 28}" text-anchor="end" fill="#d62728">bf16 (dashed)</text>')
parts.append("</svg>")
open(svg, "w").write("\n".join(parts) + "\n")
PY
echo "wrote $svg" >&2

#!/usr/bin/env bash
# ctest `plot_script`: scripts/plot.py draws curves from a metrics file that
# `pipedream train --clip-grad-norm` writes (with its lr and grad_norm row) and from a hand-written one in `run`'s format
# (evals that carry a step, minibatch accuracy, a diverged null loss), and a
# throughput chart from `simulate --json`-shaped files; each must be a
# non-empty PNG, and bands (mean and min-max over seeds) from a figure
# description as scripts/study_staleness.sh writes it. Bad input must exit
# 2 and name the file.
#   tests/scripts/plot_test.sh SOURCE_DIR PIPEDREAM_BINARY
# Exits 77 (ctest SKIP_RETURN_CODE) when matplotlib is absent.
set -euo pipefail
source_dir=$1
pipedream=$2
plot=("/usr/bin/python3" "$source_dir/scripts/plot.py")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

if ! /usr/bin/python3 -c 'import matplotlib' 2>/dev/null; then
  echo "SKIP: matplotlib is not installed for /usr/bin/python3 (apt-get install python3-matplotlib)"
  exit 77
fi

fail() { echo "FAIL: $*"; exit 1; }
expect_png() {
  [ -s "$1" ] || fail "$1 was not written or is empty"
  [ "$(head -c 8 "$1" | od -An -tx1 | tr -d ' \n')" = "89504e470d0a1a0a" ] || fail "$1 is not a PNG"
}

# A metrics file in the product's current format, so a renamed field fails here.
"$pipedream" train --model cnn --data synthetic --minibatches 4 --batch 16 --log-every 1 --clip-grad-norm 1 \
  --threads 1 --metrics "$work/train.jsonl" >"$work/train.log" 2>&1 || { cat "$work/train.log"; fail "pipedream train failed"; }

cat >"$work/run.jsonl" <<'JSON'
{"event":"step","step":0,"epoch":0,"loss":2.3,"accuracy":0.1,"samples_per_s":100,"seconds":0.5}
{"event":"step","step":1,"epoch":0,"loss":1.9,"accuracy":0.3,"samples_per_s":110,"seconds":1.0}
{"event":"eval","step":2,"epoch":0,"test_loss":1.7,"test_accuracy":0.4,"seconds":1.2}
{"event":"step","step":2,"epoch":1,"loss":1.5,"accuracy":0.5,"samples_per_s":120,"seconds":1.5}
{"event":"step","step":3,"epoch":1,"loss":null,"accuracy":0.6,"samples_per_s":120,"seconds":2.0}
{"event":"eval","step":4,"epoch":1,"test_loss":1.3,"test_accuracy":0.6,"seconds":2.2}
{"event":"summary","steps":4,"seconds":2.2}
JSON
"${plot[@]}" curves train="$work/train.jsonl" stash="$work/run.jsonl" --x step,time,epoch -o "$work/out/curves.png"
expect_png "$work/out/curves.png"

echo '{"schedule":"1f1b-rr","minibatches":100,"time_per_minibatch_s":0.1,"throughput_samples_per_s":640,"workers":[]}' >"$work/7-1.json"
echo '{"schedule":"1f1b-rr","minibatches":100,"time_per_minibatch_s":0.4,"throughput_samples_per_s":160,"workers":[]}' >"$work/dp.json"
"${plot[@]}" throughput "$work/7-1.json" BSP="$work/dp.json" -o "$work/throughput.png"
expect_png "$work/throughput.png"

# bands: mean and min-max over seeds from a figure description; seed files
# in the study's format (eval lines only, one missing a value).
for seed in 0 1; do
  cat >"$work/seed$seed.jsonl" <<JSON
{"event":"eval","epoch":0,"test_accuracy":0.$((5 + seed)),"test_loss":1.0,"seconds":0.2}
{"event":"eval","epoch":1,"test_accuracy":0.$((7 + seed)),"test_loss":0.8,"seconds":0.4}
{"event":"eval","epoch":2,"test_accuracy":null,"test_loss":null,"seconds":0.6}
JSON
done
cat >"$work/figure.json" <<JSON
{"title": "bands", "x": "epoch", "columns": 2, "panels": [
  {"title": "a", "series": [{"label": "stash", "files": ["$work/seed0.jsonl", "$work/seed1.jsonl"]}]},
  {"title": "b", "series": [{"label": "none", "files": ["$work/seed1.jsonl"]}]},
  {"title": "c", "series": [{"label": "stash", "files": ["$work/seed0.jsonl"]}]}]}
JSON
"${plot[@]}" bands "$work/figure.json" -o "$work/bands.png"
expect_png "$work/bands.png"
sed 's/"epoch"/"time"/' "$work/figure.json" >"$work/figure-time.json"
"${plot[@]}" bands "$work/figure-time.json" -o "$work/bands-time.png"
expect_png "$work/bands-time.png"
echo '{"panels": [{"title": "a", "series": [{"label": "x", "files": ["/nonexistent.jsonl"]}]}]}' >"$work/bad-figure.json"
set +e
message=$("${plot[@]}" bands "$work/bad-figure.json" -o "$work/bad-figure.png" 2>&1)
status=$?
set -e
[ "$status" -eq 2 ] || fail "bands with a missing file exited $status, expected 2: $message"
[[ "$message" == */nonexistent.jsonl* ]] || fail "the error does not name the missing file: $message"

# A log whose clock restarts where the run resumed (written before `run`
# and `train` continued it): the time axis continues the interrupted run's.
cat >"$work/resumed.jsonl" <<'JSON'
{"event":"step","step":0,"epoch":0,"loss":2.3,"samples_per_s":100,"seconds":1.0}
{"event":"step","step":1,"epoch":0,"loss":2.1,"samples_per_s":100,"seconds":2.0}
{"event":"step","step":2,"epoch":0,"loss":1.9,"samples_per_s":100,"seconds":0.5}
{"event":"step","step":3,"epoch":0,"loss":1.7,"samples_per_s":100,"seconds":1.5}
JSON
times=$(cd "$source_dir/scripts" && /usr/bin/python3 -c '
import sys, plot
steps, _ = plot.read_metrics(sys.argv[1])
print(",".join(str(s["seconds"]) for s in steps))' "$work/resumed.jsonl")
[ "$times" = "1.0,2.0,2.5,3.5" ] || fail "a resumed log's seconds are $times, expected 1.0,2.0,2.5,3.5"

echo 'not json' >"$work/broken.jsonl"
set +e
message=$("${plot[@]}" curves "$work/broken.jsonl" -o "$work/broken.png" 2>&1)
status=$?
set -e
[ "$status" -eq 2 ] || fail "bad input exited $status, expected 2: $message"
[[ "$message" == *broken.jsonl* ]] || fail "the error does not name the file: $message"
[ ! -e "$work/broken.png" ] || fail "a PNG was written for bad input"
echo "PASS"

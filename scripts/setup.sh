#!/usr/bin/env bash
# Installs what pipedream needs from Debian (only what is missing) and
# builds it into build/. Idempotent: a second run only rebuilds.
#   scripts/setup.sh [--no-build] [extra cmake args...]
set -euo pipefail
cd "$(dirname "$0")/.."

PACKAGES=(cmake ninja-build g++ nlohmann-json3-dev libcli11-dev libgtest-dev libopenblas-dev
          libopenmpi-dev openmpi-bin dataset-fashion-mnist zlib1g-dev
          libjpeg62-turbo-dev libpng-dev
          # Not the product's: scripts/plot.py (and its test, which would
          # otherwise always skip) and scripts/paper_table1.sh.
          python3-matplotlib jq
          # Not the product's: the ONNX cross-check tests (tests/onnx) and
          # scripts/export_torch.py, which export PyTorch models; the onnx
          # package checks what `pipedream export` writes.
          python3-torch python3-torchvision python3-onnx
          # Not the product's: the Slurm cluster of tests/cluster
          # (scripts/cluster.sh up --slurm; srun --mpi=pmix); ip and tc for
          # scripts/cluster.sh.
          slurm-wlm munge iproute2)
missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

[ "${1:-}" = "--no-build" ] && exit 0
BUILD_DIR=${BUILD_DIR:-build}
if [ ! -f "$BUILD_DIR/build.ninja" ]; then
  cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release "$@"
fi
# Two parallel jobs keep peak memory low on small machines (nvcc is hungry).
cmake --build "$BUILD_DIR" -j "${JOBS:-$(nproc)}"

#!/usr/bin/env bash
# The test command: set up if needed, build, run every test with ctest.
#   scripts/test.sh [ctest args...]     e.g. scripts/test.sh -L planner
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1
cd "${BUILD_DIR:-build}"
ctest --output-on-failure -j "${CTEST_JOBS:-2}" --timeout 600 "$@"

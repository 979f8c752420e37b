#!/bin/bash
# The data readers' fuzz, reader and CLI tests under ASan + UBSan (issue 44).
#   cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DPIPEDREAM_SANITIZE=ON \
#         -DPIPEDREAM_CUDA=OFF -DCMAKE_CXX_COMPILER_LAUNCHER=ccache
#   cmake --build build-asan -j2 --target pipedream test_fuzz test_models test_cli
#   scripts/sanitize_data_tests.sh [build-asan] [log folder]
# Every process's report (the test binaries' and the pipedream commands
# they start, which may still exit as a test expects) goes to a file in
# the log folder; the run fails if there is any.
set -u
BUILD=$(cd "${1:-build-asan}" && pwd)
LOGS=${2:-$(mktemp -d /tmp/pd_sanitize.XXXXXX)}
mkdir -p "$LOGS" && chmod 1777 "$LOGS"  # the unreadable-file test runs pipedream as nobody
export ASAN_OPTIONS=log_path=$LOGS/asan:detect_leaks=1
export UBSAN_OPTIONS=log_path=$LOGS/ubsan:print_stacktrace=1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
status=0
run() {  # LABEL BINARY ARGS...
  local label=$1 name=$2
  shift 2
  local start=$SECONDS
  "$BUILD/tests/$name" "$@" > "$LOGS/$label.out" 2>&1 || status=1
  echo "$label: $(grep -E '^\[  (PASSED|FAILED|SKIPPED)  \]' "$LOGS/$label.out" | tr -s ' ' | tr '\n' ' ')($((SECONDS - start)) s)"
}
run fuzz test_fuzz
run models test_models --gtest_filter='ImageFolder.*:Npy.*:Tokens.*:Synthetic.*:BatchLoader.*:SampleOrder.*:Datasets.*:DataTrain.*:ParameterStore.*:MatchNamedWeights.*'
run cli test_cli --gtest_filter='*HostileFiles*:HostileData.*:FullDisk.*:MetricsFile.*:ShardedSave.*-ShardedSave.FourStages*'
# Its 4 MPI ranks leak Open MPI's and hwloc's allocations at MPI_Finalize
# (LeakSanitizer: ompi_op_base_op_select, hwloc_bitmap_alloc and Open MPI's
# unloaded plugins; no pipedream frame), and a leak report makes a rank
# exit 1: leaks are not checked there, everything else is.
ASAN_OPTIONS=log_path=$LOGS/asan:detect_leaks=0 run cli-mpi test_cli --gtest_filter='ShardedSave.FourStages*'
reports=$(find "$LOGS" -name 'asan.*' -o -name 'ubsan.*' | wc -l)
echo "sanitizer reports: $reports (in $LOGS)"
[ "$reports" -eq 0 ] || status=1
exit $status

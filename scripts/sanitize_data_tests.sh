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
run() {
  local name=$1
  shift
  local start=$SECONDS
  "$BUILD/tests/$name" "$@" > "$LOGS/$name.out" 2>&1 || status=1
  echo "$name: $(grep -E '^\[  (PASSED|FAILED|SKIPPED)  \]' "$LOGS/$name.out" | tr -s ' ' | tr '\n' ' ')($((SECONDS - start)) s)"
}
run test_fuzz
run test_models --gtest_filter='ImageFolder.*:Npy.*:Tokens.*:Synthetic.*:BatchLoader.*:SampleOrder.*:Datasets.*:DataTrain.*:ParameterStore.*:MatchNamedWeights.*'
run test_cli --gtest_filter='*HostileFiles*:HostileData.*:FullDisk.*:MetricsFile.*:ShardedSave.*'
reports=$(find "$LOGS" -name 'asan.*' -o -name 'ubsan.*' | wc -l)
echo "sanitizer reports: $reports (in $LOGS)"
[ "$reports" -eq 0 ] || status=1
exit $status

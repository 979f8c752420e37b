#!/bin/bash
# capped.sh CAP_BYTES NAME PEAK_FILE CMD...: runs CMD in a memory cgroup of
# its own limited to CAP_BYTES (v1 memory.limit_in_bytes, or v2 memory.max),
# writes CMD's peak resident size in kB (/usr/bin/time %M) to PEAK_FILE, and
# exits with CMD's status. Under mpirun, NAME gets the rank appended and
# PEAK_FILE's "RANK" is replaced by the rank. Needs root.
set -u
cap=$1 name=$2 peak=$3
shift 3
rank=${OMPI_COMM_WORLD_RANK:-${PMI_RANK:-}}
if [ -n "$rank" ]; then name="$name.rank$rank"; peak=${peak//RANK/$rank}; fi
own=$(grep -E '^[0-9]+:memory:' /proc/self/cgroup | cut -d: -f3)
if [ -n "$own" ] && [ -d "/sys/fs/cgroup/memory$own" ]; then  # cgroup v1
  group="/sys/fs/cgroup/memory$own/pd_bench_$name"
  mkdir -p "$group"
  echo "$cap" > "$group/memory.limit_in_bytes"
  echo 0 > "$group/memory.swappiness" 2>/dev/null || true
else  # cgroup v2
  own=$(grep -E '^0::' /proc/self/cgroup | cut -d: -f3)
  group="/sys/fs/cgroup$own/pd_bench_$name"
  mkdir -p "$group"
  echo "$cap" > "$group/memory.max"
  echo 0 > "$group/memory.swap.max" 2>/dev/null || true
fi
echo $$ > "$group/cgroup.procs"
/usr/bin/time -f %M -o "$peak" "$@"
status=$?
echo $$ > "$(dirname "$group")/cgroup.procs"
rmdir "$group" 2>/dev/null || true
exit $status

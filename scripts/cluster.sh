#!/usr/bin/env bash
# A cluster of several "hosts" on this machine, for tests and demos: each host
# is a network namespace with its own hostname; the hosts reach each other
# over veth links joined by a bridge (in a switch namespace of its own) and
# shaped with tc tbf. Inside a host, ranks use shared memory; between hosts,
# Open MPI's TCP. Nothing is added to the machine's own network namespace.
#
#   scripts/cluster.sh up [--hosts N] [--slots S] [--rate RATE] [--name NAME] [--slurm]
#       S: ranks per host in the hostfile (default 2). --slurm: also a Slurm
#       cluster (slurm-wlm, munge): slurmctld on host 0, one slurmd per host
#       with S CPUs, partition "debug"; run srun/sbatch with `exec HOST --`
#       (it sets SLURM_CONF). RATE: tc's spelling, e.g. 1gbit (default), 200mbit. NAME (default pd)
#       prefixes everything made: namespaces NAME-h0.., NAME-sw.
#   scripts/cluster.sh down [--name NAME]      removes all of it, processes too
#   scripts/cluster.sh status [--name NAME]    hosts, links, rates, processes
#   scripts/cluster.sh exec HOST -- CMD...     runs CMD on HOST (namespace,
#       hostname, and the environment that lets mpirun reach the other hosts)
#   scripts/cluster.sh mpirun ARGS...          mpirun on host 0 with the hostfile
#       (of cluster $PD_CLUSTER_NAME, default pd: the commands below that
#       take no --name read it too)
#   scripts/cluster.sh hostfile                prints the hostfile's path
#   scripts/cluster.sh kill HOST               kills every process on HOST (KILL)
#   scripts/cluster.sh link HOST up|down       takes HOST's link down or up
#   scripts/cluster.sh agent HOST CMD...       (Open MPI's launch agent, as ssh)
#
# Needs root (CAP_NET_ADMIN, CAP_SYS_ADMIN) and iproute2; Open MPI for the
# ranks. `up` first removes a cluster of the same name left behind.
set -euo pipefail

SELF=$(readlink -f "$0")
NAME=${PD_CLUSTER_NAME:-pd}
HOSTS=2
SLOTS=2
SLURM=0
RATE=1gbit
SUBNET=10.231.7  # the hosts' addresses: $SUBNET.1, .2, ...

die() { echo "cluster.sh: $*" >&2; exit 2; }

state_dir() { echo "/run/pipedream-cluster/$NAME"; }
host_ns() { echo "$NAME-h$1"; }
switch_ns() { echo "$NAME-sw"; }
# This cluster's namespaces, switch last.
namespaces() { ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^$NAME-(h[0-9]+|sw)$" | sort -r || true; }
host_names() { ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^$NAME-h[0-9]+$" | sort -V || true; }

parse_common() {
  while [ $# -gt 0 ]; do
    case "$1" in
      --hosts) HOSTS=$2; shift 2 ;;
      --rate) RATE=$2; shift 2 ;;
      --slots) SLOTS=$2; shift 2 ;;
      --name) NAME=$2; shift 2 ;;
      --slurm) SLURM=1; shift ;;
      *) die "unknown option '$1' (see the top of scripts/cluster.sh)" ;;
    esac
  done
  [[ "$HOSTS" =~ ^[0-9]+$ ]] && [ "$HOSTS" -ge 1 ] && [ "$HOSTS" -le 200 ] || die "--hosts $HOSTS: give 1 to 200"
  [[ "$SLOTS" =~ ^[0-9]+$ ]] && [ "$SLOTS" -ge 1 ] || die "--slots $SLOTS: give the ranks per host, 1 or more"
  [[ "$NAME" =~ ^[a-z][a-z0-9]{0,5}$ ]] || die "--name $NAME: 1-6 lower-case letters or digits, starting with a letter"
}

# Bytes of tbf burst for a rate: 4 ms of traffic, at least 64 KB (a GSO
# segment must fit, or tbf drops it).
burst_for() {
  local bits
  bits=$(echo "$1" | awk '{ r=tolower($1); n=r+0;
    if (r ~ /gbit$/) n*=1e9; else if (r ~ /mbit$/) n*=1e6; else if (r ~ /kbit$/) n*=1e3;
    else if (r ~ /bit$/) n*=1; else n=-1; printf "%d", n }')
  [ "$bits" -gt 0 ] 2>/dev/null || die "--rate $1: give a rate like 1gbit, 200mbit or 500kbit"
  local b=$((bits / 8 / 250))
  [ $b -lt 65536 ] && b=65536
  echo $b
}

cmd_up() {
  parse_common "$@"
  [ "$(id -u)" -eq 0 ] || die "up needs root (network namespaces)"
  local burst; burst=$(burst_for "$RATE")
  # A subshell: a cluster left behind that cannot be removed is reported
  # here, not by a silent exit of this script.
  local left_behind
  if ! left_behind=$( (cmd_down) 2>&1 ); then
    echo "cluster.sh: up: the cluster $NAME left behind could not be removed: $left_behind" >&2
    exit 1
  fi
  local sw; sw=$(switch_ns)
  local dir; dir=$(state_dir)
  mkdir -p "$dir"
  # Undo what was made when any step fails.
  trap 'echo "cluster.sh: up failed; removing what was made" >&2; cmd_down >/dev/null 2>&1' ERR
  ip netns add "$sw"
  ip -n "$sw" link set lo up
  ip -n "$sw" link add br0 type bridge
  ip -n "$sw" link set br0 up
  : > "$dir/hostfile"
  local hosts_file="$dir/hosts"
  printf '127.0.0.1 localhost\n' > "$hosts_file"
  for ((i = 0; i < HOSTS; i++)); do
    printf '%s.%d %s\n' "$SUBNET" $((i + 1)) "$(host_ns $i)" >> "$hosts_file"
  done
  for ((i = 0; i < HOSTS; i++)); do
    local ns; ns=$(host_ns $i)
    ip netns add "$ns"
    ip -n "$ns" link set lo up
    # One veth per host: eth0 inside the host, p<i> on the bridge.
    ip link add "$NAME-v$i" netns "$ns" type veth peer name "p$i" netns "$sw"
    ip -n "$ns" link set "$NAME-v$i" name eth0
    ip -n "$ns" addr add "$SUBNET.$((i + 1))/24" dev eth0
    ip -n "$ns" link set eth0 up
    ip -n "$sw" link set "p$i" master br0
    ip -n "$sw" link set "p$i" up
    # Both directions shaped: host -> switch on eth0, switch -> host on p<i>.
    ip netns exec "$ns" tc qdisc add dev eth0 root tbf rate "$RATE" burst "$burst" latency 100ms
    ip netns exec "$sw" tc qdisc add dev "p$i" root tbf rate "$RATE" burst "$burst" latency 100ms
    # `ip netns exec` shows /etc/netns/<ns>/hosts as /etc/hosts: the hosts
    # know each other by name.
    mkdir -p "/etc/netns/$ns"
    cp "$hosts_file" "/etc/netns/$ns/hosts"
    echo "$ns slots=$SLOTS" >> "$dir/hostfile"
  done
  trap - ERR
  echo "$RATE" > "$dir/rate"
  if [ "$SLURM" = 1 ]; then
    trap 'echo "cluster.sh: starting Slurm failed; removing what was made" >&2; cmd_down >/dev/null 2>&1' ERR
    slurm_up
    trap - ERR
  fi
  echo "cluster $NAME up: $HOSTS hosts ($(host_names | tr '\n' ' ' | sed 's/ $//')) at $RATE between hosts; hostfile $dir/hostfile"
}

# Slurm on the hosts: slurmctld on host 0, a slurmd per host (entered with
# nsenter, not `ip netns exec`, so that /sys - and the cgroups slurmd
# needs - stay the machine's), each node's own TmpFS (PMIx's folders would
# collide on one /tmp). munged runs outside the hosts (a Unix socket); when
# none runs, one is started and stopped by `down`.
slurm_up() {
  local dir; dir=$(state_dir)
  command -v slurmd >/dev/null && command -v munged >/dev/null ||
    die "--slurm needs slurm-wlm and munge (apt-get install slurm-wlm munge; scripts/setup.sh installs them)"
  mkdir -p "$dir/slurm/state"
  local conf="$dir/slurm/slurm.conf"
  {
    echo "ClusterName=$NAME"
    echo "SlurmctldHost=$(host_ns 0)($SUBNET.1)"
    echo "SlurmUser=root"
    echo "AuthType=auth/munge"
    echo "StateSaveLocation=$dir/slurm/state"
    echo "SlurmdSpoolDir=$dir/slurm/spool-%n"
    echo "TmpFS=$dir/slurm/tmp-%n"
    echo "SlurmctldPidFile=$dir/slurm/slurmctld.pid"
    echo "SlurmdPidFile=$dir/slurm/slurmd-%n.pid"
    echo "SlurmctldLogFile=$dir/slurm/slurmctld.log"
    echo "SlurmdLogFile=$dir/slurm/slurmd-%n.log"
    echo "ProctrackType=proctrack/linuxproc"
    echo "TaskPlugin=task/none"
    echo "SelectType=select/cons_tres"
    echo "SelectTypeParameters=CR_CPU"
    echo "MpiDefault=pmix"
    echo "ReturnToService=2"
    echo "SchedulerType=sched/builtin"
    echo "JobCompType=jobcomp/none"
    echo "AccountingStorageType=accounting_storage/none"
    for ((i = 0; i < HOSTS; i++)); do
      echo "NodeName=$(host_ns $i) NodeAddr=$SUBNET.$((i + 1)) CPUs=$SLOTS State=UNKNOWN"
    done
    echo "PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES"
  } > "$conf"
  printf 'CgroupPlugin=cgroup/v1\nIgnoreSystemd=yes\n' > "$dir/slurm/cgroup.conf"
  if [ ! -S /run/munge/munge.socket.2 ] || ! pgrep -x munged >/dev/null; then
    mkdir -p /run/munge && chown munge:munge /run/munge 2>/dev/null || true
    munged --force 2>/dev/null
    cat /run/munge/munged.pid > "$dir/slurm/munged.pid" 2>/dev/null || pgrep -nx munged > "$dir/slurm/munged.pid"
  fi
  export SLURM_CONF="$conf"
  for ((i = 0; i < HOSTS; i++)); do
    local ns; ns=$(host_ns $i)
    mkdir -p "$dir/slurm/spool-$ns" "$dir/slurm/tmp-$ns"
    if [ $i -eq 0 ]; then
      nsenter --net="/run/netns/$ns" unshare --uts /bin/sh -c 'hostname "$0" && exec slurmctld -f "$1"' "$ns" "$conf"
    fi
    nsenter --net="/run/netns/$ns" unshare --uts /bin/sh -c 'hostname "$0" && exec slurmd -f "$1" -N "$0"' "$ns" "$conf"
  done
  local idle=0
  for _ in $(seq 1 60); do
    idle=$(nsenter --net="/run/netns/$(host_ns 0)" sinfo -h -N -o '%T' 2>/dev/null | grep -c '^idle' || true)
    [ "$idle" -eq "$HOSTS" ] && break
    sleep 0.5
  done
  [ "$idle" -eq "$HOSTS" ] || { echo "cluster.sh: Slurm nodes did not come up (logs in $dir/slurm/)" >&2; return 1; }
  echo "slurm: $HOSTS nodes idle; SLURM_CONF=$conf"
}

# Kills what runs in a namespace, TERM then KILL.
kill_namespace() {
  local ns=$1 pids
  pids=$(ip netns pids "$ns" 2>/dev/null || true)
  [ -z "$pids" ] && return 0
  kill -TERM $pids 2>/dev/null || true
  for _ in 1 2 3 4 5 6 7 8 9 10; do
    pids=$(ip netns pids "$ns" 2>/dev/null || true)
    [ -z "$pids" ] && return 0
    sleep 0.2
  done
  kill -KILL $pids 2>/dev/null || true
  sleep 0.2
}

# A host failing: every process on it killed at once.
kill_host() {
  local pids; pids=$(ip netns pids "$1" 2>/dev/null || true)
  [ -z "$pids" ] || kill -KILL $pids 2>/dev/null || true
}

cmd_down() {
  parse_common "$@"
  [ "$(id -u)" -eq 0 ] || die "down needs root"
  local ns
  for ns in $(namespaces); do kill_namespace "$ns"; done
  # Deleting a namespace deletes its veth ends and their qdiscs. Right
  # after its processes were killed a deletion can fail while they exit:
  # tried again for up to 5 s.
  local try
  for try in $(seq 1 25); do
    for ns in $(namespaces); do
      ip netns del "$ns" 2>/dev/null || true
      rm -rf "/etc/netns/$ns"
    done
    [ -z "$(namespaces)" ] && break
    sleep 0.2
  done
  # munged, when up --slurm started it (it serves the whole machine).
  local munged_pid; munged_pid=$(cat "$(state_dir)/slurm/munged.pid" 2>/dev/null || true)
  if [ -n "$munged_pid" ] && [ "$(cat "/proc/$munged_pid/comm" 2>/dev/null)" = munged ]; then
    kill "$munged_pid" 2>/dev/null || true
  fi
  rm -rf "$(state_dir)"
  rmdir /run/pipedream-cluster /etc/netns 2>/dev/null || true
  local left; left=$(namespaces)
  [ -z "$left" ] || { echo "cluster.sh: could not remove namespaces: $left ($(ip netns del "${left%%$'\n'*}" 2>&1))" >&2; exit 1; }
  echo "cluster $NAME down"
}

cmd_status() {
  parse_common "$@"
  local hosts; hosts=$(host_names)
  if [ -z "$hosts" ]; then echo "cluster $NAME: down"; return 0; fi
  echo "cluster $NAME: up, rate $(cat "$(state_dir)/rate" 2>/dev/null || echo '?') between hosts"
  local ns
  for ns in $hosts; do
    local addr state qdisc nproc
    addr=$(ip -n "$ns" -4 -o addr show dev eth0 2>/dev/null | awk '{print $4}')
    state=$(ip -n "$ns" -o link show dev eth0 2>/dev/null | grep -o 'state [A-Z]*' | awk '{print $2}')
    qdisc=$(ip netns exec "$ns" tc qdisc show dev eth0 2>/dev/null | grep -o 'tbf.*rate [^ ]*' | awk '{print $NF}')
    nproc=$(ip netns pids "$ns" 2>/dev/null | wc -l)
    printf '  %-8s %-16s link %-5s tbf %-8s processes %s\n' "$ns" "$addr" "${state:-?}" "${qdisc:-none}" "$nproc"
  done
}

# The environment for mpirun on a cluster host: launch the other hosts'
# daemons with this script as the agent, and speak TCP on the cluster's
# subnet only.
mpi_environment() {
  export OMPI_MCA_plm_rsh_agent="$SELF agent"
  export OMPI_MCA_oob_tcp_if_include="$SUBNET.0/24"
  export OMPI_MCA_btl_tcp_if_include="$SUBNET.0/24"
  export OMPI_MCA_btl="self,vader,tcp"
  # The cluster needs root, and Open MPI refuses root without these.
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  # A host whose link goes down: mpirun notices its lost daemon within
  # seconds (TCP keepalive, 2 + 3 x 1 s) and ends the job, naming the host,
  # instead of waiting minutes to reach it.
  export OMPI_MCA_oob_tcp_keepalive_time=2 OMPI_MCA_oob_tcp_keepalive_intvl=1 OMPI_MCA_oob_tcp_keepalive_probes=3
  export PD_CLUSTER_NAME="$NAME"
  [ -f "$(state_dir)/slurm/slurm.conf" ] && export SLURM_CONF="$(state_dir)/slurm/slurm.conf"
  return 0
}

# A host's name says its cluster (NAME-h<i>): checks it exists and sets NAME.
set_host() {
  HOST=$1
  [[ "$HOST" =~ ^([a-z][a-z0-9]{0,5})-h[0-9]+$ ]] || die "'$HOST' is not a cluster host's name (NAME-h0, NAME-h1, ...)"
  NAME=${BASH_REMATCH[1]}
  ip netns list 2>/dev/null | awk '{print $1}' | grep -qx "$HOST" ||
    die "no host '$HOST' (scripts/cluster.sh status --name $NAME)"
}

# Runs a command inside HOST's namespace with HOST as its hostname (its own
# UTS namespace), so MPI sees one host per namespace.
cmd_exec() {
  set_host "$1"; local host=$HOST; shift
  [ "${1:-}" = "--" ] && shift
  [ $# -gt 0 ] || die "exec HOST -- CMD: give a command"
  mpi_environment
  exec ip netns exec "$host" unshare --uts /bin/sh -c 'hostname "$0" && exec "$@"' "$host" "$@"
}

# Open MPI's rsh launch agent: called as `agent HOST word...`, as ssh would
# be; the words form one shell command line.
cmd_agent() {
  set_host "$1"; local host=$HOST; shift
  mpi_environment
  # Not exec: this process stays on the launching host, so when HOST's
  # processes are killed (a host failure) it is left to say which host.
  local status=0
  ip netns exec "$host" unshare --uts /bin/sh -c 'hostname "$0" && exec /bin/sh -c "$1"' "$host" "$*" || status=$?
  if [ $status -gt 128 ]; then
    echo "cluster.sh: host $host failed: its Open MPI daemon was killed (signal $((status - 128))), and with it the ranks placed on $host" >&2
  fi
  exit $status
}

cmd_mpirun() {
  local dir; dir=$(state_dir)
  [ -f "$dir/hostfile" ] || die "cluster $NAME is down (scripts/cluster.sh up)"
  cmd_exec "$(head -1 "$dir/hostfile" | awk '{print $1}')" -- mpirun --hostfile "$dir/hostfile" "$@"
}

cmd_link() {
  set_host "$1"; local host=$HOST
  case "${2:-}" in
    up|down) ip -n "$host" link set eth0 "$2" ;;
    *) die "link HOST up|down" ;;
  esac
}

main() {
  local cmd=${1:-}
  [ $# -gt 0 ] && shift
  case "$cmd" in
    up) cmd_up "$@" ;;
    down) cmd_down "$@" ;;
    status) cmd_status "$@" ;;
    exec) [ $# -ge 2 ] || die "exec HOST -- CMD"; cmd_exec "$@" ;;
    agent) [ $# -ge 2 ] || die "agent HOST CMD"; cmd_agent "$@" ;;
    mpirun) cmd_mpirun "$@" ;;
    hostfile) echo "$(state_dir)/hostfile" ;;
    kill) [ $# -eq 1 ] || die "kill HOST"; set_host "$1"; kill_host "$HOST" ;;
    link) [ $# -eq 2 ] || die "link HOST up|down"; cmd_link "$@" ;;
    *) die "usage: cluster.sh up|down|status|exec|mpirun|hostfile|kill|link (see the top of the script)" ;;
  esac
}

main "$@"

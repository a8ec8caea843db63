# Shared helpers for tests/cluster/{build,up,down,test}. Source, don't run.
# shellcheck shell=bash

CLUSTER_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=versions.env
source "$CLUSTER_DIR/versions.env"

# shellcheck source=node.sh
source "$CLUSTER_DIR/node.sh"

# Use the installed Go as is (never download a toolchain).
export GOTOOLCHAIN=${GOTOOLCHAIN:-local}

CLUSTER_CACHE_ROOT=${CLUSTER_CACHE_ROOT:-${KARPENTER_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/karpenter-wasm}/cluster}
CLUSTER_STATE_ROOT=${CLUSTER_STATE_ROOT:-${XDG_RUNTIME_DIR:-/tmp}/karpenter-clusters}

log() { printf '[cluster] %s\n' "$*" >&2; }
die() { printf '[cluster] error: %s\n' "$*" >&2; exit 1; }

# The cache key names the pinned versions and a hash of the four build modules'
# go.mod/go.sum, so any change of a pin or dependency builds into a new directory.
cache_key() {
  local h
  h=$(cat "$CLUSTER_DIR"/modules/{kube,etcd,kwok,helm}/go.{mod,sum} | sha256sum | cut -c1-10)
  printf 'k8s-%s_etcd-%s_kwok-%s_helm-%s_%s' \
    "$KUBE_VERSION" "$ETCD_VERSION" "$KWOK_VERSION" "$HELM_VERSION" "$h"
}

bin_dir() { printf '%s/%s/bin' "$CLUSTER_CACHE_ROOT" "$(cache_key)"; }

ALL_BINARIES=(etcd kube-apiserver kube-controller-manager kube-scheduler kubectl kwok helm)

missing_binaries() {
  local dir b
  dir=$(bin_dir)
  for b in "${ALL_BINARIES[@]}"; do
    [ -x "$dir/$b" ] || printf '%s\n' "$b"
  done
}

# pid_alive PIDFILE NAME: the pid in PIDFILE runs the program NAME (so a
# recycled pid or a zombie does not count).
pid_alive() {
  local pid argv0
  [ -f "$1" ] || return 1
  pid=$(cat "$1" 2>/dev/null) || return 1
  [[ "$pid" =~ ^[0-9]+$ ]] || return 1
  argv0=$({ tr '\0' '\n' < "/proc/$pid/cmdline"; } 2>/dev/null | head -n 1) || return 1
  [ "${argv0##*/}" = "$2" ]
}

# port_in_use PORT: some TCP socket on this machine uses PORT locally.
port_in_use() {
  local hex
  hex=$(printf '%04X' "$1")
  awk -v h="$hex" 'NR > 1 { split($2, a, ":"); if (a[2] == h) found = 1 } END { exit !found }' \
    /proc/net/tcp /proc/net/tcp6 2>/dev/null
}

# random_port: a port below the kernel's ephemeral range (so outgoing
# connections never hold it), at or above 10000.
random_port() {
  local lo=10000 hi=32768 eph
  eph=$(awk '{print $1}' /proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || echo 32768)
  [ "$eph" -gt $((lo + 1000)) ] && hi=$eph
  echo $((lo + (RANDOM * 32768 + RANDOM) % (hi - lo)))
}

CLUSTER_PROCESSES=(kwok kube-scheduler kube-controller-manager kube-apiserver etcd)

# stop_cluster DATADIR: SIGTERM every process of the cluster (by pid file),
# wait up to 10 s, then SIGKILL what is left.
stop_cluster() {
  local data=$1 p pid pids=() deadline
  node_stop "$data"
  for p in "${CLUSTER_PROCESSES[@]}"; do
    if pid_alive "$data/$p.pid" "$p"; then
      pid=$(cat "$data/$p.pid")
      kill -TERM "$pid" 2>/dev/null || true
      pids+=("$p:$pid")
    fi
  done
  deadline=$(($(date +%s) + 10))
  for entry in "${pids[@]}"; do
    p=${entry%%:*}
    while pid_alive "$data/$p.pid" "$p" && [ "$(date +%s)" -lt "$deadline" ]; do sleep 0.1; done
    if pid_alive "$data/$p.pid" "$p"; then
      log "$p (pid ${entry#*:}) did not stop; killing it"
      kill -KILL "${entry#*:}" 2>/dev/null || true
    fi
  done
  rm -f "$data"/*.pid
}

# lock_cluster NAME: hold the lock of cluster NAME on fd 8 (until the shell
# exits or closes fd 8). `down` deletes the lock file while holding it, so after
# getting the lock, check that it is still the file at that path.
lock_cluster() {
  local f=$CLUSTER_STATE_ROOT/.$1.lock deadline=$(($(date +%s) + ${2:-60}))
  mkdir -p "$CLUSTER_STATE_ROOT"
  while :; do
    exec 8>"$f"
    flock -w "${2:-60}" 8 || die "timed out waiting for the lock of cluster $1"
    [ "$f" -ef /dev/fd/8 ] && return 0
    exec 8>&-
    [ "$(date +%s)" -lt "$deadline" ] || die "timed out waiting for the lock of cluster $1"
  done
}

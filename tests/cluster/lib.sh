# Shared helpers for tests/cluster/{build,up,down,test}. Source, don't run.
# shellcheck shell=bash

CLUSTER_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=versions.env
source "$CLUSTER_DIR/versions.env"

# Use the installed Go as is (never download a toolchain).
export GOTOOLCHAIN=${GOTOOLCHAIN:-local}

CLUSTER_CACHE_ROOT=${CLUSTER_CACHE_ROOT:-${XDG_CACHE_HOME:-$HOME/.cache}/karpenter-wasm/cluster}
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

# The real node of `up NAME --node`: containerd and runc (Debian packages), the
# CNI plugins (Debian containernetworking-plugins), a kubelet and kube-proxy
# built from the pinned Kubernetes modules (modules/node). This machine joins
# the cluster as one Node, tainted CriticalAddonsOnly so that only pods that
# tolerate it (the controller's chart does) run here; kwok keeps simulating the
# Nodes that NodeClaims create. Sourced by `up`, `down` and `restart` (through
# lib.sh's stop_cluster); functions only.
# shellcheck shell=bash

NODE_PACKAGES=(containerd runc containernetworking-plugins iptables umoci gcc)
# One bridge and pod subnet on this machine: one node cluster at a time.
NODE_BRIDGE=kt-node0
NODE_POD_SUBNET=10.88.0.0/24
NODE_CNI_BIN=/usr/lib/cni
# The sandbox ("pause") image, built here from the Kubernetes module's source.
NODE_PAUSE_IMAGE=localhost/karpenter-test/pause:3.10

node_bin_dir() {
  local h
  h=$(cat "$CLUSTER_DIR"/modules/node/go.{mod,sum} | sha256sum | cut -c1-10)
  printf '%s/node-k8s-%s_%s/bin' "$CLUSTER_CACHE_ROOT" "$KUBE_VERSION" "$h"
}

# node_install: the Debian packages the node runs on.
node_install() {
  local p missing=()
  for p in "${NODE_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
  done
  [ "${#missing[@]}" -eq 0 ] && return 0
  [ "$(id -u)" = 0 ] || die "the node needs these Debian packages: ${missing[*]} (and root)"
  log "installing ${missing[*]} from Debian"
  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"; } >&2 ||
    die "apt-get install ${missing[*]} failed"
}

# node_host_ip: the address pods reach this machine at (the API server and
# kubelet listen there too).
node_host_ip() {
  ip -4 route get 1.1.1.1 2>/dev/null | sed -n 's/.* src \([0-9.]*\).*/\1/p' | head -n 1
}

# node_other_running NAME: the name of another cluster with a running node.
node_other_running() {
  local d
  for d in "$CLUSTER_STATE_ROOT"/*/node; do
    [ -d "$d" ] || continue
    [ "$(basename "$(dirname "$d")")" = "$1" ] && continue
    pid_alive "$d/kubelet.pid" kubelet && basename "$(dirname "$d")" && return 0
  done
  return 1
}

# node_pause_image DIR: an OCI archive of the sandbox image in DIR/pause.tar.
node_pause_image() {
  local out=$1 src layout tmp
  src="$(cd /tmp && go env GOMODCACHE)/k8s.io/kubernetes@${KUBE_VERSION}/build/pause/linux/pause.c"
  [ -f "$src" ] || (cd "$CLUSTER_DIR/modules/node" && go mod download k8s.io/kubernetes) >/dev/null
  [ -f "$src" ] || die "no pause.c in the k8s.io/kubernetes ${KUBE_VERSION} module"
  tmp=$(mktemp -d)
  gcc -Os -static -DVERSION="${KUBE_VERSION}" -o "$tmp/pause" "$src" || die "pause.c did not compile"
  strip "$tmp/pause"
  layout=$tmp/layout
  umoci init --layout "$layout" >/dev/null
  umoci new --image "$layout:${NODE_PAUSE_IMAGE##*:}" >/dev/null
  umoci insert --image "$layout:${NODE_PAUSE_IMAGE##*:}" "$tmp/pause" /pause >/dev/null
  umoci config --image "$layout:${NODE_PAUSE_IMAGE##*:}" --os linux --architecture amd64 \
    --config.entrypoint /pause --config.user 65535:65535 >/dev/null
  tar -C "$layout" -cf "$out/pause.tar" .
  rm -rf "$tmp"
}

# node_sign_certs PKI NODE HOST_IP: the kubelet's client certificate (its
# Node identity) and its serving certificate.
node_sign_certs() {
  local pki=$1 node=$2 ip=$3
  (
    cd "$pki"
    umask 077
    sign kubelet-client "/O=system:nodes/CN=system:node:$node" \
"basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=clientAuth"
    sign kubelet-serving "/O=system:nodes/CN=system:node:$node" \
"basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=serverAuth
subjectAltName=IP:$ip,DNS:$node"
    rm -f ca.srl
  ) || die "node certificate generation failed"
}

# node_write_config DATA NAME NODE HOST_IP KUBELET_PORT KUBELET_HEALTHZ PROXY_METRICS PROXY_HEALTHZ
node_write_config() {
  local data=$1 name=$2 node=$3 ip=$4 port=$5 healthz=$6 pmetrics=$7 phealthz=$8
  local d=$data/node b64
  b64() { base64 -w0 < "$1"; }
  mkdir -p "$d"/{containerd/root,containerd/state,net.d,cni-ipam,kubelet,pod-logs}
  cat > "$d/containerd.toml" <<EOF
version = 2
root = "$d/containerd/root"
state = "$d/containerd/state"
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper"]
[grpc]
  address = "$d/containerd.sock"
[ttrpc]
  address = "$d/containerd.sock.ttrpc"
[plugins."io.containerd.internal.v1.opt"]
  path = "$d/containerd/opt"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$NODE_PAUSE_IMAGE"
  enable_selinux = false
  # This machine's root may not lower an OOM score (no CAP_SYS_RESOURCE over
  # it); the kubelet asks -998 for sandboxes. Keep them at containerd's own.
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        BinaryName = "/usr/sbin/runc"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "$NODE_CNI_BIN"
    conf_dir = "$d/net.d"
EOF
  cat > "$d/net.d/10-bridge.conflist" <<EOF
{
  "cniVersion": "0.4.0",
  "name": "karpenter-test",
  "plugins": [
    {"type": "bridge", "bridge": "$NODE_BRIDGE", "isGateway": true, "ipMasq": true, "hairpinMode": true,
     "ipam": {"type": "host-local", "dataDir": "$d/cni-ipam", "ranges": [[{"subnet": "$NODE_POD_SUBNET"}]],
              "routes": [{"dst": "0.0.0.0/0"}]}},
    {"type": "portmap", "capabilities": {"portMappings": true}},
    {"type": "loopback"}
  ]
}
EOF
  cat > "$d/kubelet.kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: $name
  cluster:
    server: https://127.0.0.1:$API_PORT
    certificate-authority-data: $(b64 "$data/pki/ca.crt")
users:
- name: kubelet
  user:
    client-certificate-data: $(b64 "$data/pki/kubelet-client.crt")
    client-key-data: $(b64 "$data/pki/kubelet-client.key")
contexts:
- name: kubelet
  context: {cluster: $name, user: kubelet}
current-context: kubelet
EOF
  chmod 600 "$d/kubelet.kubeconfig"
  # cgroup v1 here: kubelet 1.35 runs on it only when told to. The API server
  # reaches the kubelet with the admin certificate (x509), so no webhooks.
  cat > "$d/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
failCgroupV1: false
cgroupDriver: cgroupfs
cgroupRoot: /karpenter-test
containerRuntimeEndpoint: unix://$d/containerd.sock
address: $ip
port: $port
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: $healthz
tlsCertFile: $data/pki/kubelet-serving.crt
tlsPrivateKeyFile: $data/pki/kubelet-serving.key
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: false}
  x509: {clientCAFile: $data/pki/ca.crt}
authorization: {mode: AlwaysAllow}
registerWithTaints:
  - {key: CriticalAddonsOnly, value: "true", effect: NoSchedule}
podLogsDir: $d/pod-logs
failSwapOn: false
resolvConf: /etc/resolv.conf
clusterDomain: cluster.local
serializeImagePulls: false
# The disk is shared with builds: evict nothing for its use.
evictionHard: {memory.available: 100Mi, nodefs.available: "0%", imagefs.available: "0%", nodefs.inodesFree: "0%"}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
EOF
  cat > "$d/kube-proxy.yaml" <<EOF
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection: {kubeconfig: $data/kubeconfig}
hostnameOverride: $node
mode: iptables
clusterCIDR: $NODE_POD_SUBNET
metricsBindAddress: 127.0.0.1:$pmetrics
healthzBindAddress: 127.0.0.1:$phealthz
conntrack: {maxPerCore: 0}
EOF
}

# node_cgroups: the kubelet's cgroup root in every v1 hierarchy.
node_cgroups() {
  local h
  for h in /sys/fs/cgroup/*/; do
    [ -f "$h/cgroup.procs" ] || continue
    mkdir -p "$h/karpenter-test" 2>/dev/null || true
  done
}

# node_stop DATA: stop the node's processes, its containers and their mounts,
# and remove its bridge and iptables rules. Safe to run on a half-started node.
node_stop() {
  local data=$1 d=$1/node sock id pid deadline
  [ -d "$d" ] || return 0
  sock=$d/containerd.sock
  for p in kube-proxy kubelet; do
    if pid_alive "$data/$p.pid" "$p"; then kill -TERM "$(cat "$data/$p.pid")" 2>/dev/null || true; fi
  done
  deadline=$(($(date +%s) + 10))
  while { pid_alive "$data/kubelet.pid" kubelet || pid_alive "$data/kube-proxy.pid" kube-proxy; } &&
    [ "$(date +%s)" -lt "$deadline" ]; do sleep 0.1; done
  for p in kube-proxy kubelet; do
    if pid_alive "$data/$p.pid" "$p"; then kill -KILL "$(cat "$data/$p.pid")" 2>/dev/null || true; fi
  done
  if pid_alive "$data/containerd.pid" containerd && [ -S "$sock" ]; then
    # The sandboxes' network namespaces live in /run/netns, outside DATA.
    for id in $(ctr --address "$sock" -n k8s.io containers ls -q 2>/dev/null); do
      ctr --address "$sock" -n k8s.io containers info "$id" 2>/dev/null | python3 -c '
import json, sys
for ns in json.load(sys.stdin).get("Spec", {}).get("linux", {}).get("namespaces", []):
    if ns.get("type") == "network" and ns.get("path", "").startswith("/var/run/netns/"):
        print(ns["path"])' 2>/dev/null
    done | sort -u > "$d/netns" || true
    for id in $(ctr --address "$sock" -n k8s.io tasks ls -q 2>/dev/null); do
      ctr --address "$sock" -n k8s.io tasks kill -s SIGKILL "$id" >/dev/null 2>&1 || true
    done
    for id in $(ctr --address "$sock" -n k8s.io tasks ls -q 2>/dev/null); do
      for _ in $(seq 1 50); do
        ctr --address "$sock" -n k8s.io tasks delete "$id" >/dev/null 2>&1 && break
        sleep 0.1
      done
    done
    kill -TERM "$(cat "$data/containerd.pid")" 2>/dev/null || true
    deadline=$(($(date +%s) + 10))
    while pid_alive "$data/containerd.pid" containerd && [ "$(date +%s)" -lt "$deadline" ]; do sleep 0.1; done
    if pid_alive "$data/containerd.pid" containerd; then kill -KILL "$(cat "$data/containerd.pid")" 2>/dev/null || true; fi
  fi
  # Shims outlive containerd; theirs name its socket.
  for pid in $(pgrep -f "containerd-shim.*-address $sock" 2>/dev/null); do
    kill -KILL "$pid" 2>/dev/null || true
  done
  # Mounts under the node's directories (volumes, rootfs, sandboxes' netns), innermost first.
  awk -v d="$d" '$2 ~ "^"d {print $2}' /proc/self/mounts | sort -r | while read -r m; do
    umount -l "$m" 2>/dev/null || true
  done || true
  if [ -x "$(node_bin_dir)/kube-proxy" ]; then
    "$(node_bin_dir)/kube-proxy" --cleanup >/dev/null 2>&1 || true
  fi
  if [ -f "$d/netns" ]; then
    while read -r ns; do
      umount "$ns" 2>/dev/null || true; rm -f "$ns"
    done < "$d/netns"
  fi
  # The bridge plugin's masquerade rules, named after our network.
  local rule chain
  iptables -t nat -S POSTROUTING 2>/dev/null | grep -F 'name: \"karpenter-test\"' | sed 's/^-A /-D /' |
    while read -r rule; do eval "iptables -t nat $rule" 2>/dev/null || true; done || true
  for chain in $(iptables -t nat -S 2>/dev/null | sed -n 's/^-N \(CNI-[0-9a-f]*\)$/\1/p'); do
    if iptables -t nat -S "$chain" | grep -qF 'name: \"karpenter-test\"'; then
      iptables -t nat -F "$chain" 2>/dev/null; iptables -t nat -X "$chain" 2>/dev/null || true
    fi
  done
  # What the kubelet leaves (KUBE-FIREWALL, canaries, hints).
  local ipt table
  for ipt in iptables ip6tables; do
    for table in filter nat mangle; do
      "$ipt" -t "$table" -S 2>/dev/null | grep -E '^-A [A-Z]+ .*-j KUBE-' | sed 's/^-A /-D /' |
        while read -r rule; do eval "$ipt -t $table $rule" 2>/dev/null || true; done || true
      for chain in $("$ipt" -t "$table" -S 2>/dev/null | sed -n 's/^-N \(KUBE-[A-Z0-9-]*\)$/\1/p'); do
        "$ipt" -t "$table" -F "$chain" 2>/dev/null || true
      done
      for chain in $("$ipt" -t "$table" -S 2>/dev/null | sed -n 's/^-N \(KUBE-[A-Z0-9-]*\)$/\1/p'); do
        "$ipt" -t "$table" -X "$chain" 2>/dev/null || true
      done
    done
  done
  ip link del "$NODE_BRIDGE" 2>/dev/null || true
  for h in /sys/fs/cgroup/*/karpenter-test; do
    [ ! -d "$h" ] || find "$h" -depth -type d -exec rmdir {} + 2>/dev/null || true
  done
  rm -f "$data"/{kubelet,kube-proxy,containerd}.pid
}

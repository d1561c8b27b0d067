#!/usr/bin/env bash
# One real node beside the kwok nodes of an e2e cluster (e2e/cluster.sh up):
# containerd v2 with runc and the CNI bridge plugin, and a kubelet that
# registers as NODE (default NAME-real) with a NoSchedule taint, so that only
# Pods that tolerate it (and pick it by nodeSelector) run there:
#
#   nodeSelector: {kascade.io/real-node: "true"}
#   tolerations: [{key: kascade.io/real-node, operator: Exists}]
#
#   e2e/node.sh up     [--name NAME] [--port-base N] [--node-ip IP] [--tracing-endpoint HOST:PORT|none]
#   e2e/node.sh down   [--name NAME]
#   e2e/node.sh status [--name NAME]
#
# NAME and N are the cluster's (`cluster.sh up --name NAME --port-base N`);
# everything lives in its run dir's node/ (containerd's root and state, the
# kubelet's root dir, Pod logs, CNI state, logs, PIDs). Images cannot be
# pulled (no registry here): the busybox and pause images are built locally
# (e2e/build.sh node) and imported. Both the kubelet and containerd send their
# traces (OTLP gRPC) to the cluster's Jaeger unless --tracing-endpoint says
# otherwise. Needs root, cgroups (v1 works: failCgroupV1 false), overlayfs,
# bridge and veth interfaces. `down` deletes the node's Pods, stops the kubelet,
# containerd and its shims, unmounts what is left under node/, removes the
# bridge and the cgroups. `cluster.sh down` runs it first.
set -euo pipefail

E2E_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=versions.env
source "$E2E_DIR/versions.env"
CMD="${1:-}"; shift || true
NAME="${KASCADE_E2E_NAME:-e2e}"
PORT_BASE="${KASCADE_E2E_PORT_BASE:-26000}"
NODE_IP=""
TRACING=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --name) NAME="$2"; shift 2 ;;
    --port-base) PORT_BASE="$2"; shift 2 ;;
    --node-ip) NODE_IP="$2"; shift 2 ;;
    --tracing-endpoint) TRACING="$2"; shift 2 ;;
    *) echo "unknown argument: $1" >&2; exit 2 ;;
  esac
done
if [[ "$NAME" == e2e ]]; then RUN_DIR="$E2E_DIR/.run"; else RUN_DIR="$E2E_DIR/.run-$NAME"; fi
NODE_DIR="$RUN_DIR/node"
NODE_NAME="$NAME-real"
KUBELET_PORT=$((PORT_BASE + 350)); KUBELET_HEALTHZ_PORT=$((PORT_BASE + 348)); STREAM_PORT=$((PORT_BASE + 351))
TRACING="${TRACING:-127.0.0.1:$((PORT_BASE + 317))}"
# The pods' bridge (at most 15 characters) and subnet; the CNI network is
# named after the cluster.
BRIDGE="kas-${NAME:0:11}"
POD_SUBNET="${KASCADE_E2E_REAL_POD_SUBNET:-10.89.0.0/24}"
CGROUP_ROOT="/kascade-$NAME-real"
SOCK="$NODE_DIR/containerd.sock"

log() { printf '[node %s %s] %s\n' "$NODE_NAME" "$(date +%H:%M:%S)" "$*" >&2; }

pid_alive() {
  local pid="$1"
  [[ -n "$pid" && -r "/proc/$pid/cmdline" ]] && tr '\0' ' ' <"/proc/$pid/cmdline" | grep -qF "$NODE_DIR"
}

wait_for() {
  local what="$1" secs="$2"; shift 2
  local deadline=$((SECONDS + secs))
  until "$@" >/dev/null 2>&1; do
    if (( SECONDS >= deadline )); then log "timed out after ${secs}s waiting for $what"; return 1; fi
    sleep 0.5
  done
  log "$what: ok"
}

start() {
  local name="$1"; shift
  log "starting $name"
  setsid "$@" >>"$NODE_DIR/logs/$name.log" 2>&1 </dev/null &
  echo $! >"$NODE_DIR/pids/$name.pid"
}

# stop NAME: SIGTERM, 20 s, SIGKILL.
stop() {
  local name="$1" pid
  pid="$(cat "$NODE_DIR/pids/$name.pid" 2>/dev/null || true)"
  pid_alive "$pid" || return 0
  log "stopping $name (pid $pid)"
  kill -TERM "$pid" 2>/dev/null || true
  local deadline=$((SECONDS + 20))
  while pid_alive "$pid" && (( SECONDS < deadline )); do sleep 0.2; done
  if pid_alive "$pid"; then log "$name still running after 20 s: SIGKILL"; kill -KILL "$pid" 2>/dev/null || true; sleep 0.5; fi
}

# The kubelet's cgroup root in every cgroup v1 hierarchy (or the v2 mount).
cgroup_dirs() {
  local d
  if [[ -f /sys/fs/cgroup/cgroup.controllers ]]; then echo "/sys/fs/cgroup$CGROUP_ROOT"; return; fi
  for d in /sys/fs/cgroup/*/; do
    d="${d%/}"
    # Symlinks (cpu -> cpu,cpuacct) skipped; runc makes the cgroup in the
    # hybrid mode's unified (v2) hierarchy too.
    [[ ! -L "$d" ]] || continue
    echo "$d$CGROUP_ROOT"
  done
}

cmd_up() {
  [[ -f "$RUN_DIR/env" ]] || { log "no $RUN_DIR/env: e2e/cluster.sh up --name $NAME first"; exit 1; }
  [[ $EUID -eq 0 ]] || { log "needs root (containers, cgroups, mounts, a bridge)"; exit 1; }
  if pid_alive "$(cat "$NODE_DIR/pids/kubelet.pid" 2>/dev/null || true)"; then log "already up; 'down' first"; exit 1; fi
  # shellcheck source=/dev/null
  source "$RUN_DIR/env"
  local built
  built="$("$E2E_DIR/build.sh" node)"
  local NODE_BIN CNI_BIN NODE_IMAGES BUSYBOX_IMAGE PAUSE_IMAGE
  eval "$(grep -E '^(NODE_BIN|CNI_BIN|NODE_IMAGES|BUSYBOX_IMAGE|PAUSE_IMAGE)=' <<<"$built" | sed 's/^/local /')"
  if [[ -z "$NODE_IP" ]]; then
    NODE_IP="$(ip -4 -o addr show scope global | awk 'NR==1 {split($4, a, "/"); print a[1]}')"
    [[ -n "$NODE_IP" ]] || { log "no global IPv4 address for the node (the kubelet refuses loopback); pass --node-ip"; exit 1; }
  fi
  rm -rf "$NODE_DIR"
  mkdir -p "$NODE_DIR"/{logs,pids,kubelet,pod-logs,runc,opt,cni/net.d,cni/ipam,pki}
  trap 'log "up failed"; tail -n 30 "$NODE_DIR"/logs/*.log >&2; cmd_down' ERR

  # The kubelet's identity: system:node:NODE in system:nodes (the Node authorizer).
  local pki="$RUN_DIR/pki"
  openssl req -newkey rsa:2048 -nodes -keyout "$NODE_DIR/pki/kubelet-client.key" -out "$NODE_DIR/pki/kubelet-client.csr" \
    -subj "/O=system:nodes/CN=system:node:$NODE_NAME" 2>/dev/null
  openssl x509 -req -in "$NODE_DIR/pki/kubelet-client.csr" -CA "$pki/ca.crt" -CAkey "$pki/ca.key" -CAcreateserial \
    -out "$NODE_DIR/pki/kubelet-client.crt" -days 365 2>/dev/null
  cat >"$NODE_DIR/kubelet.kubeconfig" <<KCFG
apiVersion: v1
kind: Config
clusters:
- name: $NAME
  cluster: {server: $APISERVER_URL, certificate-authority: $pki/ca.crt}
users:
- name: $NODE_NAME
  user: {client-certificate: $NODE_DIR/pki/kubelet-client.crt, client-key: $NODE_DIR/pki/kubelet-client.key}
contexts:
- name: $NAME
  context: {cluster: $NAME, user: $NODE_NAME}
current-context: $NAME
KCFG

  cat >"$NODE_DIR/cni/net.d/10-$NAME.conflist" <<JSON
{
  "cniVersion": "1.0.0",
  "name": "kascade-$NAME",
  "plugins": [{
    "type": "bridge", "bridge": "$BRIDGE", "isGateway": true, "ipMasq": false, "hairpinMode": true,
    "ipam": {"type": "host-local", "ranges": [[{"subnet": "$POD_SUBNET"}]],
             "routes": [{"dst": "0.0.0.0/0"}], "dataDir": "$NODE_DIR/cni/ipam"}
  }]
}
JSON
  cat >"$NODE_DIR/containerd.toml" <<TOML
version = 3
root = "$NODE_DIR/containerd/root"
state = "$NODE_DIR/containerd/state"
# Not needed here, and NRI would open /var/run/nri/nri.sock.
disabled_plugins = ["io.containerd.nri.v1.nri"]
[grpc]
  address = "$SOCK"
[ttrpc]
  address = "$SOCK.ttrpc"
[plugins.'io.containerd.internal.v1.opt']
  path = "$NODE_DIR/opt"
[plugins.'io.containerd.cri.v1.images']
  snapshotter = "overlayfs"
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = "$PAUSE_IMAGE"
[plugins.'io.containerd.cri.v1.runtime']
  # No lower oom_score_adj than containerd's own: a sandbox's -998 needs
  # CAP_SYS_RESOURCE, which a VM or container may not grant even to root.
  restrict_oom_score_adj = true
  [plugins.'io.containerd.cri.v1.runtime'.containerd]
    default_runtime_name = "runc"
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
        BinaryName = "$NODE_BIN/runc"
        Root = "$NODE_DIR/runc"
        SystemdCgroup = false
  [plugins.'io.containerd.cri.v1.runtime'.cni]
    bin_dirs = ["$CNI_BIN"]
    conf_dir = "$NODE_DIR/cni/net.d"
[plugins.'io.containerd.grpc.v1.cri']
  stream_server_address = "127.0.0.1"
  stream_server_port = "$STREAM_PORT"
TOML
  local otel=()
  if [[ "$TRACING" != none ]]; then
    otel=(env "OTEL_EXPORTER_OTLP_ENDPOINT=http://$TRACING" OTEL_EXPORTER_OTLP_PROTOCOL=grpc OTEL_EXPORTER_OTLP_INSECURE=true
      OTEL_SERVICE_NAME=containerd OTEL_TRACES_SAMPLER=parentbased_always_on)
  fi
  PATH="$NODE_BIN:$PATH" start containerd "${otel[@]}" "$NODE_BIN/containerd" --config "$NODE_DIR/containerd.toml"
  wait_for "containerd socket" 30 "$NODE_BIN/ctr" --address "$SOCK" version
  local img
  for img in busybox pause; do
    "$NODE_BIN/ctr" --address "$SOCK" -n k8s.io images import --no-unpack=false "$NODE_IMAGES/$img.tar" >&2
  done

  local d
  for d in $(cgroup_dirs); do
    mkdir -p "$d"
    # A cpuset cgroup takes no task until it has CPUs and memory nodes.
    if [[ -f "$d/cpuset.cpus" && -z "$(cat "$d/cpuset.cpus")" ]]; then
      cat "$(dirname "$d")/cpuset.cpus" >"$d/cpuset.cpus"; cat "$(dirname "$d")/cpuset.mems" >"$d/cpuset.mems"
    fi
  done
  local tracing_yaml=""
  [[ "$TRACING" == none ]] || tracing_yaml="tracing: {endpoint: \"$TRACING\", samplingRatePerMillion: 1000000}"
  cat >"$NODE_DIR/kubelet.yaml" <<YAML
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
# Loopback only: the harness's node allows anonymous requests (below).
address: 127.0.0.1
port: $KUBELET_PORT
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: $KUBELET_HEALTHZ_PORT
containerRuntimeEndpoint: unix://$SOCK
cgroupDriver: cgroupfs
cgroupRoot: $CGROUP_ROOT
# Kubernetes 1.35+ refuses cgroup v1 unless told otherwise.
failCgroupV1: false
failSwapOn: false
# The kubelet's own oom_score_adj (default -999) needs CAP_SYS_RESOURCE too.
oomScoreAdj: 0
podLogsDir: $NODE_DIR/pod-logs
resolvConf: ""
# No DNS server runs; without an address the kubelet warns (MissingClusterDNS
# Events) on every Pod it syncs.
clusterDNS: [10.96.0.10]
clusterDomain: cluster.local
# The harness's own node, on loopback: no client certificates, no authorization.
authentication: {anonymous: {enabled: true}, webhook: {enabled: false}}
authorization: {mode: AlwaysAllow}
registerWithTaints: [{key: kascade.io/real-node, value: "true", effect: NoSchedule}]
# A shared build machine's disk: no evictions for lack of space.
evictionHard: {memory.available: 100Mi, nodefs.available: 1%, imagefs.available: 1%, nodefs.inodesFree: 1%}
imageGCHighThresholdPercent: 99
imageGCLowThresholdPercent: 98
maxPods: 30
$tracing_yaml
YAML
  start kubelet "$NODE_BIN/kubelet" --config "$NODE_DIR/kubelet.yaml" --kubeconfig "$NODE_DIR/kubelet.kubeconfig" \
    --root-dir "$NODE_DIR/kubelet" --hostname-override "$NODE_NAME" --node-ip "$NODE_IP" \
    --node-labels kascade.io/real-node=true --v 2
  wait_for "kubelet healthz" 90 curl -sf "http://127.0.0.1:$KUBELET_HEALTHZ_PORT/healthz"
  # shellcheck disable=SC2153 # KUBECTL: from the cluster's env
  wait_for "node $NODE_NAME Ready" 120 "$KUBECTL" wait --for=condition=Ready "node/$NODE_NAME" --timeout=2s
  cat >"$NODE_DIR/env" <<ENV
# Written by e2e/node.sh up.
export REAL_NODE=$NODE_NAME
export REAL_NODE_DIR=$NODE_DIR
export BUSYBOX_IMAGE=$BUSYBOX_IMAGE
export PAUSE_IMAGE=$PAUSE_IMAGE
export CONTAINERD_ADDRESS=$SOCK
export CTR=$NODE_BIN/ctr
ENV
  trap - ERR
  log "up: node $NODE_NAME (kubelet :$KUBELET_PORT, containerd $SOCK, pods $POD_SUBNET on $BRIDGE); source $NODE_DIR/env"
}

cmd_down() {
  [[ -d "$NODE_DIR" ]] || { log "not up (no $NODE_DIR)"; return 0; }
  local kubectl=""
  [[ -f "$RUN_DIR/env" ]] && kubectl="$(sed -n 's/^export KUBECTL=//p' "$RUN_DIR/env")"
  local kubeconfig="$RUN_DIR/admin.kubeconfig"
  if pid_alive "$(cat "$NODE_DIR/pids/kubelet.pid" 2>/dev/null || true)" && [[ -n "$kubectl" ]]; then
    # The kubelet stops and removes its Pods' sandboxes (CNI DEL, netns, mounts);
    # cordoned first, so that no controller's replacement Pod lands here again.
    log "cordoning $NODE_NAME and deleting its Pods"
    "$kubectl" --kubeconfig "$kubeconfig" cordon "$NODE_NAME" >/dev/null 2>&1 || true
    "$kubectl" --kubeconfig "$kubeconfig" delete pods -A --field-selector "spec.nodeName=$NODE_NAME" \
      --grace-period 1 --wait --timeout 60s >/dev/null 2>&1 || log "some Pods were not deleted in 60 s"
    local deadline=$((SECONDS + 30))
    while [[ -n "$(ls "$NODE_DIR/kubelet/pods" 2>/dev/null)" ]] && (( SECONDS < deadline )); do sleep 1; done
  fi
  stop kubelet
  [[ -z "$kubectl" ]] || "$kubectl" --kubeconfig "$kubeconfig" delete node "$NODE_NAME" --ignore-not-found >/dev/null 2>&1 || true
  # Sandboxes the kubelet did not get to remove: their network namespaces and
  # CNI result caches (named after the sandbox ID; containerd keeps them in
  # /var/run/netns and /var/lib/cni, not under node/).
  local ctr id f netns
  ctr="$(sed -n 's/^export CTR=//p' "$NODE_DIR/env" 2>/dev/null || true)"
  if pid_alive "$(cat "$NODE_DIR/pids/containerd.pid" 2>/dev/null || true)" && [[ -x "$ctr" ]]; then
    for id in $("$ctr" --address "$SOCK" -n k8s.io containers ls -q 2>/dev/null); do
      for f in /var/lib/cni/results/*-"$id"-*; do
        [[ -f "$f" ]] || continue
        netns="$(sed -n 's/.*"netns":"\([^"]*\)".*/\1/p' "$f")"
        if [[ -n "$netns" && -e "$netns" ]]; then
          log "removing network namespace $netns of sandbox ${id:0:12}"
          umount "$netns" 2>/dev/null || true; rm -f "$netns"
        fi
        rm -f "$f"
      done
    done
  fi
  stop containerd
  # The shims outlive containerd by design; their command lines name our socket.
  # A shim's socket is /run/containerd/s/<sha256 of ADDRESS/NAMESPACE/ID>
  # (containerd's pkg/shim), not under node/; a killed shim leaves it.
  local pid sid
  for pid in $(pgrep -f "containerd-shim-runc-v2 .*-address $SOCK" || true); do
    pid_alive "$pid" || continue
    sid="$(tr '\0' '\n' <"/proc/$pid/cmdline" | sed -n '/^-id$/{n;p;}')"
    log "stopping shim $pid"; kill -KILL "$pid" 2>/dev/null || true
    [[ -z "$sid" ]] || rm -f "/run/containerd/s/$(printf '%s' "$SOCK/k8s.io/$sid" | sha256sum | cut -c1-64)"
  done
  rmdir /run/containerd/s /run/containerd 2>/dev/null || true
  # Whatever is left in the node's cgroups is a container of ours.
  local d
  for d in $(cgroup_dirs); do
    [[ -d "$d" ]] || continue
    while read -r pid; do
      log "killing pid $pid left in $d"; kill -KILL "$pid" 2>/dev/null || true
    done < <(find "$d" -name cgroup.procs -exec cat {} + 2>/dev/null)
  done
  sleep 0.5
  for d in $(cgroup_dirs); do
    [[ -d "$d" ]] && find "$d" -depth -type d -exec rmdir {} \; 2>/dev/null
    [[ ! -d "$d" ]] || log "cgroup $d not removed"
  done
  # Mounts under node/ (rootfs overlays, shm, projected volumes), deepest first;
  # network namespaces containerd made for our sandboxes.
  local m
  while read -r m; do
    umount "$m" 2>/dev/null || umount -l "$m" || log "cannot unmount $m"
  done < <(awk -v dir="$NODE_DIR" 'index($2, dir) == 1 {print $2}' /proc/mounts | sort -r)
  if ip link show "$BRIDGE" >/dev/null 2>&1; then ip link del "$BRIDGE"; fi
  rm -f /var/lib/cni/results/"kascade-$NAME"-* 2>/dev/null || true
  if awk -v dir="$NODE_DIR" 'index($2, dir) == 1' /proc/mounts | grep -q .; then
    log "down FAILED: mounts left under $NODE_DIR (kept)"; return 1
  fi
  rm -rf "$NODE_DIR"
  log "down: kubelet, containerd and shims stopped, mounts, bridge and cgroups removed"
}

cmd_status() {
  [[ -d "$NODE_DIR" ]] || { echo "$NODE_NAME: down"; return 1; }
  local name pid rc=0
  for name in containerd kubelet; do
    pid="$(cat "$NODE_DIR/pids/$name.pid" 2>/dev/null || true)"
    if pid_alive "$pid"; then echo "$name: running (pid $pid)"; else echo "$name: NOT running"; rc=1; fi
  done
  return $rc
}

case "$CMD" in
  up) cmd_up ;;
  down) cmd_down ;;
  status) cmd_status ;;
  *) echo "usage: $0 up|down|status [--name NAME] [--port-base N] [--node-ip IP] [--tracing-endpoint HOST:PORT|none]" >&2; exit 2 ;;
esac

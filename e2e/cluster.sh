#!/usr/bin/env bash
# A real Kubernetes control plane (etcd, kube-apiserver, kube-controller-manager,
# kube-scheduler, kwok with 3 fake nodes, a default StorageClass with 10
# pre-created PersistentVolumes) and a real Jaeger v2 on 127.0.0.1.
#
#   e2e/cluster.sh up     [--name NAME] [--port-base N] [--audit-webhook-url URL] [--audit-policy FILE]
#                         [--tracing-endpoint HOST:PORT] [--second-apiserver]
#   e2e/cluster.sh down   [--name NAME]
#   e2e/cluster.sh status [--name NAME]
#   e2e/cluster.sh restart COMPONENT [--name NAME]   (e.g. kube-apiserver)
#
# NAME (default "e2e") is also the cluster name; its run dir is e2e/.run (for
# the default name) or e2e/.run-NAME, holding configs, logs, PIDs and `env`,
# the shell exports later scripts source. A second cluster runs beside the
# first with another --name and --port-base. --second-apiserver starts a
# second kube-apiserver on the same etcd (port base + 444, its own audit log
# audit-2.log, AUDIT_LOG_2 in `env`) and points the scheduler and kwok at it,
# the controller-manager and the admin at the first: one cluster's writes in
# two apiservers' logs, as a highly available control plane writes them.
set -euo pipefail

E2E_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
CMD="${1:-}"; shift || true
RESTART=""
if [[ "$CMD" == restart ]]; then RESTART="${1:-}"; shift || true; fi
NAME="${KASCADE_E2E_NAME:-e2e}"
PORT_BASE="${KASCADE_E2E_PORT_BASE:-26000}"
AUDIT_POLICY="$E2E_DIR/audit-policy.yaml"
WEBHOOK_URL=""
# Where kube-apiserver sends its own traces (OTLP gRPC, plaintext: the
# apiserver's exporter offers no TLS): kascade's component-trace listener;
# `none`: the apiserver traces nothing.
TRACING_ENDPOINT="${KASCADE_E2E_TRACING_ENDPOINT:-127.0.0.1:4317}"
CRASH=""
SECOND_APISERVER=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --name) NAME="$2"; shift 2 ;;
    --port-base) PORT_BASE="$2"; shift 2 ;;
    --audit-webhook-url) WEBHOOK_URL="$2"; shift 2 ;;
    --audit-policy) AUDIT_POLICY="$(cd "$(dirname "$2")" && pwd)/$(basename "$2")"; shift 2 ;;
    --tracing-endpoint) TRACING_ENDPOINT="$2"; shift 2 ;;
    --crash) CRASH=1; shift ;;
    --second-apiserver) SECOND_APISERVER=1; shift ;;
    *) echo "unknown argument: $1" >&2; exit 2 ;;
  esac
done
[[ "$NAME" =~ ^[a-z0-9][a-z0-9-]*$ ]] || { echo "--name must be lower-case letters, digits and '-'" >&2; exit 2; }
if [[ "$NAME" == e2e ]]; then RUN_DIR="$E2E_DIR/.run"; else RUN_DIR="$E2E_DIR/.run-$NAME"; fi
# kascade's default webhook address, with this cluster's name in the path.
WEBHOOK_URL="${WEBHOOK_URL:-${AUDIT_WEBHOOK_URL:-https://127.0.0.1:8090/audit/$NAME}}"
# The webhook's PKI is shared by every cluster of this checkout, so one kascade
# (one serving certificate) can receive the audit webhooks of several clusters.
WEBHOOK_PKI="$E2E_DIR/.pki"

ETCD_PORT=$((PORT_BASE + 79)); ETCD_PEER_PORT=$((PORT_BASE + 80))
APISERVER_PORT=$((PORT_BASE + 443)); APISERVER2_PORT=$((PORT_BASE + 444)); KCM_PORT=$((PORT_BASE + 257)); SCHED_PORT=$((PORT_BASE + 259))
KWOK_PORT=$((PORT_BASE + 250))
JAEGER_OTLP_GRPC_PORT=$((PORT_BASE + 317)); JAEGER_OTLP_HTTP_PORT=$((PORT_BASE + 318))
JAEGER_QUERY_HTTP_PORT=$((PORT_BASE + 686)); JAEGER_QUERY_GRPC_PORT=$((PORT_BASE + 685))
JAEGER_HEALTH_PORT=$((PORT_BASE + 133)); JAEGER_METRICS_PORT=$((PORT_BASE + 888))
JAEGER_REMOTE_STORAGE_PORT=$((PORT_BASE + 271))
# OTLP over TLS (e2e/jaeger/raw-tls.yaml): gRPC with mutual TLS, HTTP with server TLS.
JAEGER_OTLP_TLS_GRPC_PORT=$((PORT_BASE + 319)); JAEGER_OTLP_TLS_HTTP_PORT=$((PORT_BASE + 320))
COMPONENTS=(etcd kube-apiserver kube-apiserver-2 kube-controller-manager kube-scheduler kwok jaeger)

log() { printf '[cluster %s %s] %s\n' "$NAME" "$(date +%H:%M:%S)" "$*" >&2; }

pid_alive() {
  # Alive and still ours: its command line mentions our run dir.
  local pid="$1"
  [[ -n "$pid" && -r "/proc/$pid/cmdline" ]] && tr '\0' ' ' <"/proc/$pid/cmdline" | grep -qF "$RUN_DIR"
}

start() {
  local name="$1"; shift
  log "starting $name"
  # The command line is kept for `restart` (the component's environment is not).
  mkdir -p "$RUN_DIR/cmds"; printf '%q ' "$@" >"$RUN_DIR/cmds/$name"
  setsid "$@" >>"$RUN_DIR/logs/$name.log" 2>&1 < /dev/null &
  echo $! >"$RUN_DIR/pids/$name.pid"
}

# wait_for DESCRIPTION SECONDS COMMAND...: polls COMMAND until it succeeds.
wait_for() {
  local what="$1" secs="$2"; shift 2
  local deadline=$((SECONDS + secs))
  until "$@" >/dev/null 2>&1; do
    if (( SECONDS >= deadline )); then log "timed out after ${secs}s waiting for $what"; return 1; fi
    sleep 0.5
  done
  log "$what: ok"
}

print_log_tails() {
  for f in "$RUN_DIR"/logs/*.log; do
    [[ -f "$f" ]] || continue
    echo "----- tail of $f -----" >&2
    tail -n 25 "$f" >&2
  done
}

# Exited: no such process, or a zombie nobody reaped yet (its sockets are
# closed). Not pid_alive: while a process exits, its command line reads
# empty before its sockets are closed.
proc_gone() {
  local stat
  stat="$(cat "/proc/$1/stat" 2>/dev/null)" || return 0
  stat="${stat##*) }"
  [[ -z "$stat" || "${stat:0:1}" == Z || "${stat:0:1}" == X ]]
}

port_listening() { (echo > "/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

CLUSTER_PORTS=($ETCD_PORT $ETCD_PEER_PORT $APISERVER_PORT $APISERVER2_PORT $KCM_PORT $SCHED_PORT $KWOK_PORT
  $JAEGER_OTLP_GRPC_PORT $JAEGER_OTLP_HTTP_PORT $JAEGER_OTLP_TLS_GRPC_PORT $JAEGER_OTLP_TLS_HTTP_PORT
  $JAEGER_QUERY_HTTP_PORT $JAEGER_QUERY_GRPC_PORT $JAEGER_HEALTH_PORT $JAEGER_METRICS_PORT)

# stop_components NAME...: SIGTERM to each running component, up to
# STOP_GRACE (15) seconds for them to exit, then SIGKILL to the rest (named in
# the log); returns once every one has exited, or 1 if one outlives SIGKILL.
stop_components() {
  local names=() pids=() name pid i
  for name in "$@"; do
    [[ -f "$RUN_DIR/pids/$name.pid" ]] || continue
    pid="$(cat "$RUN_DIR/pids/$name.pid")"
    if pid_alive "$pid"; then kill -TERM "$pid" 2>/dev/null || true; names+=("$name"); pids+=("$pid"); fi
  done
  local deadline=$((SECONDS + ${STOP_GRACE:-15}))
  for i in "${!pids[@]}"; do
    while ! proc_gone "${pids[$i]}" && (( SECONDS < deadline )); do sleep 0.2; done
  done
  local killed=()
  for i in "${!pids[@]}"; do
    if ! proc_gone "${pids[$i]}"; then
      kill -KILL "${pids[$i]}" 2>/dev/null || true
      killed+=("${names[$i]} (pid ${pids[$i]})")
    fi
  done
  if (( ${#killed[@]} )); then log "still running ${STOP_GRACE:-15}s after SIGTERM, SIGKILLed: ${killed[*]}"; fi
  # Even after SIGKILL, exiting (closing its sockets) takes a moment.
  deadline=$((SECONDS + 30))
  local rc=0
  for i in "${!pids[@]}"; do
    while ! proc_gone "${pids[$i]}" && (( SECONDS < deadline )); do sleep 0.1; done
    if ! proc_gone "${pids[$i]}"; then log "${names[$i]} (pid ${pids[$i]}) has not exited, even after SIGKILL"; rc=1; fi
  done
  return $rc
}

# Stops every component, then waits (at most 30 s) until none of the
# cluster's ports is listening any more, so that `up` can follow at once.
stop_all() {
  local rc=0 port busy=()
  stop_components "${COMPONENTS[@]}" || rc=1
  local deadline=$((SECONDS + 30))
  for port in "${CLUSTER_PORTS[@]}"; do
    while port_listening "$port" && (( SECONDS < deadline )); do sleep 0.2; done
    if port_listening "$port"; then busy+=("$port"); fi
  done
  if (( ${#busy[@]} )); then
    log "ports still listening after stopping every component: ${busy[*]}"
    ss -ltnp 2>/dev/null | grep -E ":($(IFS='|'; echo "${busy[*]}"))\b" >&2 || true
    rc=1
  fi
  return $rc
}

# Certificates, tokens and kubeconfigs: e2e/pki.sh, shared with the
# docker-compose quickstart (deploy/compose/init.sh).
# shellcheck source=pki.sh
source "$E2E_DIR/pki.sh"

# The harness's default StorageClass and PV_COUNT (10) PersistentVolumes of
# 1Gi each (ReadWriteOnce, Retain: a claim's volume stays bound to it).
storage_manifest() {
  cat <<'YAML'
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata:
  name: standard
  annotations: {storageclass.kubernetes.io/is-default-class: "true"}
provisioner: kubernetes.io/no-provisioner
volumeBindingMode: Immediate
reclaimPolicy: Retain
YAML
  local i
  for ((i = 0; i < ${PV_COUNT:-10}; i++)); do
    cat <<YAML
---
apiVersion: v1
kind: PersistentVolume
metadata:
  name: pv-$i
spec:
  storageClassName: standard
  capacity: {storage: 1Gi}
  accessModes: [ReadWriteOnce]
  persistentVolumeReclaimPolicy: Retain
  hostPath: {path: /tmp/kascade-e2e-pv-$i}
YAML
  done
}

cmd_up() {
  if [[ -f "$RUN_DIR/pids/kube-apiserver.pid" ]] && pid_alive "$(cat "$RUN_DIR/pids/kube-apiserver.pid")"; then
    log "already up (run dir $RUN_DIR); use 'down' first"; exit 1
  fi
  local port
  for port in "${CLUSTER_PORTS[@]}"; do
    if port_listening "$port"; then
      log "port $port is already in use; pick another --port-base"; exit 1
    fi
  done
  local bin
  bin="$("$E2E_DIR/build.sh" all | sed -n 's/^KASCADE_E2E_BIN=//p')"
  rm -rf "$RUN_DIR"; mkdir -p "$RUN_DIR/logs" "$RUN_DIR/pids"
  trap 'log "up failed"; print_log_tails; stop_all' ERR

  pki_cluster "$RUN_DIR/pki" "$NAME" \
    "IP:127.0.0.1,IP:10.96.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc"
  # Each component has its own identity, so audit events show who acted.
  pki_identities "$RUN_DIR/pki" "$RUN_DIR" "$NAME" "https://127.0.0.1:$APISERVER_PORT"
  local admin_token="$ADMIN_TOKEN"
  pki_webhook "$WEBHOOK_PKI" "IP:127.0.0.1,DNS:localhost,DNS:kascade"
  pki_webhook_kubeconfig "$RUN_DIR/audit-webhook.kubeconfig" "$WEBHOOK_URL" "$WEBHOOK_PKI"
  cp "$AUDIT_POLICY" "$RUN_DIR/audit-policy.yaml"
  # Every request traced (tests count traced requests against joined ones).
  # The OTLP exporter reads its headers from the environment (the
  # TracingConfiguration has no field for them): kascade's bearer token and
  # this cluster's name (gRPC has no path to carry it), passed through
  # env(1) so that `restart` keeps them.
  local tracing=()
  if [[ "$TRACING_ENDPOINT" != none ]]; then
    cat >"$RUN_DIR/tracing.yaml" <<TRACING
apiVersion: apiserver.config.k8s.io/v1
kind: TracingConfiguration
endpoint: $TRACING_ENDPOINT
samplingRatePerMillion: 1000000
TRACING
    tracing=(env "OTEL_EXPORTER_OTLP_TRACES_HEADERS=authorization=Bearer%20$(cat "$WEBHOOK_PKI/webhook.token"),kascade-cluster=$NAME"
      "$bin/kube-apiserver" --tracing-config-file "$RUN_DIR/tracing.yaml")
  else
    tracing=("$bin/kube-apiserver")
  fi
  cp "$E2E_DIR/jaeger/raw.yaml" "$RUN_DIR/jaeger-raw.yaml"
  cp "$E2E_DIR/jaeger/raw-tls.yaml" "$RUN_DIR/jaeger-raw-tls.yaml"
  pki_otlp "$RUN_DIR/pki/otlp" "IP:127.0.0.1,DNS:localhost"

  start etcd "$bin/etcd" --name "$NAME" --data-dir "$RUN_DIR/etcd" \
    --listen-client-urls "http://127.0.0.1:$ETCD_PORT" --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
    --listen-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" --initial-advertise-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
    --initial-cluster "$NAME=http://127.0.0.1:$ETCD_PEER_PORT" --unsafe-no-fsync --log-level warn
  wait_for "etcd health" 30 curl -sf "http://127.0.0.1:$ETCD_PORT/health"

  start kube-apiserver "${tracing[@]}" \
    --etcd-servers "http://127.0.0.1:$ETCD_PORT" \
    --bind-address 127.0.0.1 --advertise-address 127.0.0.1 --secure-port "$APISERVER_PORT" \
    --cert-dir "$RUN_DIR/pki/apiserver-generated" \
    --tls-cert-file "$RUN_DIR/pki/apiserver.crt" --tls-private-key-file "$RUN_DIR/pki/apiserver.key" \
    --client-ca-file "$RUN_DIR/pki/ca.crt" \
    --token-auth-file "$RUN_DIR/pki/tokens.csv" \
    --authorization-mode Node,RBAC \
    --service-account-issuer https://kubernetes.default.svc.cluster.local \
    --service-account-key-file "$RUN_DIR/pki/sa.pub" \
    --service-account-signing-key-file "$RUN_DIR/pki/sa.key" \
    --service-cluster-ip-range 10.96.0.0/16 \
    --allow-privileged=true \
    --audit-policy-file "$RUN_DIR/audit-policy.yaml" \
    --audit-log-path "$RUN_DIR/audit.log" --audit-log-format json --audit-log-maxsize 0 --audit-log-mode blocking \
    --audit-webhook-config-file "$RUN_DIR/audit-webhook.kubeconfig" \
    --audit-webhook-mode batch --audit-webhook-batch-max-wait 1s \
    --audit-webhook-initial-backoff 3s --audit-webhook-batch-throttle-enable=false \
    --audit-webhook-batch-buffer-size 100000
  wait_for "kube-apiserver /readyz" 90 curl -sf --cacert "$RUN_DIR/pki/ca.crt" \
    -H "Authorization: Bearer $admin_token" "https://127.0.0.1:$APISERVER_PORT/readyz"
  if [[ -n "$SECOND_APISERVER" ]]; then
    # The first one's command line (kept for `restart`; e2e/validate-deploy.sh
    # compares the flags above with compose's), on its own port, cert dir
    # and audit log.
    sed -e "s#--secure-port $APISERVER_PORT #--secure-port $APISERVER2_PORT #" \
      -e "s#/pki/apiserver-generated #/pki/apiserver-generated-2 #" \
      -e "s#/audit\.log #/audit-2.log #" "$RUN_DIR/cmds/kube-apiserver" >"$RUN_DIR/cmds/kube-apiserver-2"
    local want
    for want in "--secure-port $APISERVER2_PORT " "/pki/apiserver-generated-2 " "/audit-2.log "; do
      grep -qF -- "$want" "$RUN_DIR/cmds/kube-apiserver-2" \
        || { log "the second apiserver's command line lacks '$want'"; false; }
    done
    log "starting kube-apiserver-2"
    (eval "exec setsid $(cat "$RUN_DIR/cmds/kube-apiserver-2")") >>"$RUN_DIR/logs/kube-apiserver-2.log" 2>&1 </dev/null &
    echo $! >"$RUN_DIR/pids/kube-apiserver-2.pid"
    wait_for "kube-apiserver-2 /readyz" 90 curl -sf --cacert "$RUN_DIR/pki/ca.crt" \
      -H "Authorization: Bearer $admin_token" "https://127.0.0.1:$APISERVER2_PORT/readyz"
    # The scheduler and the kubelets write through the second apiserver.
    sed -i "s#https://127.0.0.1:$APISERVER_PORT\b#https://127.0.0.1:$APISERVER2_PORT#" \
      "$RUN_DIR/scheduler.kubeconfig" "$RUN_DIR/kwok.kubeconfig"
  fi

  start kube-controller-manager "$bin/kube-controller-manager" \
    --kubeconfig "$RUN_DIR/kcm.kubeconfig" \
    --authentication-kubeconfig "$RUN_DIR/kcm.kubeconfig" --authorization-kubeconfig "$RUN_DIR/kcm.kubeconfig" \
    --bind-address 127.0.0.1 --secure-port "$KCM_PORT" --cert-dir "$RUN_DIR/pki/kcm-generated" \
    --leader-elect=false --use-service-account-credentials=true \
    --service-account-private-key-file "$RUN_DIR/pki/sa.key" --root-ca-file "$RUN_DIR/pki/ca.crt" \
    --cluster-name "$NAME"
  start kube-scheduler "$bin/kube-scheduler" \
    --kubeconfig "$RUN_DIR/scheduler.kubeconfig" \
    --authentication-kubeconfig "$RUN_DIR/scheduler.kubeconfig" --authorization-kubeconfig "$RUN_DIR/scheduler.kubeconfig" \
    --bind-address 127.0.0.1 --secure-port "$SCHED_PORT" --cert-dir "$RUN_DIR/pki/scheduler-generated" \
    --leader-elect=false
  start kwok "$bin/kwok" --kubeconfig "$RUN_DIR/kwok.kubeconfig" \
    --config "$E2E_DIR/kwok/stages.yaml" \
    --manage-all-nodes=false --manage-nodes-with-annotation-selector kwok.x-k8s.io/node=fake \
    --node-lease-duration-seconds 40 --cidr 10.244.0.0/16 --node-ip 10.0.0.1 --server-address "127.0.0.1:$KWOK_PORT"

  JAEGER_BIND_HOST=127.0.0.1 JAEGER_OTLP_GRPC_PORT=$JAEGER_OTLP_GRPC_PORT JAEGER_OTLP_HTTP_PORT=$JAEGER_OTLP_HTTP_PORT \
  JAEGER_QUERY_HTTP_PORT=$JAEGER_QUERY_HTTP_PORT JAEGER_QUERY_GRPC_PORT=$JAEGER_QUERY_GRPC_PORT \
  JAEGER_HEALTH_PORT=$JAEGER_HEALTH_PORT JAEGER_METRICS_PORT=$JAEGER_METRICS_PORT JAEGER_REMOTE_STORAGE_PORT=$JAEGER_REMOTE_STORAGE_PORT \
  JAEGER_OTLP_TLS_GRPC_PORT=$JAEGER_OTLP_TLS_GRPC_PORT JAEGER_OTLP_TLS_HTTP_PORT=$JAEGER_OTLP_TLS_HTTP_PORT \
  JAEGER_OTLP_TLS_CERT_FILE="$RUN_DIR/pki/otlp/jaeger.crt" JAEGER_OTLP_TLS_KEY_FILE="$RUN_DIR/pki/otlp/jaeger.key" \
  JAEGER_OTLP_TLS_CLIENT_CA_FILE="$RUN_DIR/pki/otlp/ca.crt" \
    start jaeger "$bin/jaeger" --config "file:$RUN_DIR/jaeger-raw.yaml" --config "file:$RUN_DIR/jaeger-raw-tls.yaml"

  local kubectl=("$bin/kubectl" --kubeconfig "$RUN_DIR/admin.kubeconfig")
  "${kubectl[@]}" apply -f "$E2E_DIR/kwok/nodes.yaml" >/dev/null
  wait_for "3 kwok nodes Ready" 60 "${kubectl[@]}" wait --for=condition=Ready node --all --timeout=2s
  # Volumes: a default StorageClass without a provisioner and pre-created
  # PersistentVolumes, which the real kube-controller-manager's PV binder
  # binds claims to (kwok mounts nothing, so hostPath volumes suffice).
  storage_manifest | "${kubectl[@]}" apply -f - >/dev/null
  wait_for "default ServiceAccount" 60 "${kubectl[@]}" get serviceaccount default -n default
  # kascade's watchers run as user `kascade` with exactly the chart's
  # read-only ClusterRole (deploy/helm/kascade, get/list/watch).
  "$bin/helm" template kascade "$E2E_DIR/../deploy/helm/kascade" --show-only templates/rbac.yaml 2>/dev/null \
    | "${kubectl[@]}" apply -f - >/dev/null
  "${kubectl[@]}" create clusterrolebinding kascade-e2e-reader --clusterrole=kascade-reader --user=kascade >/dev/null
  wait_for "Jaeger query API" 60 curl -sf "http://127.0.0.1:$JAEGER_QUERY_HTTP_PORT/api/services"

  cat >"$RUN_DIR/env" <<ENV
# Written by e2e/cluster.sh up; source it to use this cluster.
export CLUSTER_NAME=$NAME
export KASCADE_E2E_RUN_DIR=$RUN_DIR
export KASCADE_E2E_BIN=$bin
export KUBECONFIG=$RUN_DIR/admin.kubeconfig
export KUBECTL=$bin/kubectl
export KASCADE_KUBECONFIG=$RUN_DIR/kascade.kubeconfig
export APISERVER_URL=https://127.0.0.1:$APISERVER_PORT
export ETCD_ENDPOINT=http://127.0.0.1:$ETCD_PORT
export AUDIT_LOG=$RUN_DIR/audit.log
export AUDIT_LOG_2=${SECOND_APISERVER:+$RUN_DIR/audit-2.log}
export AUDIT_WEBHOOK_URL=$WEBHOOK_URL
export AUDIT_WEBHOOK_TOKEN_FILE=$WEBHOOK_PKI/webhook.token
export TRACING_ENDPOINT=$TRACING_ENDPOINT
export KASCADE_TLS_CERT_FILE=$WEBHOOK_PKI/kascade.crt
export KASCADE_TLS_KEY_FILE=$WEBHOOK_PKI/kascade.key
export KASCADE_TLS_CLIENT_CA_FILE=$WEBHOOK_PKI/ca.crt
export JAEGER_OTLP_GRPC=http://127.0.0.1:$JAEGER_OTLP_GRPC_PORT
export JAEGER_OTLP_HTTP=http://127.0.0.1:$JAEGER_OTLP_HTTP_PORT
export JAEGER_QUERY_URL=http://127.0.0.1:$JAEGER_QUERY_HTTP_PORT
export JAEGER_QUERY_GRPC=127.0.0.1:$JAEGER_QUERY_GRPC_PORT
export JAEGER_REMOTE_STORAGE_URL=http://127.0.0.1:$JAEGER_REMOTE_STORAGE_PORT
export JAEGER_OTLP_TLS_GRPC=https://127.0.0.1:$JAEGER_OTLP_TLS_GRPC_PORT
export JAEGER_OTLP_TLS_HTTP=https://localhost:$JAEGER_OTLP_TLS_HTTP_PORT
export OTLP_CA_FILE=$RUN_DIR/pki/otlp/ca.crt
export OTLP_CLIENT_CERT_FILE=$RUN_DIR/pki/otlp/kascade-client.crt
export OTLP_CLIENT_KEY_FILE=$RUN_DIR/pki/otlp/kascade-client.key
ENV
  trap - ERR
  log "up: source $RUN_DIR/env"
}

cmd_down() {
  if [[ ! -d "$RUN_DIR" ]]; then log "not up (no $RUN_DIR)"; return 0; fi
  # A real node (e2e/node.sh) first: its containers, mounts and bridge.
  if [[ -d "$RUN_DIR/node" ]] && ! "$E2E_DIR/node.sh" down --name "$NAME"; then
    log "down FAILED: e2e/node.sh down; $RUN_DIR is kept"
    return 1
  fi
  if ! stop_all; then
    log "down FAILED: see above; $RUN_DIR is kept (its pids/ name what was started)"
    return 1
  fi
  rm -rf "$RUN_DIR"
  log "down: every component exited, ports free"
}

cmd_status() {
  if [[ ! -d "$RUN_DIR" ]]; then echo "$NAME: down"; return 1; fi
  local name pid rc=0
  for name in "${COMPONENTS[@]}"; do
    # Started only with --second-apiserver.
    [[ "$name" != kube-apiserver-2 || -f "$RUN_DIR/cmds/$name" ]] || continue
    pid="$(cat "$RUN_DIR/pids/$name.pid" 2>/dev/null || true)"
    if pid_alive "$pid"; then echo "$name: running (pid $pid)"; else echo "$name: NOT running"; rc=1; fi
  done
  [[ -f "$RUN_DIR/env" ]] && echo "env: $RUN_DIR/env"
  return $rc
}

# restart COMPONENT: stops it (TERM, then KILL after 15 s) and starts it again
# with the same command line, then waits for it to be ready (apiserver: /readyz).
cmd_restart() {
  local name="$RESTART" pid
  [[ -f "$RUN_DIR/cmds/$name" ]] || { log "no component $name in $RUN_DIR"; exit 1; }
  [[ "$name" != jaeger ]] || { log "jaeger takes its ports from the environment; restart the cluster instead"; exit 1; }
  if [[ -n "$CRASH" ]]; then
    # A crash: SIGKILL, no chance to end connections cleanly.
    pid="$(cat "$RUN_DIR/pids/$name.pid")"
    log "killing $name (pid $pid)"
    kill -KILL "$pid" 2>/dev/null || true
    local deadline=$((SECONDS + 30))
    while ! proc_gone "$pid" && (( SECONDS < deadline )); do sleep 0.1; done
  else
    stop_components "$name" || exit 1
  fi
  if [[ "$name" == kube-apiserver ]]; then
    # An exiting process may hold its port a moment after its cmdline is gone.
    local deadline=$((SECONDS + 30))
    while port_listening "$APISERVER_PORT" && (( SECONDS < deadline )); do sleep 0.1; done
  fi
  log "restarting $name"
  # exec, so that $! is the component itself (what `down` stops).
  (eval "exec setsid $(cat "$RUN_DIR/cmds/$name")") >>"$RUN_DIR/logs/$name.log" 2>&1 < /dev/null &
  echo $! >"$RUN_DIR/pids/$name.pid"
  if [[ "$name" == kube-apiserver ]]; then
    local token url
    token="$(awk -F, '$2=="kascade-e2e-admin" {print $1}' "$RUN_DIR/pki/tokens.csv")"
    url="$(sed -n 's/^export APISERVER_URL=//p' "$RUN_DIR/env")"
    wait_for "kube-apiserver /readyz" 90 curl -sf --cacert "$RUN_DIR/pki/ca.crt" \
      -H "Authorization: Bearer $token" "$url/readyz"
  fi
}

case "$CMD" in
  up) cmd_up ;;
  down) cmd_down ;;
  status) cmd_status ;;
  restart) cmd_restart ;;
  *) echo "usage: $0 up|down|status|restart COMPONENT [--crash] [--name NAME] [--port-base N] [--audit-webhook-url URL] [--audit-policy FILE] [--tracing-endpoint HOST:PORT] [--second-apiserver]" >&2; exit 2 ;;
esac

#!/usr/bin/env bash
# A real Kubernetes control plane (etcd, kube-apiserver, kube-controller-manager,
# kube-scheduler, kwok with 3 fake nodes) and a real Jaeger v2 on 127.0.0.1.
#
#   e2e/cluster.sh up     [--name NAME] [--port-base N] [--audit-webhook-url URL] [--audit-policy FILE]
#   e2e/cluster.sh down   [--name NAME]
#   e2e/cluster.sh status [--name NAME]
#
# NAME (default "e2e") is also the cluster name; its run dir is e2e/.run (for
# the default name) or e2e/.run-NAME, holding configs, logs, PIDs and `env`,
# the shell exports later scripts source. A second cluster runs beside the
# first with another --name and --port-base.
set -euo pipefail

E2E_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
CMD="${1:-}"; shift || true
NAME="${KASCADE_E2E_NAME:-e2e}"
PORT_BASE="${KASCADE_E2E_PORT_BASE:-26000}"
AUDIT_POLICY="$E2E_DIR/audit-policy.yaml"
WEBHOOK_URL=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --name) NAME="$2"; shift 2 ;;
    --port-base) PORT_BASE="$2"; shift 2 ;;
    --audit-webhook-url) WEBHOOK_URL="$2"; shift 2 ;;
    --audit-policy) AUDIT_POLICY="$(cd "$(dirname "$2")" && pwd)/$(basename "$2")"; shift 2 ;;
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
APISERVER_PORT=$((PORT_BASE + 443)); KCM_PORT=$((PORT_BASE + 257)); SCHED_PORT=$((PORT_BASE + 259))
KWOK_PORT=$((PORT_BASE + 250))
JAEGER_OTLP_GRPC_PORT=$((PORT_BASE + 317)); JAEGER_OTLP_HTTP_PORT=$((PORT_BASE + 318))
JAEGER_QUERY_HTTP_PORT=$((PORT_BASE + 686)); JAEGER_QUERY_GRPC_PORT=$((PORT_BASE + 685))
JAEGER_HEALTH_PORT=$((PORT_BASE + 133)); JAEGER_METRICS_PORT=$((PORT_BASE + 888))
COMPONENTS=(etcd kube-apiserver kube-controller-manager kube-scheduler kwok jaeger)

log() { printf '[cluster %s %s] %s\n' "$NAME" "$(date +%H:%M:%S)" "$*" >&2; }

pid_alive() {
  # Alive and still ours: its command line mentions our run dir.
  local pid="$1"
  [[ -n "$pid" && -r "/proc/$pid/cmdline" ]] && tr '\0' ' ' <"/proc/$pid/cmdline" | grep -qF "$RUN_DIR"
}

start() {
  local name="$1"; shift
  log "starting $name"
  setsid "$@" >"$RUN_DIR/logs/$name.log" 2>&1 < /dev/null &
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

stop_all() {
  local pids=() name pid
  for name in "${COMPONENTS[@]}"; do
    [[ -f "$RUN_DIR/pids/$name.pid" ]] || continue
    pid="$(cat "$RUN_DIR/pids/$name.pid")"
    if pid_alive "$pid"; then kill -TERM "$pid" 2>/dev/null || true; pids+=("$pid"); fi
  done
  local deadline=$((SECONDS + 15))
  for pid in "${pids[@]}"; do
    while pid_alive "$pid" && (( SECONDS < deadline )); do sleep 0.2; done
    if pid_alive "$pid"; then kill -KILL "$pid" 2>/dev/null || true; fi
  done
}

write_kubeconfig() {
  local file="$1" user="$2" token="$3"
  cat >"$file" <<KCFG
apiVersion: v1
kind: Config
clusters:
- name: $NAME
  cluster:
    server: https://127.0.0.1:$APISERVER_PORT
    certificate-authority: $RUN_DIR/pki/ca.crt
users:
- name: $user
  user:
    token: $token
contexts:
- name: $NAME
  context: {cluster: $NAME, user: $user}
current-context: $NAME
KCFG
}

make_pki() {
  local pki="$RUN_DIR/pki"; mkdir -p "$pki"
  openssl req -x509 -newkey rsa:2048 -nodes -keyout "$pki/ca.key" -out "$pki/ca.crt" -days 3650 \
    -subj "/CN=kascade-e2e-$NAME-ca" 2>/dev/null
  openssl req -newkey rsa:2048 -nodes -keyout "$pki/apiserver.key" -out "$pki/apiserver.csr" \
    -subj "/CN=kube-apiserver" 2>/dev/null
  printf 'subjectAltName=IP:127.0.0.1,IP:10.96.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc\n' >"$pki/san.ext"
  openssl x509 -req -in "$pki/apiserver.csr" -CA "$pki/ca.crt" -CAkey "$pki/ca.key" -CAcreateserial \
    -out "$pki/apiserver.crt" -days 3650 -extfile "$pki/san.ext" 2>/dev/null
  openssl genrsa -out "$pki/sa.key" 2048 2>/dev/null
  openssl rsa -in "$pki/sa.key" -pubout -out "$pki/sa.pub" 2>/dev/null
}

make_webhook_pki() {
  local p="$WEBHOOK_PKI"
  [[ -f "$p/kascade.crt" && -f "$p/apiserver-client.crt" ]] && return 0
  mkdir -p "$p"
  openssl req -x509 -newkey rsa:2048 -nodes -keyout "$p/ca.key" -out "$p/ca.crt" -days 3650 \
    -subj "/CN=kascade-e2e-webhook-ca" 2>/dev/null
  openssl req -newkey rsa:2048 -nodes -keyout "$p/kascade.key" -out "$p/kascade.csr" -subj "/CN=kascade" 2>/dev/null
  printf 'subjectAltName=IP:127.0.0.1,DNS:localhost,DNS:kascade\n' >"$p/kascade.ext"
  openssl x509 -req -in "$p/kascade.csr" -CA "$p/ca.crt" -CAkey "$p/ca.key" -CAcreateserial \
    -out "$p/kascade.crt" -days 3650 -extfile "$p/kascade.ext" 2>/dev/null
  # The apiserver's client certificate, for kascade's --tls-client-ca-file (mutual TLS).
  openssl req -newkey rsa:2048 -nodes -keyout "$p/apiserver-client.key" -out "$p/apiserver-client.csr" \
    -subj "/CN=kube-apiserver-audit" 2>/dev/null
  printf 'extendedKeyUsage=clientAuth\n' >"$p/client.ext"
  openssl x509 -req -in "$p/apiserver-client.csr" -CA "$p/ca.crt" -CAkey "$p/ca.key" -CAcreateserial \
    -out "$p/apiserver-client.crt" -days 3650 -extfile "$p/client.ext" 2>/dev/null
  openssl rand -hex 16 >"$p/webhook.token"
  chmod 600 "$p"/*.key "$p/webhook.token"
}

cmd_up() {
  if [[ -f "$RUN_DIR/pids/kube-apiserver.pid" ]] && pid_alive "$(cat "$RUN_DIR/pids/kube-apiserver.pid")"; then
    log "already up (run dir $RUN_DIR); use 'down' first"; exit 1
  fi
  local port
  for port in $ETCD_PORT $APISERVER_PORT $JAEGER_OTLP_GRPC_PORT $JAEGER_QUERY_HTTP_PORT; do
    if (echo > "/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
      log "port $port is already in use; pick another --port-base"; exit 1
    fi
  done
  local bin
  bin="$("$E2E_DIR/build.sh" all | sed -n 's/^KASCADE_E2E_BIN=//p')"
  rm -rf "$RUN_DIR"; mkdir -p "$RUN_DIR/logs" "$RUN_DIR/pids"
  trap 'log "up failed"; print_log_tails; stop_all' ERR

  make_pki
  local admin_token kcm_token sched_token kwok_token reader_token
  admin_token="$(openssl rand -hex 16)"; kcm_token="$(openssl rand -hex 16)"
  sched_token="$(openssl rand -hex 16)"; kwok_token="$(openssl rand -hex 16)"
  reader_token="$(openssl rand -hex 16)"
  make_webhook_pki
  local webhook_token; webhook_token="$(cat "$WEBHOOK_PKI/webhook.token")"
  # Each component has its own identity, so audit events show who acted.
  cat >"$RUN_DIR/pki/tokens.csv" <<CSV
$admin_token,kascade-e2e-admin,uid-admin,"system:masters"
$kcm_token,system:kube-controller-manager,uid-kcm
$sched_token,system:kube-scheduler,uid-scheduler
$kwok_token,kwok-kubelet,uid-kwok,"system:masters"
$reader_token,kascade,uid-kascade
CSV
  write_kubeconfig "$RUN_DIR/admin.kubeconfig" kascade-e2e-admin "$admin_token"
  write_kubeconfig "$RUN_DIR/kcm.kubeconfig" system:kube-controller-manager "$kcm_token"
  write_kubeconfig "$RUN_DIR/scheduler.kubeconfig" system:kube-scheduler "$sched_token"
  write_kubeconfig "$RUN_DIR/kwok.kubeconfig" kwok-kubelet "$kwok_token"
  write_kubeconfig "$RUN_DIR/kascade.kubeconfig" kascade "$reader_token"
  chmod 600 "$RUN_DIR/pki/tokens.csv"
  cat >"$RUN_DIR/audit-webhook.kubeconfig" <<KCFG
apiVersion: v1
kind: Config
clusters:
- name: kascade
  cluster:
    server: $WEBHOOK_URL
    certificate-authority: $WEBHOOK_PKI/ca.crt
users:
- name: kube-apiserver
  user:
    token: $webhook_token
    client-certificate: $WEBHOOK_PKI/apiserver-client.crt
    client-key: $WEBHOOK_PKI/apiserver-client.key
contexts:
- name: kascade
  context: {cluster: kascade, user: kube-apiserver}
current-context: kascade
KCFG
  cp "$AUDIT_POLICY" "$RUN_DIR/audit-policy.yaml"
  cp "$E2E_DIR/jaeger/raw.yaml" "$RUN_DIR/jaeger-raw.yaml"

  start etcd "$bin/etcd" --name "$NAME" --data-dir "$RUN_DIR/etcd" \
    --listen-client-urls "http://127.0.0.1:$ETCD_PORT" --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
    --listen-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" --initial-advertise-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
    --initial-cluster "$NAME=http://127.0.0.1:$ETCD_PEER_PORT" --unsafe-no-fsync --log-level warn
  wait_for "etcd health" 30 curl -sf "http://127.0.0.1:$ETCD_PORT/health"

  start kube-apiserver "$bin/kube-apiserver" \
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
  JAEGER_HEALTH_PORT=$JAEGER_HEALTH_PORT JAEGER_METRICS_PORT=$JAEGER_METRICS_PORT \
    start jaeger "$bin/jaeger" --config "file:$RUN_DIR/jaeger-raw.yaml"

  local kubectl=("$bin/kubectl" --kubeconfig "$RUN_DIR/admin.kubeconfig")
  for i in 0 1 2; do
    cat <<NODE
apiVersion: v1
kind: Node
metadata:
  name: kwok-node-$i
  annotations:
    kwok.x-k8s.io/node: fake
    node.alpha.kubernetes.io/ttl: "0"
  labels:
    type: kwok
    kubernetes.io/hostname: kwok-node-$i
    kubernetes.io/os: linux
    kubernetes.io/arch: amd64
    topology.kubernetes.io/zone: zone-$i
---
NODE
  done | "${kubectl[@]}" apply -f - >/dev/null
  wait_for "3 kwok nodes Ready" 60 "${kubectl[@]}" wait --for=condition=Ready node --all --timeout=2s
  wait_for "default ServiceAccount" 60 "${kubectl[@]}" get serviceaccount default -n default
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
export AUDIT_WEBHOOK_URL=$WEBHOOK_URL
export AUDIT_WEBHOOK_TOKEN_FILE=$WEBHOOK_PKI/webhook.token
export KASCADE_TLS_CERT_FILE=$WEBHOOK_PKI/kascade.crt
export KASCADE_TLS_KEY_FILE=$WEBHOOK_PKI/kascade.key
export KASCADE_TLS_CLIENT_CA_FILE=$WEBHOOK_PKI/ca.crt
export JAEGER_OTLP_GRPC=http://127.0.0.1:$JAEGER_OTLP_GRPC_PORT
export JAEGER_OTLP_HTTP=http://127.0.0.1:$JAEGER_OTLP_HTTP_PORT
export JAEGER_QUERY_URL=http://127.0.0.1:$JAEGER_QUERY_HTTP_PORT
export JAEGER_QUERY_GRPC=127.0.0.1:$JAEGER_QUERY_GRPC_PORT
ENV
  trap - ERR
  log "up: source $RUN_DIR/env"
}

cmd_down() {
  if [[ ! -d "$RUN_DIR" ]]; then log "not up (no $RUN_DIR)"; return 0; fi
  stop_all
  rm -rf "$RUN_DIR"
  log "down"
}

cmd_status() {
  if [[ ! -d "$RUN_DIR" ]]; then echo "$NAME: down"; return 1; fi
  local name pid rc=0
  for name in "${COMPONENTS[@]}"; do
    pid="$(cat "$RUN_DIR/pids/$name.pid" 2>/dev/null || true)"
    if pid_alive "$pid"; then echo "$name: running (pid $pid)"; else echo "$name: NOT running"; rc=1; fi
  done
  [[ -f "$RUN_DIR/env" ]] && echo "env: $RUN_DIR/env"
  return $rc
}

case "$CMD" in
  up) cmd_up ;;
  down) cmd_down ;;
  status) cmd_status ;;
  *) echo "usage: $0 up|down|status [--name NAME] [--port-base N] [--audit-webhook-url URL] [--audit-policy FILE]" >&2; exit 2 ;;
esac

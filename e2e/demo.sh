#!/usr/bin/env bash
# The whole stack on this machine without Docker: a real control plane and
# raw Jaeger (e2e/cluster.sh), `kascade collect` as the audit webhook and
# list-watch, `kascade frontend`, and Jaeger v2 as the UI/query tier on
# http://127.0.0.1:16686 (API only when built from source: the UI assets are a
# placeholder, see README). Runs the deployment scenario, prints where to look,
# and keeps running until Ctrl-C, then stops everything it started.
#
#   e2e/demo.sh            # then e.g. e2e/scenarios/service.sh in another shell
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
E2E_DIR="$ROOT/e2e"
cd "$ROOT"
log() { printf '[demo %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

"$E2E_DIR/build.sh" all >/dev/null
log "building kascade (release)"
cargo build --release --locked --bin kascade 2>&1 | tail -n 1 >&2
KASCADE="${CARGO_TARGET_DIR:-$ROOT/target}/release/kascade"

pids=()
cleanup() {
  trap - EXIT INT TERM
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  "$E2E_DIR/cluster.sh" down >/dev/null 2>&1 || true
  log "stopped"
}
trap cleanup EXIT INT TERM

"$E2E_DIR/cluster.sh" up
# shellcheck source=/dev/null
source "$E2E_DIR/.run/env"

# The same settings as the e2e suite, the quickstart and the chart.
( set -a; source "$ROOT/deploy/config/collect.env"; set +a
  exec "$KASCADE" collect --listen 127.0.0.1:8090 --admin-listen 127.0.0.1:8091 --cluster "$CLUSTER_NAME" \
    --spool-dir "$E2E_DIR/.run/spool" \
    --webhook-token-file "$AUDIT_WEBHOOK_TOKEN_FILE" \
    --tls-cert-file "$KASCADE_TLS_CERT_FILE" --tls-key-file "$KASCADE_TLS_KEY_FILE" \
    --tls-client-ca-file "$KASCADE_TLS_CLIENT_CA_FILE" \
    --watch-cluster "$CLUSTER_NAME=$KASCADE_KUBECONFIG" --otlp-endpoint "$JAEGER_OTLP_GRPC"
) >"$KASCADE_E2E_RUN_DIR/kascade.log" 2>&1 &
pids+=($!)
( set -a; source "$ROOT/deploy/config/frontend.env"; set +a
  exec "$KASCADE" frontend --grpc-listen 127.0.0.1:8093 --http-listen 127.0.0.1:8094 \
    --jaeger-url "$JAEGER_QUERY_URL" --jaeger-grpc-url "$JAEGER_REMOTE_STORAGE_URL" \
    --ui-url http://127.0.0.1:16686 --default-cluster "$CLUSTER_NAME"
) >"$KASCADE_E2E_RUN_DIR/kascade-frontend.log" 2>&1 &
pids+=($!)
JAEGER_BIND_HOST=127.0.0.1 JAEGER_QUERY_HTTP_PORT=16686 JAEGER_QUERY_GRPC_PORT=16685 JAEGER_HEALTH_PORT=13134 \
  JAEGER_OTLP_GRPC_PORT=14317 KASCADE_FRONTEND_GRPC=127.0.0.1:8093 \
  "$KASCADE_E2E_BIN/jaeger" --config "file:$E2E_DIR/jaeger/query.yaml" >"$KASCADE_E2E_RUN_DIR/jaeger-query.log" 2>&1 &
pids+=($!)
deadline=$((SECONDS + 60))
until curl -sf http://127.0.0.1:8091/readyz >/dev/null && curl -sf http://127.0.0.1:8094/readyz >/dev/null \
  && curl -sf http://127.0.0.1:16686/api/services >/dev/null; do
  (( SECONDS < deadline )) || { log "not ready after 60s; logs in $KASCADE_E2E_RUN_DIR"; exit 1; }
  sleep 0.5
done

"$E2E_DIR/scenarios/deployment.sh"
# Ready when the UI tier serves the Deployment's assembled trace (the audit
# webhook batches for up to 1 s; export batches for up to 1 s more).
deadline=$((SECONDS + 60))
until curl -sf 'http://127.0.0.1:16686/api/traces?service=tracing&tags=%7B%22resource%22%3A%22deployments%22%2C%22name%22%3A%22hello%22%7D&lookback=1h' \
    | grep -q '"operationName":"default/hello"'; do
  (( SECONDS < deadline )) || { log "the Deployment's trace did not appear within 60s; logs in $KASCADE_E2E_RUN_DIR"; exit 1; }
  sleep 0.5
done
log "the Deployment's trace is in the UI tier"

cat >&2 <<EOF

kascade is running. Try:
  curl -s 'http://127.0.0.1:16686/api/traces?service=tracing&tags={"resource":"deployments","name":"hello"}&lookback=1h'
  curl -si 'http://127.0.0.1:8094/redirect?cluster=$CLUSTER_NAME&group=apps&resource=deployments&namespace=default&name=hello'
  source $KASCADE_E2E_RUN_DIR/env && e2e/scenarios/service.sh     # more activity
  $KASCADE trace $AUDIT_LOG --cluster $CLUSTER_NAME --resource deployments --namespace default --name hello
Metrics: http://127.0.0.1:8091/metrics (collector), http://127.0.0.1:8094/metrics (frontend).
Logs: $KASCADE_E2E_RUN_DIR. Ctrl-C stops everything.
EOF
wait

#!/usr/bin/env bash
# The e2e suite: builds the harness (cached), starts a control plane and Jaeger,
# runs `kascade collect` as the apiserver's audit webhook, drives the scenarios,
# and checks what Jaeger stored (tests/e2e.rs). Tears everything down on exit,
# also when a test fails.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
E2E_DIR="$ROOT/e2e"
cd "$ROOT"
started=$SECONDS
log() { printf '[e2e %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

"$E2E_DIR/build.sh" all >/dev/null
log "building kascade (release)"
cargo build --release --locked --bin kascade 2>&1 | tail -n 2 >&2
KASCADE="$ROOT/target/release/kascade"

KASCADE_PID=""
cleanup() {
  local rc=$?
  if [[ -n "$KASCADE_PID" ]] && kill -0 "$KASCADE_PID" 2>/dev/null; then
    kill -TERM "$KASCADE_PID" 2>/dev/null || true
    wait "$KASCADE_PID" 2>/dev/null || true
  fi
  if [[ $rc -ne 0 && -f "$E2E_DIR/.run/kascade.log" ]]; then
    echo "----- tail of kascade.log -----" >&2; tail -n 40 "$E2E_DIR/.run/kascade.log" >&2
  fi
  "$E2E_DIR/cluster.sh" down >/dev/null 2>&1 || true
  log "finished in $((SECONDS - started))s (exit $rc)"
  exit $rc
}
trap cleanup EXIT

"$E2E_DIR/cluster.sh" up
# shellcheck source=/dev/null
source "$E2E_DIR/.run/env"

# kascade starts after the apiserver: the apiserver's webhook retries meanwhile.
"$KASCADE" collect --listen 127.0.0.1:8090 --admin-listen 127.0.0.1:8091 --cluster "$CLUSTER_NAME" \
  --webhook-token-file "$AUDIT_WEBHOOK_TOKEN_FILE" \
  --tls-cert-file "$KASCADE_TLS_CERT_FILE" --tls-key-file "$KASCADE_TLS_KEY_FILE" \
  --tls-client-ca-file "$KASCADE_TLS_CLIENT_CA_FILE" \
  --otlp-endpoint "$JAEGER_OTLP_GRPC" --export-batch-timeout 200ms \
  >"$KASCADE_E2E_RUN_DIR/kascade.log" 2>&1 &
KASCADE_PID=$!
deadline=$((SECONDS + 30))
until curl -sf http://127.0.0.1:8091/readyz >/dev/null; do
  kill -0 "$KASCADE_PID" 2>/dev/null || { log "kascade exited"; exit 1; }
  (( SECONDS < deadline )) || { log "kascade not ready after 30s"; exit 1; }
  sleep 0.2
done
log "kascade collect is ready"

# The webhook is HTTPS with mutual TLS and a bearer token: without a client
# certificate the handshake fails, with one but without the token it is 401.
if curl -s --cacert "$KASCADE_TLS_CLIENT_CA_FILE" -X POST https://127.0.0.1:8090/audit -d '{}' >/dev/null 2>&1; then
  log "FAIL: the webhook answered a client without a certificate"; exit 1
fi
code=$(curl -s -o /dev/null -w '%{http_code}' --cacert "$KASCADE_TLS_CLIENT_CA_FILE" \
  --cert "$E2E_DIR/.pki/apiserver-client.crt" --key "$E2E_DIR/.pki/apiserver-client.key" \
  -X POST https://127.0.0.1:8090/audit -d '{}')
[[ "$code" == 401 ]] || { log "FAIL: a request without the bearer token got $code, not 401"; exit 1; }
log "webhook refuses clients without certificate or token"

for s in deployment service config; do
  log "scenario $s"
  "$E2E_DIR/scenarios/$s.sh"
done

log "checking Jaeger"
export KASCADE_BIN="$KASCADE" KASCADE_METRICS_URL=http://127.0.0.1:8091/metrics
cargo test --release --locked --test e2e -- --ignored --test-threads=1

#!/usr/bin/env bash
# The e2e suite: builds the harness (cached), starts a control plane and Jaeger,
# runs `kascade collect` as the apiserver's audit webhook, drives the scenarios,
# and checks what Jaeger stored (tests/e2e/). Tears everything down on exit,
# also when a test fails.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
E2E_DIR="$ROOT/e2e"
cd "$ROOT"
started=$SECONDS
log() { printf '[e2e %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

"$E2E_DIR/build.sh" all >/dev/null
# The OpenTelemetry Collector of tests/e2e_shippers.rs (collector builder, cached).
OTELCOL_BIN="$("$E2E_DIR/build.sh" otelcol | sed -n 's/^OTELCOL=//p')"; export OTELCOL_BIN
# kascade static (musl), checked to run, and the test programs built beside
# it: by default the unit suite's build (e2e/profile.sh,
# KASCADE_STATIC_PROFILE), which CI has already made.
# shellcheck source=e2e/profile.sh
source "$E2E_DIR/profile.sh"
log "building kascade (static, profile $E2E_PROFILE)"
KASCADE="$("$E2E_DIR/static-kascade.sh" | sed -n 's/^KASCADE=//p')"
# The example controller is built with the workspace's test programs (as
# `cargo test --workspace` builds examples), so the dependencies keep the
# features of that one build.
cargo test "${E2E_CARGO_PROFILE[@]}" --workspace --locked --no-run 2>&1 | tail -n 2 >&2
CONFIG_ROLLER="$E2E_OUT/examples/config_roller"

KASCADE_PID=""; FRONTEND_PID=""; JAEGER_QUERY_PID=""; CPID_WEBHOOK_PID=""; ROLLER_PID=""
cleanup() {
  local rc=$?
  for p in $FRONTEND_PID $JAEGER_QUERY_PID $CPID_WEBHOOK_PID $ROLLER_PID; do kill "$p" 2>/dev/null || true; done
  if [[ -n "$KASCADE_PID" ]] && kill -0 "$KASCADE_PID" 2>/dev/null; then
    kill -TERM "$KASCADE_PID" 2>/dev/null || true
    wait "$KASCADE_PID" 2>/dev/null || true
  fi
  if [[ $rc -ne 0 && -f "$E2E_DIR/.run/kascade.log" ]]; then
    echo "----- tail of kascade.log -----" >&2; tail -n 40 "$E2E_DIR/.run/kascade.log" >&2
  fi
  if [[ $rc -ne 0 && -f "$E2E_DIR/.run/kascade-frontend.log" ]]; then
    echo "----- tail of kascade-frontend.log -----" >&2; tail -n 20 "$E2E_DIR/.run/kascade-frontend.log" >&2
    echo "----- tail of jaeger-query.log -----" >&2; tail -n 20 "$E2E_DIR/.run/jaeger-query.log" >&2
  fi
  [[ $rc -ne 0 ]] && keep_failed_run
  "$E2E_DIR/cluster.sh" down >/dev/null 2>&1 || true
  "$E2E_DIR/cluster.sh" down --name "$CLUSTER_B" >/dev/null 2>&1 || true
  log "finished in $((SECONDS - started))s (exit $rc)"
  exit $rc
}
# A failed run's logs, audit log and the raw Jaeger's spans of the CPID
# scenarios outlive the teardown (the raw Jaeger keeps them in memory) in
# KASCADE_E2E_KEEP_DIR, outside the clone CI deletes; the newest 3 are kept.
keep_failed_run() {
  local keep="${KASCADE_E2E_KEEP_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/kascade-e2e/failed-runs}"
  local run="$E2E_DIR/.run" dest
  [[ -d "$run" ]] || return 0
  dest="$keep/$(date -u +%Y%m%dT%H%M%SZ)"
  mkdir -p "$dest" || return 0
  tar -C "$run" --exclude=./etcd --exclude=./spool -cf - . 2>/dev/null | tar -C "$dest" -xf - 2>/dev/null || true
  if [[ -n "${JAEGER_QUERY_URL:-}" ]]; then
    local ns
    for ns in roller-demo cpidhook-demo cpid-demo; do
      curl -s --max-time 20 -G "$JAEGER_QUERY_URL/api/traces" --data-urlencode service=kascade \
        --data-urlencode "tags={\"namespace\":\"$ns\"}" --data-urlencode limit=500 \
        --data-urlencode lookback=2h >"$dest/raw-$ns.json" 2>/dev/null || true
    done
  fi
  ls -1dt "$keep"/*/ 2>/dev/null | tail -n +4 | xargs -r rm -rf || true
  log "kept the failed run in $dest"
}
CLUSTER_B=remote
trap cleanup EXIT

# Cluster B audits pods at Metadata level only: their diffs must come from
# the list-watch. Both clusters send their audit webhook to the same kascade.
"$E2E_DIR/cluster.sh" up --name "$CLUSTER_B" --port-base 27000 \
  --audit-policy "$E2E_DIR/audit-policy-metadata-pods.yaml"
B_ENV="$E2E_DIR/.run-$CLUSTER_B/env"
B_KASCADE_KUBECONFIG="$(sed -n 's/^export KASCADE_KUBECONFIG=//p' "$B_ENV")"
"$E2E_DIR/cluster.sh" up
# shellcheck source=/dev/null
source "$E2E_DIR/.run/env"

# kascade starts after the apiservers (their webhooks retry meanwhile), with
# the settings the quickstart and the chart use (deploy/config/*.env), and
# watches both clusters as the read-only user bound to the chart's ClusterRole.
# It traces itself into the raw Jaeger (service kascade-collect; the object
# spans go to --otlp-endpoint under KASCADE_SERVICE_NAME), as does the
# frontend below: tests/e2e/ kascade_traces_itself_into_jaeger.
SELF_TRACING=(OTEL_TRACES_EXPORTER=otlp "OTEL_EXPORTER_OTLP_ENDPOINT=$JAEGER_OTLP_GRPC")
# KASCADE_WATCH_AUDIT_WAIT: a write's audit event may trail its watch event
# by more than the 5 s default on a loaded 2-core machine (the webhook's 1 s
# batch wait, its 3 s backoff after a failed send); with_full_audit_no_write_is_shown_twice
# must not depend on that.
( set -a; source "$ROOT/deploy/config/collect.env"; set +a
  export KASCADE_WATCH_AUDIT_WAIT=30s
  exec env "${SELF_TRACING[@]}" "$KASCADE" collect --listen 127.0.0.1:8090 --admin-listen 127.0.0.1:8091 --cluster "$CLUSTER_NAME" \
    --spool-dir "$E2E_DIR/.run/spool" \
    --webhook-token-file "$AUDIT_WEBHOOK_TOKEN_FILE" \
    --tls-cert-file "$KASCADE_TLS_CERT_FILE" --tls-key-file "$KASCADE_TLS_KEY_FILE" \
    --tls-client-ca-file "$KASCADE_TLS_CLIENT_CA_FILE" \
    --watch-cluster "$CLUSTER_NAME=$KASCADE_KUBECONFIG,$CLUSTER_B=$B_KASCADE_KUBECONFIG" \
    --component-traces-listen "$TRACING_ENDPOINT" \
    --otlp-endpoint "$JAEGER_OTLP_GRPC"
) >"$KASCADE_E2E_RUN_DIR/kascade.log" 2>&1 &
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
# The 401 comes before the body is read. Asked over HTTP/1.1: over HTTP/2,
# curl 7.88 (Debian 12) reports the early answer followed by the reset of
# the unread request stream as error 92 without the status in most runs
# (CI failed so); an HTTP/2 client that reads the response gets the 401
# (tests/webhook/, http2_clients_get_the_refusal_not_a_stream_reset).
code=$(curl -s --http1.1 -o /dev/null -w '%{http_code}' --cacert "$KASCADE_TLS_CLIENT_CA_FILE" \
  --cert "$E2E_DIR/.pki/apiserver-client.crt" --key "$E2E_DIR/.pki/apiserver-client.key" \
  -X POST https://127.0.0.1:8090/audit -d '{}' || true)
[[ "$code" == 401 ]] || { log "FAIL: a request without the bearer token got $code, not 401"; exit 1; }
log "webhook refuses clients without certificate or token"

# The read side: kascade frontend over the raw Jaeger (its remote-storage gRPC
# API; the second frontend in tests/e2e/ reads the HTTP API), and a second Jaeger v2
# (the UI/query tier) whose trace storage is the frontend.
( set -a; source "$ROOT/deploy/config/frontend.env"; set +a
  exec env "${SELF_TRACING[@]}" "$KASCADE" frontend --grpc-listen 127.0.0.1:8093 --http-listen 127.0.0.1:8094 \
    --jaeger-url "$JAEGER_QUERY_URL" --jaeger-grpc-url "$JAEGER_REMOTE_STORAGE_URL" \
    --ui-url http://127.0.0.1:8096 --default-cluster "$CLUSTER_NAME"
) >"$KASCADE_E2E_RUN_DIR/kascade-frontend.log" 2>&1 &
FRONTEND_PID=$!
# The query tier traces itself into the raw Jaeger too, and so passes a
# traceparent to the frontend with each read (query-selftrace.yaml).
JAEGER_BIND_HOST=127.0.0.1 JAEGER_QUERY_HTTP_PORT=8096 JAEGER_QUERY_GRPC_PORT=8097 JAEGER_HEALTH_PORT=8098 \
  JAEGER_OTLP_GRPC_PORT=8099 KASCADE_FRONTEND_GRPC=127.0.0.1:8093 \
  OTEL_SERVICE_NAME=jaeger-query OTEL_EXPORTER_OTLP_ENDPOINT="$JAEGER_OTLP_GRPC" \
  "$KASCADE_E2E_BIN/jaeger" --config "file:$E2E_DIR/jaeger/query.yaml" \
    --config "file:$E2E_DIR/jaeger/query-selftrace.yaml" >"$KASCADE_E2E_RUN_DIR/jaeger-query.log" 2>&1 &
JAEGER_QUERY_PID=$!
deadline=$((SECONDS + 60))
until curl -sf http://127.0.0.1:8094/readyz >/dev/null && curl -sf http://127.0.0.1:8096/api/services >/dev/null; do
  kill -0 "$FRONTEND_PID" 2>/dev/null || { log "kascade frontend exited"; tail -n 20 "$KASCADE_E2E_RUN_DIR/kascade-frontend.log" >&2; exit 1; }
  kill -0 "$JAEGER_QUERY_PID" 2>/dev/null || { log "Jaeger query tier exited"; tail -n 20 "$KASCADE_E2E_RUN_DIR/jaeger-query.log" >&2; exit 1; }
  (( SECONDS < deadline )) || { log "read side not ready after 60s"; exit 1; }
  sleep 0.2
done

# The CPID webhook (kascade cpid-webhook), registered in the apiserver for
# Deployments and ConfigMaps in namespaces labeled kascade.io/cpid-webhook,
# as the Helm chart does (failurePolicy Ignore: it never blocks a write).
"$KASCADE" cpid-webhook --listen 127.0.0.1:8089 \
  --tls-cert-file "$KASCADE_TLS_CERT_FILE" --tls-key-file "$KASCADE_TLS_KEY_FILE" \
  >"$KASCADE_E2E_RUN_DIR/cpid-webhook.log" 2>&1 &
CPID_WEBHOOK_PID=$!
deadline=$((SECONDS + 30))
until curl -sf --cacert "$KASCADE_TLS_CLIENT_CA_FILE" https://127.0.0.1:8089/healthz >/dev/null; do
  kill -0 "$CPID_WEBHOOK_PID" 2>/dev/null || { log "kascade cpid-webhook exited"; tail -n 20 "$KASCADE_E2E_RUN_DIR/cpid-webhook.log" >&2; exit 1; }
  (( SECONDS < deadline )) || { log "kascade cpid-webhook not ready after 30s"; exit 1; }
  sleep 0.2
done
"$KUBECTL" apply -f - >/dev/null <<YAML
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingWebhookConfiguration
metadata:
  name: kascade-cpid
webhooks:
- name: cpid.kascade.io
  clientConfig:
    url: https://127.0.0.1:8089/mutate
    caBundle: $(base64 -w0 "$KASCADE_TLS_CLIENT_CA_FILE")
  rules:
  - {apiGroups: ["", "apps"], apiVersions: ["v1"], operations: ["CREATE", "UPDATE"], resources: ["deployments", "configmaps"]}
  namespaceSelector:
    matchLabels: {kascade.io/cpid-webhook: enabled}
  failurePolicy: Ignore
  sideEffects: None
  timeoutSeconds: 5
  admissionReviewVersions: ["v1"]
YAML
log "kascade cpid-webhook registered"
log "kascade frontend and the Jaeger query tier are ready"
"$E2E_DIR/validate-deploy.sh"
# Its server dry runs must have reached kascade before the crash below drops
# whatever the apiserver's webhook batch still holds (tests/e2e/
# server_dry_runs_leave_no_spans counts them as filtered).
deadline=$((SECONDS + 30))
until curl -sf http://127.0.0.1:8091/metrics | grep -q 'kascade_audit_events_filtered_total{reason="dry_run"}'; do
  (( SECONDS < deadline )) || { log "the dry runs of validate-deploy.sh never reached kascade"; exit 1; }
  sleep 0.2
done

# The watchers must survive an apiserver crash without losing or repeating
# Events. SIGKILL, not a graceful stop: a stopping apiserver may end its
# watches cleanly (then the watchers just re-watch, and whether one sees an
# error depends on timing); a killed one cuts every open watch. Before the
# scenarios: a killed apiserver also loses the audit events its webhook
# batch still held (up to --audit-webhook-batch-max-wait, outside kascade),
# which the checks of a scenario just before would miss.
"$E2E_DIR/cluster.sh" restart kube-apiserver --crash
# The instrumented example controller, reporting its merges to the collector
# over the webhook's mutual TLS with its bearer token. Started after the
# crash, which its scenario does not test: a kube-runtime Controller whose
# watches were cut 3 s after it started re-watched ConfigMaps but never
# Deployments again (CI run of 2026-11-26 20:18), and never rolled.
KUBECONFIG="$KUBECONFIG" "$CONFIG_ROLLER" --kascade-url https://127.0.0.1:8090 \
  --token-file "$AUDIT_WEBHOOK_TOKEN_FILE" --ca-file "$KASCADE_TLS_CLIENT_CA_FILE" \
  --client-cert "$E2E_DIR/.pki/apiserver-client.crt" --client-key "$E2E_DIR/.pki/apiserver-client.key" \
  >"$KASCADE_E2E_RUN_DIR/config-roller.log" 2>&1 &
ROLLER_PID=$!

for s in deployment service config unschedulable rollout-stuck quota statefulset volumes bigobject job cpid-annotated cpid-webhook config-roller deep slow-webhook; do
  log "scenario $s"
  "$E2E_DIR/scenarios/$s.sh"
done
log "scenario crosscluster (in cluster $CLUSTER_B)"
KASCADE_E2E_ENV="$B_ENV" LINK_CLUSTER="$CLUSTER_NAME" "$E2E_DIR/scenarios/crosscluster.sh"

KASCADE_BIN="$KASCADE" "$E2E_DIR/scale-out.sh"
log "checking Jaeger"
# tests/e2e/ reports a mergelog as an instrumented controller would:
# over the webhook's mutual TLS, with its bearer token.
export KASCADE_WEBHOOK_BASE=https://127.0.0.1:8090 \
  KASCADE_WEBHOOK_CLIENT_CERT="$E2E_DIR/.pki/apiserver-client.crt" KASCADE_WEBHOOK_CLIENT_KEY="$E2E_DIR/.pki/apiserver-client.key"
export KASCADE_BIN="$KASCADE" KASCADE_METRICS_URL=http://127.0.0.1:8091/metrics CLUSTER_B_NAME="$CLUSTER_B" \
  JAEGER_UI_URL=http://127.0.0.1:8096 KASCADE_FRONTEND_URL=http://127.0.0.1:8094 \
  KASCADE_ADMIN_URL=http://127.0.0.1:8091 KASCADE_E2E_ENV_B="$B_ENV"
# tests/e2e_doctor.rs makes faults in cluster B (and puts it back); the others use cluster A.
cargo test "${E2E_CARGO_PROFILE[@]}" --locked --test e2e --test e2e_shippers --test e2e_admission --test e2e_doctor -- --ignored --test-threads=1

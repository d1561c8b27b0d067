#!/usr/bin/env bash
# A slow admission webhook, and one that fails open: a validating webhook
# (e2e/tools/admission-webhook.py, HTTPS with a certificate of the cluster's
# CA) answers every Pod create in namespace slow-demo after
# SLOW_WEBHOOK_DELAY_MS (default 800) ms, and a second one answers 500 under
# failurePolicy Ignore (the apiserver admits anyway: it fails open).
# Deployment web (2 replicas): each Pod create waits for the slow webhook.
# With the apiserver's tracing on (e2e/cluster.sh up), each create's trace
# holds the webhooks' spans. Both webhooks stop (and their configurations
# are deleted) when the scenario ends.
source "$(dirname "$0")/lib.sh"
NS=slow-demo
DELAY_MS="${SLOW_WEBHOOK_DELAY_MS:-800}"
PORT_BASE_WH="${SLOW_WEBHOOK_PORT:-$(( ${APISERVER_URL##*:} + 460 ))}"
SLOW_PORT=$PORT_BASE_WH; FAILING_PORT=$((PORT_BASE_WH + 1))
PKI="$KASCADE_E2E_RUN_DIR/pki"
WORK="$(mktemp -d)"
pids=()
cleanup() {
  k delete validatingwebhookconfiguration slow-policy failing-policy --ignore-not-found >/dev/null 2>&1 || true
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  rm -rf "$WORK"
}
trap cleanup EXIT
openssl req -newkey rsa:2048 -nodes -keyout "$WORK/webhook.key" -out "$WORK/webhook.csr" \
  -subj "/CN=slow-policy-webhook" 2>/dev/null
printf 'subjectAltName=IP:127.0.0.1\n' >"$WORK/webhook.ext"
openssl x509 -req -in "$WORK/webhook.csr" -CA "$PKI/ca.crt" -CAkey "$PKI/ca.key" -CAcreateserial \
  -CAserial "$WORK/ca.srl" -out "$WORK/webhook.crt" -days 1 -extfile "$WORK/webhook.ext" 2>/dev/null
python3 "$SCENARIO_DIR/../tools/admission-webhook.py" --listen "127.0.0.1:$SLOW_PORT" \
  --cert "$WORK/webhook.crt" --key "$WORK/webhook.key" --delay-ms "$DELAY_MS" 2>"$WORK/slow.log" &
pids+=($!)
python3 "$SCENARIO_DIR/../tools/admission-webhook.py" --listen "127.0.0.1:$FAILING_PORT" \
  --cert "$WORK/webhook.crt" --key "$WORK/webhook.key" --status 500 2>"$WORK/failing.log" &
pids+=($!)
for port in "$SLOW_PORT" "$FAILING_PORT"; do
  for _ in $(seq 60); do
    curl -sf --cacert "$PKI/ca.crt" "https://127.0.0.1:$port/healthz" >/dev/null && break
    sleep 0.5
  done
done
fresh_namespace "$NS"
webhook() { # NAME PORT FAILURE_POLICY
  cat <<YAML
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingWebhookConfiguration
metadata:
  name: $1
webhooks:
- name: $1.example.com
  clientConfig:
    url: https://127.0.0.1:$2/validate
    caBundle: $(base64 -w0 "$PKI/ca.crt")
  rules:
  - {apiGroups: [""], apiVersions: ["v1"], operations: ["CREATE"], resources: ["pods"]}
  namespaceSelector:
    matchLabels: {kubernetes.io/metadata.name: $NS}
  failurePolicy: $3
  sideEffects: None
  timeoutSeconds: 5
  admissionReviewVersions: ["v1"]
YAML
}
{ webhook slow-policy "$SLOW_PORT" Fail; echo ---; webhook failing-policy "$FAILING_PORT" Ignore; } | k apply -f - >/dev/null
say "deployment web (2 replicas); each Pod create waits ${DELAY_MS} ms for slow-policy.example.com"
k create deployment web -n "$NS" --image=nginx:1.27 --replicas=2 >/dev/null
k rollout status deployment/web -n "$NS" --timeout=90s
say "done"

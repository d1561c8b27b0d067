#!/usr/bin/env bash
# An admission webhook denying: a validating webhook (e2e/tools/admission-webhook.py,
# HTTPS with a certificate of the cluster's CA) registered for Pod creates
# denies Pods labelled access=privileged. Deployment agent's template carries
# that label: every Pod create of its ReplicaSet is refused (admission webhook
# "pod-policy.example.com" denied the request), FailedCreate on the
# ReplicaSet. Meanwhile the healthy StatefulSet of e2e/scenarios/statefulset.sh
# (namespace sts-demo) gets its Pods through the same webhook. The webhook
# keeps running until the capture is taken.
source "$(dirname "$0")/lib.sh"
NS=policy-demo
PORT=$((CORPUS_PORT_BASE + 900))
PKI="$KASCADE_E2E_RUN_DIR/pki"
openssl req -newkey rsa:2048 -nodes -keyout "$CORPUS_WORK/webhook.key" -out "$CORPUS_WORK/webhook.csr" \
  -subj "/CN=pod-policy-webhook" 2>/dev/null
printf 'subjectAltName=IP:127.0.0.1\n' >"$CORPUS_WORK/webhook.ext"
openssl x509 -req -in "$CORPUS_WORK/webhook.csr" -CA "$PKI/ca.crt" -CAkey "$PKI/ca.key" -CAcreateserial \
  -out "$CORPUS_WORK/webhook.crt" -days 1 -extfile "$CORPUS_WORK/webhook.ext" 2>/dev/null
python3 "$E2E_DIR/tools/admission-webhook.py" --listen "127.0.0.1:$PORT" \
  --cert "$CORPUS_WORK/webhook.crt" --key "$CORPUS_WORK/webhook.key" \
  --deny-label access=privileged --message "pod-policy: privileged access is not allowed" \
  2>"$CORPUS_WORK/webhook.log" &
keep_running $!
wait_until 30 "webhook answering on port $PORT" curl -sf --cacert "$PKI/ca.crt" "https://127.0.0.1:$PORT/healthz"
k apply -f - <<YAML
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingWebhookConfiguration
metadata:
  name: pod-policy
webhooks:
- name: pod-policy.example.com
  clientConfig:
    url: https://127.0.0.1:$PORT/validate
    caBundle: $(base64 -w0 "$PKI/ca.crt")
  rules:
  - {apiGroups: [""], apiVersions: ["v1"], operations: ["CREATE"], resources: ["pods"]}
  namespaceSelector:
    matchExpressions:
    - {key: kubernetes.io/metadata.name, operator: NotIn, values: [kube-system]}
  failurePolicy: Fail
  sideEffects: None
  timeoutSeconds: 5
  admissionReviewVersions: ["v1"]
YAML
fresh_namespace "$NS"
deny_agent() {
  say "deployment agent (2 replicas), its Pods labelled access=privileged"
  k apply -n "$NS" -f - <<'YAML'
apiVersion: apps/v1
kind: Deployment
metadata:
  name: agent
spec:
  replicas: 2
  selector:
    matchLabels: {app: agent}
  template:
    metadata:
      labels: {app: agent, access: privileged}
    spec:
      containers:
      - {name: agent, image: "datadog/agent:7.60.0"}
YAML
  wait_event 60 "$NS" FailedCreate ReplicaSet
}
together agent deny_agent
together statefulset scenario statefulset
join
grep -q "denied" "$CORPUS_WORK/webhook.log" || fail "the webhook logged no denial"
[[ -z "$(k get pods -n "$NS" -o name)" ]] || fail "namespace $NS has Pods; the webhook let one through"

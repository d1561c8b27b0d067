#!/usr/bin/env bash
# Regenerates e2e/fixtures/<scenario>/ from a fresh control plane:
#   audit.log          the apiserver's audit log lines written during the scenario
#                      (writes only: reads are trimmed; lines are not edited)
#   events.json        core/v1 Events of the scenario's namespace (EventList)
#   watch/<res>.jsonl  the raw watch streams of the touched resources
#
#
#   e2e/fixtures.sh [scenario...]    (default: every scenario)
#
# With KASCADE_FIXTURES_ADMISSION=1 the scenarios are written to
# e2e/fixtures/admission/<scenario>/ instead, with one more file:
#   admission.jsonl    every AdmissionReview a validating webhook received for
#                      the scenario's namespace (e2e/tools/admission-webhook.py
#                      --record; the rules kascade's chart installs for its
#                      admission source), one JSON line each
set -euo pipefail
E2E_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
NAME=fixtures
PORT_BASE=28000
RUN_DIR="$E2E_DIR/.run-$NAME"
OUT="$E2E_DIR/fixtures"
ADMISSION="${KASCADE_FIXTURES_ADMISSION:-}"
[[ -z "$ADMISSION" ]] || OUT="$E2E_DIR/fixtures/admission"
SCENARIOS=("$@")
[[ ${#SCENARIOS[@]} -gt 0 ]] || SCENARIOS=(deployment service config statefulset job unschedulable rollout-stuck quota cronjob volumes job-failed pvc-pending finalizer-blocked bigobject crosscluster cpid-annotated)

# Namespace and watched resources (API path prefix + resource) of each scenario.
declare -A NS=([deployment]=default [service]=svc-demo [config]=config-demo [statefulset]=sts-demo [job]=job-demo
  [unschedulable]=sched-demo [rollout-stuck]=rollout-demo [quota]=quota-demo [cronjob]=cron-demo [volumes]=vol-demo
  [job-failed]=jobfail-demo [pvc-pending]=pvc-demo [finalizer-blocked]=fin-demo
  [bigobject]=big-demo [crosscluster]=remote-demo [cpid-annotated]=cpid-demo)
declare -A WATCH=(
  [deployment]="/apis/apps/v1:deployments /apis/apps/v1:replicasets /api/v1:pods"
  [service]="/apis/apps/v1:deployments /apis/apps/v1:replicasets /api/v1:pods /api/v1:services /apis/discovery.k8s.io/v1:endpointslices"
  [config]="/api/v1:configmaps /api/v1:secrets /apis/apps/v1:deployments /apis/apps/v1:replicasets /api/v1:pods"
  [statefulset]="/apis/apps/v1:statefulsets /apis/apps/v1:controllerrevisions /api/v1:pods /api/v1:services"
  [job]="/apis/batch/v1:jobs /api/v1:pods"
  [unschedulable]="/api/v1:pods"
  [rollout-stuck]="/apis/apps/v1:deployments /apis/apps/v1:replicasets /api/v1:pods"
  [quota]="/api/v1:resourcequotas /apis/apps/v1:deployments /apis/apps/v1:replicasets /api/v1:pods"
  [cronjob]="/apis/batch/v1:cronjobs /apis/batch/v1:jobs /api/v1:pods"
  [volumes]="/apis/apps/v1:statefulsets /api/v1:pods /api/v1:persistentvolumeclaims"
  [job-failed]="/apis/batch/v1:jobs /api/v1:pods"
  [pvc-pending]="/api/v1:persistentvolumeclaims /api/v1:pods"
  [finalizer-blocked]="/apis/apps/v1:deployments /apis/apps/v1:replicasets /api/v1:pods"
  [bigobject]="/api/v1:configmaps"
  [crosscluster]="/api/v1:pods /api/v1:configmaps"
  [cpid-annotated]="/apis/apps/v1:deployments /apis/apps/v1:replicasets /api/v1:pods /api/v1:configmaps"
)

RECORDER_PID=
cleanup() {
  [[ -z "$RECORDER_PID" ]] || kill "$RECORDER_PID" 2>/dev/null || true
  "$E2E_DIR/cluster.sh" down --name "$NAME" >/dev/null 2>&1 || true
}
trap cleanup EXIT
# No kascade listens here: the webhook's failures are logged by the apiserver and harmless.
"$E2E_DIR/cluster.sh" up --name "$NAME" --port-base "$PORT_BASE" --audit-webhook-url "http://127.0.0.1:9/audit/$NAME"
# shellcheck source=/dev/null
source "$RUN_DIR/env"
TOKEN="$(awk -F, '/kascade-e2e-admin/ {print $1}' "$RUN_DIR/pki/tokens.csv")"
api() { curl -sf --cacert "$RUN_DIR/pki/ca.crt" -H "Authorization: Bearer $TOKEN" "$APISERVER_URL$1"; }

# The recording webhook of KASCADE_FIXTURES_ADMISSION: HTTPS with a
# certificate of the cluster's CA; its configuration names one namespace.
RECORDER_PORT=$((PORT_BASE + 470))
recorder() { # NAMESPACE FILE
  local work="$RUN_DIR/recorder"
  mkdir -p "$work"
  if [[ ! -f "$work/tls.crt" ]]; then
    openssl req -newkey rsa:2048 -nodes -keyout "$work/tls.key" -out "$work/tls.csr" -subj "/CN=recorder" 2>/dev/null
    printf 'subjectAltName=IP:127.0.0.1\n' >"$work/tls.ext"
    openssl x509 -req -in "$work/tls.csr" -CA "$RUN_DIR/pki/ca.crt" -CAkey "$RUN_DIR/pki/ca.key" -CAcreateserial \
      -CAserial "$work/ca.srl" -out "$work/tls.crt" -days 1 -extfile "$work/tls.ext" 2>/dev/null
  fi
  [[ -z "$RECORDER_PID" ]] || { kill "$RECORDER_PID" 2>/dev/null || true; wait "$RECORDER_PID" 2>/dev/null || true; }
  python3 "$E2E_DIR/tools/admission-webhook.py" --listen "127.0.0.1:$RECORDER_PORT" \
    --cert "$work/tls.crt" --key "$work/tls.key" --record "$2" 2>"$work/recorder.log" &
  RECORDER_PID=$!
  for _ in $(seq 60); do
    curl -sf --cacert "$RUN_DIR/pki/ca.crt" "https://127.0.0.1:$RECORDER_PORT/healthz" >/dev/null && break
    sleep 0.5
  done
  "$KUBECTL" apply -f - >/dev/null <<YAML
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingWebhookConfiguration
metadata:
  name: kascade-fixture-recorder
webhooks:
- name: recorder.kascade.io
  clientConfig:
    url: https://127.0.0.1:$RECORDER_PORT/admission
    caBundle: $(base64 -w0 "$RUN_DIR/pki/ca.crt")
  rules:
  - apiGroups: ["*"]
    apiVersions: ["*"]
    operations: ["CREATE", "UPDATE", "DELETE"]
    resources: ["*", "*/status", "*/scale", "pods/binding", "pods/eviction"]
  matchConditions:
  - name: not-events-or-leases
    expression: "!(request.resource.resource in ['events', 'leases'])"
  namespaceSelector:
    matchLabels: {kubernetes.io/metadata.name: $1}
  failurePolicy: Ignore
  sideEffects: None
  timeoutSeconds: 2
  admissionReviewVersions: ["v1"]
YAML
}

for s in "${SCENARIOS[@]}"; do
  ns="${NS[$s]:?unknown scenario $s}"
  dir="$OUT/$s"; rm -rf "$dir"; mkdir -p "$dir/watch"
  echo "== $s (namespace $ns)" >&2
  offset=$(stat -c %s "$AUDIT_LOG")
  watch_pids=()
  for w in ${WATCH[$s]}; do
    prefix="${w%%:*}"; res="${w##*:}"
    rv="$(api "$prefix/namespaces/$ns/$res?limit=1" | python3 -c 'import json,sys; print(json.load(sys.stdin)["metadata"]["resourceVersion"])')"
    group="${prefix#/apis/}"; group="${group%/*}"; [[ "$prefix" == /api/v1 ]] && group=core
    curl -sN --cacert "$RUN_DIR/pki/ca.crt" -H "Authorization: Bearer $TOKEN" \
      "$APISERVER_URL$prefix/namespaces/$ns/$res?watch=1&resourceVersion=$rv" >"$dir/watch/$group.$res.jsonl" &
    watch_pids+=($!)
  done
  [[ -z "$ADMISSION" ]] || recorder "$ns" "$dir/admission.jsonl"
  KASCADE_E2E_ENV="$RUN_DIR/env" "$E2E_DIR/scenarios/$s.sh"
  # A marker write: once it is in the audit log, everything before it is too.
  marker="kascade-fixture-end-$s-$RANDOM"
  "$KUBECTL" annotate namespace "$ns" "kascade.io/fixture-end=$marker" --overwrite >/dev/null
  deadline=$((SECONDS + 30))
  until tail -c +"$((offset + 1))" "$AUDIT_LOG" | grep -q "$marker"; do
    (( SECONDS < deadline )) || { echo "audit log never showed the end marker" >&2; exit 1; }
    sleep 0.2
  done
  kill "${watch_pids[@]}" 2>/dev/null || true
  wait "${watch_pids[@]}" 2>/dev/null || true
  [[ -z "$ADMISSION" ]] || "$KUBECTL" delete validatingwebhookconfiguration kascade-fixture-recorder >/dev/null
  tail -c +"$((offset + 1))" "$AUDIT_LOG" | python3 -c '
import json, sys
ns, marker = sys.argv[1], sys.argv[2]
writes = {"create", "update", "patch", "delete", "deletecollection"}
for line in sys.stdin:
    if not line.strip() or marker in line:
        continue
    ev = json.loads(line)
    ref = ev.get("objectRef") or {}
    if ev.get("verb") in writes and ref.get("namespace", "") in (ns, ""):
        sys.stdout.write(line)
' "$ns" "$marker" >"$dir/audit.log"
  api "/api/v1/namespaces/$ns/events" >"$dir/events.json"
  echo "   $(wc -l <"$dir/audit.log") audit events, $(python3 -c 'import json,sys; print(len(json.load(open(sys.argv[1]))["items"]))' "$dir/events.json") Events, watch: $(cat "$dir"/watch/*.jsonl | wc -l) lines" >&2
done
echo "fixtures written to $OUT" >&2

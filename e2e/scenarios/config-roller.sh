#!/usr/bin/env bash
# The instrumented controller (examples/config_roller.rs, started by
# e2e/suite.sh) rolls a Deployment when its ConfigMap changes, under the
# CPIDs the CPID webhook stamps: first a ConfigMap edit alone (its CPID is
# inherited by the roll), then a Deployment edit and a ConfigMap edit
# together (merged into a new CPID, mergelog sent to kascade). kubectl's
# warnings (the stamped CPIDs) are kept for tests/e2e/.
source "$(dirname "$0")/lib.sh"
NS=roller-demo
OUT="$KASCADE_E2E_RUN_DIR/config-roller"
mkdir -p "$OUT"
fresh_namespace "$NS"
k label namespace "$NS" kascade.io/cpid-webhook=enabled >/dev/null
rolled_cpid() {
  k get deployment web -n "$NS" -o jsonpath='{.spec.template.metadata.annotations.config-roller\.kascade\.io/cpid}'
}
# wait_rolled NOT_CPID: until the controller rolled under another CPID than
# NOT_CPID, and the rollout is complete.
wait_rolled() {
  local deadline=$((SECONDS + 60))
  until [[ -n "$(rolled_cpid)" && "$(rolled_cpid)" != "$1" ]]; do
    (( SECONDS < deadline )) || { say "config-roller did not roll web (rolled CPID still '$1')"; exit 1; }
    sleep 0.3
  done
  k rollout status deployment/web -n "$NS" --timeout=60s >/dev/null
}
k create configmap app-config -n "$NS" --from-literal=v=1 >/dev/null 2>"$OUT/create-configmap.err"
k apply -n "$NS" -f - >/dev/null 2>"$OUT/create-deployment.err" <<'YAML'
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  annotations:
    config-roller.kascade.io/configmap: app-config
spec:
  replicas: 1
  selector:
    matchLabels: {app: web}
  template:
    metadata:
      labels: {app: web}
    spec:
      containers:
      - {name: app, image: nginx:1.27}
YAML
wait_rolled ""
first="$(rolled_cpid)"
say "adopted: rolled under $first"
k patch configmap app-config -n "$NS" --type=merge -p '{"data":{"v":"2"}}' >/dev/null 2>"$OUT/edit-configmap.err"
wait_rolled "$first"
second="$(rolled_cpid)"
say "ConfigMap edit: rolled under $second ($(cat "$OUT/edit-configmap.err"))"
k patch deployment web -n "$NS" --type=merge -p '{"metadata":{"labels":{"tier":"web"}}}' >/dev/null 2>"$OUT/edit-deployment.err"
k patch configmap app-config -n "$NS" --type=merge -p '{"data":{"v":"3"}}' >/dev/null 2>"$OUT/edit-configmap-again.err"
wait_rolled "$second"
rolled_cpid >"$OUT/merged.cpid"
say "Deployment and ConfigMap edits: rolled under $(cat "$OUT/merged.cpid")"
say "done"

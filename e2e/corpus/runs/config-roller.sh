#!/usr/bin/env bash
# Healthy: a controller rolls a Deployment when its ConfigMap changes.
# config-roller (e2e/tools/config-roller.py, service account
# kube-system:config-roller) writes ConfigMap app-config's hash into
# Deployment web's Pod template; app-config is edited twice, and each edit
# rolls web out (a new ReplicaSet, Ready). The controller runs until the
# capture is taken.
source "$(dirname "$0")/lib.sh"
NS=roller
k create serviceaccount config-roller -n kube-system
k create clusterrole config-roller --verb=get,list,watch --resource=configmaps,deployments
k create clusterrole config-roller-patch --verb=patch --resource=deployments
k create clusterrolebinding config-roller --clusterrole=config-roller --serviceaccount=kube-system:config-roller
k create clusterrolebinding config-roller-patch --clusterrole=config-roller-patch --serviceaccount=kube-system:config-roller
sa_kubeconfig kube-system config-roller "$CORPUS_WORK/config-roller.kubeconfig"
python3 "$E2E_DIR/tools/config-roller.py" --kubectl "$KUBECTL" --kubeconfig "$CORPUS_WORK/config-roller.kubeconfig" \
  2>"$CORPUS_WORK/config-roller.log" &
keep_running $!
fresh_namespace "$NS"
k create configmap app-config -n "$NS" --from-literal=LOG_LEVEL=info --from-literal=FEATURE_X=off
k apply -n "$NS" -f - <<'YAML'
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  annotations:
    config-roller.kascade.io/configmap: app-config
spec:
  replicas: 2
  selector:
    matchLabels: {app: web}
  template:
    metadata:
      labels: {app: web}
    spec:
      containers:
      - name: web
        image: nginx:1.27
        envFrom: [{configMapRef: {name: app-config}}]
YAML
rolled_hash() {
  k get deployment web -n "$NS" -o jsonpath='{.spec.template.metadata.annotations.config-roller\.kascade\.io/hash}'
}
# wait_rolled NOT_HASH: until the roller set another hash, and that rollout completed.
wait_rolled() {
  local deadline=$((SECONDS + 60))
  until [[ -n "$(rolled_hash)" && "$(rolled_hash)" != "$1" ]]; do
    (( SECONDS < deadline )) || fail "config-roller did not roll web (hash still '$1'): $(tail -n 5 "$CORPUS_WORK/config-roller.log")"
    sleep 0.5
  done
  k rollout status deployment/web -n "$NS" --timeout=60s
}
wait_rolled ""
first="$(rolled_hash)"
say "edit app-config: LOG_LEVEL=debug"
k patch configmap app-config -n "$NS" --type=merge -p '{"data":{"LOG_LEVEL":"debug"}}'
wait_rolled "$first"
second="$(rolled_hash)"
say "edit app-config: FEATURE_X=on"
k patch configmap app-config -n "$NS" --type=merge -p '{"data":{"FEATURE_X":"on"}}'
wait_rolled "$second"
[[ "$(k get replicasets -n "$NS" -l app=web -o name | wc -l)" -ge 3 ]] || fail "fewer than 3 ReplicaSets of web"

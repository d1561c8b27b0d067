#!/usr/bin/env bash
# A delete held by a finalizer no controller removes: the Deployment gets
# its deletionTimestamp and stays (its ReplicaSet and Pod with it). The
# namespace cannot be deleted afterwards: run it on a cluster of its own
# (e2e/fixtures.sh brings one up and tears it down).
source "$(dirname "$0")/lib.sh"
NS=fin-demo
fresh_namespace "$NS"
k apply -n "$NS" -f - <<'YAML'
apiVersion: apps/v1
kind: Deployment
metadata:
  name: held
  finalizers: [kascade.io/hold]
spec:
  replicas: 1
  selector:
    matchLabels: {app: held}
  template:
    metadata:
      labels: {app: held}
    spec:
      containers:
      - {name: app, image: nginx:1.27}
YAML
say "deployment held (finalizer kascade.io/hold), 1 replica"
k rollout status deployment/held -n "$NS" --timeout=60s
say "delete: held by the finalizer"
k delete deployment held -n "$NS" --wait=false
deadline=$((SECONDS + 30))
until [[ -n "$(k get deployment held -n "$NS" -o jsonpath='{.metadata.deletionTimestamp}')" ]]; do
  (( SECONDS < deadline )) || { say "deployment held has no deletionTimestamp after 30s"; exit 1; }
  sleep 0.5
done
say "done"

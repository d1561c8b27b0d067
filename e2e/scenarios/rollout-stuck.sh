#!/usr/bin/env bash
# A rollout that never completes: Deployment web rolls out normally, then its
# template gets a nodeSelector no node has. The new ReplicaSet's Pod stays
# Pending (the scheduler's FailedScheduling Warning Events), the old Pods keep
# serving, and the Deployment reports ProgressDeadlineExceeded.
source "$(dirname "$0")/lib.sh"
NS=rollout-demo
fresh_namespace "$NS"
k apply -n "$NS" -f - <<'YAML'
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
spec:
  replicas: 2
  progressDeadlineSeconds: 10
  selector:
    matchLabels: {app: web}
  template:
    metadata:
      labels: {app: web}
    spec:
      containers:
      - {name: nginx, image: nginx:1.27}
YAML
say "deployment web with 2 replicas"
k rollout status deployment/web -n "$NS" --timeout=60s
say "update: a nodeSelector no node has"
k patch deployment web -n "$NS" --type=merge \
  -p '{"spec":{"template":{"spec":{"nodeSelector":{"kascade.io/no-such-node":"true"}}}}}'
say "waiting for the scheduler's FailedScheduling event on the new ReplicaSet's Pod"
deadline=$((SECONDS + 60))
until k get events -n "$NS" --field-selector reason=FailedScheduling,involvedObject.kind=Pod -o name 2>/dev/null | grep -q .; do
  (( SECONDS < deadline )) || { say "no FailedScheduling event after 60s"; exit 1; }
  sleep 0.5
done
say "waiting for the Deployment to report ProgressDeadlineExceeded"
k wait deployment/web -n "$NS" --timeout=60s \
  --for=jsonpath='{.status.conditions[?(@.type=="Progressing")].reason}'=ProgressDeadlineExceeded
say "done"

#!/usr/bin/env bash
# StatefulSet with its headless Service: ordered pods, then scale down.
source "$(dirname "$0")/lib.sh"
NS=sts-demo
fresh_namespace "$NS"
k apply -n "$NS" -f - <<'YAML'
apiVersion: v1
kind: Service
metadata:
  name: db
spec:
  clusterIP: None
  selector: {app: db}
  ports: [{port: 5432}]
---
apiVersion: apps/v1
kind: StatefulSet
metadata:
  name: db
spec:
  serviceName: db
  replicas: 3
  selector:
    matchLabels: {app: db}
  template:
    metadata:
      labels: {app: db}
    spec:
      containers:
      - name: postgres
        image: postgres:17
        ports: [{containerPort: 5432}]
YAML
say "statefulset db with 3 replicas"
k rollout status statefulset/db -n "$NS" --timeout=90s
say "scale to 1"
k scale statefulset/db -n "$NS" --replicas=1
k wait --for=delete pod/db-2 pod/db-1 -n "$NS" --timeout=60s
k wait --for=jsonpath='{.status.readyReplicas}'=1 statefulset/db -n "$NS" --timeout=60s
say "done"

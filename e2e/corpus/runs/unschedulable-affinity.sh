#!/usr/bin/env bash
# Unschedulable by node affinity: Deployment db requires (required node
# affinity) zone eu-west-1a; the nodes are in zone-0..2. Its Pods stay Pending
# (FailedScheduling: didn't match Pod's node affinity/selector).
source "$(dirname "$0")/lib.sh"
NS=affinity-demo
fresh_namespace "$NS"
say "deployment db (2 replicas) requiring zone eu-west-1a"
k apply -n "$NS" -f - <<'YAML'
apiVersion: apps/v1
kind: Deployment
metadata:
  name: db
spec:
  replicas: 2
  selector:
    matchLabels: {app: db}
  template:
    metadata:
      labels: {app: db}
    spec:
      affinity:
        nodeAffinity:
          requiredDuringSchedulingIgnoredDuringExecution:
            nodeSelectorTerms:
            - matchExpressions:
              - {key: topology.kubernetes.io/zone, operator: In, values: [eu-west-1a]}
      containers:
      - {name: mysql, image: "mysql:8.4"}
YAML
wait_event 60 "$NS" FailedScheduling Pod
[[ "$(k get pods -n "$NS" -l app=db -o jsonpath='{.items[*].status.phase}')" == "Pending Pending" ]] \
  || fail "db's 2 Pods are not both Pending"

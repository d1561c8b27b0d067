#!/usr/bin/env bash
# Unschedulable by insufficient resources: Deployment trainer asks for 48 CPUs
# a Pod; the nodes have 32 each. Its Pod stays Pending (FailedScheduling:
# Insufficient cpu).
source "$(dirname "$0")/lib.sh"
NS=resources-demo
fresh_namespace "$NS"
say "deployment trainer (1 replica) requesting 48 CPUs and 64Gi"
k apply -n "$NS" -f - <<'YAML'
apiVersion: apps/v1
kind: Deployment
metadata:
  name: trainer
spec:
  replicas: 1
  selector:
    matchLabels: {app: trainer}
  template:
    metadata:
      labels: {app: trainer}
    spec:
      containers:
      - name: trainer
        image: "pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime"
        resources:
          requests: {cpu: "48", memory: 64Gi}
          limits: {cpu: "48", memory: 64Gi}
YAML
wait_event 60 "$NS" FailedScheduling Pod
[[ "$(k get pods -n "$NS" -l app=trainer -o jsonpath='{.items[*].status.phase}')" == Pending ]] \
  || fail "trainer's Pod is not Pending"

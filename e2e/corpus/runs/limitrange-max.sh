#!/usr/bin/env bash
# LimitRange: namespace limits-demo allows at most 1 CPU and 1Gi per
# container; Deployment api asks for a limit of 2 CPUs. LimitRanger admission
# refuses the ReplicaSet controller's Pod creates (403: maximum cpu usage per
# Container is 1, but limit is 2): FailedCreate on the ReplicaSet, no Pod.
source "$(dirname "$0")/lib.sh"
NS=limits-demo
fresh_namespace "$NS"
k apply -n "$NS" -f - <<'YAML'
apiVersion: v1
kind: LimitRange
metadata:
  name: container-max
spec:
  limits:
  - type: Container
    max: {cpu: "1", memory: 1Gi}
    default: {cpu: 500m, memory: 512Mi}
    defaultRequest: {cpu: 250m, memory: 256Mi}
YAML
say "deployment api (2 replicas) with a limit of 2 CPUs"
k apply -n "$NS" -f - <<'YAML'
apiVersion: apps/v1
kind: Deployment
metadata:
  name: api
spec:
  replicas: 2
  selector:
    matchLabels: {app: api}
  template:
    metadata:
      labels: {app: api}
    spec:
      containers:
      - name: api
        image: "ghcr.io/example/api:1.4.2"
        resources:
          requests: {cpu: "1", memory: 512Mi}
          limits: {cpu: "2", memory: 1Gi}
YAML
wait_event 60 "$NS" FailedCreate ReplicaSet
[[ -z "$(k get pods -n "$NS" -o name)" ]] || fail "namespace $NS has Pods; LimitRanger let one through"

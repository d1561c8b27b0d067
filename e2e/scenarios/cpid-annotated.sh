#!/usr/bin/env bash
# Changes carrying change propagation IDs, as the CPID webhook or an
# instrumented client would stamp them: a Deployment created with
# kascade.io/cpid, then its image changed under a second CPID; a ConfigMap
# with only a W3C traceparent annotation; one with a malformed CPID. The
# built-in controllers are not instrumented: what they write shows whether
# kascade carries the CPIDs over (the deployment controller copies the
# Deployment's annotations onto its ReplicaSets; Pods get none).
source "$(dirname "$0")/lib.sh"
NS=cpid-demo
FIRST=6f1c2a4e-0b7d-4c1e-9a3f-5d2e8b7c6a01
SECOND=0d9e8f7a-6b5c-4d3e-8f2a-1b0c9d8e7f02
fresh_namespace "$NS"
k apply -n "$NS" -f - <<YAML
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  annotations:
    kascade.io/cpid: $FIRST
spec:
  replicas: 2
  selector:
    matchLabels: {app: web}
  template:
    metadata:
      labels: {app: web}
    spec:
      containers:
      - {name: app, image: nginx:1.27}
YAML
say "deployment web created under CPID $FIRST"
k rollout status deployment/web -n "$NS" --timeout=60s
k patch deployment web -n "$NS" --type=merge -p "{\"metadata\":{\"annotations\":{\"kascade.io/cpid\":\"$SECOND\"}},\"spec\":{\"template\":{\"spec\":{\"containers\":[{\"name\":\"app\",\"image\":\"nginx:1.28\"}]}}}}"
say "image changed under CPID $SECOND"
k rollout status deployment/web -n "$NS" --timeout=60s
k apply -n "$NS" -f - <<'YAML'
apiVersion: v1
kind: ConfigMap
metadata:
  name: traced
  annotations:
    tracing.k8s.io/traceparent: 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01
data: {mode: traced}
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: forged
  annotations:
    kascade.io/cpid: "not-a-cpid,6f1c2a4e-0b7d-4c1e-9a3f-5d2e8b7c6a01"
data: {mode: forged}
YAML
say "configmaps traced (traceparent) and forged (malformed CPID)"
say "done"

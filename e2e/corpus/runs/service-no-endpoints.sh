#!/usr/bin/env bash
# A Service with no ready endpoints: Service web selects Deployment web's 2
# Pods, which run but whose readiness probe fails (HTTP 503; kwok's
# readiness-fail lifecycle, chosen by the template's annotation
# kascade.io/kubelet, stands in for the kubelet). The EndpointSlice lists
# them, none ready; web serves nothing.
source "$(dirname "$0")/lib.sh"
NS=frontend
fresh_namespace "$NS"
k apply -n "$NS" -f - <<'YAML'
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
spec:
  replicas: 2
  selector:
    matchLabels: {app: web}
  template:
    metadata:
      labels: {app: web}
      annotations: {kascade.io/kubelet: readiness-fail}
    spec:
      containers:
      - name: web
        image: "ghcr.io/example/frontend:5.0.1"
        ports: [{containerPort: 8080}]
        readinessProbe:
          httpGet: {path: /healthz, port: 8080}
          periodSeconds: 5
---
apiVersion: v1
kind: Service
metadata:
  name: web
spec:
  selector: {app: web}
  ports: [{port: 80, targetPort: 8080}]
YAML
slice_unready() {
  k get endpointslices -n "$NS" -l kubernetes.io/service-name=web \
    -o jsonpath='{range .items[*].endpoints[*]}{.conditions.ready}{"\n"}{end}' | grep -c '^false$' | grep -qx 2
}
wait_until 60 "EndpointSlice of web with its 2 endpoints not ready" slice_unready
wait_event 30 "$NS" Unhealthy Pod

#!/usr/bin/env bash
# A Deployment and a bare Pod mounting a ConfigMap and a Secret; then the
# ConfigMap changes. The Secret's value is a marker the secret-redaction test
# looks for in kascade's output.
source "$(dirname "$0")/lib.sh"
NS=config-demo
fresh_namespace "$NS"
say "configmap app-config and secret app-secret"
k create configmap app-config -n "$NS" --from-literal=mode=blue --from-literal=replicas=2
k create secret generic app-secret -n "$NS" --from-literal=password=kascade-fixture-s3cr3t-value
k apply -n "$NS" -f - <<'YAML'
apiVersion: apps/v1
kind: Deployment
metadata:
  name: app
spec:
  replicas: 2
  selector:
    matchLabels: {app: app}
  template:
    metadata:
      labels: {app: app}
    spec:
      containers:
      - name: app
        image: nginx:1.27
        env:
        - name: PASSWORD
          valueFrom:
            secretKeyRef: {name: app-secret, key: password}
        volumeMounts:
        - {name: config, mountPath: /etc/app}
      volumes:
      - name: config
        configMap: {name: app-config}
---
apiVersion: v1
kind: Pod
metadata:
  name: config-pod
spec:
  containers:
  - name: main
    image: busybox:1.36
    command: [sleep, infinity]
    envFrom:
    - configMapRef: {name: app-config}
    volumeMounts:
    - {name: secret, mountPath: /etc/secret}
  volumes:
  - name: secret
    secret: {secretName: app-secret}
YAML
k rollout status deployment/app -n "$NS" --timeout=60s
k wait --for=condition=Ready pod/config-pod -n "$NS" --timeout=60s
say "the ConfigMap changes"
k patch configmap app-config -n "$NS" --type merge -p '{"data":{"mode":"green"}}'
say "the Secret is rotated"
k create secret generic app-secret -n "$NS" --from-literal=password=kascade-fixture-rotated-value --dry-run=client -o yaml | k apply -f - 2>/dev/null
say "done"

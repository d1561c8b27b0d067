#!/usr/bin/env bash
# On the real node (e2e/node.sh): Deployment web, 2 replicas of a container
# that sleeps, with a readiness probe that passes (exec `true`). Both Pods
# run and become Ready; the rollout completes. The real kubelet's healthy
# counterpart of real-crashloop, real-oom and real-readiness.
source "$(dirname "$0")/lib.sh"
real_node
NS=real-healthy
fresh_namespace "$NS"
k apply -n "$NS" -f - <<YAML
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
    spec:
      nodeSelector: {kascade.io/real-node: "true"}
      tolerations: [{key: kascade.io/real-node, operator: Exists}]
      automountServiceAccountToken: false
      terminationGracePeriodSeconds: 1
      containers:
      - name: app
        image: $BUSYBOX_IMAGE
        imagePullPolicy: IfNotPresent
        command: [sleep, "3600"]
        resources:
          limits: {memory: 32Mi}
        readinessProbe:
          exec: {command: ["true"]}
          periodSeconds: 2
YAML
say "deployment web: 2 replicas on the real node, a readiness probe that passes"
k rollout status deployment/web -n "$NS" --timeout=90s
k wait deployment/web -n "$NS" --for=condition=Available --timeout=30s
say "done"

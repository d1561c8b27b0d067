#!/usr/bin/env bash
# On the real node (e2e/node.sh): Deployment web's container runs, but its
# readiness probe (exec `cat /tmp/ready`, a file nothing writes) fails every
# time. The Pod is Running and never Ready (the kubelet's Unhealthy Warning
# Events), so the rollout stalls: ProgressDeadlineExceeded after 15 s.
source "$(dirname "$0")/lib.sh"
real_node
NS=real-ready
fresh_namespace "$NS"
k apply -n "$NS" -f - <<YAML
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
spec:
  replicas: 1
  progressDeadlineSeconds: 15
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
        readinessProbe:
          exec: {command: [cat, /tmp/ready]}
          periodSeconds: 2
          failureThreshold: 1
YAML
say "deployment web: a readiness probe that always fails"
say "waiting for the Pod to run"
k wait pod -n "$NS" -l app=web --timeout=60s --for=jsonpath='{.status.phase}'=Running
say "waiting for the kubelet's Unhealthy event"
deadline=$((SECONDS + 60))
until k get events -n "$NS" --field-selector reason=Unhealthy -o name 2>/dev/null | grep -q .; do
  (( SECONDS < deadline )) || { say "no Unhealthy event after 60s"; exit 1; }
  sleep 0.5
done
say "waiting for the Deployment to report ProgressDeadlineExceeded"
k wait deployment/web -n "$NS" --timeout=60s \
  --for=jsonpath='{.status.conditions[?(@.type=="Progressing")].reason}'=ProgressDeadlineExceeded
[[ "$(k get pod -n "$NS" -l app=web -o jsonpath='{.items[0].status.conditions[?(@.type=="Ready")].status}')" == False ]] \
  || { say "the Pod became Ready"; exit 1; }
say "done"

#!/usr/bin/env bash
# Crash loop: Deployment worker's container exits with code 1 two seconds
# after each start and is restarted with back-off (CrashLoopBackOff; kwok's
# crash-loop lifecycle, chosen by the template's annotation
# kascade.io/kubelet, stands in for the kubelet). Meanwhile the healthy
# Service of e2e/scenarios/service.sh runs in namespace svc-demo.
# shellcheck disable=SC2317 # restarted_twice runs through wait_until
source "$(dirname "$0")/lib.sh"
NS=payments
fresh_namespace "$NS"
crash_worker() {
  say "deployment worker (2 replicas) whose container exits 1"
  k apply -n "$NS" -f - <<'YAML'
apiVersion: apps/v1
kind: Deployment
metadata:
  name: worker
spec:
  replicas: 2
  selector:
    matchLabels: {app: worker}
  template:
    metadata:
      labels: {app: worker}
      annotations: {kascade.io/kubelet: crash-loop}
    spec:
      containers:
      - name: worker
        image: "ghcr.io/example/payments-worker:3.2.0"
        env: [{name: QUEUE_URL, value: "amqp://rabbitmq.payments:5672"}]
YAML
  restarted_twice() {
    k get pods -n "$NS" -l app=worker -o jsonpath='{range .items[*]}{.status.containerStatuses[0].restartCount}{"\n"}{end}' \
      | awk '$1 >= 2 {ok=1} END {exit !ok}'
  }
  wait_until 90 "a worker Pod restarted twice" restarted_twice
}
together worker crash_worker
together service scenario service
join

#!/usr/bin/env bash
# A Job whose Pods fail (kwok's pod-fail stage: label kascade.io/fail=true,
# the container exits 1): with backoffLimit 1, two Pods fail and the Job
# ends Failed (BackoffLimitExceeded).
source "$(dirname "$0")/lib.sh"
NS=jobfail-demo
fresh_namespace "$NS"
k apply -n "$NS" -f - <<'YAML'
apiVersion: batch/v1
kind: Job
metadata:
  name: migrate
spec:
  backoffLimit: 1
  template:
    metadata:
      labels: {kascade.io/fail: "true"}
    spec:
      restartPolicy: Never
      containers:
      - name: migrate
        image: busybox:1.37
        command: [sh, -c, "exit 1"]
YAML
say "job migrate: its pods fail, backoffLimit 1"
k wait --for=condition=Failed job/migrate -n "$NS" --timeout=120s
say "done"

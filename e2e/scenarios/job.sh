#!/usr/bin/env bash
# A Job of 3 completions, 2 at a time; its pods complete (kwok's pod-complete stage).
source "$(dirname "$0")/lib.sh"
NS=job-demo
fresh_namespace "$NS"
k apply -n "$NS" -f - <<'YAML'
apiVersion: batch/v1
kind: Job
metadata:
  name: pi
spec:
  completions: 3
  parallelism: 2
  backoffLimit: 2
  template:
    spec:
      restartPolicy: Never
      containers:
      - name: pi
        image: perl:5.40
        command: [perl, -Mbignum=bpi, -wle, "print bpi(100)"]
YAML
say "job pi: 3 completions"
k wait --for=condition=complete job/pi -n "$NS" --timeout=120s
say "done"

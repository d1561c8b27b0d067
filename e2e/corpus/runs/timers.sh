#!/usr/bin/env bash
# Healthy, with the writes a clock makes rather than a change: a Job with
# ttlSecondsAfterFinished that the ttl-after-finished controller deletes
# once it is Complete, and (this run's audit policy,
# runs/timers.audit-policy.yaml, logs Lease writes, as many clusters' do)
# the leader-election, node-heartbeat and apiserver-identity Lease renewals
# every few seconds. None of them is an effect of the change before it.
source "$(dirname "$0")/lib.sh"
NS=ttl-demo
fresh_namespace "$NS"
k apply -n "$NS" -f - <<'YAML'
apiVersion: batch/v1
kind: Job
metadata:
  name: report
spec:
  completions: 2
  parallelism: 2
  ttlSecondsAfterFinished: 5
  template:
    spec:
      restartPolicy: Never
      containers:
      - name: report
        image: busybox:1.37
        command: [sh, -c, "echo done"]
YAML
say "job report: 2 completions, deleted 5 s after it finishes"
k wait --for=condition=complete job/report -n "$NS" --timeout=120s
job_gone() { [[ -z "$(k get jobs -n "$NS" --field-selector metadata.name=report -o name)" ]]; }
wait_until 60 "job report deleted by its TTL" job_gone
say "done"

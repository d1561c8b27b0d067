#!/usr/bin/env bash
# A CronJob that fires every minute: its Job, the Job's Pod (completed by
# kwok). Searched by the Job, the trace must show the Job's own Pod under
# the CronJob (fixture only: the wait for the minute would slow the suite).
source "$(dirname "$0")/lib.sh"
NS=cron-demo
fresh_namespace "$NS"
k apply -n "$NS" -f - <<'YAML'
apiVersion: batch/v1
kind: CronJob
metadata:
  name: tick
spec:
  schedule: "* * * * *"
  successfulJobsHistoryLimit: 1
  jobTemplate:
    spec:
      template:
        spec:
          restartPolicy: Never
          containers:
          - {name: tick, image: busybox:1.37, command: [date]}
YAML
say "cronjob tick: waiting for its first Job (at the next minute)"
deadline=$((SECONDS + 90))
until job=$(k get jobs -n "$NS" -o name 2>/dev/null | head -n 1) && [[ -n "$job" ]]; do
  (( SECONDS < deadline )) || { say "no Job after 90s"; exit 1; }
  sleep 1
done
k wait --for=condition=complete "$job" -n "$NS" --timeout=120s
# The CronJob records the finished Job in its status.
deadline=$((SECONDS + 60))
until [[ -n "$(k get cronjob tick -n "$NS" -o jsonpath='{.status.lastSuccessfulTime}')" ]]; do
  (( SECONDS < deadline )) || { say "the CronJob never recorded its Job's success"; exit 1; }
  sleep 1
done
k patch cronjob tick -n "$NS" --type=merge -p '{"spec":{"suspend":true}}' >/dev/null
say "done"

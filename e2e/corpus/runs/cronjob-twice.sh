#!/usr/bin/env bash
# Healthy: CronJob reports/nightly-report fires every minute; two of its Jobs
# run and complete (each with its Pod); then it is suspended.
source "$(dirname "$0")/lib.sh"
NS=reports
fresh_namespace "$NS"
k apply -n "$NS" -f - <<'YAML'
apiVersion: batch/v1
kind: CronJob
metadata:
  name: nightly-report
spec:
  schedule: "* * * * *"
  concurrencyPolicy: Forbid
  successfulJobsHistoryLimit: 3
  jobTemplate:
    spec:
      backoffLimit: 1
      template:
        spec:
          restartPolicy: Never
          containers:
          - {name: report, image: "ghcr.io/example/report:1.0.0", command: [report, --since=24h]}
YAML
say "cronjob nightly-report: waiting for two Jobs to complete (up to 3 minutes)"
two_complete() {
  [[ "$(k get jobs -n "$NS" -o jsonpath='{range .items[*]}{.status.succeeded}{"\n"}{end}' | grep -c '^1$')" -ge 2 ]]
}
wait_until 200 "two completed Jobs of nightly-report" two_complete
last_success() { [[ -n "$(k get cronjob nightly-report -n "$NS" -o jsonpath='{.status.lastSuccessfulTime}')" ]]; }
wait_until 60 "lastSuccessfulTime on the CronJob" last_success
k patch cronjob nightly-report -n "$NS" --type=merge -p '{"spec":{"suspend":true}}'

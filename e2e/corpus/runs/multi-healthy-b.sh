#!/usr/bin/env bash
# Healthy, several workloads at once: the Service of e2e/scenarios/service.sh
# (svc-demo/web), the ConfigMap/Secret consumers of e2e/scenarios/config.sh
# (config-demo/app and pod config-pod), the StatefulSet of
# e2e/scenarios/statefulset.sh (sts-demo/db) and the CronJob of
# e2e/scenarios/cronjob.sh (cron-demo/tick, one Job completed).
source "$(dirname "$0")/lib.sh"
together service scenario service
together config scenario config
together statefulset scenario statefulset
together cronjob scenario cronjob
join

#!/usr/bin/env bash
# Healthy, several workloads at once: the Deployment rollout of
# e2e/scenarios/deployment.sh (default/hello: create, scale, new image, scale,
# delete), the StatefulSet with claims of e2e/scenarios/volumes.sh
# (vol-demo/data) and the Job of e2e/scenarios/job.sh (job-demo/pi).
source "$(dirname "$0")/lib.sh"
together deployment scenario deployment
together volumes scenario volumes
together job scenario job
join

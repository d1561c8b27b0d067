#!/usr/bin/env bash
# Healthy, with the apiserver's own traces (runs/traced-healthy.traced):
# the three workloads of multi-healthy-a at once — the Deployment rollout of
# e2e/scenarios/deployment.sh (default/hello), the StatefulSet with claims
# of e2e/scenarios/volumes.sh (vol-demo/data), the Job of e2e/scenarios/job.sh
# (job-demo/pi) — so that every write of a whole healthy cluster, start-up
# included, has its request's trace (apiserver-traces.jsonl.gz).
source "$(dirname "$0")/lib.sh"
together deployment scenario deployment
together volumes scenario volumes
together job scenario job
join

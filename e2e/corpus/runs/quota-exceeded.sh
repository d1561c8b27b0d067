#!/usr/bin/env bash
# ResourceQuota (e2e/scenarios/quota.sh: Deployment capped wants 3 Pods, the
# quota allows 1; the ReplicaSet's other creates are refused), while the
# healthy Job of e2e/scenarios/job.sh runs in namespace job-demo.
source "$(dirname "$0")/lib.sh"
together quota scenario quota
together job scenario job
join

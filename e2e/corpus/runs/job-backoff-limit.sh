#!/usr/bin/env bash
# A Job exceeding its backoffLimit (e2e/scenarios/job-failed.sh): Job
# jobfail-demo/migrate's Pods exit 1; with backoffLimit 1 it ends Failed
# (BackoffLimitExceeded).
source "$(dirname "$0")/lib.sh"
scenario job-failed

#!/usr/bin/env bash
# A claim that never binds (e2e/scenarios/pvc-pending.sh): claim pvc-demo/data
# names StorageClass no-such-class (ProvisioningFailed); Pod db, mounting it,
# cannot be scheduled.
source "$(dirname "$0")/lib.sh"
scenario pvc-pending

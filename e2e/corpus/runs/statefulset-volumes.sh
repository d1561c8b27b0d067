#!/usr/bin/env bash
# Healthy: a StatefulSet with volume claims (e2e/scenarios/volumes.sh):
# vol-demo/data, 3 replicas, each claim bound to a pre-created PV, each Pod
# Running.
source "$(dirname "$0")/lib.sh"
scenario volumes
